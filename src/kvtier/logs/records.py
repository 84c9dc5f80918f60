"""Typed records of what a startup log printed, shared by the engine parsers."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kvtier.logs.facts import Fact

T = TypeVar("T")

# A printed decimal: bounded so a mangled line cannot make int() or float() slow or raise; a
# longer number does not match at all (it is not cut to its first digits).
NUM = r"(-?\d{1,12}(?:\.\d{1,12})?)(?!\d)"
INT = r"(\d{1,15})(?!\d)"
GROUPED_INT = r"(\d{1,3}(?:,\d{3}){0,5}|\d{1,15})(?!\d|,\d)"  # "476,016" or "476016"


@dataclass(frozen=True, slots=True)
class Printed:
    """A log line that carried one or more values."""

    line: int
    text: str
    rank: str | None

    def fact(self, value: T) -> Fact[T]:
        return Fact(value, self.line, self.text, self.rank)


@dataclass(frozen=True, slots=True)
class Args(Printed):
    """Engine arguments printed as a repr, or a launch command found in the log."""

    values: dict[str, object]


def field(pattern: re.Pattern[str], text: str, start: int = 0) -> str | None:
    """First group of `pattern` searched in `text` from `start`, or None."""
    match = pattern.search(text, start)
    return match.group(1) if match else None


def as_float(raw: str | None) -> float | None:
    return float(raw) if raw is not None else None


def as_int(raw: str | None) -> int | None:
    return int(raw.replace(",", "")) if raw is not None else None


def as_text(raw: str | None) -> str | None:
    return raw


# A record's figures that a line prints after its marker: field -> (pattern, reading of group 1)
Figures = Mapping[str, tuple[re.Pattern[str], Callable[[str | None], object]]]


def figures(table: Figures, text: str, start: int = 0) -> dict[str, Any]:
    """Each field of `table` read from its pattern searched in `text` from `start` (None where the
    line does not print it): the record's keyword arguments."""
    return {name: read(field(pattern, text, start)) for name, (pattern, read) in table.items()}


# A figure after a `label: ` in the engines' periodic lines ("token usage: 0.45"): a plain ASCII
# decimal followed by the end, a blank, a unit's `%` or a separating comma; never cut to its
# first digits (a longer number, `1_000`, `0x10`, `1e3`, `1,000`, `5.` or other digits do not
# match). A line's closing `.` is stripped before (vLLM V0's speculative line).
_LABELLED_NUM = re.compile(
    r"\s{0,4}([0-9]{1,15}(?:\.[0-9]{1,12})?)(?=$|[\s%]|,(?![0-9]))", re.ASCII
)


def label_table(
    plain: dict[str, str], percents: dict[str, str] | None = None
) -> dict[str, tuple[str, float]]:
    """printed label -> (field, divisor) for `labelled_numbers`: the `plain` labels' numbers read
    as printed, the `percents`' divided by 100."""
    table: dict[str, tuple[str, float]] = {label: (name, 1) for label, name in plain.items()}
    return table | {label: (name, 100) for label, name in (percents or {}).items()}


def labelled_numbers(body: str, labels: dict[str, tuple[str, float]]) -> dict[str, float]:
    """`label: number` pairs of a comma-separated line, for the labels known: each stored under
    its field name, divided by its scale (a percentage's 100). A known label whose value is not
    a plain decimal is stored as NaN, so the reader refuses the line rather than read it without
    that field."""
    fields: dict[str, float] = {}
    for part in body.split(", "):
        label, sep, raw = part.partition(": ")
        if not sep:
            continue
        known = labels.get(label.strip())
        if known is None:
            continue
        match = _LABELLED_NUM.match(raw)
        fields[known[0]] = float(match.group(1)) / known[1] if match else math.nan
    return fields
