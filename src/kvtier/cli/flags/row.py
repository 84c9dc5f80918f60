"""One kvtier flag: its spellings, the argparse group it shows in, the Deployment field it sets,
for each command that accepts it whether the command uses it or refuses it (and why), and the
engines whose deployments refuse it (and why)."""

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
    group: str  # a key of flags.GROUPS; "" for the command's own options
    commands: Mapping[str, str]  # command -> USED, or why it refuses the flag
    # the Deployment field (explain: the setting) it sets; a sub-record's as `hicache.ratio`
    field: str | None = None
    sample: tuple[str, ...] = ()  # a valid value other than the default (the table's test)
    spec: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # add_argument keywords
    # engine -> why its deployments refuse the flag ("an SGLang HiCache flag; ..."); others use it
    engines: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def dest(self) -> str:
        long = next(n for n in self.names if n.startswith("--"))
        return str(self.spec.get("dest", long[2:].replace("-", "_")))


def flag(
    *names: str,
    group: str,
    commands: Mapping[str, str],
    field: str | None = None,
    sample: tuple[str, ...] = (),
    engines: Mapping[str, str] | None = None,
    **spec: Any,
) -> KvFlag:
    return KvFlag(names, group, dict(commands), field, sample, spec, dict(engines or {}))


def used(*commands: str) -> dict[str, str]:
    return dict.fromkeys(commands, USED)
