"""A fleet run: N identical servers, each sized by the ledger as one server is, behind a router.

Each replica is the engine's single-server model (`kvtier.sim.servers.build_server`), with the
deployment's `SimConfig`: same tiers, limits and timing. With a shared store (SGLang's HiCache
L3), the replicas' caches save to and read from one `AccountingStore` through one reader
(`kvtier.sim.fleet.shared_store`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from kvtier.engines.deployment import Engine
from kvtier.engines.sglang.prefetch import ERA_0_5_3
from kvtier.errors import KvtierError
from kvtier.sim.decode_log import DecodeLog
from kvtier.sim.fleet.loop import FleetLoop, ReplicaLog
from kvtier.sim.fleet.registry import make_router
from kvtier.sim.fleet.result import FleetResult, ReplicaStats
from kvtier.sim.fleet.shared_store import SharedStoreQueue
from kvtier.sim.fleet.view import ReplicaView
from kvtier.sim.metrics import ConcurrencyRecorder, RequestRecord, SimResult, summarize
from kvtier.sim.run import all_settled
from kvtier.sim.servers import build_server
from kvtier.sim.servers.base import ServerModel
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.sglang import EngineConfig, SGLangServer
from kvtier.sim.servers.store import AccountingStore
from kvtier.sim.setup import SimConfig
from kvtier.sim.trace import Trace

MAX_REPLICAS = 4096  # beyond any fleet one router fronts; each replica holds its own caches
# the stages of a ladder measured: its last (inference-perf's per-stage report), all of them
# (its summary report), or all but the first, the output rate the mean of the stages' own (the
# "Summary across QPS" of llm-d-kv-cache-manager's benchmarking reports)
LAST, ALL, LADDER = "last", "all", "ladder"
STAGES_MEASURED = (LAST, ALL, LADDER)


@dataclass(frozen=True, slots=True)
class FleetSpec:
    replicas: int
    router: str
    router_options: tuple[str, ...] = ()
    seed: int = 0
    shared_store: bool = False  # config.store_tokens is then the fleet's one store
    store_latency_s: float = 0.0
    stages_measured: str = LAST  # one of STAGES_MEASURED

    def check(self) -> None:
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise KvtierError(f"--replicas must be from 1 to {MAX_REPLICAS}, got {self.replicas}")
        if not (math.isfinite(self.store_latency_s) and self.store_latency_s >= 0):
            raise KvtierError(
                f"--shared-store-latency-ms must be >= 0, got {self.store_latency_s * 1e3}"
            )


def _shared_queue(config: SimConfig, spec: FleetSpec) -> SharedStoreQueue:
    # HiCacheController: prefetch_threshold = max(prefetch_threshold, page_size)
    rules = dataclasses.replace(
        config.prefetch, threshold_tokens=max(config.prefetch.threshold_tokens, config.page_size)
    )
    capacity = config.prefetch_capacity
    if capacity is None:
        capacity = ERA_0_5_3.capacity_tokens(config.host_tokens, config.device_tokens)
    s_per_token = config.timing.store_read_s(1)
    return SharedStoreQueue(rules, s_per_token, capacity * spec.replicas, spec.store_latency_s)


def build_servers(config: SimConfig, spec: FleetSpec) -> list[ServerModel]:
    """The replicas: the engine's own server N times, or SGLang servers over one store; a
    fleet reports no token times, so no server keeps its decode iterations' ends."""
    servers = _servers(config, spec)
    for server in servers:
        if isinstance(server, SGLangServer):
            server.decode_log = DecodeLog(kept=False)
    return servers


def _servers(config: SimConfig, spec: FleetSpec) -> list[ServerModel]:
    if not (spec.shared_store and config.store_blocks):
        return [build_server(config) for _ in range(spec.replicas)]
    if config.engine is not Engine.SGLANG:
        raise KvtierError("a shared store is modelled as SGLang's HiCache L3: use --engine sglang")
    limits = EngineConfig(
        config.block_size,
        config.max_running_requests,
        config.chunked_prefill_size,
        config.context_length,
    )
    store = AccountingStore(config.store_blocks)
    queue = _shared_queue(config, spec)
    servers: list[ServerModel] = []
    for _ in range(spec.replicas):
        port = TieredCachePort(
            config.device_blocks, config.host_blocks, config.write_policy, 0, store
        )
        servers.append(SGLangServer(port, config.timing, limits, queue))
    return servers


