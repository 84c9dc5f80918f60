"""What a vLLM startup log's memory lines say: the KV budget and the count made of it.

`Available KV cache memory: A GiB` is the budget (or `--kv-cache-memory-bytes` set it, and
profiling was skipped); without that line it is the requested memory less the profile's non-KV
figure and, when the release budgets them, the CUDA-graph estimate (`determine_available_memory`).
The count is `GPU KV cache size: N tokens`, or V0's `# GPU blocks: B` x the block size.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.vllm import pool as vllm_pool
from kvtier.engines.vllm.log import VllmStartup
from kvtier.logs.facts import Fact, min_over_ranks, stated


@dataclass(frozen=True, slots=True)
class VllmMemory:
    available: Fact[float]  # GiB for the KV cache on the smallest worker


def read_memory(startup: VllmStartup) -> tuple[VllmMemory | None, list[str]]:
    notes: list[str] = []
    if (blocks := startup.blocks_override) is not None:
        notes.append(
            f"the KV block count was set with --num-gpu-blocks-override={blocks.value:,} "
            f"({blocks.where}): the memory figures did not size the pool"
        )
    if startup.kv_memory_override_gib is not None:
        return VllmMemory(startup.kv_memory_override_gib), [
            *notes,
            "the KV cache size was set with --kv-cache-memory-bytes; memory profiling was skipped",
        ]
    printed = startup.available_kv()
    requested = min_over_ranks(startup.requested_gib)
    profile = next((p for p in startup.profiles if p.non_kv_gib is not None), None)
    chain: float | None = None
    if requested is not None and profile is not None and profile.non_kv_gib is not None:
        graphs = budgeted_graphs(startup)
        chain = requested.value - profile.non_kv_gib - graphs
        how = (
            f"requested {requested.value:.2f} ({requested.where}) - non-KV "
            f"{profile.non_kv_gib:.2f} (line {profile.line})"
            + (f" - CUDA-graph estimate {graphs:.2f}" if graphs else "")
        )
        if printed is not None:
            notes.append(f"available KV {printed.value:.2f} GiB = {how} = {chain:.2f} GiB")
        else:
            return VllmMemory(stated(round(chain, 2), f"computed: {how}")), notes
    return (VllmMemory(printed) if printed is not None else None), notes


def observed_count(startup: VllmStartup, block: Fact[int]) -> Fact[int] | None:
    if startup.kv_tokens is not None:
        return startup.kv_tokens
    blocks = startup.gpu_blocks
    if blocks is None:
        return startup.capacity_tokens  # a refusal that states the capacity
    return Fact(
        blocks.value * block.value,
        blocks.line,
        f"derived: # GPU blocks {blocks.value} x block size {block.value} ({block.where}): "
        + blocks.text,
        blocks.rank,
    )


def budgeted_graphs(startup: VllmStartup) -> float:
    """The CUDA-graph estimate, when this version subtracts it (on by default since v0.21)."""
    estimate = startup.graph_estimate_gib
    if estimate is None:
        return 0.0
    switch = startup.graph_profiling
    if switch is not None:
        return estimate.value if switch.value == "enabled" else 0.0
    version = startup.version.value if startup.version else None
    return estimate.value if vllm_pool.era_for(version).budgets_cuda_graphs else 0.0
