"""L3 page stores behind the host tier: local disk by default, Redis to share or outlive a process.

`open_store(url, fingerprint)` picks the backend from the URL and wraps it in the circuit
breaker, so callers see a `PageStore` that never raises when the backend is away. The tiered
cache takes it through `StoreHook`:

    fp = StoreFingerprint.for_model(spec, kv_dtype="bfloat16", tp_rank=0, tp_size=1, page_size=16)
    cache = TieredCache(device, host, store=StoreHook(open_store("/var/cache/kvtier", fp)))
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from kvtier.errors import KvtierError
from kvtier.store.base import PageStore, StoreFingerprint, StoreStats, StoreUnavailable
from kvtier.store.disk import DiskStore
from kvtier.store.hook import StoreHook
from kvtier.store.options import StoreOptions, check_url_text
from kvtier.store.redis_store import RedisStore
from kvtier.store.redis_url import CLUSTER_SCHEME_PREFIX, redact
from kvtier.store.resilient import ResilientStore

REDIS_SCHEMES = ("redis", "rediss", "unix")
DEFAULT_OPTIONS = StoreOptions()

__all__ = [
    "DiskStore",
    "PageStore",
    "RedisStore",
    "ResilientStore",
    "StoreFingerprint",
    "StoreHook",
    "StoreOptions",
    "StoreStats",
    "StoreUnavailable",
    "open_store",
]


def open_store(
    url: str, fingerprint: StoreFingerprint, options: StoreOptions = DEFAULT_OPTIONS
) -> ResilientStore:
    """A store for `url`: a directory path (`~` expanded) or `file:///dir` (disk), or a Redis
    URL (`redis://host:port/db`, `rediss://`, `unix:///socket?db=N`, `cluster+redis://`).

    `options.capacity_bytes` caps a disk store (LRU eviction); `options.ttl_s` expires Redis
    keys. The URL is checked here, strictly, as the options were when built: anything wrong is a
    `KvtierError` of one line naming it. A Redis server that is down now is not an error: the
    store reports misses until it answers.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise KvtierError(f"store URL must be a string, got {type(url).__name__}")
    if not isinstance(fingerprint, StoreFingerprint):
        raise KvtierError(f"store fingerprint must be a StoreFingerprint, got {fingerprint!r}")
    if not isinstance(options, StoreOptions):
        raise KvtierError(f"store options must be a StoreOptions, got {options!r:.80}")
    capacity_bytes, ttl_s = options.capacity_bytes, options.ttl_s
    check_url_text(url)
    scheme = _scheme(url)
    inner: PageStore
    if scheme in ("", "file"):
        path = _disk_path(url, scheme)
        if ttl_s is not None:
            raise KvtierError("ttl_s applies to Redis stores; a disk store is capped by size")
        try:
            inner = DiskStore(path, fingerprint, capacity_bytes=capacity_bytes)
        except StoreUnavailable as exc:
            raise KvtierError(str(exc)) from None
    elif scheme.removeprefix(CLUSTER_SCHEME_PREFIX) in REDIS_SCHEMES:
        if capacity_bytes is not None:
            raise KvtierError("capacity_bytes applies to disk stores; size Redis with maxmemory")
        inner = RedisStore(url, fingerprint, ttl_s=ttl_s, timeout_s=options.timeout_s)
    else:
        raise KvtierError(
            f"unknown store URL scheme {scheme!r} in {redact(url)!r}: use a directory, "
            "file:///dir, redis://host:port/db, rediss://, unix:// or cluster+redis://host:port"
        )
    return ResilientStore(inner)


def _scheme(url: str) -> str:
    """The URL's scheme, lower case; "" for a plain path (which may hold a colon)."""
    known = ("file", *REDIS_SCHEMES, *(CLUSTER_SCHEME_PREFIX + s for s in REDIS_SCHEMES))
    if url.startswith(("/", "~", ".")) or (
        "://" not in url and url.partition(":")[0].lower() not in known
    ):
        return ""
    try:
        return urlsplit(url).scheme
    except ValueError:
        raise KvtierError(f"cannot parse store URL {redact(url)!r}") from None


def _home(url: str, path: str) -> str:
    """`path` once `~` or `~user` was expanded; a `~user` of no known user is refused (the disk
    store's pathlib would raise RuntimeError)."""
    if path.startswith("~"):
        user = path[1:].partition(os.sep)[0]
        raise KvtierError(f"store URL {url!r:.80}: no user {user!r:.40} whose home ~ names")
    return path


def _disk_path(url: str, scheme: str) -> str:
    """The directory a disk store URL names, `~` expanded; `file://` URLs must be absolute and
    name no host but localhost."""
    if not scheme:
        if not url.strip():
            raise KvtierError(f"store URL {url!r} names no directory")
        return _home(url, os.path.expanduser(url))
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise KvtierError(
            f"store URL {url!r} names host {parts.netloc!r}; a file URL names a local "
            "directory: file:///absolute/dir (three slashes) or a plain path"
        )
    if parts.query or parts.fragment:
        raise KvtierError(f"store URL {url!r}: a file URL takes no ?query or #fragment")
    path = _home(url, os.path.expanduser(unquote(parts.path)))
    if not path:
        raise KvtierError(f"store URL {url!r} names no directory")
    if not os.path.isabs(path):
        raise KvtierError(f"store URL {url!r} names a relative path; use file:///absolute/dir")
    if "\0" in path:
        raise KvtierError(f"store URL {url!r} holds a NUL character")
    return path
