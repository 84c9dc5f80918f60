"""vLLM's CPU offloading connector (OffloadingConnector, CPUOffloadingSpec): its host pool per
release, from `--kv-transfer-config` or `--kv-offloading-size`.

  v0.11.0 - v0.13.x  v1/kv_offload/cpu.py CPUOffloadingSpec.__init__ takes kv_connector_extra_config
                     `num_cpu_blocks`, the offloaded blocks, and raises when it is missing or 0.
                     --kv-offloading-size (v0.12.0 on) acts only with --kv-offloading-backend
                     (config/vllm.py _post_init_kv_transfer_config: alone it is not read, and no
                     pool is sized), whose native backend sets num_cpu_blocks 0: that check
                     refuses it.
  v0.14.0 on         `cpu_bytes_to_use`, host bytes over all ranks, in its place (same check);
                     --kv-offloading-size S with the native backend (the default from v0.14.0)
                     names the connector and sets cpu_bytes_to_use = S x 2^30 over the config's
                     (SimpleCPUOffloadConnector instead under VLLM_USE_SIMPLE_KV_OFFLOAD=1 from
                     v0.19.0, or when --kv-transfer-config names it: simple_offload.py).
                     Blocks = int(cpu_bytes_to_use) // the bytes of one offloaded block:
                       one GPU block's KV on one rank (page_size_bytes x len(kv_cache_tensors),
                       v0.14.0 - v0.19.x; the KV tensors' bytes // num_blocks from v0.20.0;
                       both the page x the pool's layers)
                       x world_size copies (one from v0.27.0 in the replicated layout:
                       an MLA model at TP > 1 without PP, offloading/config.py)
                       x blocks_per_chunk (block_size // the GPU block)
                       rounded up to BLOCK_SIZE_ALIGNMENT (1 to v0.26.x; mmap.PAGESIZE from
                       v0.27.0, SharedOffloadRegion: 4,096 B on x86-64 Linux)
  chunk              `block_size` (tokens, a multiple of the GPU block) or, from v0.26.0,
                     `blocks_per_chunk` (offloading/config.py), not both: the connector stores and
                     hits whole chunks.
A value of the wrong kind, a key the release does not read in place of the one it needs, a
config key that is not one of the release's KVTransferConfig fields from v0.16.0 (a note
before: engines/vllm/kv_transfer.py), or a release before v0.11.0 (no OffloadingConnector)
exits 2 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.deployment import Deployment
from kvtier.engines.version import Version
from kvtier.engines.vllm.kv_transfer import TransferConfig
from kvtier.engines.vllm.simple_offload import SIMPLE, host_bytes, simple_pool, whole
from kvtier.engines.vllm.versions import V0_11, V0_12, V0_14, V0_19, V0_23, V0_26, V0_27
from kvtier.errors import KvtierError

NATIVE = "OffloadingConnector"
GiB = 1 << 30
PAGE_ALIGNMENT = 4096  # mmap.PAGESIZE on x86-64 Linux


@dataclass(frozen=True, slots=True)
class Offload:
    """The connector's host pool as the scheduler's manager counts it."""

    blocks: int  # offloaded blocks (chunks)
    chunk_tokens: int  # tokens one holds
    chunk_given: bool  # block_size or blocks_per_chunk set: hits come in whole chunks
    cpu_bytes: int  # host bytes over all ranks
    source: str


def simple_variable_note(d: Deployment, config: TransferConfig, version: Version) -> list[str]:
    """A note that VLLM_USE_SIMPLE_KV_OFFLOAD=1 is not read before v0.19.0 (no such variable
    there), naming the connector --kv-offloading-size sizes instead."""
    if not d.simple_kv_offload or version >= V0_19:
        return []
    name = connector(d, config, version) if d.kv_offloading_size_gib is not None else None
    sized = f"; --kv-offloading-size sizes {name}" if name is not None else ""
    return [
        f"VLLM_USE_SIMPLE_KV_OFFLOAD=1: not read by vLLM {version} (from v0.19.0), which "
        f"ignores it without a word, and so does kvtier{sized}"
    ]


def connector(d: Deployment, config: TransferConfig, version: Version) -> str | None:
    """The connector the flags name: --kv-offloading-size (read from v0.14.0) names
    OffloadingConnector with the native backend, or SimpleCPUOffloadConnector under
    VLLM_USE_SIMPLE_KV_OFFLOAD=1 from v0.19.0, and with the lmcache backend LMCacheConnectorV1,
    LMCacheMPConnector from v0.23.0 (_post_init_kv_transfer_config); else --kv-transfer-config's."""
    if d.kv_offloading_size_gib is not None and version >= V0_14:
        if d.kv_offloading_backend == "lmcache":
            return "LMCacheMPConnector" if version >= V0_23 else "LMCacheConnectorV1"
        return SIMPLE if d.simple_kv_offload and version >= V0_19 else NATIVE
    return config.connector


def _size(d: Deployment) -> float | None:
    return d.kv_offloading_size_gib if d.kv_offloading_backend != "lmcache" else None


