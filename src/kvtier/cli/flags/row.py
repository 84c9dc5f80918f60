"""One kvtier flag: its spellings, the argparse group it shows in, the Deployment field it sets,
and for each command that accepts it whether the command uses it or refuses it (and why)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PLAN, EXPLAIN, ADVISE, SIMULATE = "plan", "explain", "advise", "simulate"
USED = ""  # a command's entry: used; any other text is why the command refuses the flag


@dataclass(frozen=True, slots=True)
class KvFlag:
    names: tuple[str, ...]  # as typed, first the one messages name
    group: str  # a key of layout.GROUPS; "" for the command's own options
    commands: Mapping[str, str]  # command -> USED, or why it refuses the flag
    field: str | None = None  # the Deployment field (explain: the setting) it sets
    sample: tuple[str, ...] = ()  # a valid value other than the default (the table's test)
    spec: Mapping[str, Any] = dataclasses.field(
        default_factory=dict
    )  # argparse add_argument keywords

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def dest(self) -> str:
        long = next(n for n in self.names if n.startswith("--"))
        return str(self.spec.get("dest", long[2:].replace("-", "_")))

    def refusal(self, command: str) -> str:
        """Why `command` refuses this flag; '' when it uses it."""
        return self.commands[command]


def flag(
    *names: str,
    group: str,
    commands: Mapping[str, str],
    field: str | None = None,
    sample: tuple[str, ...] = (),
    **spec: Any,
) -> KvFlag:
    return KvFlag(names, group, dict(commands), field, sample, spec)


def used(*commands: str) -> dict[str, str]:
    return dict.fromkeys(commands, USED)
