"""A workload as a serving log shows it: the window it covers and what was fitted from its lines.

`kvtier.observe.workload_fit` fits one from a serving log's periodic lines; `kvtier.sim`
replays it (`sim/from_log.py`) and compares the simulated window with the observed one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Inference:
    """One inferred figure and how it was obtained."""

    name: str
    value: float
    how: str


@dataclass(frozen=True, slots=True)
class DecodeReading:
    """A sample with generation throughput: enough to time one decode step."""

    running: int
    gen_tps: float
    kv_usage: float | None


@dataclass(frozen=True, slots=True)
class ObservedWindow:
    """What the log shows over the time it covers."""

    duration_s: float
    prompt_tps: float  # prompt tokens admitted per second, cached and computed
    gen_tps: float | None
    hit_rate: float | None
    queue_times_s: tuple[float, ...]  # when each queue figure was printed, from window start
    queued: tuple[int, ...]
    saturated: bool  # some sample showed requests waiting


@dataclass(frozen=True, slots=True)
class FittedWorkload:
    source: str
    engine: str
    window: ObservedWindow
    # (from, to, requests): requests arriving between two times (seconds from window start)
    arrivals: tuple[tuple[float, float, float], ...]
    running_at_start: int
    prompt_tokens: int  # mean prompt length
    output_tokens: int  # mean output length
    reuse: float  # share of prompt tokens found in the prefix cache
    pool_tokens: int | None
    decode: tuple[DecodeReading, ...]
    inferences: tuple[Inference, ...]
    admitted: float  # requests admitted over the window: the count the rate and lengths rest on
    accept_length: float | None = None  # mean tokens per decode step, speculative decoding on
    accept_lines: int = 0  # the readings that mean is over

    @property
    def requests(self) -> float:
        return sum(n for _, _, n in self.arrivals)