def offload(
    d: Deployment, config: TransferConfig, version: Version, block: int, block_bytes: int, mla: bool
) -> Offload | None:
    """The CPU offloading connector's pool for `d` and its `config` (None without one): `block`
    tokens and `block_bytes` of KV (one GPU block over the pool's layers on one rank)."""
    extra = config.extra
    size = _size(d)
    if size is not None:
        _check_size_flag(d, version)
    if size is not None and version < V0_14:
        size = None  # v0.12.0 - v0.13.x without a backend: the size is not read
    if connector(d, config, version) == SIMPLE:
        return _simple(d, version, block, block_bytes, extra, size)
    if size is not None:
        extra = {**extra, "cpu_bytes_to_use": size * GiB}
    elif config.connector != NATIVE:
        return None
    if version < V0_11:
        raise KvtierError(f"vLLM {version} has no {NATIVE} (it arrives in v0.11.0)")
    per_chunk, chunk_given = chunk_blocks(extra, block, version)
    if version < V0_14:
        blocks = _count(extra, "num_cpu_blocks", version)
        cpu_bytes = blocks * block_bytes * per_chunk * d.tp * d.pp
        return Offload(blocks, block * per_chunk, chunk_given, cpu_bytes, _blocks_source(blocks))
    cpu_bytes = _count(extra, "cpu_bytes_to_use", version)
    copies = 1 if _replicated(d, version, mla) else d.tp * d.pp
    align = PAGE_ALIGNMENT if version >= V0_27 else 1
    chunk_bytes = -(-block_bytes * copies * per_chunk // align) * align
    blocks = cpu_bytes // chunk_bytes
    given = "cpu_bytes_to_use" if size is None else f"--kv-offloading-size {size:g} GiB"
    source = (
        f"{given}: {cpu_bytes:,} B // {chunk_bytes:,} B a block ({block_bytes:,} B a GPU block "
        f"x {copies} {'copy' if copies == 1 else 'ranks'} x {per_chunk} a chunk, rounded up to "
        f"{align} B) = {blocks:,} blocks of {block * per_chunk} tokens (CPUOffloadingSpec, "
        f"vLLM {version})"
    )
    return Offload(blocks, block * per_chunk, chunk_given, cpu_bytes, source)


def _simple(
    d: Deployment,
    version: Version,
    block: int,
    block_bytes: int,
    extra: dict[str, object],
    size: float | None,
) -> Offload | None:
    """SimpleCPUOffloadConnector's pool: GPU-sized blocks, each rank pinning its own."""
    pool = simple_pool(d, version, (block, block_bytes), extra, size)
    if pool is None:
        return None
    cpu_bytes = pool.bytes_per_rank * d.tp * d.pp
    return Offload(pool.blocks, block, False, cpu_bytes, pool.source)


def _check_size_flag(d: Deployment, version: Version) -> None:
    """--kv-offloading-size as the release takes it: none before v0.12.0; in v0.12.0 - v0.13.x
    the native backend's num_cpu_blocks 0, which CPUOffloadingSpec refuses."""
    if version < V0_12:
        raise KvtierError(f"vLLM {version} has no --kv-offloading-size (it arrives in v0.12.0)")
    simple = d.simple_kv_offload and version >= V0_19
    if not d.kv_offloading_size_gib and not simple:
        raise KvtierError("--kv-offloading-size 0: CPUOffloadingSpec refuses no bytes")
    if version < V0_14 and d.kv_offloading_backend == "native":
        raise KvtierError(
            f"--kv-offloading-size with --kv-offloading-backend native in vLLM {version} sets "
            "num_cpu_blocks 0, which CPUOffloadingSpec refuses; give --kv-transfer-config with "
            f"{NATIVE} and num_cpu_blocks"
        )


def _blocks_source(blocks: int) -> str:
    return f"{NATIVE} num_cpu_blocks {blocks:,} (CPUOffloadingSpec, vLLM v0.11.0 - v0.13.x)"


def _count(extra: dict[str, object], key: str, version: Version) -> int:
    """The size key the release reads, as a positive whole number (int() of it, as vLLM)."""
    value = extra.get(key)
    if value is None:
        other = "cpu_bytes_to_use" if key == "num_cpu_blocks" else "num_cpu_blocks"
        since = "v0.11.0 - v0.13.x" if key == "num_cpu_blocks" else "v0.14.0 on"
        read = f" ({other} is not read there)" if other in extra else ""
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} in vLLM {version} needs kv_connector_extra_config "
            f"{key} ({since}){read}"
        )
    number = whole(value)
    if number is None or number < 1:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} {key} must be a positive number, got {value!r:.40}"
        )
    return host_bytes(number, NATIVE, key) if key == "cpu_bytes_to_use" else number


def _replicated(d: Deployment, version: Version, mla: bool) -> bool:
    """offloading/config.py (v0.27.0 on): one host copy of an MLA cache that every TP rank
    holds alike, at TP > 1 with no other parallel axis, on one node."""
    return version >= V0_27 and mla and d.tp > 1 and d.pp == 1


def chunk_blocks(extra: dict[str, object], block: int, version: Version) -> tuple[int, bool]:
    """GPU blocks in one offloaded chunk, and whether the config set it: `block_size` (tokens,
    a multiple of the GPU block) or `blocks_per_chunk` (v0.26.0 on), not both."""
    tokens, per = extra.get("block_size"), extra.get("blocks_per_chunk")
    if tokens is None and per is None:
        return 1, False
    if tokens is not None and per is not None:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} takes block_size or blocks_per_chunk, not both"
        )
    if per is not None and version < V0_26:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} blocks_per_chunk is read from vLLM v0.26.0, "
            f"not by {version} (give block_size in tokens)"
        )
    key, value = ("block_size", tokens) if tokens is not None else ("blocks_per_chunk", per)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} {key} must be a positive whole number, "
            f"got {value!r:.40}"
        )
    if key == "blocks_per_chunk":
        return value, True
    if value % block:
        raise KvtierError(
            f"--kv-transfer-config: {NATIVE} block_size {value} must be a multiple of the GPU "
            f"block ({block} tokens)"
        )
    return value // block, True
