"""vLLM's SimpleCPUOffloadConnector (v0.19.0 on): its host pool per release, named by
`--kv-offloading-size` under VLLM_USE_SIMPLE_KV_OFFLOAD=1 (config/vllm.py
_post_init_kv_transfer_config: cpu_bytes_to_use = S x 2^30) or by `--kv-transfer-config`.

  bytes a rank      cpu_bytes_to_use (8 GiB when not given) // world_size (TP x PP), or
                    cpu_bytes_to_use_per_rank in its place (simple_cpu_offload_connector.py
                    SimpleCPUOffloadConnector.__init__, v0.19.0 - v0.33.0 alike)
  blocks            max(1, num_gpu_blocks x bytes a rank // the GPU pool's bytes)
                    (v1/simple_kv_offload/manager.py SimpleCPUOffloadScheduler._derive_cpu_config;
                    the pool's bytes: the sum of its KV tensors' to v0.23.x, the one packed
                    tensor's when packed in v0.24.0 - v0.28.x, kv_cache_tensors[0] from v0.29.0:
                    num_gpu_blocks x one GPU block's bytes every way), so max(1, bytes a rank //
                    one GPU block's KV on one rank over the pool's layers). The scheduler's
                    KVCacheConfig is rank 0's (generate_scheduler_kv_cache_config): at PP, the
                    first stage's layers.
                    v0.33.0: the least of every worker's count (sizing.py
                    sync_num_offload_blocks_across_workers, all-reduce MIN: the ranks are alike
                    at PP 1; at PP > 1, stages differing, exit 2), or kv_connector_extra_config
                    num_cpu_blocks, a positive int no more than the bytes allow
                    (_derive_cpu_config raises otherwise).
  block             the GPU block (no chunks): the CPU pool is a vLLM BlockPool of the GPU's
                    KVCacheConfig with num_blocks scaled, LRU through its free queue.
  host memory       each rank pins blocks x its GPU block's bytes (worker.py
                    SimpleCPUOffloadWorker, "... allocating N CPU blocks (X GB)"); no GPU memory.
  prefix caching    off: the connector warns and sizes nothing ("Detected prefix caching
                    disabled, disabling CPU offload"): no pool.
  disk backend      kv_offload_backend "disk" (v0.28.0 on) sizes a disk pool of
                    disk_capacity_bytes a rank, not the host: exit 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.engines.deployment import MAX_OFFLOADING_GIB, Deployment
from kvtier.engines.version import Version
from kvtier.engines.vllm.versions import V0_19, V0_28, V0_33
from kvtier.errors import KvtierError
from kvtier.units import GiB

SIMPLE = "SimpleCPUOffloadConnector"
DEFAULT_BYTES = 8 * GiB  # DEFAULT_CPU_CAPACITY_BYTES
BACKENDS = ("cpu", "disk")  # VALID_KV_OFFLOAD_BACKENDS, v0.28.0 on


@dataclass(frozen=True, slots=True)
class SimplePool:
    """The connector's CPU pool as its scheduler counts it."""

    blocks: int  # GPU-sized blocks
    bytes_per_rank: int  # pinned on each rank: blocks x one GPU block's bytes
    lazy: bool  # lazy_offload: stores GPU blocks near eviction, not as they are computed
    source: str


