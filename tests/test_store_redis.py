"""Redis store against real redis-server processes on loopback ports: round trips, damage,
a server killed and restarted mid-run, a stalled server, out-of-memory, cluster addressing."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.errors import KvtierError
from kvtier.store import open_store, redis_store
from kvtier.store.base import StoreFingerprint, StoreUnavailable
from kvtier.store.blob import encode_blob
from kvtier.store.redis_store import RedisStore, page_key
from kvtier.store.resilient import ResilientStore
from store_support import (
    FP,
    Clock,
    RedisServer,
    chain,
    free_port,
    needs_redis,
    payloads,
    run_worker,
    running_cluster,
    running_redis,
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path) as srv:
        yield srv


def _raw(server: RedisServer):
    import redis

    return redis.Redis.from_url(server.url)


def test_keys_of_one_fingerprint_share_a_cluster_slot() -> None:
    from redis.crc import key_slot

    hashes = chain(64)
    keys = [page_key("kvtier", FP, h) for h in hashes]
    assert keys[0] == f"kvtier:{{{FP.digest.hex()}}}:{hashes[0].hex()}"
    assert {key_slot(k.encode()) for k in keys} == {key_slot(FP.digest.hex().encode())}
    other = dataclasses.replace(FP, tp_rank=1, tp_size=2)
    assert page_key("kvtier", other, hashes[0]) != keys[0]


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(KvtierError, match="unknown store URL scheme"):
        open_store("memcache://127.0.0.1:11211", FP)


def test_missing_redis_py_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(KvtierError, match=r"kvtier\[redis\]"):
        open_store("redis://127.0.0.1:6379/0", FP)


def test_unreachable_server_is_misses_and_errors_not_exceptions() -> None:
    clock = Clock()
    store = ResilientStore(
        RedisStore(f"redis://127.0.0.1:{free_port()}/0", FP, timeout_s=0.2), clock=clock
    )
    hashes, blobs = chain(4), payloads(4)
    assert store.put(hashes, blobs) == 0
    assert store.get(hashes) == [None] * 4
    assert store.exists_prefix(hashes) == 0
    stats = store.stats()
    assert stats.errors == 1  # the first failure opens the circuit; the rest are skipped
    assert stats.refused == 4 and stats.skipped == 4
    assert store.last_error is not None and "127.0.0.1" in store.last_error


@needs_redis
@pytest.mark.redis
def test_round_trip_ttl_and_delete(server: RedisServer) -> None:
    store = RedisStore(server.url, FP, ttl_s=600)
    hashes, blobs = chain(20), payloads(20)
    assert store.put(hashes[:16], blobs[:16]) == 16
    assert store.exists_prefix(hashes) == 16
    assert store.get(hashes) == blobs[:16] + [None] * 4
    raw = _raw(server)
    ttls = [raw.pttl(store.key(h)) for h in hashes[:16]]
    assert ttls[-1] > 590_000 and ttls == sorted(ttls, reverse=True)  # the tail expires first
    assert store.delete(hashes[:2]) == 2
    assert store.exists_prefix(hashes) == 0
    stats = store.stats()
    assert (stats.puts, stats.hits, stats.misses, stats.bytes_read) == (16, 16, 4, 16 * 4096)


@needs_redis
@pytest.mark.redis
@pytest.mark.parametrize("window_bytes", [1, 10_000, 1 << 40])
@pytest.mark.parametrize("ttl_s", [None, 600])
def test_get_into_reads_a_batch_window_by_window(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, window_bytes: int, ttl_s: int | None
) -> None:
    """Whether the batch's GETs go out one page, a few pages or all at once, every page lands in
    its own target, a damaged one and an absent one are misses, and nothing is left unread."""
    monkeypatch.setattr(redis_store, "READ_WINDOW_BYTES", window_bytes)
    store = RedisStore(server.url, FP, ttl_s=ttl_s)
    hashes, blobs = chain(9), payloads(9)
    store.put(hashes[:8], blobs[:8])
    raw = _raw(server)
    good = raw.get(store.key(hashes[3]))
    raw.set(store.key(hashes[3]), good[:-1] + bytes([good[-1] ^ 1]))
    targets = [bytearray(len(b)) for b in blobs]
    found = store.get_into(hashes, [[memoryview(t)] for t in targets])
    assert found == [True] * 3 + [False] + [True] * 4 + [False]
    assert [bytes(t) for i, t in enumerate(targets) if found[i]] == [
        b for i, b in enumerate(blobs) if found[i]
    ]
    assert store.get_into(hashes[:3], [[memoryview(t)] for t in targets[:3]]) == [True] * 3
    assert (store.stats().corrupt, store.stats().hits) == (1, 10)


@needs_redis
@pytest.mark.redis
def test_damaged_and_foreign_values_are_dropped(server: RedisServer) -> None:
    store = RedisStore(server.url, FP)
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes, blobs)
    raw = _raw(server)
    good = raw.get(store.key(hashes[0]))
    raw.set(store.key(hashes[0]), good[: len(good) - 100])
    other = dataclasses.replace(FP, kv_dtype="float16")
    raw.set(store.key(hashes[2]), encode_blob(other.digest, hashes[2], blobs[2]))
    assert store.get(hashes) == [None, blobs[1], None]
    assert (store.stats().corrupt, store.stats().foreign) == (1, 1)
    assert raw.exists(store.key(hashes[0]), store.key(hashes[2])) == 0


@needs_redis
@pytest.mark.redis
def test_server_killed_mid_run_and_restarted(server: RedisServer) -> None:
    """SIGKILL at step 10, restart at step 20: every step completes, no page is ever wrong,
    hits stop while the server is down and resume after it returns."""
    clock = Clock()
    store = ResilientStore(
        RedisStore(server.url, FP, timeout_s=5), base_delay_s=1, max_delay_s=4, clock=clock
    )
    hits = {"before": 0, "down": 0, "after": 0}
    wrong = 0
    for step in range(40):
        clock.now = float(step)
        if step == 10:
            server.kill()
        if step == 20:
            server.start()  # same port, empty: no persistence
        phase = "before" if step < 10 else "down" if step < 20 else "after"
        hashes, blobs = chain(8, seed=step), payloads(8, seed=step)
        store.put(hashes, blobs)
        got = store.get(hashes)
        wrong += sum(g is not None and g != b for g, b in zip(got, blobs, strict=True))
        hits[phase] += sum(g is not None for g in got)
    stats = store.stats()
    assert wrong == 0
    assert hits["before"] == 80 and hits["down"] == 0 and hits["after"] > 0
    # failures at steps 10, 11, 13, 17 (backoff 1, 2, 4 s); step 21 reconnects
    assert stats.errors == 4 and stats.corrupt == 0
    assert not store.is_open


@needs_redis
@pytest.mark.redis
def test_stalled_server_times_out_then_recovers(server: RedisServer) -> None:
    clock = Clock()
    store = ResilientStore(RedisStore(server.url, FP, timeout_s=0.5), clock=clock)
    hashes, blobs = chain(4), payloads(4)
    store.put(hashes, blobs)
    server.pause()  # SIGSTOP: connections accept but nothing answers
    try:
        assert store.get(hashes) == [None] * 4
        assert store.is_open and store.stats().errors == 1
    finally:
        server.resume()
    clock.now = 60.0
    assert store.get(hashes) == blobs


@needs_redis
@pytest.mark.redis
def test_out_of_memory_refuses_writes_keeps_reads(tmp_path: Path) -> None:
    with running_redis(tmp_path, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction") as srv:
        store = RedisStore(srv.url, FP)
        hashes, blobs = chain(2000), payloads(2000)
        written = sum(
            store.put(hashes[i : i + 100], blobs[i : i + 100]) for i in range(0, 2000, 100)
        )
        stats = store.stats()
        assert 0 < written < 2000 and stats.refused == 2000 - written
        assert store.get(hashes[:1]) == blobs[:1]


@needs_redis
@pytest.mark.redis
def test_two_processes_share_a_redis_store(server: RedisServer) -> None:
    first = run_worker(server.url, "put", 12, seed=3)
    second = run_worker(server.url, "get", 12, seed=3)
    assert first == {"written": 12, "errors": 0}
    assert second == {"prefix": 12, "hits": 12, "exact": True, "errors": 0}


@needs_redis
@pytest.mark.redis
def test_cluster_url_talks_to_a_one_node_cluster(tmp_path: Path) -> None:
    cluster = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with running_redis(tmp_path, *cluster) as srv:
        raw = _raw(srv)
        raw.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 10
        while b"cluster_state:ok" not in raw.execute_command("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "cluster did not become ready"
            time.sleep(0.05)
        store = open_store("cluster+" + srv.url.removesuffix("/0"), FP)
        hashes, blobs = chain(10), payloads(10)
        assert store.put(hashes, blobs) == 10
        assert store.exists_prefix(hashes) == 10
        assert store.get(hashes) == blobs
        assert store.stats().errors == 0


def test_redis_store_raises_unavailable_without_the_breaker() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", FP, timeout_s=0.2)
    with pytest.raises(StoreUnavailable):
        store.get(chain(1))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:99999/0", "out of range"),
        ("redis://127.0.0.1:6379/abc", "'abc' is not a number"),
        ("redis://127.0.0.1:6379/0?db=1", "given twice"),
        ("redis://127.0.0.1:6379/0?retries=3", "unknown option 'retries'"),
        ("redis:///0", "no host"),
        ("cluster+redis://127.0.0.1:7000/2", "only database 0"),
        ("unix://", "absolute path"),
        ("redis://user:hunter2@127.0.0.1:0/0", r"user:\*\*\*@"),
    ],
)
def test_bad_redis_urls_are_refused_at_open(url: str, message: str) -> None:
    with pytest.raises(KvtierError, match=message) as info:
        open_store(url, FP)
    assert "hunter2" not in str(info.value) and "\n" not in str(info.value)


@needs_redis
@pytest.mark.redis
def test_a_key_of_another_type_costs_only_its_page(server: RedisServer) -> None:
    store = ResilientStore(RedisStore(server.url, FP))
    inner: RedisStore = store.inner  # type: ignore[assignment]
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes, blobs)
    raw = _raw(server)
    raw.delete(inner.key(hashes[1]))
    raw.hset(inner.key(hashes[1]), "f", "v")
    assert store.exists_prefix(hashes) == 1
    raw.rpush(inner.key(hashes[1]), "x")
    assert store.get(hashes) == [blobs[0], None, blobs[2]]
    assert raw.exists(inner.key(hashes[1])) == 0
    stats = store.stats()
    assert (stats.corrupt, stats.errors, store.is_open) == (2, 0, False)


@needs_redis
@pytest.mark.redis
def test_a_three_master_cluster_serves_each_fingerprint_from_one_slot(tmp_path: Path) -> None:
    """A real cluster of 3 masters: the pages of one fingerprint share a hash tag, so a batch
    is one round trip to the one node holding its slot (the raw batch path talks to that node
    only, so a batch served whole shows it); the fingerprints of a TP deployment's ranks spread
    over the masters; put, get, get_into and probes all answer through any node's URL."""
    import redis

    with running_cluster(tmp_path, masters=3) as nodes:
        ranks = [dataclasses.replace(FP, tp_rank=r, tp_size=16) for r in range(16)]
        owners = set()
        for n, fp in enumerate(ranks):
            url = f"cluster+redis://127.0.0.1:{nodes[n % 3].port}"
            store = open_store(url, fp)
            hashes, blobs = chain(32, seed=n), payloads(32, size=8192)
            assert store.put(hashes, blobs) == 32
            assert store.exists_prefix(hashes) == 32
            assert store.get(hashes) == blobs
            targets = [bytearray(8192) for _ in hashes]
            assert store.get_into(hashes, [[t] for t in targets]) == [True] * 32
            assert [bytes(t) for t in targets] == blobs
            assert store.stats().errors == 0 and not store.is_open
            holders = []
            for node in nodes:
                client = redis.Redis(port=node.port)
                if client.execute_command("CLUSTER", "COUNTKEYSINSLOT", key_slot_of(fp)):
                    holders.append(node.port)
                client.close()
            assert len(holders) == 1, f"rank {n}'s pages on {holders}"
            owners.add(holders[0])
            store.close()
        assert len(owners) >= 2, "16 ranks' fingerprints all landed on one master"


def key_slot_of(fp: StoreFingerprint) -> int:
    from redis.crc import key_slot

    return int(key_slot(fp.digest.hex().encode()))
