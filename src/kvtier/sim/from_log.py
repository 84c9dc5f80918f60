"""A trace with a serving log's statistics, and the same window measured in a simulated run.

The trace (`fitted_trace`):
  window   arrivals as the fit counted them, spread evenly over the gap between the two lines
           that bound them; every request has the mean prompt and output lengths (the lines give
           means, not spreads)
  reuse    every prompt starts with one shared prefix of reuse x prompt tokens, whole blocks, at
           least one token left to compute (the lines give the share of tokens reused, not how
           far apart the reuses are)
  before   the requests the first line shows running are admitted before the window opens, with
           half the mean output left; they, or one request of the shared prefix when none ran,
           also warm the prefix cache; the window opens when their prefill is done

`measure` reads, over the window only: prompt tokens admitted per second, generation tokens per
second (each request's output spread evenly between its first token and its end), the token hit
rate of the window's requests, and the queue at the times the log printed it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.logs.workload import FittedWorkload, ObservedWindow
from kvtier.sim.run import Replay, replay
from kvtier.sim.setup import SimConfig
from kvtier.sim.trace import Trace, TraceRequest

FIT_BLOCK_TOKENS = 16  # fine enough that a 99% reuse is not rounded to whole 512-token blocks


@dataclass(frozen=True, slots=True)
class FittedTrace:
    trace: Trace
    before: int  # requests (the first ones) admitted before the window opens
    offset_s: float  # when the window opens in the trace's time


@dataclass(frozen=True, slots=True)
class SimulatedWindow:
    prompt_tps: float
    gen_tps: float
    hit_rate: float | None
    queued: tuple[int, ...]  # at the times the log printed its queue


def _blocks(shared: tuple[int, ...], length: int, next_id: int) -> tuple[tuple[int, ...], int]:
    own = math.ceil(length / FIT_BLOCK_TOKENS) - len(shared)
    return shared + tuple(range(next_id, next_id + own)), next_id + own


def _requests(fit: FittedWorkload, offset: float) -> tuple[list[TraceRequest], int]:
    """The requests (those before the window first) and how many come before it."""
    length, block = fit.prompt_tokens, FIT_BLOCK_TOKENS
    shared_blocks = min(round(fit.reuse * length / block), (length - 1) // block)
    shared = tuple(range(shared_blocks))
    next_id = shared_blocks
    rows: list[tuple[float, int]] = []
    before = fit.running_at_start or (1 if shared_blocks else 0)
    rows += [(0.0, max(1, fit.output_tokens // 2))] * before
    owed = 0.0
    for start, end, count in fit.arrivals:
        owed += count
        n = int(owed + 1e-9)
        owed -= n
        rows += [
            (offset + start + (end - start) * (i + 1) / (n + 1), fit.output_tokens)
            for i in range(n)
        ]
    requests = []
    for rid, (at, output) in enumerate(rows):
        blocks, next_id = _blocks(shared, length, next_id)
        requests.append(TraceRequest(rid, at, length, output, blocks))
    return requests, before


def fitted_trace(fit: FittedWorkload, config: SimConfig) -> FittedTrace:
    """The trace of `fit`, its window opened once the requests before it are prefilled."""
    warm, before = _requests(fit, 0.0)
    offset = 0.0
    if before:
        head = Trace(tuple(warm[:before]), FIT_BLOCK_TOKENS, "fitted: before the window")
        offset = max(r.first_token_s for r in replay(head, config).records if r.finished)
    requests, _ = _requests(fit, offset)
    trace = Trace(tuple(requests), FIT_BLOCK_TOKENS, f"fitted from {fit.source}")
    return FittedTrace(trace, before, offset)


def _waiting_at(run: Replay, times: list[float]) -> tuple[int, ...]:
    series = run.concurrency.series()
    out = []
    i = -1
    for t in times:
        while i + 1 < len(series) and series[i + 1][0] <= t + 1e-9:
            i += 1
        out.append(series[i][2] if i >= 0 else 0)
    return tuple(out)


def measure(run: Replay, fitted: FittedTrace, window: ObservedWindow) -> SimulatedWindow:
    """The simulated run over the log's window."""
    start, end = fitted.offset_s, fitted.offset_s + window.duration_s
    inside = [r for r in run.records[fitted.before :] if r.finished and start <= r.admit_s <= end]
    generated = 0.0
    for r in run.records:
        if not r.finished:
            continue
        span = r.finish_s - r.first_token_s
        overlap = min(end, r.finish_s) - max(start, r.first_token_s)
        if span <= 0:
            generated += r.output_len if start <= r.first_token_s <= end else 0
        elif overlap > 0:
            generated += r.output_len * overlap / span
    prompt = sum(r.input_len for r in inside)
    hits = sum(sum(r.hit_tokens.values()) for r in inside)
    return SimulatedWindow(
        prompt_tps=prompt / window.duration_s,
        gen_tps=generated / window.duration_s,
        hit_rate=hits / prompt if prompt else None,
        queued=_waiting_at(run, [start + t for t in window.queue_times_s]),
    )