def whole(value: object) -> int | None:
    """int(value) as vLLM takes a JSON value; None for what int() refuses, a bool or a
    non-finite float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def simple_pool(
    d: Deployment,
    version: Version,
    block: tuple[int, int],
    extra: dict[str, object],
    size: float | None,
) -> SimplePool | None:
    """The pool for `d` (None with prefix caching off) of GPU blocks of `block` (tokens, bytes
    of KV on one rank over the pool's layers); `size` the --kv-offloading-size GiB, if it named
    the connector."""
    tokens, block_bytes = block
    if version < V0_19:
        raise KvtierError(f"vLLM {version} has no {SIMPLE} (it arrives in v0.19.0)")
    _check_backend(extra, version)
    if size is not None:
        extra = {**extra, "cpu_bytes_to_use": size * GiB}
    if d.hybrid.enable_prefix_caching is False:
        return None
    world = d.tp * d.pp
    total = _int(extra, "cpu_bytes_to_use", DEFAULT_BYTES)
    per_rank = total // world
    given = "--kv-offloading-size" if size is not None else "cpu_bytes_to_use"
    said = f"{given} {total:,} B // {world} {'rank' if world == 1 else 'ranks'}"
    if "cpu_bytes_to_use_per_rank" in extra:
        per_rank = _int(extra, "cpu_bytes_to_use_per_rank", 0)
        said = "cpu_bytes_to_use_per_rank"
    if per_rank < 0:
        raise KvtierError(f"{SIMPLE}: {said} leaves {per_rank:,} B a rank; vLLM takes 0 or more")
    blocks = max(1, per_rank // block_bytes)
    counted = f"max(1, {per_rank:,} B a rank // {block_bytes:,} B a GPU block)"
    explicit = extra.get("num_cpu_blocks") if version >= V0_33 else None
    if explicit is not None:
        blocks = _explicit(explicit, per_rank // block_bytes)
        counted = f"num_cpu_blocks {blocks:,} (at most {per_rank // block_bytes:,} by bytes)"
    if version >= V0_33 and d.pp > 1:
        raise KvtierError(
            f"{SIMPLE} at PP {d.pp} in vLLM {version}: every stage counts its own blocks and "
            "all take the least (sync_num_offload_blocks_across_workers), which kvtier does "
            "not size; give --vllm-version 0.32.0 for stage 0's count"
        )
    lazy = lazy_offload(extra)
    source = (
        f"{said}: {counted} = {blocks:,} blocks of {tokens} tokens ({SIMPLE} "
        f"_derive_cpu_config, vLLM {version}); "
        f"logs {_log_line(blocks, per_rank, lazy, version)!r}"
    )
    return SimplePool(blocks, blocks * block_bytes, lazy, source)


def _log_line(blocks: int, per_rank: int, lazy: bool, version: Version) -> str:
    """SimpleCPUOffloadScheduler.__init__'s logger.info: the count and the bytes a rank in GB
    of 2^30 B ("offload blocks" and the backend from v0.28.0)."""
    mode, gb = "lazy" if lazy else "eager", f"{per_rank / GiB:.2f} GB"
    if version < V0_28:
        return f"SimpleCPUOffloadScheduler: Allocating {blocks} CPU blocks ({gb}, mode={mode})"
    return (
        f"SimpleCPUOffloadScheduler: Allocating {blocks} offload blocks "
        f"({gb}, mode={mode}, backend=cpu)"
    )


def disabled_note(d: Deployment) -> tuple[str, ...]:
    """The connector's warning when prefix caching is off (it then sizes no pool)."""
    if d.hybrid.enable_prefix_caching is not False:
        return ()
    return (
        f"{SIMPLE} sizes no host pool with prefix caching off: it logs 'Detected prefix "
        "caching disabled, disabling CPU offload since it requires prefix caching.'",
    )


def lazy_offload(extra: dict[str, object]) -> bool:
    """kv_connector_extra_config lazy_offload, as the connector reads it: bool(value)."""
    return bool(extra.get("lazy_offload", False))


def _check_backend(extra: dict[str, object], version: Version) -> None:
    """kv_offload_backend (v0.28.0 on): "cpu" (the default) or "disk", whose pool is
    disk_capacity_bytes on a disk, not the host."""
    if version < V0_28 or "kv_offload_backend" not in extra:
        return
    backend = str(extra["kv_offload_backend"])
    if backend not in BACKENDS:
        raise KvtierError(
            f"--kv-transfer-config: {SIMPLE} kv_offload_backend {backend!r:.40}; vLLM "
            f"{version} takes {', '.join(BACKENDS)}"
        )
    if backend == "disk":
        raise KvtierError(
            f'--kv-transfer-config: {SIMPLE} kv_offload_backend "disk" keeps its blocks on a '
            "disk (disk_capacity_bytes a rank), which kvtier does not size; drop it for the "
            "host pool"
        )


def host_bytes(number: int, connector: str, key: str) -> int:
    """`number` bytes of host memory, refused past the most --kv-offloading-size takes."""
    if number > MAX_OFFLOADING_GIB * GiB:
        raise KvtierError(
            f"--kv-transfer-config: {connector} {key} {number:.3g} B is more than "
            f"{MAX_OFFLOADING_GIB:g} GiB, the most kvtier sizes (--kv-offloading-size's bound)"
        )
    return number


def _int(extra: dict[str, object], key: str, default: int) -> int:
    value = extra.get(key, default)
    number = whole(value)
    if number is None:
        raise KvtierError(
            f"--kv-transfer-config: {SIMPLE} {key} must be a whole number of bytes, "
            f"got {value!r:.40}"
        )
    return host_bytes(number, SIMPLE, key)


def _explicit(value: object, capacity: int) -> int:
    """num_cpu_blocks (v0.33.0): a positive int (type(n) is int) no more than the bytes
    allow."""
    if type(value) is not int or not 0 < value <= capacity:
        raise KvtierError(
            f"--kv-transfer-config: {SIMPLE} num_cpu_blocks={value!r:.40} must be between 1 "
            f"and the {capacity:,} blocks its bytes allow (vLLM v0.33.0 refuses it)"
        )
    return value
