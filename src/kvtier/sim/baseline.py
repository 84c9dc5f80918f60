"""A serving log beside its calibrated simulation: each figure observed vs simulated, with the
tolerance it must meet (docs/simulate.md, "A workload fitted from a serving log").

  hit rate       within HIT_RATE_POINTS (absolute): the fitted prefix reproduces the share of
                 tokens reused, rounded to whole FIT_BLOCK_TOKENS blocks
  prompt tok/s   within THROUGHPUT_SHARE of the log's: the arrivals are the log's admissions, and
                 a saturated log sets the prefill speed
  gen tok/s      within THROUGHPUT_SHARE: the decode lines set the HBM efficiency
  queue, mean    within QUEUE_SHARE of the log's mean or QUEUE_REQUESTS requests, the larger,
                 at the times the log printed its queue

A log is fitted only when it admits MIN_REQUESTS requests or more: a rate (or a mean length)
counted from N requests arriving as a Poisson process has a relative standard error of 1/sqrt(N),
and that error must not exceed the THROUGHPUT_SHARE the fitted rate is judged by, so
N >= 1 / THROUGHPUT_SHARE^2.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kvtier.logs.workload import ObservedWindow
from kvtier.sim.from_log import SimulatedWindow

HIT_RATE_POINTS = 0.05
THROUGHPUT_SHARE = 0.20
QUEUE_SHARE = 0.25
QUEUE_REQUESTS = 2.0
MIN_REQUESTS = math.ceil(round(1 / THROUGHPUT_SHARE**2, 9))  # 25: 1/sqrt(25) = 20 %


@dataclass(frozen=True, slots=True)
class Comparison:
    metric: str
    observed: float
    simulated: float
    tolerance: str
    within: bool


def _relative(metric: str, observed: float, simulated: float) -> Comparison:
    ok = abs(simulated - observed) <= THROUGHPUT_SHARE * observed
    return Comparison(metric, observed, simulated, f"±{THROUGHPUT_SHARE:.0%}", ok)


def compare(observed: ObservedWindow, simulated: SimulatedWindow) -> tuple[Comparison, ...]:
    rows = []
    if observed.hit_rate is not None and simulated.hit_rate is not None:
        ok = abs(simulated.hit_rate - observed.hit_rate) <= HIT_RATE_POINTS
        tolerance = f"±{100 * HIT_RATE_POINTS:g} points"
        rows.append(Comparison("hit rate", observed.hit_rate, simulated.hit_rate, tolerance, ok))
    rows.append(_relative("prompt tokens/s", observed.prompt_tps, simulated.prompt_tps))
    if observed.gen_tps is not None:
        rows.append(_relative("generation tokens/s", observed.gen_tps, simulated.gen_tps))
    if observed.queued:
        seen, run = statistics.fmean(observed.queued), statistics.fmean(simulated.queued)
        ok = abs(run - seen) <= max(QUEUE_REQUESTS, QUEUE_SHARE * seen)
        tolerance = f"±max({QUEUE_REQUESTS:g}, {QUEUE_SHARE:.0%})"
        rows.append(Comparison("queue, mean", seen, run, tolerance, ok))
        top = max(observed.queued), max(simulated.queued)
        rows.append(Comparison("queue, max", *top, "shown", True))
    return tuple(rows)
