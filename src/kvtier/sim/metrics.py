"""What a simulation measured: per-request records in, one frozen summary out.

Token hit rate = prefix tokens served from a cache tier / prompt tokens, summed over the
measured requests (those after the warm-up fraction); TTFT and queueing percentiles are over the
measured requests too, throughput over the whole run. A tier's hit is the part of the matched
prefix that was resident there when the request was scheduled: device first, then host, then
store. For a trace whose requests carry their conversation round, `hit_rate_by_round` is the same
ratio over each round's measured requests (first round first; None for a round none of whose
requests is measured), and `ttft_mean_s_by_round` their mean TTFT (as SGLang's multi-turn
benchmark prints per round). Latency percentiles interpolate linearly between order statistics.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvtier.cache.storage import Tier
from kvtier.payload import OMITTED, Amount, Share
from kvtier.sim.token_latency import itl_values, tpot_values

TIERS = (Tier.DEVICE, Tier.HOST, Tier.STORE)
MAX_SERIES_POINTS = 200  # concurrency samples kept for charts


@dataclass(slots=True)
class RequestRecord:
    """One request's life in the simulation; times in seconds from the trace start."""

    rid: int
    arrival_s: float
    input_len: int
    output_len: int
    round: int | None = None
    hit_tokens: dict[Tier, int] = field(default_factory=dict)
    admit_s: float = math.nan
    first_token_s: float = math.nan
    finish_s: float = math.nan
    rejected: str = ""  # why the request can never run; empty when it ran
    decode_steps: tuple[int, int] = (0, 0)  # the server's decode iterations [first, end) it ran in

    @property
    def finished(self) -> bool:
        return not math.isnan(self.finish_s)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Latency percentiles and the mean (left out of the JSON when None)."""

    mean: float | None = field(default=None, kw_only=True, metadata=OMITTED)
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True, slots=True)
class ConcurrencySummary:
    """Running requests: the most at once, the time-weighted mean, and (time, running, waiting)
    samples at every change, thinned to `MAX_SERIES_POINTS`."""

    max: int
    mean: float
    series: tuple[tuple[float, int, int], ...]


@dataclass(frozen=True, slots=True)
class SimResult:
    """Summary of one run; `timed` is False for the reference modes, which have no clock.

    It is the `--json` payload of a run as it stands (`kvtier.payload.to_json`): keys are the
    field names in this order, so a new figure is one field here, placed where its key goes.
    """

    params: dict[str, object]
    requests: int
    measured_requests: int  # requests after the warm-up fraction, over which hit rates are taken
    finished: int
    rejected: int
    rejected_ids: tuple[int, ...]
    input_tokens: int  # prompt tokens of the measured requests
    hit_rate: Share
    hit_rate_by_tier: dict[str, Share]
    hit_rate_by_round: tuple[float | None, ...] | None  # None: the trace has no rounds
    ttft_mean_s_by_round: tuple[float | None, ...] | None  # timed runs with rounds only
    hit_tokens_by_tier: dict[str, int]
    prefill_tokens_saved: int  # over all requests that ran
    timed: bool
    ttft_s: Percentiles | None
    queue_s: Percentiles | None
    throughput_tok_s: Amount
    duration_s: float
    concurrency: ConcurrencySummary
    evictions: dict[str, int]
    pcie_busy_fraction: float
    # timed runs: latencies and rates as serving benchmarks state them (`sim.token_latency`)
    tpot_s: Percentiles | None = None
    itl_s: Percentiles | None = None  # None unless the run kept decode iteration times
    output_tok_s: Amount | None = None
    request_throughput: Amount | None = None
    total_output_tokens: int | None = None


def hit_rates(hit_tokens_by_tier: dict[str, int], input_tokens: int) -> dict[str, float]:
    """Each tier's hit tokens over the prompt tokens (0 when there are none)."""
    n = input_tokens
    return {t: (v / n if n else 0.0) for t, v in hit_tokens_by_tier.items()}


