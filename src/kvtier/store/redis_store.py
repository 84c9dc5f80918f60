"""Redis page store: one key per page, batched through pipelines, shared across processes.

Keys are `<prefix>:{<fingerprint hex>}:<page hash hex>`. The braces are a Redis Cluster hash
tag: every page of one fingerprint hashes to the same slot, so a whole chain can be read or
probed in one pipeline on one node. The price is that one fingerprint lives on one node; the
ranks of a tensor-parallel deployment have distinct fingerprints and so spread over the cluster.
Values use the blob format of `blob.py` and are verified on read; a damaged value is deleted.

Sizing is left to Redis: give keys a TTL (`ttl_s`, refreshed on every read and write), or run
the server with `maxmemory` and `maxmemory-policy allkeys-lru`. With a TTL, each page of a batch
gets one millisecond less than the page before it, so expiry, and eviction under
`maxmemory-policy volatile-ttl`, take a chain from its tail (its head is what lookups need).
When Redis refuses a write for memory (an OOM reply) the page is counted as refused and reads
go on.

URLs: `redis://host:port/db`, `rediss://...`, `unix:///path?db=N`; prefix the scheme with
`cluster+` (`cluster+redis://host:port`) to address a Redis Cluster through any of its nodes.
redis-py's own retries are off: `ResilientStore` decides when to try again.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvtier.errors import KvtierError
from kvtier.store.base import (
    PageHash,
    StoreCounters,
    StoreFingerprint,
    StoreStats,
    StoreUnavailable,
)
from kvtier.store.blob import CorruptBlob, ForeignBlob, decode_blob, encode_blob

if TYPE_CHECKING:
    import redis

CLUSTER_SCHEME_PREFIX = "cluster+"


def page_key(prefix: str, fingerprint: StoreFingerprint, page_hash: PageHash) -> str:
    """The Redis key of one page; the `{...}` hash tag pins a fingerprint to one slot."""
    return f"{prefix}:{{{fingerprint.digest.hex()}}}:{page_hash.hex()}"


def connect(url: str, *, timeout_s: float) -> redis.Redis | redis.RedisCluster:
    """A client for `url` with our timeouts and without redis-py's retries. A plain client
    connects on its first command; a cluster client asks for the slot map at once."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    if url.startswith(CLUSTER_SCHEME_PREFIX):
        return redis.RedisCluster.from_url(url.removeprefix(CLUSTER_SCHEME_PREFIX), **options)
    return redis.Redis.from_url(url, **options)


class RedisStore:
    """Page store in Redis; see the module docstring for keys, sizing and URLs."""

    def __init__(
        self,
        url: str,
        fingerprint: StoreFingerprint,
        *,
        ttl_s: int | None = None,
        timeout_s: float = 1.0,
        prefix: str = "kvtier",
    ) -> None:
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if importlib.util.find_spec("redis") is None:
            raise KvtierError("a Redis store needs redis-py: pip install 'kvtier[redis]'")
        self.url = url
        self.fingerprint = fingerprint
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.prefix = prefix
        self._client: redis.Redis | redis.RedisCluster | None = None
        self._counters = StoreCounters()

    def key(self, page_hash: PageHash) -> str:
        return page_key(self.prefix, self.fingerprint, page_hash)

    def put(self, hashes: Sequence[PageHash], payloads: Sequence[bytes]) -> int:
        from redis.exceptions import OutOfMemoryError

        if len(hashes) != len(payloads):
            raise ValueError("hash and payload counts differ")
        digest = self.fingerprint.digest
        blobs = [encode_blob(digest, h, p) for h, p in zip(hashes, payloads, strict=True)]

        def queue(pipe: Any) -> None:
            for i, (h, blob) in enumerate(zip(hashes, blobs, strict=True)):
                pipe.set(self.key(h), blob, px=self._ttl_ms(i))

        replies = self._pipeline(queue)
        written = nbytes = refused = 0
        for reply, blob in zip(replies, blobs, strict=True):
            if isinstance(reply, Exception):
                if not isinstance(reply, OutOfMemoryError):
                    raise StoreUnavailable(f"redis refused a write: {reply}")
                refused += 1
            else:
                written += 1
                nbytes += len(blob)
        self._counters.add(puts=written, bytes_written=nbytes, refused=refused)
        return written

    def get(self, hashes: Sequence[PageHash]) -> list[bytes | None]:
        def queue(pipe: Any) -> None:
            for i, h in enumerate(hashes):
                if self.ttl_s is None:
                    pipe.get(self.key(h))
                else:
                    pipe.getex(self.key(h), px=self._ttl_ms(i))

        replies = self._pipeline(queue)
        out: list[bytes | None] = []
        damaged: list[PageHash] = []
        for h, blob in zip(hashes, replies, strict=True):
            if isinstance(blob, Exception):
                raise StoreUnavailable(f"redis failed a read: {blob}")
            payload = None
            if blob is not None:
                try:
                    payload = decode_blob(self.fingerprint.digest, h, blob)
                except CorruptBlob:
                    self._counters.add(corrupt=1)
                    damaged.append(h)
                except ForeignBlob:
                    self._counters.add(foreign=1)
                    damaged.append(h)
            out.append(payload)
        if damaged:
            self.delete(damaged)
        self._counters.add_reads(out)
        return out

    def exists_prefix(self, hashes: Sequence[PageHash]) -> int:
        replies = self._pipeline(lambda pipe: [pipe.exists(self.key(h)) for h in hashes])
        for i, reply in enumerate(replies):
            if reply != 1:
                return i
        return len(hashes)

    def delete(self, hashes: Sequence[PageHash]) -> int:
        replies = self._pipeline(lambda pipe: [pipe.delete(self.key(h)) for h in hashes])
        return sum(r for r in replies if isinstance(r, int))

    def stats(self) -> StoreStats:
        return self._counters.snapshot()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _ttl_ms(self, position: int) -> int | None:
        """TTL of the page at `position` in a batch: later pages of a chain expire first."""
        if self.ttl_s is None:
            return None
        return max(1, self.ttl_s * 1000 - position)

    def _pipeline(self, queue: Any) -> list[Any]:
        """Run the commands `queue(pipe)` adds in one round trip; per-command errors returned."""
        import redis

        try:
            if self._client is None:
                self._client = connect(self.url, timeout_s=self.timeout_s)
            pipe = self._client.pipeline(transaction=False)
            queue(pipe)
            return list(pipe.execute(raise_on_error=False))
        except redis.RedisError as exc:
            # drop the client so the next call reconnects from scratch (a restarted server)
            self.close()
            raise StoreUnavailable(f"redis at {self.url}: {exc}") from exc
