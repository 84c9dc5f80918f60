"""One engine's launch flags: which `Deployment` field each sets, how its value reads, and the
name the engine prints it under (its argparse destination, in `server_args=ServerArgs(...)`,
`non-default args: {...}` or `Namespace(...)`).

Each engine keeps its table in `engines/<engine>/flags.py`; the launch-command parser, the log
readers and explain all go through these tables, so a flag is spelled in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

Convert = Callable[[str], object]


def as_bool(raw: str) -> bool:
    """A switch's explicit value (`--enable-dp-lm-head=false`); any other word is a ValueError."""
    word = raw.lower()
    if word not in ("true", "1", "yes", "false", "0", "no"):
        raise ValueError(raw)
    return word in ("true", "1", "yes")


def as_upper(raw: str) -> str:
    return raw.upper()


class BadChoice(ValueError):
    """A value outside a flag's choices; its text names them."""


def one_of(*choices: str) -> Convert:
    """A converter that takes only `choices` (the engine's argparse `choices=`)."""

    def convert(raw: str) -> str:
        if raw not in choices:
            raise BadChoice(f"one of {', '.join(choices)}")
        return raw

    return convert


class Flag(NamedTuple):
    field: str  # the Deployment field it sets (`hicache.ratio`: a field of a sub-record)
    printed: str  # the argument name the engine prints it under
    convert: Convert | None  # None: a boolean switch
    spellings: tuple[str, ...]  # as typed on a command line, dashes, without the leading --


def flag(printed: str, convert: Convert | None, *aliases: str, field: str = "") -> Flag:
    """A flag typed as its printed name with dashes, or as one of `aliases`, that sets the
    Deployment field `field` (default: the printed name)."""
    return Flag(field or printed, printed, convert, (printed.replace("_", "-"), *aliases))


class FlagTable:
    """An engine's flags by every spelling, and by the field they set."""

    def __init__(self, flags: tuple[Flag, ...]) -> None:
        self.flags = flags
        self._by_spelling = {s: f for f in flags for s in f.spellings}
        self._by_field: dict[str, list[Flag]] = {}
        for f in flags:
            self._by_field.setdefault(f.field, []).append(f)

    def find(self, spelling: str) -> Flag | None:
        """The flag a command-line spelling (dashes, no leading --) names, or None."""
        return self._by_spelling.get(spelling)

    def spelling(self, field: str) -> str | None:
        """The engine's own flag for `field` (`--mem-fraction-static`), or None: it has none."""
        flags = self._by_field.get(field)
        return "--" + flags[0].spellings[0] if flags else None

    def printed(self, field: str) -> tuple[str, ...]:
        """The names the engine prints the arguments setting `field` under."""
        return tuple(dict.fromkeys(f.printed for f in self._by_field.get(field, ())))