def by_round(
    rounds: Sequence[int | None], totals: Sequence[float], parts: Sequence[float]
) -> tuple[float | None, ...] | None:
    """Sum of `parts` over sum of `totals` per round (index = round; None for a round without
    requests), from per-request figures; None when the requests carry no round."""
    if not rounds or rounds[0] is None:
        return None
    top = max(r for r in rounds if r is not None)
    total = [0.0] * (top + 1)
    part = [0.0] * (top + 1)
    for r, n, h in zip(rounds, totals, parts, strict=True):
        assert r is not None  # a trace carries rounds on every line or on none
        total[r] += n
        part[r] += h
    return tuple(h / n if n else None for h, n in zip(part, total, strict=True))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), q in [0, 100]."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def percentiles(values: Sequence[float]) -> Percentiles | None:
    if not values:
        return None
    s = sorted(values)
    mean = math.fsum(s) / len(s)
    return Percentiles(percentile(s, 50), percentile(s, 90), percentile(s, 99), mean=mean)


class ConcurrencyRecorder:
    """Time-weighted running/waiting counts, sampled at every change. The samples are kept in
    three flat arrays (24 bytes a sample, where a tuple of a float and two ints took about 100),
    and the waiting requests' area and peak are summed as samples come."""

    def __init__(self) -> None:
        self.times = array("d")
        self.running = array("q")
        self.waiting = array("q")
        self.max_running = 0
        self.max_waiting = 0
        self.waiting_area = 0.0  # sum of waiting x (next sample's time - its time)
        self._area = 0.0
        self._last = (0.0, 0)
        self._sample: tuple[float, int, int] | None = None  # the last sample kept

    def observe(self, t: float, running: int, waiting: int) -> None:
        last_t, last_running = self._last
        self._area += last_running * (t - last_t)
        self._last = (t, running)
        if running > self.max_running:
            self.max_running = running
        kept = self._sample
        if kept is not None:
            if kept[1] == running and kept[2] == waiting:
                return
            self.waiting_area += kept[2] * (t - kept[0])
        if waiting > self.max_waiting:
            self.max_waiting = waiting
        self._sample = (t, running, waiting)
        self.times.append(t)
        self.running.append(running)
        self.waiting.append(waiting)

    def window(self, start: float, end: float) -> tuple[int, float]:
        """The most requests running and their time-weighted mean between `start` and `end`.
        A run measured over its whole span takes the sums kept as samples came; one measured
        over part of its span (a load ladder's last stage) walks the samples in that part, so
        the earlier stages' load counts in neither figure."""
        if end <= start:
            return 0, 0.0
        times = self.times
        if not times or (start <= times[0] and end >= self._last[0]):
            last_t, last_running = self._last
            area = self._area + last_running * max(0.0, end - last_t)
            return self.max_running, area / (end - start)
        first = max(0, bisect_right(times, start) - 1)
        peak, area = 0, 0.0
        for i in range(first, len(times)):
            t0 = max(times[i], start)
            if t0 >= end:
                break
            t1 = times[i + 1] if i + 1 < len(times) else end
            running = self.running[i]
            area += running * (min(t1, end) - t0)
            peak = max(peak, running)
        return peak, area / (end - start)

    def series(self) -> tuple[tuple[float, int, int], ...]:
        step = max(1, math.ceil(len(self.times) / MAX_SERIES_POINTS))
        return tuple(
            zip(self.times[::step], self.running[::step], self.waiting[::step], strict=True)
        )


def summarize_untimed(
    input_lens: Sequence[int],
    device_hits: Sequence[int],
    warmup_fraction: float,
    evictions: dict[str, int],
    params: dict[str, object] | None = None,
    rounds: Sequence[int | None] = (),
) -> SimResult:
    """What `summarize` gives for a clockless reference run, from each request's prompt tokens
    and device hit tokens (in trace order) rather than from records: every request runs, at
    once, so there is no latency, throughput or concurrency to measure."""
    skip = math.floor(warmup_fraction * len(input_lens))
    hits = {t.value: 0 for t in TIERS}
    hits[Tier.DEVICE.value] = sum(device_hits[skip:])
    input_tokens = sum(input_lens[skip:])
    by_tier = hit_rates(hits, input_tokens)
    return SimResult(
        params=params or {},
        requests=len(input_lens),
        measured_requests=len(input_lens) - skip,
        finished=len(input_lens),
        rejected=0,
        rejected_ids=(),
        input_tokens=input_tokens,
        hit_rate=sum(hits.values()) / input_tokens if input_tokens else 0.0,
        hit_rate_by_tier=by_tier,
        hit_rate_by_round=by_round(rounds[skip:], input_lens[skip:], device_hits[skip:]),
        ttft_mean_s_by_round=None,
        hit_tokens_by_tier=hits,
        prefill_tokens_saved=sum(device_hits),
        timed=False,
        ttft_s=percentiles([]),
        queue_s=percentiles([]),
        throughput_tok_s=0.0,
        duration_s=0.0,
        concurrency=ConcurrencySummary(0, 0.0, ()),
        evictions=evictions,
        pcie_busy_fraction=0.0,
    )


