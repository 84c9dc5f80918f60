"""L3 page stores behind the host tier: local disk by default, Redis to share or outlive a process.

`open_store(url, fingerprint)` picks the backend from the URL and wraps it in the circuit
breaker, so callers see a `PageStore` that never raises when the backend is away. The tiered
cache takes it through `StoreHook`:

    fp = StoreFingerprint.for_model(spec, kv_dtype="bfloat16", tp_rank=0, tp_size=1, page_size=16)
    cache = TieredCache(device, host, store=StoreHook(open_store("/var/cache/kvtier", fp)))
"""

from __future__ import annotations

from urllib.parse import urlsplit

from kvtier.errors import KvtierError
from kvtier.store.base import PageStore, StoreFingerprint, StoreStats, StoreUnavailable
from kvtier.store.disk import DiskStore
from kvtier.store.hook import StoreHook
from kvtier.store.redis_store import CLUSTER_SCHEME_PREFIX, RedisStore
from kvtier.store.resilient import ResilientStore

REDIS_SCHEMES = ("redis", "rediss", "unix")

__all__ = [
    "DiskStore",
    "PageStore",
    "RedisStore",
    "ResilientStore",
    "StoreFingerprint",
    "StoreHook",
    "StoreStats",
    "StoreUnavailable",
    "open_store",
]


def open_store(
    url: str,
    fingerprint: StoreFingerprint,
    *,
    capacity_bytes: int | None = None,
    ttl_s: int | None = None,
    timeout_s: float = 1.0,
) -> ResilientStore:
    """A store for `url`: a directory path or `file:///dir` (disk), or a Redis URL.

    `capacity_bytes` caps a disk store (LRU eviction); `ttl_s` expires Redis keys. A Redis
    server that is down now is not an error: the store reports misses until it answers.
    """
    scheme = urlsplit(url).scheme
    inner: PageStore
    if scheme in ("", "file"):
        path = urlsplit(url).path if scheme else url
        if not path:
            raise KvtierError(f"store URL {url!r} names no directory")
        if ttl_s is not None:
            raise KvtierError("ttl_s applies to Redis stores; a disk store is capped by size")
        try:
            inner = DiskStore(path, fingerprint, capacity_bytes=capacity_bytes)
        except StoreUnavailable as exc:
            raise KvtierError(str(exc)) from exc
    elif scheme.removeprefix(CLUSTER_SCHEME_PREFIX) in REDIS_SCHEMES:
        if capacity_bytes is not None:
            raise KvtierError("capacity_bytes applies to disk stores; size Redis with maxmemory")
        inner = RedisStore(url, fingerprint, ttl_s=ttl_s, timeout_s=timeout_s)
    else:
        raise KvtierError(
            f"unknown store URL scheme {scheme!r} in {url!r}: use a directory, file:///dir, "
            "redis://host:port/db, rediss://, unix:// or cluster+redis://host:port"
        )
    return ResilientStore(inner)
