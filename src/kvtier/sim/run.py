"""One timed simulation: a trace through the server model of the deployment's engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvtier.sim.bench import RandomBench
from kvtier.sim.clients import ClientLoop
from kvtier.sim.metrics import ConcurrencyRecorder, RequestRecord, SimResult, summarize
from kvtier.sim.servers import build_server
from kvtier.sim.setup import SimConfig
from kvtier.sim.simulation import Simulation
from kvtier.sim.speculative import gains
from kvtier.sim.trace import Trace


@dataclass(frozen=True, slots=True)
class Replay:
    """A timed run's per-request records, with what the engine and cache counted."""

    records: list[RequestRecord]
    concurrency: ConcurrencyRecorder
    pcie_busy_s: float
    evictions: dict[str, int]
    prefetches: dict[str, object] | None = None  # the store prefetch's policy and counts
    preemptions: int | None = None  # None: the server model never preempts
    decode_ends: np.ndarray | None = None  # every decode iteration's end (benchmark clients)


Source = Trace | ClientLoop | RandomBench
SPEC_BATCHES = (1, 16, 64)  # batch sizes at which a speculative run states its draft's gain


def replay(
    trace: Source, config: SimConfig, progress: Callable[[int], None] | None = None
) -> Replay:
    """Replay `trace` (or run the benchmark clients of a `ClientLoop` or `RandomBench`) on the
    deployment `config` describes; `progress` gets settled requests."""
    if trace.block_size != config.block_size:
        raise ValueError("trace and config disagree on the block size")
    server = build_server(config)
    clients: Any = None
    if not isinstance(trace, Trace):
        clients = trace.start()
        sim = Simulation(clients, server)
    else:
        sim = Simulation(trace, server)
    records = all_settled(sim.run(progress))
    if clients is not None and clients.left:
        raise RuntimeError(f"{clients.left} turns of the benchmark's clients were never sent")
    c = server.counters()
    ends = c.decode_log.ends() if isinstance(trace, RandomBench) and c.decode_log else None
    return Replay(
        records, sim.concurrency, c.pcie_busy_s, c.evictions, c.prefetches, c.preemptions, ends
    )


def all_settled(records: list[RequestRecord]) -> list[RequestRecord]:
    """A run's `records`, each finished or rejected: one left neither is the loop's fault."""
    settled = sum(1 for r in records if r.finished or r.rejected)
    if settled != len(records):
        raise RuntimeError(f"{len(records) - settled} requests neither finished nor were rejected")
    return records


def simulate(
    trace: Source,
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
    if run.preemptions is not None:
        run_params["preemptions"] = run.preemptions
    if config.timing.spec is not None and run.records:
        # what the draft costs and buys per decode iteration, at the run's mean context
        context = round(sum(r.input_len + r.output_len / 2 for r in run.records) / len(run.records))
        run_params["speculative_gain"] = {
            "context_tokens": context,
            "by_batch": [g.to_json() for g in gains(config.timing, context, SPEC_BATCHES)],
        }
    return summarize(
        run.records,
        warmup_fraction,
        True,
        run.evictions,
        run.concurrency,
        run.pcie_busy_s,
        run_params,
        run.decode_ends,
    )