def _token_latency(
    measured: Sequence[RequestRecord],
    finished: Sequence[RequestRecord],
    duration_s: float,
    decode_ends: np.ndarray | None,
) -> dict[str, Any]:
    """`SimResult`'s benchmark fields (`kvtier.sim.token_latency`): latencies over the measured
    finished requests, rates over every finished one."""
    out = sum(r.output_len for r in finished)
    rate = 1.0 / duration_s if duration_s > 0 else 0.0
    return {
        "tpot_s": percentiles(tpot_values(measured)),
        "itl_s": None if decode_ends is None else percentiles(itl_values(measured, decode_ends)),
        "output_tok_s": out * rate,
        "request_throughput": len(finished) * rate,
        "total_output_tokens": out,
    }


def summarize(
    records: Sequence[RequestRecord],
    warmup_fraction: float,
    timed: bool,
    evictions: dict[str, int],
    concurrency: ConcurrencyRecorder | None = None,
    pcie_busy_s: float = 0.0,
    params: dict[str, object] | None = None,
    decode_ends: np.ndarray | None = None,
    pcie_over_s: float | None = None,
) -> SimResult:
    """Fold per-request records (in trace order) into a `SimResult`; `decode_ends`, every
    decode iteration's end time, gives the inter-token latencies; `pcie_over_s`, the seconds
    the link's busy time is shared over where they are not the records' span (a ladder
    measured over its last stage, whose link ran through every stage)."""
    skip = math.floor(warmup_fraction * len(records))
    measured = records[skip:]
    ran = [r for r in records if not r.rejected]
    hits = {t.value: sum(r.hit_tokens.get(t, 0) for r in measured) for t in TIERS}
    done = [r for r in records if r.finished]
    timed_done = [r for r in measured if r.finished] if timed else []
    start = min((r.arrival_s for r in records), default=0.0)
    end = max((r.finish_s for r in done), default=start) if timed else start
    duration = end - start
    rejected = tuple(r.rid for r in records if r.rejected)
    input_tokens = sum(r.input_len for r in measured)
    return SimResult(
        params=params or {},
        requests=len(records),
        measured_requests=len(measured),
        finished=len(done),
        rejected=len(rejected),
        rejected_ids=rejected,
        input_tokens=input_tokens,
        hit_rate=sum(hits.values()) / input_tokens if input_tokens else 0.0,
        hit_rate_by_tier=hit_rates(hits, input_tokens),
        hit_rate_by_round=by_round(
            [r.round for r in measured],
            [r.input_len for r in measured],
            [sum(r.hit_tokens.values()) for r in measured],
        ),
        ttft_mean_s_by_round=by_round(
            [r.round for r in timed_done],
            [1.0] * len(timed_done),
            [r.first_token_s - r.arrival_s for r in timed_done],
        ),
        hit_tokens_by_tier=hits,
        prefill_tokens_saved=sum(sum(r.hit_tokens.values()) for r in ran),
        timed=timed,
        ttft_s=percentiles([r.first_token_s - r.arrival_s for r in timed_done]),
        queue_s=percentiles([r.admit_s - r.arrival_s for r in timed_done]),
        throughput_tok_s=sum(r.output_len for r in done) / duration if duration > 0 else 0.0,
        duration_s=duration,
        concurrency=ConcurrencySummary(
            *(concurrency.window(start, end) if concurrency else (0, 0.0)),
            concurrency.series() if concurrency else (),
        ),
        evictions=evictions,
        pcie_busy_fraction=pcie_busy_s / over if (over := pcie_over_s or duration) > 0 else 0.0,
        **(_token_latency(timed_done, done, duration, decode_ends) if timed else {}),
    )
