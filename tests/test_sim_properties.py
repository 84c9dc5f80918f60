"""Properties of timed simulations on small generated traces (hypothesis).

* no request is lost: every request finishes or is rejected, and exactly those that can
  never fit on the device are rejected;
* the hit rate never decreases as the host tier grows (host ratio 0, 1, 2, 4, 8);
* with an L3 store, under every prefetch policy and store bandwidth, no request is lost either,
  and on an idle server `best_effort` never serves a store hit (the prefetch stops at once);
* a request that meets an idle server gets its first token no later when PCIe is faster.
  TTFT percentiles under contention are NOT monotone in PCIe bandwidth: a prefill that ends
  sooner lets a decode step start just before the next arrival, which then waits for it (a
  scheduling anomaly real engines share); the p50 stays within one decode step.
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtier.sim.run import simulate
from kvtier.sim.servers.prefetch import PrefetchPolicy, PrefetchRules
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import Trace, TraceRequest

# a Llama-3-8B-like model on one H100: the figures only need to be plausible
COST = ModelCost(8_000_000_000, 16e9, 131_072, 32, 32 * 256)


def config(
    device_blocks: int,
    host_ratio: int = 0,
    pcie_gbps: float = 25.0,
    max_running: int = 64,
    chunk: int = 4096,
) -> SimConfig:
    hw = Hardware(989.0, 3350.0, pcie_gbps, pcie_gbps * 4, 8)
    return SimConfig(
        device_blocks * 512,
        device_blocks * host_ratio * 512,
        1,
        512,
        "write_through",
        max_running,
        chunk,
        TimingModel(COST, hw, 1),
        (),
    )


@st.composite
def traces(draw: st.DrawFn, max_requests: int = 30, max_gap_ms: int = 3000) -> Trace:
    """Requests that extend or branch off earlier prompts; ids name whole prefixes."""
    n = draw(st.integers(1, max_requests))
    next_id = 0
    t_ms = 0
    requests: list[TraceRequest] = []
    for rid in range(n):
        base: tuple[int, ...] = ()
        if requests and draw(st.booleans()):
            parent = requests[draw(st.integers(0, len(requests) - 1))].blocks
            base = parent[: draw(st.integers(0, len(parent)))]
        fresh = draw(st.integers(0 if base else 1, 12))
        blocks = base + tuple(range(next_id, next_id + fresh))
        next_id += fresh
        input_len = 512 * (len(blocks) - 1) + draw(st.integers(1, 512))
        t_ms += draw(st.integers(0, max_gap_ms))
        requests.append(
            TraceRequest(rid, t_ms / 1000, input_len, draw(st.integers(1, 700)), blocks)
        )
    return Trace(tuple(requests))


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(traces(), st.integers(2, 40), st.integers(0, 4), st.integers(1, 8), st.integers(1, 8))
def test_no_request_is_lost(
    trace: Trace, device: int, ratio: int, running: int, chunk_blocks: int
) -> None:
    result = simulate(trace, config(device, ratio, max_running=running, chunk=512 * chunk_blocks))
    # whole blocks for prompt and output, and PrefillAdder.add_one_req's prompt, output and
    # page strictly below the pool
    never_fit = {
        r.rid
        for r in trace.requests
        if math.ceil((r.input_len + r.output_len) / 512) > device
        or len(r.blocks) * 512 + r.output_len + 1 >= device * 512
    }
    assert result.requests == len(trace.requests)
    assert result.finished + result.rejected == result.requests
    assert set(result.rejected_ids) == never_fit


@SETTINGS
@given(traces(), st.integers(4, 40))
def test_hit_rate_never_decreases_as_the_host_tier_grows(trace: Trace, device: int) -> None:
    rates = [simulate(trace, config(device, ratio)).hit_rate for ratio in (0, 1, 2, 4, 8)]
    assert rates == sorted(rates)


@SETTINGS
@given(traces(max_gap_ms=0).filter(lambda t: len(t.requests) >= 2), st.integers(8, 40))
def test_host_tier_serves_hits_the_device_evicted(trace: Trace, device: int) -> None:
    """Everything the device-only run hits, the tiered run hits too, some of it from host."""
    alone = simulate(trace, config(device, 0))
    tiered = simulate(trace, config(device, 8))
    assert alone.hit_tokens_by_tier["host"] == 0
    assert tiered.hit_rate >= alone.hit_rate


def _isolated(trace: Trace) -> Trace:
    """The same requests an hour apart: each meets an idle server."""
    return Trace(
        tuple(
            TraceRequest(r.rid, 3600.0 * r.rid, r.input_len, r.output_len, r.blocks)
            for r in trace.requests
        )
    )


@SETTINGS
@given(traces(), st.integers(8, 40))
def test_ttft_of_an_uncontended_request_never_grows_with_pcie_bandwidth(
    trace: Trace, device: int
) -> None:
    trace = _isolated(trace)
    p50s = []
    for gbps in (4.0, 16.0, 64.0):
        result = simulate(trace, config(device, 8, pcie_gbps=gbps))
        if result.ttft_s is not None:
            p50s.append(result.ttft_s.p50)
    assert p50s == sorted(p50s, reverse=True)


@SETTINGS
@given(
    traces(),
    st.integers(2, 40),
    st.integers(2, 4),
    st.integers(1, 80),
    st.sampled_from(list(PrefetchPolicy)),
    st.sampled_from([0.05, 1.0, 50.0]),
)
def test_no_request_is_lost_with_an_l3_store(
    trace: Trace, device: int, ratio: int, store: int, policy: PrefetchPolicy, gbps: float
) -> None:
    base = config(device, ratio)
    timing = dataclasses.replace(
        base.timing, hw=dataclasses.replace(base.timing.hw, store_gbps=gbps)
    )
    rules = PrefetchRules(policy, timeout_base_s=0.05, timeout_per_ki_token_s=0.1)
    cfg = dataclasses.replace(base, timing=timing, store_tokens=store * 512, prefetch=rules)
    result = simulate(trace, cfg)
    assert result.finished + result.rejected == result.requests == len(trace.requests)
    if policy is PrefetchPolicy.BEST_EFFORT:
        assert simulate(_isolated(trace), cfg).hit_tokens_by_tier["store"] == 0
