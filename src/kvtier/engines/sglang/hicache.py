"""SGLang HiCache host pool sizing and the host-RAM checks it must pass.

Mirrors mem_cache/memory_pool_host.py HostKVCache.__init__ (v0.5.x; 2026: mem_cache/pool_host/
base.py). Host sizes are decimal GB (x 1e9) there, unlike GPU sizes. Every rank allocates its own
pinned pool and checks it alone against psutil's available memory minus a 10 GiB reserve, so a
node of N ranks needs N pools at once: kvtier checks the whole node too.
"""

from __future__ import annotations

from kvtier.engines.host import HostCheck
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang.pool import dsa_indexer_bytes
from kvtier.model.description import AttentionKind, KVGeometry
from kvtier.units import GB, GiB

# HICACHE_HOST_MEMORY_RESERVE_BYTES (older builds: ten_gb = 10 * (1024**3)).
HOST_MEMORY_RESERVE_BYTES = 10 * GiB
# server_args default hicache_ratio (v0.5.x) when the cache is enabled without a size.
DEFAULT_HICACHE_RATIO = 2.0


def host_bytes_per_token(kv: KVGeometry, attn_tp: int, layers: int, dtype: KVDtype) -> int:
    """HostKVCache.get_size_per_token: MHA head_dim x heads x layers x 2; MLA latent x layers;
    a DSA model's host pool keeps the indexer's keys too (NSATokenToKVPoolHost, v0.5.9)."""
    if kv.kind is AttentionKind.MLA:
        latent = (kv.kv_lora_rank + kv.qk_rope_head_dim) * dtype.element_bytes * layers
        return latent + dsa_indexer_bytes(kv) * layers
    return kv.head_dim * kv.kv_heads_per_rank(attn_tp) * layers * dtype.element_bytes * 2


def host_tokens(
    device_tokens: int, page_size: int, per_token: int, ratio: float | None, size_gb: float | None
) -> int:
    """Host pool tokens: size_gb*1e9 // per_token, else device tokens x ratio; then one page up.

    v0.5.x aligns up by adding a page (size // page_size + 1 pages); `--hicache-size` (per rank)
    overrides the ratio.
    """
    if size_gb:
        size = int(size_gb * GB // per_token)
    else:
        size = int(device_tokens * (ratio if ratio is not None else DEFAULT_HICACHE_RATIO))
    return (size // page_size + 1) * page_size


def check_host_ram(per_rank_bytes: int, ranks: int, available_bytes: int) -> HostCheck:
    """Both checks against `available_bytes` (psutil's available memory of the node)."""
    usable = available_bytes - HOST_MEMORY_RESERVE_BYTES
    node = per_rank_bytes * ranks
    engine_ok = per_rank_bytes <= usable
    node_ok = node <= usable
    if not engine_ok:
        message = (
            f"Not enough host memory available. Requesting {per_rank_bytes / GB:.2f} GB but only "
            f"have {usable / GB:.2f} GB free (the engine refuses at startup)"
        )
    elif not node_ok:
        message = (
            f"{ranks} ranks need {node / GB:.1f} GB together but {usable / GB:.1f} GB is usable: "
            "the first ranks pass the engine's check and the last ones fail or the node swaps"
        )
    else:
        message = f"{node / GB:.1f} GB for {ranks} ranks fits in {usable / GB:.1f} GB usable"
    return HostCheck(per_rank_bytes, node, engine_ok, node_ok, message)
