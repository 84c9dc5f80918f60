"""Every periodic serving sample of a log, kept in order with its time in seconds.

`kvtier observe` folds samples into bounded totals; fitting a workload needs the samples
themselves (admissions, queue and throughput over time), so `SampleRecorder` is the observer
that also keeps them. It reads through the same stream reader and grammars as `observe`.

Times are read from the forms the engines print: `YYYY-MM-DD HH:MM:SS[.f]` (SGLang),
`MM-DD HH:MM:SS[.f]` (vLLM, no year) and `HH:MM:SS` (SGLang 2024, no date; a time earlier than
the one before it is taken as the next day).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO

from kvtier.engines.vllm.serving import ASYNC
from kvtier.errors import KvtierError
from kvtier.observe.logread import read_stream
from kvtier.observe.observer import Fields, Observation, Observer

MAX_SAMPLES = 1_000_000  # a day of SGLang decode lines at 10 a second
_STAMP = re.compile(
    r"(?:(?P<year>\d{4})-)?(?:(?P<month>\d\d)-(?P<day>\d\d)[ T])?"
    r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d{1,9}))?$"
)
_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One periodic line: its kind (`prefill`, `decode`, `fill`, `stats`), fields, time, line."""

    kind: str
    fields: dict[str, float]
    time_s: float  # seconds after the log's first timed sample
    line: int | None


@dataclass(frozen=True, slots=True)
class ServingSamples:
    engine: str
    samples: tuple[Sample, ...]
    fractional_times: bool  # whether the log prints fractions of a second
    observation: Observation
    # tokens a decode step made, one per speculative-decoding reading (SGLang's decode line,
    # vLLM's own line); empty when the log shows no speculative decoding
    accept_lengths: tuple[float, ...] = ()
    # vLLM's first `Asynchronous scheduling is enabled.` / `... disabled.` line: its number and
    # the choice; None when the log prints none
    async_scheduling: tuple[int, bool] | None = None


def _absolute(stamp: str, years: int = 0) -> tuple[float, bool, bool]:
    """Seconds of `stamp` on its own scale, whether it carries a date, whether a fraction.

    A month-day stamp without a year (vLLM's) is placed `years` after a leap year."""
    found = _STAMP.search(stamp)
    if found is None:
        raise ValueError(stamp)
    g = found.group
    frac = g("frac")
    clock = int(g("h")) * 3600 + int(g("m")) * 60 + int(g("s")) + float(f"0.{frac or 0}")
    if g("month") is None:
        return clock, False, frac is not None
    day = datetime(int(g("year") or 2000 + years), int(g("month")), int(g("day")))
    return day.timestamp() + clock, True, frac is not None


def _yearless(stamp: str) -> bool:
    found = _STAMP.search(stamp)
    return found is not None and found.group("month") is not None and found.group("year") is None


class SampleRecorder(Observer):
    """An observer that also keeps every sample with a time."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.kept: list[tuple[str, dict[str, float], str, int | None]] = []
        self.untimed = 0
        self.accept_lengths: list[float] = []
        self.async_scheduling: tuple[int, bool] | None = None

    def heard(self, kind: str, fields: Fields, line: int | None, time: str | None) -> None:
        if kind == ASYNC and self.async_scheduling is None and line is not None:
            self.async_scheduling = (line, fields["async_scheduling"] == 1.0)
        if "accept_len" in fields and len(self.accept_lengths) < MAX_SAMPLES:
            self.accept_lengths.append(fields["accept_len"])
        if kind not in ("prefill", "decode", "fill", "stats"):
            return
        if time is None:
            self.untimed += 1
        elif len(self.kept) < MAX_SAMPLES:
            self.kept.append((kind, dict(fields), time, line))

    def collected(self) -> ServingSamples:
        if self.engine is None or not self.kept:
            raise KvtierError(f"{self.source}: no periodic serving line with a time in the log")
        samples: list[Sample] = []
        origin: float | None = None
        previous, before = 0.0, ""
        days, years = 0.0, 0
        fractional = False
        for kind, fields, stamp, line in self.kept:
            value, dated, frac = self._seconds(stamp, line, years)
            fractional = fractional or frac
            if not dated and value + days < previous - 1.0:
                days += _DAY  # a clock without a date went past midnight
            elif dated and value < previous - 1.0 and _yearless(stamp):
                # a month-day clock that went past New Year (12-31 -> 01-01)
                later = self._seconds(stamp, line, years + 1)[0]
                if previous - 1.0 <= later <= previous + 2 * _DAY:
                    years, value = years + 1, later
            value += days
            if origin is not None and value < previous - 1.0:
                raise KvtierError(
                    f"{self.source}: line {line}: the time goes back from {before} to {stamp} "
                    "(lines out of order, or a log joined with itself); give one run of the "
                    "server's log, in the order it was written"
                )
            previous, before = max(previous, value), stamp
            origin = value if origin is None else origin
            samples.append(Sample(kind, fields, max(value, previous) - origin, line))
        return ServingSamples(
            self.engine,
            tuple(samples),
            fractional,
            self.result(),
            tuple(self.accept_lengths),
            self.async_scheduling,
        )

    def _seconds(self, stamp: str, line: int | None, years: int) -> tuple[float, bool, bool]:
        try:
            return _absolute(stamp, years)
        except ValueError:  # no time, or a date no calendar has (02-30)
            raise KvtierError(f"{self.source}: line {line}: unreadable time {stamp!r}") from None


def read_samples(stream: BinaryIO, source: str) -> ServingSamples:
    """The timed serving samples of a log stream, and `observe`'s reading of it."""
    recorder = SampleRecorder(source)
    read_stream(stream, recorder)
    return recorder.collected()
