"""Redis page store: one key per page, batched through pipelines, shared across processes.

Keys are `<prefix>:{<fingerprint hex>}:<page hash hex>`. The braces are a Redis Cluster hash
tag: every page of one fingerprint hashes to the same slot, so a whole chain can be read or
probed in one pipeline on one node. The price is that one fingerprint lives on one node; the
ranks of a tensor-parallel deployment have distinct fingerprints and so spread over the cluster.
Values use the blob format of `blob.py` and are verified on read. A bad entry costs only its
own page: a damaged or foreign value, or a key of another type (a hash, a list: WRONGTYPE), is
a miss, counted as corrupt or foreign, and deleted. `exists_prefix` reads each value's head and
length (GETRANGE, STRLEN), not just whether the key exists, so it never counts a bad entry.

Sizing is left to Redis: give keys a TTL (`ttl_s`, refreshed on every read and write), or run
the server with `maxmemory` and `maxmemory-policy allkeys-lru`. With a TTL, each page of a batch
gets one millisecond less than the page before it, so expiry, and eviction under
`maxmemory-policy volatile-ttl`, take a chain from its tail (its head is what lookups need).
When Redis refuses a write for memory (an OOM reply) the page is counted as refused and reads
go on.

URLs: `redis://host:port/db`, `rediss://...`, `unix:///path?db=N`; prefix the scheme with
`cluster+` (`cluster+redis://host:port`) to address a Redis Cluster through any of its nodes.
A URL is checked when the store is made (`check_url`): a missing host, a port outside 1..65535,
a database that is not a number (or not 0 for a cluster), an unknown query option is a
`KvtierError`, so a typo fails at start-up rather than as misses. redis-py's own retries are
off: `ResilientStore` decides when to try again.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from kvtier.errors import KvtierError
from kvtier.store.base import (
    PageHash,
    StoreCounters,
    StoreFingerprint,
    StoreStats,
    StoreUnavailable,
)
from kvtier.store.blob import (
    HEADER_SIZE,
    CorruptBlob,
    ForeignBlob,
    check_head,
    decode_blob,
    encode_blob,
)

if TYPE_CHECKING:
    import redis

CLUSTER_SCHEME_PREFIX = "cluster+"
SCHEMES = ("redis", "rediss", "unix")
# query options a URL may carry (redis-py's own parsers check their values); retries stay off
QUERY_OPTIONS = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "health_check_interval",
        "max_connections",
        "protocol",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
    }
)


def redact(url: str) -> str:
    """`url` with its password, if any, replaced by `***` (for messages)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rpartition("@")[2]
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
    except ValueError:
        return url


