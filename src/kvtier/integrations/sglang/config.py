"""What the SGLang backend reads from its launch config, and how it names pages.

Pure Python: no SGLang or torch import, so the option checks and the key scheme are usable (and
tested) without an engine.

A page is stored under kvtier's `StoreFingerprint`, built from what SGLang's own backends key
on (model name, tensor-parallel rank and size unless the pool is rank-replicated, pipeline and
context-parallel shard) plus what they leave out: the host pool's class, KV geometry, dtype,
memory layout and the byte size of one page. Two engines share pages exactly when all of that
agrees; anything else is another fingerprint, so another directory or key space, and a miss.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtier.errors import KvtierError
from kvtier.store import StoreFingerprint
from kvtier.store.options import STORE_OPTION_KEYS, StoreOptions, check_url_text

logger = logging.getLogger(__name__)

# SGLang releases this backend is run against (tests, benchmarks); another loads with a warning
# when its HiCacheStorage has the calls used, and fails naming what is missing otherwise.
TESTED_SGLANG_VERSIONS = ("0.5.23",)
MODULE_PATH = "kvtier.integrations.sglang"
CLASS_NAME = "KvtierHiCacheStorage"

# Keys of --hicache-storage-backend-extra-config that are SGLang's (the dynamic loader's, its
# controller's, other backends'): accepted and ignored here.
SGLANG_KEYS = frozenset(
    {
        "backend_name",
        "module_path",
        "class_name",
        "interface_v1",
        "prefetch_threshold",
        "prefetch_timeout_base",
        "prefetch_timeout_per_ki_token",
        "hicache_storage_pass_prefix_keys",
        "tp_lcm_size",
    }
)
KVTIER_KEYS = ("url", *STORE_OPTION_KEYS, "model_id")

# A pool that holds no per-rank shard even in a rank-replicated (MLA) model.
TP_SHARDED_POOLS = frozenset({"mamba"})
# A lowercase hex key (SGLang's SHA-256 page hashes) is stored as its bytes.
_HEX_KEY = re.compile(r"(?:[0-9a-f]{2}){1,64}")
# Any other key is stored as a BLAKE2b digest of this length of its UTF-8 text.
OTHER_KEY_DIGEST = 40
# Host-pool attributes that describe a page's geometry, where the pool has them.
GEOMETRY_ATTRS = (
    "layer_num",
    "head_num",
    "head_dim",
    "v_head_dim",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "kv_cache_dim",
    "start_layer",
    "end_layer",
)


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """kvtier's keys of the extra config: the store URL and `open_store`'s options."""

    url: str
    store: StoreOptions
    model_id: str | None = None

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any] | None) -> BackendOptions:
        """The options in `extra` (SGLang's parsed extra-config dict); `ValueError` naming the
        key for anything missing or of the wrong type. Unknown keys are logged, not refused:
        SGLang may pass keys of its own."""
        extra = dict(extra or {})
        url = extra.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ValueError(
                'kvtier\'s SGLang backend needs "url" in --hicache-storage-backend-extra-config: '
                "a directory (file:///var/cache/kvtier) or a Redis URL (redis://host:6379/0)"
            )
        try:
            check_url_text(url)
            store = StoreOptions.of(extra)
        except KvtierError as exc:
            raise ValueError(str(exc)) from None
        model_id = extra.get("model_id")
        if model_id is not None and not isinstance(model_id, str):
            raise ValueError(f"model_id must be a string, got {model_id!r}")
        unknown = sorted(set(extra) - SGLANG_KEYS - set(KVTIER_KEYS))
        if unknown:
            logger.warning(
                "kvtier SGLang backend: ignoring unknown extra-config keys %s (kvtier reads %s)",
                unknown,
                ", ".join(KVTIER_KEYS),
            )
        return cls(url, store, model_id)


@dataclass(frozen=True, slots=True)
class Shard:
    """One rank of a parallel group: `rank` of `size` (printed `rank/size`)."""

    rank: int = 0
    size: int = 1

    @classmethod
    def read(cls, config: Any, rank: str, size: str) -> Shard:
        """The shard a config names by its `rank` and `size` attributes, where it has them."""
        return cls(int(getattr(config, rank, 0)), int(getattr(config, size, 1)))

    def __str__(self) -> str:
        return f"{self.rank}/{self.size}"


@dataclass(frozen=True, slots=True)
class StorageScope:
    """The parts of SGLang's `HiCacheStorageConfig` that scope pages (`from_config` reads them
    by attribute, so any object with that config's fields will do)."""

    model_name: str
    tp: Shard
    rank_replicated: bool  # SGLang's is_mla_model: KV identical on every TP rank
    pp: Shard = Shard()
    cp: Shard = Shard()  # attention context parallelism
    dcp: Shard = Shard()  # decode context parallelism

    @classmethod
    def from_config(cls, config: Any, model_id: str | None = None) -> StorageScope:
        return cls(
            model_name=model_id if model_id is not None else (config.model_name or ""),
            tp=Shard(int(config.tp_rank), int(config.tp_size)),
            rank_replicated=bool(config.is_mla_model),
            pp=Shard(int(config.pp_rank), int(config.pp_size)),
            cp=Shard.read(config, "attn_cp_rank", "attn_cp_size"),
            dcp=Shard.read(config, "dcp_rank", "dcp_size"),
        )


@dataclass(frozen=True, slots=True)
class PoolShape:
    """What shapes the bytes of one flat page of a host pool."""

    pool_class: str
    layout: str
    dtype: str
    page_size: int
    page_bytes: int
    dims: tuple[tuple[str, int], ...]
    format_tag: str | None = None

    @classmethod
    def of(cls, pool: Any, page_bytes: int) -> PoolShape:
        """Read a host pool's shape (`page_bytes` is the byte size of its flat page)."""
        dims = tuple(
            (name, value)
            for name in GEOMETRY_ATTRS
            if isinstance(value := getattr(pool, name, None), int) and not isinstance(value, bool)
        )
        dtype = str(pool.dtype).removeprefix("torch.")
        tag = getattr(pool, "storage_format_tag", None)
        return cls(
            pool_class=type(pool).__name__,
            layout=str(pool.layout),
            dtype=dtype,
            page_size=int(pool.page_size),
            page_bytes=page_bytes,
            dims=dims,
            format_tag=tag if isinstance(tag, str) else None,
        )


def fingerprint(scope: StorageScope, pool_name: str, shape: PoolShape) -> StoreFingerprint:
    """The kvtier fingerprint of one host pool's pages under `scope`.

    Rank-replicated pools (MLA KV) are shared by every TP rank, as in SGLang's own backends:
    their fingerprint carries rank 0 of 1. Every other field is part of the digest.
    """
    replicated = scope.rank_replicated and pool_name not in TP_SHARDED_POOLS
    shard = f"pp={scope.pp}:cp={scope.cp}:dcp={scope.dcp}"
    dims = ":".join(f"{name}={value}" for name, value in shape.dims)
    geometry = f"sglang:{pool_name}:{shape.pool_class}:{dims}:page_bytes={shape.page_bytes}:{shard}"
    layout = shape.layout if shape.format_tag is None else f"{shape.layout}+{shape.format_tag}"
    return StoreFingerprint(
        model_id=scope.model_name,
        geometry=geometry,
        kv_dtype=shape.dtype,
        tp_rank=0 if replicated else scope.tp.rank,
        tp_size=1 if replicated else scope.tp.size,
        page_size=shape.page_size,
        layout=layout,
    )


def page_hash(key: str) -> bytes:
    """The kvtier page hash of an SGLang storage key: a lowercase hex key (SGLang's SHA-256
    page hashes) is its bytes; any other string a 40-byte BLAKE2b digest of its text."""
    if _HEX_KEY.fullmatch(key):
        return bytes.fromhex(key)
    return hashlib.blake2b(key.encode("utf-8"), digest_size=OTHER_KEY_DIGEST).digest()
