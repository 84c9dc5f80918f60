"""One timed simulation: a trace through the SGLang-like engine over kvtier's tiered cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from kvtier.engines.sglang.prefetch import ERA_0_5_3
from kvtier.sim.clients import ClientLoop
from kvtier.sim.engine.cacheport import TieredCachePort
from kvtier.sim.engine.prefetch import PrefetchQueue
from kvtier.sim.engine.scheduler import EngineConfig, ServerModel
from kvtier.sim.engine.simulator import Simulation
from kvtier.sim.metrics import Concurrency, RequestRecord, SimResult, summarize
from kvtier.sim.setup import SimConfig
from kvtier.sim.trace import Trace


@dataclass(frozen=True, slots=True)
class Replay:
    """A timed run's per-request records, with what the engine and cache counted."""

    records: list[RequestRecord]
    concurrency: Concurrency
    pcie_busy_s: float
    evictions: dict[str, int]
    prefetches: dict[str, object] | None = None  # the store prefetch's policy and counts


def replay(
    trace: Trace | ClientLoop, config: SimConfig, progress: Callable[[int], None] | None = None
) -> Replay:
    """Replay `trace` (or run the benchmark clients of a `ClientLoop`) on the deployment
    `config` describes; `progress` gets settled requests."""
    if trace.block_size != config.block_size:
        raise ValueError("trace and config disagree on the block size")
    port = TieredCachePort(
        config.device_blocks, config.host_blocks, config.write_policy, config.store_blocks
    )
    prefetch = None
    if config.store_blocks:
        # HiCacheController: prefetch_threshold = max(prefetch_threshold, page_size)
        rules = config.prefetch
        rules = dataclasses.replace(
            rules, threshold_tokens=max(rules.threshold_tokens, config.page_size)
        )
        capacity = config.prefetch_capacity
        if capacity is None:
            capacity = ERA_0_5_3.capacity_tokens(config.host_tokens, config.device_tokens)
        prefetch = PrefetchQueue(rules, config.timing.store_read_s(1), capacity)
    engine = ServerModel(
        port,
        config.timing,
        EngineConfig(
            config.block_size,
            config.max_running_requests,
            config.chunked_prefill_size,
            config.context_length,
        ),
        prefetch,
    )
    clients = None
    if isinstance(trace, ClientLoop):
        clients = trace.start()
        sim = Simulation(clients, engine)
    else:
        sim = Simulation(trace, engine)
    records = sim.run(progress)
    settled = sum(1 for r in records if r.finished or r.rejected)
    if settled != len(records):
        raise RuntimeError(f"{len(records) - settled} requests neither finished nor were rejected")
    if clients is not None and clients.left:
        raise RuntimeError(f"{clients.left} turns of the benchmark's clients were never sent")
    prefetches: dict[str, object] | None = None
    if prefetch is not None:
        prefetches = {
            "policy": prefetch.rules.policy.value,
            "issued": prefetch.issued,
            "completed": prefetch.completed,
            "stopped_early": prefetch.partial,
        }
    return Replay(records, sim.concurrency, engine.pcie_busy_s, port.evictions(), prefetches)


def simulate(
    trace: Trace | ClientLoop,
    config: SimConfig,
    warmup_fraction: float = 0.0,
    progress: Callable[[int], None] | None = None,
    params: dict[str, object] | None = None,
) -> SimResult:
    """Replay `trace` on the deployment `config` describes; `progress` gets settled requests."""
    run = replay(trace, config, progress)
    run_params: dict[str, object] = {
        "mode": "timed",
        "device_tokens": config.device_tokens,
        "host_tokens": config.host_tokens,
        "device_blocks": config.device_blocks,
        "host_blocks": config.host_blocks,
        "store_tokens": config.store_tokens,
        "store_blocks": config.store_blocks,
        "page_size": config.page_size,
        "write_policy": config.write_policy,
        "max_running_requests": config.max_running_requests,
        "chunked_prefill_size": config.chunked_prefill_size,
        "warmup_fraction": warmup_fraction,
        "sources": dict(config.sources),
        **(params or {}),
    }
    if run.prefetches is not None:
        run_params["prefetches"] = run.prefetches
    return summarize(
        run.records,
        warmup_fraction,
        True,
        run.evictions,
        run.concurrency,
        run.pcie_busy_s,
        run_params,
    )
