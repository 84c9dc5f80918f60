"""Observed values, each carrying the log line (or the flag, or the derivation) it came from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Fact(Generic[T_co]):
    """A value and its provenance.

    `line` is the 1-based line number of the log line in `text`; when the value was not printed
    (a flag, a default, an inference) `line` is None and `text` says how it was obtained.
    `rank` is the rank tag of the line ("TP3", "PP1 TP3"), when the line has one.
    """

    value: T_co
    line: int | None
    text: str
    rank: str | None = None

    @property
    def where(self) -> str:
        if self.line is None:
            return self.text
        return f"line {self.line}" + (f" ({self.rank})" if self.rank is not None else "")


def stated(value: T, how: str) -> Fact[T]:
    """A value that did not come from a log line: a flag, a default or a derivation."""
    return Fact(value, None, how)


def per_rank_last(facts: Iterable[Fact[T]]) -> list[Fact[T]]:
    """One fact per rank: the last one each rank printed (untagged lines count as one rank)."""
    last: dict[str | None, Fact[T]] = {}
    for fact in facts:
        last[fact.rank] = fact
    return list(last.values())


def min_over_ranks(facts: Iterable[Fact[float]]) -> Fact[float] | None:
    """The smallest per-rank value, as the engine's MIN all-reduce takes it."""
    ranks = per_rank_last(facts)
    return min(ranks, key=lambda f: f.value) if ranks else None
