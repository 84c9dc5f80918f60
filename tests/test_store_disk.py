"""Disk store: exact round trips, damage never served, LRU cap, full disk, several processes."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtier.errors import KvtierError
from kvtier.store import StoreOptions, disk, open_store
from kvtier.store.base import StoreStats, StoreUnavailable
from kvtier.store.blob import HEADER_SIZE, encode_blob
from kvtier.store.disk import DiskStore
from kvtier.store.resilient import ResilientStore
from store_support import FP, TESTS, Clock, chain, payloads, run_worker


def test_put_get_exists_delete(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, FP)
    hashes, blobs = chain(8), payloads(8)
    assert store.put(hashes[:5], blobs[:5]) == 5
    assert store.exists_prefix(hashes) == 5
    assert store.get(hashes) == blobs[:5] + [None] * 3
    assert store.put(hashes[:5], blobs[:5]) == 0  # already there
    assert store.delete(hashes[1:2]) == 1
    assert store.exists_prefix(hashes) == 1
    blob_bytes = 5 * (HEADER_SIZE + 16 + 4096)
    assert store.stats() == StoreStats(
        puts=5, gets=8, hits=5, bytes_written=blob_bytes, bytes_read=5 * 4096
    )


def test_files_are_sharded_and_named_by_fingerprint_and_hash(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, FP)
    [h] = chain(1)
    store.put([h], [b"x"])
    path = tmp_path / FP.digest.hex() / h.hex()[:2] / f"{h.hex()}.page"
    assert path.read_bytes() == encode_blob(FP.digest, h, b"x")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[: len(blob) // 2],  # truncated
        lambda blob: blob[:10],  # shorter than a header
        lambda blob: b"",  # empty file
        lambda blob: blob[:-1] + bytes([blob[-1] ^ 0x40]),  # one flipped bit in the payload
        lambda blob: b"JUNK" + blob[4:],  # not a page blob
    ],
    ids=["truncated", "torn-header", "empty", "bit-flip", "bad-magic"],
)
def test_damaged_blob_is_dropped_and_counted(tmp_path: Path, damage) -> None:
    store = DiskStore(tmp_path, FP)
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes, blobs)
    victim = store.path_of(hashes[1])
    victim.write_bytes(damage(victim.read_bytes()))
    assert store.get(hashes) == [blobs[0], None, blobs[2]]
    assert not victim.exists()
    assert store.stats().corrupt == 1
    assert store.exists_prefix(hashes) == 1


def test_foreign_fingerprint_blob_is_never_served(tmp_path: Path) -> None:
    other = dataclasses.replace(FP, tp_rank=1, tp_size=2)
    [h] = chain(1)
    DiskStore(tmp_path, other).put([h], [b"rank 1 KV"])
    ours = DiskStore(tmp_path, FP)
    assert ours.exists_prefix([h]) == 0  # keys are qualified by fingerprint
    # a foreign blob placed under our key is refused by its header
    ours.path_of(h).parent.mkdir(parents=True, exist_ok=True)
    ours.path_of(h).write_bytes(encode_blob(other.digest, h, b"rank 1 KV"))
    assert ours.get([h]) == [None]
    assert ours.stats().foreign == 1
    assert not ours.path_of(h).exists()
    assert DiskStore(tmp_path, other).get([h]) == [b"rank 1 KV"]


def test_blob_of_another_page_under_this_name_is_refused(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, FP)
    a, b = chain(2)
    store.put([a], [b"page a"])
    store.path_of(b).parent.mkdir(parents=True, exist_ok=True)
    os.replace(store.path_of(a), store.path_of(b))
    assert store.get([b]) == [None]
    assert store.stats().foreign == 1


def test_lru_eviction_keeps_recently_read_pages(tmp_path: Path) -> None:
    blob_size = HEADER_SIZE + 16 + 4096
    store = DiskStore(tmp_path, FP, capacity_bytes=10 * blob_size, low_watermark=0.5)
    hashes, blobs = chain(12), payloads(12)
    for i in range(10):
        store.put([hashes[i]], [blobs[i]])
        os.utime(store.path_of(hashes[i]), (1000 + i, 1000 + i))  # distinct, ordered mtimes
    assert store.get([hashes[0]]) == [blobs[0]]  # page 0 becomes the most recent
    store.put(hashes[10:12], blobs[10:12])  # 12 blobs > cap: evict down to 5
    present = [store.exists_prefix([h]) == 1 for h in hashes]
    assert present == [True] + [False] * 7 + [True] * 4
    assert store.stats().evicted == 7


def test_eviction_trims_chains_from_the_tail(tmp_path: Path) -> None:
    blob_size = HEADER_SIZE + 16 + 4096
    store = DiskStore(tmp_path, FP, capacity_bytes=10 * blob_size)
    a, b = chain(10, seed=1), chain(4, seed=2)
    store.put(a, payloads(10))
    store.put(b, payloads(4))  # 14 pages: evict the 5 oldest, a's last five
    assert (store.exists_prefix(a), store.exists_prefix(b)) == (5, 4)
    store.get(a[:5])  # a's head is now more recent than b
    store.put(chain(3, seed=3), payloads(3))  # 12 pages: evict 3, b's tail
    assert (store.exists_prefix(a), store.exists_prefix(b)) == (5, 1)
    assert len(list(tmp_path.rglob("*.page"))) == 9


def test_usage_of_existing_files_counts_toward_the_cap(tmp_path: Path) -> None:
    hashes, blobs = chain(4), payloads(4)
    DiskStore(tmp_path, FP).put(hashes[:3], blobs[:3])
    blob_size = HEADER_SIZE + 16 + 4096
    store = DiskStore(tmp_path, FP, capacity_bytes=3 * blob_size, low_watermark=1.0)
    store.put(hashes[3:], blobs[3:])
    assert store.stats().evicted == 1


def test_writers_in_other_processes_count_toward_the_cap(tmp_path: Path) -> None:
    blob_size = HEADER_SIZE + 16 + 4096
    a, b = (DiskStore(tmp_path, FP, capacity_bytes=10 * blob_size) for _ in range(2))
    hashes, blobs = chain(12), payloads(12)
    a.put(hashes[:6], blobs[:6])
    b.put(hashes[6:], blobs[6:])  # b alone wrote 6, but the root now holds 12
    assert len(list(tmp_path.rglob("*.page"))) == 9  # evicted to the 0.9 watermark
    assert b.stats().evicted == 3


def test_full_disk_stops_writes_keeps_reads_and_retries_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    store = DiskStore(tmp_path, FP, full_retry_s=30, clock=clock)
    hashes, blobs = chain(6), payloads(6)
    store.put(hashes[:2], blobs[:2])

    def no_space(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk, "_write_new", no_space)
    assert store.put(hashes[2:5], blobs[2:5]) == 0
    assert store.writes_stopped
    assert store.get(hashes[:2]) == blobs[:2]
    monkeypatch.undo()
    clock.now = 29.0
    assert store.put(hashes[2:3], blobs[2:3]) == 0  # still stopped
    assert store.stats().refused == 4
    clock.now = 30.0
    assert store.put(hashes[2:6], blobs[2:6]) == 4
    assert store.get(hashes) == blobs
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))


def test_file_vanishing_between_probe_and_read_is_a_miss(tmp_path: Path) -> None:
    writer, reader = DiskStore(tmp_path, FP), DiskStore(tmp_path, FP)
    hashes, blobs = chain(2), payloads(2)
    writer.put(hashes, blobs)
    assert reader.exists_prefix(hashes) == 2
    writer.delete(hashes[1:])  # another process evicts it
    assert reader.get(hashes) == [blobs[0], None]
    assert reader.stats().corrupt == 0


def test_eviction_tolerates_files_removed_by_another_process(tmp_path: Path) -> None:
    blob_size = HEADER_SIZE + 16 + 4096
    a = DiskStore(tmp_path, FP, capacity_bytes=4 * blob_size)
    hashes, blobs = chain(6), payloads(6)
    a.put(hashes[:4], blobs[:4])
    DiskStore(tmp_path, FP).delete(hashes[:4])
    a.put(hashes[4:], blobs[4:])  # estimate says over cap; the rescan finds little
    assert a.stats().evicted == 0
    assert a.get(hashes[4:]) == blobs[4:]


def test_a_root_wiped_by_another_process_is_rebuilt(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "root", FP)
    hashes, blobs = chain(2), payloads(2)
    store.put(hashes[:1], blobs[:1])
    shutil.rmtree(tmp_path / "root")
    assert store.get(hashes[:1]) == [None]
    assert store.put(hashes, blobs) == 2
    assert store.get(hashes) == blobs


def test_a_root_that_cannot_be_a_directory_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreUnavailable):
        DiskStore(tmp_path / "file", FP)
    with pytest.raises(KvtierError, match="cannot create store directory"):
        open_store(str(tmp_path / "file"), FP)


def test_stale_temporaries_are_swept(tmp_path: Path) -> None:
    blob_size = HEADER_SIZE + 16 + 4096
    store = DiskStore(tmp_path, FP, capacity_bytes=blob_size)
    hashes, blobs = chain(2), payloads(2)
    store.put(hashes[:1], blobs[:1])
    shard = store.path_of(hashes[0]).parent
    stale, fresh = shard / ".x.page.1.a.tmp", shard / ".y.page.2.b.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    old = time.time() - 2 * disk.STALE_TMP_S
    os.utime(stale, (old, old))
    store.put(hashes[1:], blobs[1:])
    assert not stale.exists()
    assert fresh.exists()  # may belong to a live writer


def test_two_processes_share_a_disk_store(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    first = run_worker(url, "put", 12, seed=7)
    second = run_worker(url, "get", 12, seed=7)
    assert first == {"written": 12, "errors": 0}
    assert second == {"prefix": 12, "hits": 12, "exact": True, "errors": 0}


def test_processes_racing_on_one_capped_store_never_see_a_torn_page(tmp_path: Path) -> None:
    cmd = [sys.executable, str(TESTS / "store_worker.py"), f"file://{tmp_path}", "churn", "48", "5"]
    procs = [subprocess.Popen(cmd, cwd=TESTS, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert [(r["wrong"], r["corrupt"]) for r in results] == [(0, 0)] * 3
    assert all(r["hits"] > 0 for r in results)
    assert sum(r["evicted"] for r in results) > 0  # the cap was hit while others were reading
    assert not list(tmp_path.rglob("*.tmp"))


def _resilient(root: Path) -> ResilientStore:
    return ResilientStore(DiskStore(root, FP))


def _page_removed(root: Path, page: int) -> tuple[ResilientStore, list[bytes], list[bytes], Path]:
    """A store of three pages with page `page`'s file deleted: the store, the pages' hashes and
    blobs, and the path the deleted file had."""
    store = _resilient(root)
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes, blobs)
    victim: Path = store.inner.path_of(hashes[page])  # type: ignore[attr-defined]
    victim.unlink()
    return store, hashes, blobs, victim


def test_a_fifo_at_a_page_path_is_a_miss_not_a_hang(tmp_path: Path) -> None:
    store, hashes, blobs, victim = _page_removed(tmp_path, 1)
    os.mkfifo(victim)
    assert store.get(hashes) == [blobs[0], None, blobs[2]]
    assert not os.path.lexists(victim)
    assert (store.stats().corrupt, store.stats().errors, store.is_open) == (1, 0, False)


def test_a_directory_at_a_page_path_costs_only_that_page(tmp_path: Path) -> None:
    store, hashes, blobs, victim = _page_removed(tmp_path, 0)
    (victim / "sub").mkdir(parents=True)
    assert store.get(hashes) == [None, *blobs[1:]]
    assert not os.path.lexists(victim)
    assert store.put(hashes, blobs) == 1 and store.get(hashes) == blobs


def test_a_huge_sparse_file_is_judged_by_its_header_not_read(tmp_path: Path) -> None:
    store = _resilient(tmp_path)
    hashes, blobs = chain(2), payloads(2)
    store.put(hashes, blobs)
    victim = store.inner.path_of(hashes[1])  # type: ignore[attr-defined]
    with open(victim, "r+b") as f:
        f.truncate(6 << 30)  # the page, then 6 GB of holes
    # another process's probe (this one's answers from memory the pages it wrote)
    assert _resilient(tmp_path).exists_prefix(hashes) == 1
    assert not victim.exists()
    victim.write_bytes(b"")
    os.truncate(victim, 6 << 30)
    assert store.get(hashes) == [blobs[0], None]
    assert store.stats().errors == 0


def test_symlinks_are_never_followed_nor_written_through(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    store = _resilient(root)
    hashes, blobs = chain(2), payloads(2)
    # a symlinked shard: writes land in the root, never in its target
    shard = store.inner.path_of(hashes[0]).parent  # type: ignore[attr-defined]
    shard.parent.mkdir(parents=True, exist_ok=True)
    shard.rmdir()  # made empty when the store opened
    shard.symlink_to(outside, target_is_directory=True)
    assert store.put(hashes, blobs) == 2
    assert list(outside.iterdir()) == []
    assert not shard.is_symlink() and store.get(hashes) == blobs
    # a symlink at a page path to a valid copy of the page: not served, target untouched
    bait = outside / "copy.page"
    page = store.inner.path_of(hashes[1])  # type: ignore[attr-defined]
    bait.write_bytes(page.read_bytes())
    os.utime(bait, (1000, 1000))
    page.unlink()
    page.symlink_to(bait)
    assert store.get(hashes) == [blobs[0], None]
    assert not os.path.lexists(page)
    page.symlink_to(bait)
    assert store.put(hashes, blobs) == 1
    assert not page.is_symlink() and store.get(hashes) == blobs
    assert bait.stat().st_mtime == 1000 and bait.read_bytes() == page.read_bytes()


def test_put_repairs_a_damaged_page_and_the_probe_checks_headers(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, FP)
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes, blobs)
    flipped = bytearray(store.path_of(hashes[0]).read_bytes())
    flipped[-1] ^= 1  # payload damage: the header check cannot see it, the put can
    store.path_of(hashes[0]).write_bytes(bytes(flipped))
    truncated = store.path_of(hashes[1])
    truncated.write_bytes(truncated.read_bytes()[:-5])
    assert store.exists_prefix(hashes) == 3  # this process wrote them: answered from memory
    # another process checks headers: the truncated page is not counted
    assert DiskStore(tmp_path, FP).exists_prefix(hashes) == 1
    store.path_of(hashes[1]).parent.mkdir(parents=True, exist_ok=True)
    truncated.write_bytes(encode_blob(FP.digest, hashes[1], blobs[1])[:-5])
    assert store.put(hashes, blobs) == 2  # both damaged pages rewritten
    assert store.get(hashes) == blobs


def test_a_probe_answered_from_memory_is_corrected_by_the_read(tmp_path: Path) -> None:
    """A page this process wrote is held without asking its file; once a read finds it
    damaged or gone, the probe stops counting it."""
    store = DiskStore(tmp_path, FP)
    hashes, blobs = chain(4), payloads(4)
    store.put(hashes, blobs)
    store.path_of(hashes[2]).unlink()
    assert store.exists_prefix(hashes) == 4
    assert store.get(hashes) == [*blobs[:2], None, blobs[3]]
    assert store.exists_prefix(hashes) == 2
    store.delete(hashes[:1])
    assert store.exists_prefix(hashes) == 0


def test_get_into_reads_pages_into_runs_of_memory(tmp_path: Path) -> None:
    """Pages written from runs and read into runs (a strided page's rows) are byte-exact; a
    target of another size is a miss that leaves the page in the store for its own readers."""
    store = DiskStore(tmp_path, FP)
    hashes, blobs = chain(3), payloads(3)
    runs = [[memoryview(b)[i : i + 100] for i in range(0, len(b), 100)] for b in blobs]
    assert store.put_parts(hashes, runs) == 3
    targets = [bytearray(len(b)) for b in blobs]
    split = [[memoryview(t)[: len(t) // 3], memoryview(t)[len(t) // 3 :]] for t in targets]
    assert store.get_into(hashes, split) == [True] * 3
    assert [bytes(t) for t in targets] == blobs
    short = [[bytearray(len(blobs[0]) - 1)]]
    assert store.get_into(hashes[:1], short) == [False]
    assert store.stats().foreign == 1


def test_large_batches_run_on_several_threads(tmp_path: Path) -> None:
    """A batch over the parallel threshold is split over the I/O threads, in order."""
    store = DiskStore(tmp_path, FP, io_threads=3)
    hashes = chain(12)
    pages = [bytes([i]) * (2 << 20) for i in range(12)]
    assert store.put(hashes, pages) == 12
    targets = [bytearray(2 << 20) for _ in pages]
    assert store.get_into(hashes, [[t] for t in targets]) == [True] * 12
    assert [bytes(t) for t in targets] == pages


def test_orphaned_temporaries_count_toward_the_cap(tmp_path: Path) -> None:
    blob_size = HEADER_SIZE + 16 + 4096
    hashes, blobs = chain(4), payloads(4)
    DiskStore(tmp_path, FP).put(hashes[:2], blobs[:2])
    shard = DiskStore(tmp_path, FP).path_of(hashes[0]).parent
    (shard / ".dead.page.1.00000000.tmp").write_bytes(bytes(2 * blob_size))
    store = DiskStore(tmp_path, FP, capacity_bytes=4 * blob_size, low_watermark=1.0)
    assert store.sweep() == 4 * blob_size
    store.put(hashes[2:3], blobs[2:3])  # 5 blobs' worth: the oldest page goes
    assert store.stats().evicted == 1


def test_a_store_that_cannot_be_written_refuses_writes_and_reads_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    store = ResilientStore(DiskStore(tmp_path, FP, clock=clock))
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes[:2], blobs[:2])

    def read_only(*args: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(disk, "_write_new", read_only)
    assert store.put(hashes, blobs) == 0
    assert store.get(hashes) == [*blobs[:2], None]
    stats = store.stats()
    assert (stats.errors, stats.refused, store.is_open) == (0, 1, False)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file://tmp/x", "names host 'tmp'"),
        ("file:relative/dir", "relative path"),
        ("file:///tmp/x?mode=ro", "no ?query"),
        ("", "names no directory"),
    ],
)
def test_bad_disk_urls_are_refused_at_open(url: str, message: str) -> None:
    with pytest.raises(KvtierError, match=message.replace("?", r"\?")):
        open_store(url, FP)
    assert not Path("/x").exists()


def test_options_are_checked_when_built_and_open_store_takes_only_them(tmp_path: Path) -> None:
    assert StoreOptions(capacity_bytes=10**6, timeout_s=2).timeout_s == 2.0
    with pytest.raises(KvtierError, match="capacity_bytes must be a positive integer"):
        StoreOptions(capacity_bytes=0)
    with pytest.raises(KvtierError, match="store options must be a StoreOptions, got"):
        open_store(str(tmp_path), FP, {"capacity_bytes": 1})  # type: ignore[arg-type]
    capped = open_store(str(tmp_path), FP, StoreOptions(capacity_bytes=10**6))
    assert capped.inner.capacity_bytes == 10**6  # type: ignore[attr-defined]


def test_a_home_relative_directory_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    store = open_store("~/kv", FP)
    store.put(chain(1), payloads(1))
    assert len(list((tmp_path / "kv").rglob("*.page"))) == 1
    assert store.inner.root == tmp_path / "kv"  # type: ignore[attr-defined]
