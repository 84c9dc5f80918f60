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
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kvtier.errors import KvtierError
from kvtier.store.base import StoreCounters, StoreUnavailable
from kvtier.store.blob import (
    HEADER_SIZE,
    MAX_HASH_BYTES,
    CorruptBlob,
    ForeignBlob,
    PayloadCheck,
    check_head,
    decode_blob,
    encode_head,
    parts_size,
)
from kvtier.store.options import check_timeout, check_ttl, check_url_text
from kvtier.store.pageio import pieces
from kvtier.store.redis_url import CLUSTER_SCHEME_PREFIX, check_url, redact
from kvtier.store.resp import ProtocolError, Reader, ReplyError, frame, send_all

if TYPE_CHECKING:
    import redis

    from kvtier.store.base import Buffer, PageHash, StoreFingerprint, StoreStats
    from kvtier.store.blob import Parts

_T = TypeVar("_T")


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


# A batch's GETs go out a window at a time, the next window's commands sent before this one's
# replies are read: at most two windows of replies wait in the server's output buffer. Sending
# the whole batch at once made redis-server queue 64 MiB of replies for 32 pages of 2 MiB, and
# get at batch 32 ran at 0.67-0.73 GB/s against 0.95-1.49 GB/s with one 2 MiB page a window
# (benchmarks/bench_store.py, docs/benchmarks.md).
READ_WINDOW_BYTES = 2 << 20