def simulate_fleet(
    trace: Trace,
    config: SimConfig,
    spec: FleetSpec,
    warmup_fraction: float,
    progress: Callable[[int], None] | None,
    params: dict[str, object] | None,
) -> FleetResult:
    """`trace` through `spec`'s fleet, each replica the deployment `config` describes;
    `progress` gets settled requests, `params` join the result's."""
    spec.check()
    if trace.block_size != config.block_size:
        raise ValueError("trace and config disagree on the block size")
    engines = build_servers(config, spec)
    router, opts = make_router(
        spec.router,
        spec.replicas,
        spec.router_options,
        spec.seed,
        ReplicaView(engines, config.block_tokens, config.device_blocks, config.timing),
        config.block_size,
    )
    loop = FleetLoop(trace, engines, router)
    records = all_settled(loop.run(progress))
    counters = [e.counters() for e in engines]
    preempted = [c.preemptions for c in counters if c.preemptions is not None]
    pcie_busy_s = sum(c.pcie_busy_s for c in counters) / len(counters)
    # a trace in load stages is measured over its last stage, as inference-perf reports a stage
    # (its requests' outputs over their first send to their last response), or over several
    skip = _measured_from(trace, spec, warmup_fraction, len(records))
    start, end = result_span(records)
    result = summarize(
        records[skip:] if trace.stages else records,
        warmup_fraction,
        True,
        _evictions([c.evictions for c in counters], spec.shared_store),
        loop.concurrency,
        pcie_busy_s,
        _params(config, spec, warmup_fraction, params, skip if trace.stages else None),
        pcie_over_s=end - start if trace.stages else None,  # the link ran through the ladder
    )
    if trace.stages and spec.stages_measured == LADDER:
        result = _stage_mean_rates(result, records, trace)
    replicas = tuple(_replica(log, records, skip, start, end) for log in loop.logs)
    waits = [r.first_token_s - r.arrival_s for r in records[skip:]]
    waits = [w for w in waits if not math.isnan(w)]
    mean, peak = queue_stats(loop.concurrency, start, end)
    return FleetResult(
        result=result,
        replicas=replicas,
        router=spec.router,
        router_options=opts,
        ttft_mean_s=sum(waits) / len(waits) if waits else None,
        queue_mean=mean,
        queue_max=peak,
        shared_store=spec.shared_store and bool(config.store_blocks),
        decisions=dict(getattr(router, "decisions", {})),
        preemptions=sum(preempted) if preempted else None,
    )


def _measured_from(trace: Trace, spec: FleetSpec, warmup_fraction: float, n: int) -> int:
    if not trace.stages:
        return math.floor(warmup_fraction * n)
    if spec.stages_measured == ALL:
        return 0
    return trace.stages[0 if spec.stages_measured == LADDER else -1][0]


def _stage_mean_rates(
    result: SimResult, records: Sequence[RequestRecord], trace: Trace
) -> SimResult:
    """The ladder's output rate as llm-d's reports sum it up: the mean, over the stages after
    the first, of each stage's own (its finished requests' output tokens over its first send to
    its last response, as inference-perf reports a stage)."""
    bounds = [first for first, _ in trace.stages] + [len(records)]
    rates = []
    for a, b in pairwise(bounds):
        stage = records[a:b]
        start, end = result_span(stage)
        tokens = sum(r.output_len for r in stage if r.finished)
        rates.append(tokens / (end - start) if end > start else 0.0)
    out = sum(rates) / len(rates)
    result = dataclasses.replace(result, throughput_tok_s=out)
    if result.output_tok_s is None:
        return result
    return dataclasses.replace(result, output_tok_s=out)


def _params(
    config: SimConfig,
    spec: FleetSpec,
    warmup: float,
    extra: dict[str, object] | None,
    last_stage: int | None = None,
) -> dict[str, object]:
    staged = {} if last_stage is None else {"measured_from_request": last_stage}
    return {
        "mode": "timed",
        "replicas": spec.replicas,
        "router": spec.router,
        "device_tokens": config.device_tokens,
        "host_tokens": config.host_tokens,
        "store_tokens": config.store_tokens,
        "shared_store": spec.shared_store,
        "page_size": config.page_size,
        "write_policy": config.write_policy,
        "max_running_requests": config.max_running_requests,
        "chunked_prefill_size": config.chunked_prefill_size,
        "warmup_fraction": warmup,
        "sources": dict(config.sources),
        **staged,
        **(extra or {}),
    }


def _evictions(per_server: Sequence[dict[str, int]], shared: bool) -> dict[str, int]:
    total: dict[str, int] = {}
    for evictions in per_server:
        for tier, n in evictions.items():
            total[tier] = total.get(tier, 0) + n
    if shared and "store" in total:
        total["store"] //= len(per_server)  # one store, counted by every replica's port
    return total


def result_span(records: Sequence[RequestRecord]) -> tuple[float, float]:
    start = min((r.arrival_s for r in records), default=0.0)
    end = max((r.finish_s for r in records if r.finished), default=start)
    return start, end


def queue_stats(c: ConcurrencyRecorder, start: float, end: float) -> tuple[float, int]:
    """Time-weighted mean and maximum of the waiting requests between `start` and `end`."""
    return (c.waiting_area / (end - start) if end > start else 0.0), c.max_waiting


def _replica(
    log: ReplicaLog,
    records: Sequence[RequestRecord],
    skip: int,
    start: float,
    end: float,
) -> ReplicaStats:
    mine = [records[rid] for rid in log.rids if rid >= skip]
    tokens = sum(r.input_len for r in mine)
    hits = sum(sum(r.hit_tokens.values()) for r in mine)
    mean, peak = queue_stats(log.concurrency, start, end)
    return ReplicaStats(
        requests=len(log.rids),
        hit_rate=hits / tokens if tokens else 0.0,
        busy_fraction=log.busy_s / (end - start) if end > start else 0.0,
        queue_mean=mean,
        queue_max=peak,
        series=log.concurrency.series(),
    )