def check_url(url: str) -> None:
    """Raise `KvtierError` (one line naming the URL) unless `url` is a Redis URL this store can
    use: scheme, host, port, database and query options are all checked here, at open."""
    shown = redact(url)

    def bad(why: str) -> KvtierError:
        return KvtierError(f"bad Redis store URL {shown!r}: {why}")

    cluster = url.startswith(CLUSTER_SCHEME_PREFIX)
    plain = url.removeprefix(CLUSTER_SCHEME_PREFIX)
    try:
        parts = urlsplit(plain)
        port = parts.port
    except ValueError as exc:
        raise bad(f"{exc} (a port is 1..65535)") from None
    if parts.scheme not in SCHEMES:
        raise bad(f"unknown scheme {parts.scheme!r}: use redis://, rediss:// or unix://")
    if parts.fragment:
        raise bad("a store URL has no #fragment")
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise bad(f"cannot parse the query {parts.query!r}") from None
    for name, values in query.items():
        if name not in QUERY_OPTIONS:
            raise bad(f"unknown option {name!r}; known: {', '.join(sorted(QUERY_OPTIONS))}")
        if len(values) != 1:
            raise bad(f"option {name!r} is given {len(values)} times")
    db_text = query.get("db", [None])[0]
    if parts.scheme == "unix":
        if cluster:
            raise bad("a cluster is addressed over TCP: cluster+redis://host:port")
        if parts.hostname:
            raise bad(f"a unix:// URL names a socket path, not host {parts.hostname!r}")
        if not parts.path.startswith("/") or parts.path == "/":
            raise bad("a unix:// URL needs the socket's absolute path: unix:///run/redis.sock")
    else:
        if not parts.hostname:
            raise bad("no host: use redis://host:port/db")
        if port == 0:
            raise bad("port 0 (a port is 1..65535)")
        path = parts.path.strip("/") if parts.path != "/" else ""
        if path and db_text is not None:
            raise bad("the database is given twice, in the path and as ?db=")
        if path:
            db_text = path
        if "/" in parts.path.strip("/"):
            raise bad(f"path {parts.path!r} is not a database number")
    if db_text is not None and not (db_text.isascii() and db_text.isdigit()):
        raise bad(f"database {db_text!r} is not a number")
    if cluster and db_text is not None and int(db_text) != 0:
        raise bad("a Redis Cluster has only database 0")
    if importlib.util.find_spec("redis") is not None:
        from redis.connection import parse_url

        try:
            parse_url(plain)
        except ValueError as exc:
            raise bad(str(exc)) from None


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
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int)):
            raise KvtierError(f"ttl_s must be a whole number of seconds, got {ttl_s!r}")
        if ttl_s is not None and ttl_s <= 0:
            raise KvtierError(f"ttl_s must be positive, got {ttl_s}")
        if not timeout_s > 0:
            raise KvtierError(f"timeout_s must be positive, got {timeout_s!r}")
        if importlib.util.find_spec("redis") is None:
            raise KvtierError("a Redis store needs redis-py: pip install 'kvtier[redis]'")
        check_url(url)
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
        # a hash the blob format cannot hold (over 255 bytes) is refused, alone
        batch = [
            (i, h, encode_blob(digest, h, p))
            for i, (h, p) in enumerate(zip(hashes, payloads, strict=True))
            if isinstance(h, bytes) and 0 < len(h) <= 255
        ]

        def queue(pipe: Any) -> None:
            for i, h, blob in batch:
                pipe.set(self.key(h), blob, px=self._ttl_ms(i))

        replies = self._pipeline(queue) if batch else []
        written = nbytes = 0
        refused = len(hashes) - len(batch)
        for reply, (_, _, blob) in zip(replies, batch, strict=True):
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

        replies = self._pipeline(queue) if hashes else []
        out: list[bytes | None] = []
        damaged: list[PageHash] = []
        for h, blob in zip(hashes, replies, strict=True):
            payload = None
            if isinstance(blob, Exception):
                if not _wrong_type(blob):
                    raise StoreUnavailable(f"redis failed a read: {blob}")
                self._counters.add(corrupt=1)
                damaged.append(h)
            elif blob is not None:
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
        """How many leading pages are held, each checked by its head and length (not read
        whole); the first bad entry is deleted and ends the prefix."""
        if not hashes:
            return 0

        def queue(pipe: Any) -> None:
            for h in hashes:
                key = self.key(h)
                pipe.exists(key)
                pipe.strlen(key)
                pipe.getrange(key, 0, HEADER_SIZE + len(h) - 1)

        replies = self._pipeline(queue)
        digest = self.fingerprint.digest
        for i, h in enumerate(hashes):
            exists, length, head = replies[3 * i : 3 * i + 3]
            for reply in (exists, length, head):
                if isinstance(reply, Exception) and not _wrong_type(reply):
                    raise StoreUnavailable(f"redis failed a probe: {reply}")
            if exists == 0:
                return i
            try:
                if isinstance(length, Exception) or isinstance(head, Exception):
                    raise CorruptBlob("a key of another type")
                if HEADER_SIZE + len(h) + check_head(digest, h, head) != length:
                    raise CorruptBlob("value length differs from its header")
            except CorruptBlob:
                self._counters.add(corrupt=1)
            except ForeignBlob:
                self._counters.add(foreign=1)
            else:
                continue
            self.delete([h])
            return i
        return len(hashes)

    def delete(self, hashes: Sequence[PageHash]) -> int:
        if not hashes:
            return 0
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
        from redis.exceptions import RedisClusterException, RedisError

        try:
            if self._client is None:
                self._client = connect(self.url, timeout_s=self.timeout_s)
            pipe = self._client.pipeline(transaction=False)
            queue(pipe)
            return list(pipe.execute(raise_on_error=False))
        except (RedisError, RedisClusterException, OSError) as exc:
            # drop the client so the next call reconnects from scratch (a restarted server)
            try:
                self.close()
            except (RedisError, OSError):
                self._client = None
            raise StoreUnavailable(f"redis at {redact(self.url)}: {exc}") from exc


def _wrong_type(reply: Exception) -> bool:
    """True for the per-key error of a command on a key holding another type of value."""
    return str(reply).startswith("WRONGTYPE")