def _read_window(page_bytes: int) -> int:
    """Pages a window holds: READ_WINDOW_BYTES of payload, at least one page."""
    return max(1, READ_WINDOW_BYTES // max(1, page_bytes))


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
        ttl_s, timeout_s = check_ttl(ttl_s), check_timeout(timeout_s)
        check_url_text(url)
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

    def put(self, hashes: Sequence[PageHash], payloads: Sequence[Buffer]) -> int:
        if len(hashes) != len(payloads):
            raise ValueError("hash and payload counts differ")
        return self.put_parts(hashes, [(p,) for p in payloads])

    def put_parts(self, hashes: Sequence[PageHash], pages: Sequence[Parts]) -> int:
        """SET each page, its value sent as the blob head and the page's own buffers, the
        whole batch in one round trip. An OOM reply refuses that page alone."""
        if len(hashes) != len(pages):
            raise ValueError("hash and payload counts differ")
        digest = self.fingerprint.digest
        # a hash the blob format cannot hold (over 255 bytes) is refused, alone
        batch = [
            (i, h, encode_head(digest, h, parts), parts)
            for i, (h, parts) in enumerate(zip(hashes, pages, strict=True))
            if isinstance(h, bytes) and 0 < len(h) <= MAX_HASH_BYTES
        ]
        written = nbytes = 0
        refused = len(hashes) - len(batch)

        def exchange(sock: socket.socket, reader: Reader) -> list[Any]:
            buffers: list[Buffer] = []
            for i, h, head, parts in batch:
                ttl = self._ttl_ms(i)
                extra = () if ttl is None else (b"PX", b"%d" % ttl)
                buffers += frame(b"SET", self.key(h).encode(), [head, *parts], *extra)
            send_all(sock, buffers)
            return [reader.reply() for _ in batch]

        replies = self._raw(batch[0][1], exchange) if batch else []
        for reply, (_, _, head, parts) in zip(replies, batch, strict=True):
            if isinstance(reply, ReplyError):
                if not str(reply).startswith("OOM"):
                    raise StoreUnavailable(f"redis refused a write: {reply}")
                refused += 1
            else:
                written += 1
                nbytes += len(head) + parts_size(parts)
        self._counters.add(puts=written, bytes_written=nbytes, refused=refused)
        return written

    def get_into(self, hashes: Sequence[PageHash], targets: Sequence[Parts]) -> list[bool]:
        """GET (GETEX with a TTL) each page, its payload read from the socket straight into
        its target, the batch pipelined a window at a time (READ_WINDOW_BYTES); True per page
        read and verified."""
        if len(hashes) != len(targets):
            raise ValueError("hash and target counts differ")
        if not hashes:
            return []
        sizes = [parts_size(t) for t in targets]
        damaged: list[PageHash] = []

        window = _read_window(max(sizes))

        def exchange(sock: socket.socket, reader: Reader) -> list[bool]:
            found: list[bool] = []
            send_all(sock, self._get_frames(0, window, hashes))
            for start in range(0, len(hashes), window):
                end = start + window
                if end < len(hashes):  # the next window's commands, before this one's replies
                    send_all(sock, self._get_frames(end, end + window, hashes))
                found += [
                    self._read_page(reader, hashes[i], targets[i], sizes[i], damaged)
                    for i in range(start, min(end, len(hashes)))
                ]
            return found

        found = self._raw(hashes[0], exchange)
        if damaged:
            self.delete(damaged)
        self._counters.add_reads_into(found, sizes)
        return found

    def _get_frames(self, start: int, end: int, hashes: Sequence[PageHash]) -> list[Buffer]:
        """GET (GETEX with a TTL) commands for pages `start` to `end` of a batch."""
        buffers: list[Buffer] = []
        for i in range(start, min(end, len(hashes))):
            ttl = self._ttl_ms(i)
            key = self.key(hashes[i]).encode()
            buffers += (
                frame(b"GET", key) if ttl is None else frame(b"GETEX", key, b"PX", b"%d" % ttl)
            )
        return buffers

    def _read_page(
        self, reader: Reader, page_hash: PageHash, target: Parts, size: int, damaged: list[bytes]
    ) -> bool:
        """One GET reply into `target`; a bad value is counted and listed in `damaged`."""
        kind, value = reader.header()
        if kind == "done":
            if isinstance(value, ReplyError):
                if not _wrong_type(value):
                    raise StoreUnavailable(f"redis failed a read: {value}")
                value = CorruptBlob("a key of another type")
            elif value is not None:
                raise ProtocolError(f"a GET answered {value!r}")
            else:
                return False
        else:
            value = self._receive(reader, page_hash, target, size, value)
            if value is None:
                return True
        self._counters.add(**{"foreign" if isinstance(value, ForeignBlob) else "corrupt": 1})
        damaged.append(page_hash)
        return False

    def _receive(
        self, reader: Reader, page_hash: PageHash, target: Parts, size: int, length: int
    ) -> CorruptBlob | ForeignBlob | None:
        """Read a bulk value of `length` bytes: into `target` when it is this page's size, else
        whole, to say what it is. None when it is the page, verified."""
        digest = self.fingerprint.digest
        head = bytearray(HEADER_SIZE + len(page_hash))
        try:
            if length == len(head) + size:
                reader.into([head])
                try:
                    check = PayloadCheck(digest, page_hash, head)
                except (CorruptBlob, ForeignBlob):
                    reader.skip(size)
                    reader.crlf()
                    raise
                for group in pieces(target):  # each piece hashed while still in the cache
                    reader.into(group)
                    for piece in group:
                        check.update(piece)
                reader.crlf()
                check.finish()
                return None
            data = reader.skip(length)
            reader.crlf()
            decode_blob(digest, page_hash, data)
            return ForeignBlob(f"a {length}-byte value where a {size}-byte page was asked for")
        except (CorruptBlob, ForeignBlob) as exc:
            return exc

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

    def _raw(self, key_of: PageHash, exchange: Callable[[socket.socket, Reader], _T]) -> _T:
        """`exchange(sock, reader)` on a connection borrowed from redis-py's pool (the node
        holding `key_of`'s slot, on a cluster; every page of a fingerprint is on that slot).
        A failure closes the connection and the client, and is `StoreUnavailable`."""
        from redis.exceptions import RedisClusterException, RedisError

        conn: Any = None
        pool: Any = None
        ok = False
        try:
            if self._client is None:
                self._client = connect(self.url, timeout_s=self.timeout_s)
            pool = _pool_for(self._client, self.key(key_of))
            conn = _borrow(pool)
            if getattr(conn, "_sock", None) is None:
                conn.connect()
            reader = Reader(conn._sock)
            result = exchange(conn._sock, reader)
            if reader.pending:
                raise ProtocolError(f"{reader.pending} bytes beyond the batch's replies")
            ok = True
            return result
        except (RedisError, RedisClusterException, OSError, ProtocolError, ValueError) as exc:
            raise StoreUnavailable(f"redis at {redact(self.url)}: {exc}") from exc
        finally:
            if conn is not None:
                if not ok:
                    conn.disconnect()
                pool.release(conn)
            if not ok:
                self._drop_client()

    def _drop_client(self) -> None:
        """Forget the client so the next call reconnects from scratch (a restarted server, a
        cluster whose slots moved)."""
        from redis.exceptions import RedisError

        try:
            self.close()
        except (RedisError, OSError):
            self._client = None

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
            self._drop_client()
            raise StoreUnavailable(f"redis at {redact(self.url)}: {exc}") from exc


def _pool_for(client: redis.Redis | redis.RedisCluster, key: str) -> Any:
    """redis-py's connection pool for the node that serves `key`."""
    import redis

    if isinstance(client, redis.RedisCluster):
        return client.get_redis_connection(client.get_node_from_key(key)).connection_pool
    return client.connection_pool


def _borrow(pool: Any) -> Any:
    """A connection from `pool` (redis-py 5 wants a command name, 6 and later none)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("GET")


def _wrong_type(reply: Exception) -> bool:
    """True for the per-key error of a command on a key holding another type of value."""
    return str(reply).startswith("WRONGTYPE")
