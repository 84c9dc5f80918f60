"""Store fault fuzzing: thousands of damaged, foreign, misplaced and hostile entries, failing
servers and bad URLs, each checked against the store's promises.

Invariants, for every case:
- no wrong page is ever served (a page is its exact payload or a miss);
- no exception escapes `ResilientStore`, and a fault of one entry never opens the circuit;
- a faulty entry costs only its own page (and, for a bad shard directory, the pages in it):
  every other page of the batch is still a hit;
- once a faulty entry has been looked at it is gone, quarantined or repaired, and the next
  put of its key serves the page again;
- nothing outside the store's root is written, read through or touched.

Cases come from a seeded generator: under CI (CI=true) the seed is fixed, so every run checks
the same cases; elsewhere each run draws a new seed (KVTIER_FUZZ_SEED=N to replay one), named
in every failure message. `CASES` lists how many cases each fault class gets per run.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import random
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvtier.errors import KvtierError
from kvtier.store import StoreOptions, disk, open_store, pageio
from kvtier.store.base import StoreCounters, StoreStats, StoreUnavailable
from kvtier.store.blob import (
    HEADER_SIZE,
    MAGIC,
    CorruptBlob,
    ForeignBlob,
    check_head,
    encode_blob,
    read_header,
)
from kvtier.store.disk import DiskStore
from kvtier.store.redis_store import RedisStore
from kvtier.store.resilient import ResilientStore
from store_support import FP, Clock, RedisServer, needs_redis, running_redis

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
SEED = 0 if IN_CI else int(os.environ.get("KVTIER_FUZZ_SEED", random.randrange(1 << 30)))
OTHER_FP = dataclasses.replace(FP, kv_dtype="float16")
SPARSE_BYTES = 6 << 30  # a 6 GB file that takes no disk space

# cases per run, by fault class
CASES = {
    "truncation": 1500,
    "bit flip": 2000,
    "random corruption": 1500,
    "swapped files": 700,
    "foreign or old-format blob": 700,
    "directory at a page path": 300,
    "FIFO at a page path": 300,
    "symlink at a page path": 500,
    "oversized sparse file": 250,
    "bad shard directory": 400,
    "bad fingerprint directory": 60,
    "read-only store": 500,
    "orphaned temporary files": 150,
    "bad URL": 1000,
    "store raising anything": 400,
    "redis wrong-type key": 400,
    "redis damaged value": 400,
    "redis killed mid-batch": 10,
    "redis stopped mid-batch": 5,
}


def test_a_run_checks_at_least_ten_thousand_store_faults() -> None:
    assert sum(CASES.values()) >= 10_000


def _rng(name: str) -> random.Random:
    return random.Random(f"{SEED}:{name}")


def _passes_header_check(data: bytes, page_hash: bytes) -> bool:
    """What a probe (exists_prefix) can see without reading the payload."""
    try:
        hash_len, length = read_header(data[:HEADER_SIZE])
        if len(data) != HEADER_SIZE + hash_len + length:
            return False
        check_head(FP.digest, page_hash, data[: HEADER_SIZE + hash_len])
    except (CorruptBlob, ForeignBlob):
        return False
    return True


def _old_format_blob(page_hash: bytes, payload: bytes) -> bytes:
    """A page as format 1 wrote it (version 1, the old field-joined fingerprint digest)."""
    text = "\x1f".join(str(getattr(FP, f.name)) for f in dataclasses.fields(FP))
    digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
    import zlib

    crc = zlib.crc32(payload, zlib.crc32(page_hash, zlib.crc32(digest)))
    header = struct.pack("<4sBBH16sQI", MAGIC, 1, len(page_hash), 0, digest, len(payload), crc)
    return header + page_hash + payload


def _tree_state(top: Path) -> dict[str, tuple[object, ...]]:
    """Everything under `top`, not following links: kind, size, mtime and content digest."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = b""
            if stat.S_ISREG(st.st_mode) and st.st_size < (1 << 20):
                digest = hashlib.sha1(Path(path).read_bytes()).digest()
            out[os.path.relpath(path, top)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


# -- disk page faults ------------------------------------------------------------------------


@dataclasses.dataclass
class Fault:
    """What a fault did: the batch entries it made bad, whether a header check can see it,
    and the bad directory it put in place of a shard (if any)."""

    bad: set[int]
    header_visible: bool = True
    shard: Path | None = None


class DiskCase:
    """One batch in a disk store, the outside directory an attacker points at, and helpers."""

    def __init__(self, store: ResilientStore, outside: Path, rng: random.Random) -> None:
        self.store = store
        self.inner: DiskStore = store.inner  # type: ignore[assignment]
        self.outside = outside
        self.rng = rng
        n = rng.randint(2, 6)
        sizes = [rng.choice((1, 7, 64, 300, 600, 4096)) for _ in range(n)]
        lengths = [rng.choice((16, 16, 16, 8, 32, 64)) for _ in range(n)]
        self.hashes = [rng.randbytes(length) for length in lengths]
        self.payloads = [rng.randbytes(size) for size in sizes]

    def path(self, i: int) -> Path:
        return self.inner.path_of(self.hashes[i])

    def blob(self, i: int) -> bytes:
        return encode_blob(FP.digest, self.hashes[i], self.payloads[i])

    def same_shard(self, i: int) -> set[int]:
        return {j for j in range(len(self.hashes)) if self.path(j).parent == self.path(i).parent}

    def bait(self, data: bytes) -> Path:
        """A file outside the root holding `data`."""
        path = self.outside / f"bait-{self.rng.randrange(1 << 40):x}"
        path.write_bytes(data)
        return path

    def replace_with(self, i: int, make: Callable[[Path], None]) -> None:
        path = self.path(i)
        path.unlink()
        make(path)


Breaker = Callable[[DiskCase, int], Fault]
FAULTS: dict[str, Breaker] = {}  # fault class -> what breaks one page that way


def _fault(name: str) -> Callable[[Breaker], Breaker]:
    """Register a fault class under the name its case count and test ids use."""

    def register(breaker: Breaker) -> Breaker:
        FAULTS[name] = breaker
        return breaker

    return register


@_fault("truncation")
def _fault_truncation(case: DiskCase, k: int) -> Fault:
    blob = case.blob(k)
    case.path(k).write_bytes(blob[: case.rng.randrange(len(blob))])
    return Fault({k})


@_fault("bit flip")
def _fault_bit_flip(case: DiskCase, k: int) -> Fault:
    data = bytearray(case.blob(k))
    pos = case.rng.randrange(len(data))
    data[pos] ^= 1 << case.rng.randrange(8)
    case.path(k).write_bytes(bytes(data))
    return Fault({k}, _passes_header_check(bytes(data), case.hashes[k]) is False)


@_fault("random corruption")
def _fault_random_corruption(case: DiskCase, k: int) -> Fault:
    rng, blob = case.rng, case.blob(k)
    while True:
        kind = rng.randrange(6)
        data = bytearray(blob)
        if kind == 0:  # a span overwritten with random bytes
            start = rng.randrange(len(data))
            end = min(len(data), start + rng.randint(1, 64))
            data[start:end] = rng.randbytes(end - start)
        elif kind == 1:  # a span zeroed (a torn page)
            start = rng.randrange(len(data))
            data[start:] = bytes(len(data) - start)
        elif kind == 2:  # garbage appended
            data += rng.randbytes(rng.randint(1, 100))
        elif kind == 3:  # noise of the same length
            data = bytearray(rng.randbytes(len(data)))
        elif kind == 4:  # the page twice
            data = data + data
        else:  # the header of another page over this one
            other = encode_blob(FP.digest, rng.randbytes(len(case.hashes[k])), case.payloads[k])
            data[: HEADER_SIZE + len(case.hashes[k])] = other[: HEADER_SIZE + len(case.hashes[k])]
        if bytes(data) != blob:
            break
    case.path(k).write_bytes(bytes(data))
    return Fault({k}, not _passes_header_check(bytes(data), case.hashes[k]))


@_fault("swapped files")
def _fault_swapped_files(case: DiskCase, k: int) -> Fault:
    j = (k + case.rng.randrange(1, len(case.hashes))) % len(case.hashes)
    a, b = case.path(k), case.path(j)
    if case.rng.random() < 0.5:  # exchanged
        data_a, data_b = a.read_bytes(), b.read_bytes()
        a.write_bytes(data_b)
        b.write_bytes(data_a)
        return Fault({k, j})
    a.write_bytes(b.read_bytes())  # one page's file copied over another's
    return Fault({k})


@_fault("foreign or old-format blob")
def _fault_foreign(case: DiskCase, k: int) -> Fault:
    h, p = case.hashes[k], case.payloads[k]
    choice = case.rng.randrange(3)
    if choice == 0:
        data = encode_blob(OTHER_FP.digest, h, p)  # another model's page under our key
    elif choice == 1:
        data = _old_format_blob(h, p)  # written by format 1
    else:
        data = encode_blob(OTHER_FP.digest, h, case.rng.randbytes(len(p)))
    case.path(k).write_bytes(data)
    return Fault({k})


@_fault("directory at a page path")
def _fault_directory(case: DiskCase, k: int) -> Fault:
    rng = case.rng
    bait = case.bait(case.blob(k))

    def make(path: Path) -> None:
        path.mkdir()
        if rng.random() < 0.5:
            (path / "inner.page").write_bytes(case.blob(k))
            (path / "nested").mkdir()
            (path / "nested" / "x").write_bytes(b"x")
        if rng.random() < 0.5:  # removing the directory must not follow this out of the root
            (path / "link").symlink_to(bait)
            (path / "dirlink").symlink_to(case.outside)

    case.replace_with(k, make)
    return Fault({k})


@_fault("FIFO at a page path")
def _fault_fifo(case: DiskCase, k: int) -> Fault:
    case.replace_with(k, lambda path: os.mkfifo(path))
    return Fault({k})


@_fault("symlink at a page path")
def _fault_symlink(case: DiskCase, k: int) -> Fault:
    kind = case.rng.randrange(6)
    if kind == 0:
        target = case.bait(case.blob(k))  # a valid copy of the page, outside the root
    elif kind == 1:
        target = case.bait(case.rng.randbytes(200))
    elif kind == 2:
        target = case.outside / "missing"  # dangling
    elif kind == 3:
        target = case.outside
    elif kind == 4:
        target = Path("/dev/zero")
    else:
        target = case.outside / f"fifo-{case.rng.randrange(1 << 40):x}"
        os.mkfifo(target)
    case.replace_with(k, lambda path: path.symlink_to(target))
    return Fault({k})


@_fault("oversized sparse file")
def _fault_sparse(case: DiskCase, k: int) -> Fault:
    rng, h = case.rng, case.hashes[k]
    kind = rng.randrange(3)
    if kind == 0:  # a valid-looking header that promises the whole 6 GB
        length = SPARSE_BYTES - HEADER_SIZE - len(h)
        head = encode_blob(FP.digest, h, b"")[: HEADER_SIZE + len(h)]
        head = head[:24] + struct.pack("<Q", length) + head[32:]
    elif kind == 1:  # the page itself, then 6 GB of holes
        head = case.blob(k)
    else:  # no header at all
        head = b""
    with open(case.path(k), "wb") as f:
        f.write(head)
        f.truncate(SPARSE_BYTES)
    return Fault({k})


@_fault("bad shard directory")
def _fault_shard(case: DiskCase, k: int) -> Fault:
    """The shard directory of entry k replaced by a symlink out of the root (holding valid
    copies of its pages), a dangling symlink, a file or a FIFO."""
    shard = case.path(k).parent
    bad = case.same_shard(k)
    for child in shard.iterdir():
        if child.is_dir() and not child.is_symlink():
            import shutil

            shutil.rmtree(child)
        else:
            child.unlink()
    shard.rmdir()
    kind = case.rng.randrange(4)
    if kind == 0:
        target = case.outside / f"shard-{case.rng.randrange(1 << 40):x}"
        target.mkdir()
        for j in bad:
            (target / case.path(j).name).write_bytes(case.blob(j))
        shard.symlink_to(target, target_is_directory=True)
    elif kind == 1:
        shard.symlink_to(case.outside / "no-such-dir")
    elif kind == 2:
        shard.write_bytes(b"not a directory")
    else:
        os.mkfifo(shard)
    return Fault(bad, shard=shard)


DISK_PAGE_FAULTS = tuple(FAULTS)  # every fault class above, in the order they stand


def _gone_quarantined_or_repaired(case: DiskCase, i: int) -> bool:
    path = case.path(i)
    if not os.path.lexists(path):
        return True
    if case.inner.quarantined(case.hashes[i]):
        return True
    return stat.S_ISREG(os.lstat(path).st_mode) and path.read_bytes() == case.blob(i)


def _shard_is_sound(shard: Path) -> bool:
    return not os.path.lexists(shard) or stat.S_ISDIR(os.lstat(shard).st_mode)


def _check_get(case: DiskCase, fault: Fault, got: list[bytes | None], where: str) -> None:
    for i, (page, want) in enumerate(zip(got, case.payloads, strict=True)):
        assert page is None or page == want, f"{where}: wrong page {i}"
        if i in fault.bad:
            assert page is None, f"{where}: page {i} served from a bad entry"
        else:
            assert page == want, f"{where}: page {i} lost to another entry's fault"


def _get_into(store: ResilientStore, case: DiskCase) -> list[bytes | None]:
    """`get_into` each page, split into two runs of memory; the pages read, None for misses."""
    targets = [bytearray(len(p)) for p in case.payloads]
    runs = [[memoryview(t)[: len(t) // 2], memoryview(t)[len(t) // 2 :]] for t in targets]
    found = store.get_into(case.hashes, runs)
    return [bytes(t) if ok else None for t, ok in zip(targets, found, strict=True)]


def _run_disk_case(case: DiskCase, prober: DiskStore, fault_name: str, where: str) -> None:
    """One case; `prober` is another process's view of the same root (its probe checks the
    headers of pages it has not handled, where the writer answers from memory)."""
    store, rng = case.store, case.rng
    assert store.put(case.hashes, case.payloads) == len(case.hashes), where
    k = rng.randrange(len(case.hashes))
    fault = FAULTS[fault_name](case, k)
    outside = _tree_state(case.outside)
    op = rng.choice(("get", "get_into", "exists", "put"))
    if op == "get":
        _check_get(case, fault, store.get(case.hashes), where)
        seen = fault.bad
    elif op == "get_into":
        _check_get(case, fault, _get_into(store, case), where)
        seen = fault.bad
    elif op == "exists":
        first_bad = min(fault.bad)
        # the writer answers from memory (all its pages), or from headers once its shard or
        # fingerprint directory was replaced; never short of the fault
        assert store.exists_prefix(case.hashes) >= first_bad, f"{where}: its own pages"
        prefix = prober.exists_prefix(case.hashes)
        assert prefix >= first_bad, f"{where}: probe stopped before the fault"
        if fault.header_visible:
            assert prefix == first_bad, f"{where}: probe counted a bad entry"
            seen = {first_bad}
        else:
            seen = set()
    else:
        store.put(case.hashes, case.payloads)
        assert store.get(case.hashes) == case.payloads, f"{where}: put did not repair"
        seen = set(fault.bad)
    for i in seen:
        assert _gone_quarantined_or_repaired(case, i), f"{where}: bad entry {i} left in place"
    if fault.shard is not None and op != "exists":
        assert _shard_is_sound(fault.shard), f"{where}: bad shard left in place"
    if op != "put":
        _check_get(case, fault, store.get(case.hashes), where)
    # whatever happened, the next put serves every page again
    store.put(case.hashes, case.payloads)
    assert store.get(case.hashes) == case.payloads, f"{where}: not repaired by a put"
    assert store.exists_prefix(case.hashes) == len(case.hashes), where
    assert _tree_state(case.outside) == outside, f"{where}: touched a file outside the root"


class _CountingOS:
    """The `os` module, counting the bytes the store reads from files."""

    def __init__(self) -> None:
        self.read = 0

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = os.pread(fd, size, offset)
        self.read += len(data)
        return data

    def preadv(self, fd: int, buffers: list[memoryview], offset: int) -> int:
        n = os.preadv(fd, buffers, offset)
        self.read += n
        return n


@pytest.mark.parametrize("fault_name", DISK_PAGE_FAULTS)
def test_disk_page_faults(tmp_path: Path, fault_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    store = ResilientStore(DiskStore(root, FP))
    prober = DiskStore(root, FP)
    counting = _CountingOS()
    monkeypatch.setattr(disk, "os", counting)
    monkeypatch.setattr(pageio, "os", counting)
    rng = _rng(fault_name)
    for n in range(CASES[fault_name]):
        where = f"{fault_name} case {n} (KVTIER_FUZZ_SEED={SEED})"
        (outside / str(n)).mkdir()  # where this case's baits lie
        case = DiskCase(store, outside / str(n), rng)
        counting.read = 0
        _run_disk_case(case, prober, fault_name, where)
        # reads are bounded by the pages themselves, whatever sits at their paths
        bound = 16 * sum(len(case.blob(i)) for i in range(len(case.hashes)))
        assert counting.read <= bound, f"{where}: read {counting.read} bytes"
    stats = store.stats()
    assert (stats.errors, stats.skipped) == (0, 0), stats
    assert not store.is_open
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "root"]


def test_bad_fingerprint_directory(tmp_path: Path) -> None:
    """The fingerprint directory replaced by a symlink out of the root (to a tree holding valid
    pages), a file or a FIFO: lookups miss without following it, writes rebuild it in the root."""
    rng = _rng("fingerprint directory")
    outside = tmp_path / "outside"
    outside.mkdir()
    for n in range(CASES["bad fingerprint directory"]):
        where = f"fingerprint directory case {n} (KVTIER_FUZZ_SEED={SEED})"
        root = tmp_path / f"root{n}"
        store = ResilientStore(DiskStore(root, FP))
        case = DiskCase(store, outside, rng)
        store.put(case.hashes, case.payloads)
        prober = DiskStore(root, FP)  # another process, which has not seen these pages
        fp_dir = root / FP.digest.hex()
        target = outside / f"tree{n}"
        fp_dir.rename(target)  # the real tree, valid pages and all, now outside the root
        kind = rng.randrange(3)
        if kind == 0:
            fp_dir.symlink_to(target, target_is_directory=True)
        elif kind == 1:
            fp_dir.write_bytes(b"x")
        else:
            os.mkfifo(fp_dir)
        before = _tree_state(outside)
        op = rng.choice(("get", "exists"))
        if op == "get":
            assert store.get(case.hashes) == [None] * len(case.hashes), where
        else:
            assert prober.exists_prefix(case.hashes) == 0, where
        assert store.put(case.hashes, case.payloads) == len(case.hashes), where
        assert store.get(case.hashes) == case.payloads, where
        assert stat.S_ISDIR(os.lstat(fp_dir).st_mode), where
        assert _tree_state(outside) == before, f"{where}: touched the tree outside the root"
        assert store.stats().errors == 0, where


# -- read-only stores -----------------------------------------------------------------------


def _erofs(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EROFS, "Read-only file system")


class _ReadOnlyOS:
    """The `os` module as a read-only filesystem shows it: every change fails with EROFS."""

    mkdir = unlink = replace = rename = rmdir = utime = staticmethod(_erofs)

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def open(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            _erofs()
        return os.open(path, flags, *args, **kwargs)  # type: ignore[arg-type]


@contextmanager
def _read_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as m:
        m.setattr(disk, "os", _ReadOnlyOS())
        m.setattr(disk, "shutil", SimpleNamespace(rmtree=_erofs))
        yield


READ_ONLY_FAULTS = tuple(f for f in DISK_PAGE_FAULTS if f != "bad shard directory")


def test_read_only_store_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that cannot be written: a bad entry is a miss, quarantined (not read or counted
    again), the rest of the batch hits, writes are refused without opening the circuit."""
    outside = tmp_path / "outside"
    outside.mkdir()
    clock = Clock()
    store = ResilientStore(DiskStore(tmp_path / "root", FP, clock=clock))
    rng = _rng("read-only")
    for n in range(CASES["read-only store"]):
        where = f"read-only case {n} (KVTIER_FUZZ_SEED={SEED})"
        case = DiskCase(store, outside, rng)
        store.put(case.hashes, case.payloads)
        k = rng.randrange(len(case.hashes))
        fault = FAULTS[rng.choice(READ_ONLY_FAULTS)](case, k)
        with _read_only(monkeypatch):
            _check_get(case, fault, store.get(case.hashes), where)
            for i in fault.bad:
                assert _gone_quarantined_or_repaired(case, i), f"{where}: entry {i} not quarantined"
            seen = store.stats()
            _check_get(case, fault, store.get(case.hashes), where)
            again = store.stats()
            assert (again.corrupt, again.foreign) == (seen.corrupt, seen.foreign), (
                f"{where}: a quarantined entry was read again"
            )
            assert store.exists_prefix(case.hashes) == min(fault.bad), where
            assert store.put(case.hashes, case.payloads) == 0, where
        assert store.inner.writes_stopped, where  # type: ignore[attr-defined]
        clock.now += 1000.0  # writable again, and past the stop: a put repairs the page
        store.put(case.hashes, case.payloads)
        assert store.get(case.hashes) == case.payloads, where
    stats = store.stats()
    assert (stats.errors, stats.skipped) == (0, 0), stats


def read_only_directory_check(root: Path) -> None:
    """A corrupt page in shards the process may not write: a miss, quarantined, no error."""
    store = ResilientStore(DiskStore(root, FP))
    rng = _rng("chmod")
    case = DiskCase(store, root, rng)
    store.put(case.hashes, case.payloads)
    case.path(0).write_bytes(case.blob(0)[:-1])
    shards = {case.path(i).parent for i in range(len(case.hashes))}
    for shard in shards:
        shard.chmod(0o555)
    try:
        assert store.get(case.hashes) == [None, *case.payloads[1:]]
        assert store.inner.quarantined(case.hashes[0])  # type: ignore[attr-defined]
        assert store.stats().errors == 0
    finally:
        for shard in shards:
            shard.chmod(0o755)


# Everything is imported first (the interpreter's own files may be unreadable to nobody), then
# the child drops root, under which permission bits do not bind, and runs the check.
_AS_NOBODY = """
import os, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_store_fuzz
root = Path(tempfile.mkdtemp())
os.chmod(root, 0o777)
os.setgroups([]); os.setgid(65534); os.setuid(65534)
test_store_fuzz.read_only_directory_check(root / "store")
print("checked")
"""


def test_a_really_read_only_directory(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        read_only_directory_check(tmp_path)
        return
    tests = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, tests],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0 and "checked" in done.stdout, done.stderr[-2000:]


# -- temporary files -------------------------------------------------------------------------


def test_orphaned_temporaries_count_and_stale_ones_are_swept(tmp_path: Path) -> None:
    rng = _rng("temporaries")
    root = tmp_path / "root"
    store = DiskStore(root, FP, stale_tmp_s=60)
    blob = HEADER_SIZE + 16 + 100
    for n in range(CASES["orphaned temporary files"]):
        where = f"temporaries case {n} (KVTIER_FUZZ_SEED={SEED})"
        hashes = [rng.randbytes(16) for _ in range(rng.randint(1, 3))]
        store.put(hashes, [rng.randbytes(100) for _ in hashes])
        fresh = fresh_files = 0
        for _ in range(rng.randint(1, 4)):
            shard = store.path_of(rng.choice(hashes)).parent
            tmp = shard / f".{rng.randbytes(16).hex()}.page.{rng.randrange(99999)}.ab12cd34.tmp"
            size = rng.randint(1, 5000)
            tmp.write_bytes(bytes(size))
            if rng.random() < 0.5:
                old = time.time() - 61 - rng.random() * 1e5
                os.utime(tmp, (old, old))
            else:
                fresh += size
                fresh_files += 1
        pages = len(list(root.rglob("*.page")))
        used = store.sweep()
        assert used == pages * blob + fresh, where
        left = list(root.rglob("*.tmp"))
        assert len(left) == fresh_files, f"{where}: stale temporaries not swept"
        for p in left:  # this case's fresh ones are kept (a live writer's), then cleared
            p.unlink()
    # a cap sees what temporaries use: an opened store counts them toward it
    (store.path_of(hashes[0]).parent / ".orphan.page.1.00000000.tmp").write_bytes(bytes(10**6))
    capped = DiskStore(root, FP, capacity_bytes=10**6)
    capped.put([rng.randbytes(16)], [b"x"])
    assert capped.stats().evicted > 0


# -- bad URLs ---------------------------------------------------------------------------------


def _bad_urls(rng: random.Random, tmp: Path) -> Iterator[tuple[str, object, dict[str, object]]]:
    """(what to find in the message, url, options) of calls `open_store` must refuse."""
    word = f"w{rng.randrange(1 << 30):x}"
    host = rng.choice(["127.0.0.1", "localhost", "redis.internal", "[::1]"])
    kind = rng.randrange(20)
    if kind == 0:
        url = f"file://{word}/x{word}"  # a host read where a directory was meant
        yield word, url, {}
    elif kind == 1:
        yield word, f"file:{word}/rel", {}
    elif kind == 2:
        yield word, f"file://{tmp}/{word}?{rng.choice(['a=1', 'x'])}", {}
    elif kind == 3:
        port = rng.choice([0, 65536, 99999, 10 ** rng.randint(6, 12)])
        yield str(port), f"redis://{host}:{port}/0", {}
    elif kind == 4:
        port = rng.choice(["abc", "-1", "6379x", "65535.0"])
        yield port, f"{rng.choice(['redis', 'rediss'])}://{host}:{port}/0", {}
    elif kind == 5:
        db = rng.choice(["abc", "1/2", "-1", "0x1", "1.5", " 1", word])
        yield db, f"redis://{host}:6379/{db}", {}
    elif kind == 6:
        db = rng.choice(["abc", "-3", word])
        yield db, f"redis://{host}:6379?db={db}", {}
    elif kind == 7:
        yield "twice", f"redis://{host}:6379/1?db=2", {}
    elif kind == 8:
        yield word, f"redis://{host}:6379/0?{word}=1", {}
    elif kind == 9:
        yield "host", rng.choice(["redis://", "redis:///0", "rediss://:6379/0"]), {}
    elif kind == 10:
        yield "database 0", f"cluster+redis://{host}:7000/{rng.randint(1, 15)}", {}
    elif kind == 11:
        yield "unix", rng.choice(["unix://", "unix://relative.sock", f"unix://{word}/x.sock"]), {}
    elif kind == 12:
        yield word, f"{word}://{host}/x", {}
    elif kind == 13:
        password = f"secret{word}"
        url = f"redis://user:{password}@{host}:99999/0"
        yield "***", url, {"forbid": password}
    elif kind == 14:
        value = rng.choice([0, -1, True, 1.5, "10", float("nan"), 10**20, 2**64])
        option = rng.choice(["capacity_bytes", "ttl_s", "timeout_s"])
        base = f"redis://{host}:6379/0" if option != "capacity_bytes" else str(tmp / word)
        if option == "timeout_s" and value in ("10", 1.5):
            value = rng.choice([0, -2.5, float("inf"), 1e9])
        if option == "capacity_bytes" and value == 10**20:
            value = 2**63  # 10^20 bytes is within range
        yield option, base, {option: value}
    elif kind == 15:  # whitespace at an end of a URL, or a control character anywhere in it
        url = rng.choice([f"redis://{host}:6379/0", str(tmp / word), f"file://{tmp}/{word}"])
        at = rng.choice(["start", "end", "inside"])
        if at == "inside":  # a space may be in a directory's name; a control character not
            cut = rng.randrange(1, len(url))
            url = url[:cut] + rng.choice(["\x01", "\n", "\x7f", "\x1b"]) + url[cut:]
        else:
            pad = rng.choice([" ", "\t", "\n", "\r\n", "  "])
            url = pad + url if at == "start" else url + pad
        yield "store URL", url, {}
    elif kind == 16:
        option, value = rng.choice(
            [
                ("socket_timeout", "1e20"),
                ("socket_connect_timeout", "-1"),
                ("socket_timeout", "nan"),
                ("health_check_interval", "inf"),
                ("max_connections", "0"),
                ("max_connections", str(10**12)),
                ("protocol", "9"),
            ]
        )
        yield option, f"redis://{host}:6379/0?{option}={value}", {}
    elif kind == 17:  # a home of no user: pathlib raised RuntimeError
        yield f"no user 'nouser{word}'", f"~nouser{word}/kv", {}
    elif kind == 18:  # a database no server has
        db = rng.choice([2**31 - 1, 2**64, 10**20])
        yield str(db)[:20], f"redis://{host}:6379/{db}", {}
    else:
        yield "string", rng.choice([None, 42, b"redis://h/0", ["/tmp/x"]]), {}


def test_bad_urls_are_one_line_errors_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    rng = _rng("urls")
    for n in range(CASES["bad URL"]):
        for needle, url, options in _bad_urls(rng, tmp_path):
            forbid = options.pop("forbid", None)
            where = f"bad URL case {n}: {url!r} {options} (KVTIER_FUZZ_SEED={SEED})"
            with pytest.raises(KvtierError) as info:
                open_store(url, FP, StoreOptions(**options))  # type: ignore[arg-type]
            message = str(info.value)
            assert "\n" not in message and needle in message, f"{where}: {message!r}"
            if forbid is not None:
                assert forbid not in message, f"{where}: the password is in {message!r}"
    # a file URL's host was never taken for a directory
    assert not [p for p in Path("/").iterdir() if p.name.startswith("xw")]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_good_urls_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert open_store("~/cache", FP).inner.root == tmp_path / "cache"  # type: ignore[attr-defined]
    assert (tmp_path / "cache" / FP.digest.hex()).is_dir()
    for url in (f"file://{tmp_path}/a", f"file://localhost{tmp_path}/b", f"file:{tmp_path}/c"):
        assert open_store(url, FP).inner.root.is_dir()  # type: ignore[attr-defined]
    assert open_store(f"file://{tmp_path}/with%20space", FP).inner.root.name == "with space"  # type: ignore[attr-defined]
    for url in (
        "redis://127.0.0.1:6379/0",
        "redis://127.0.0.1/3",
        "redis://:pw@redis.internal:6380",
        "rediss://h:6379/0?ssl_cert_reqs=none",
        "redis://h:6379?db=4&socket_keepalive=true",
        "unix:///run/redis.sock?db=2",
        "cluster+redis://127.0.0.1:7000",
        "redis://[::1]:6379/0",
    ):
        store = open_store(url, FP)
        assert isinstance(store.inner, RedisStore), url


# -- a store that raises anything ------------------------------------------------------------


class _Exploding:
    """A store whose every call may raise anything at all."""

    fingerprint = FP

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.raised = 0
        self._counters = StoreCounters()

    def _maybe_raise(self) -> None:
        if self.rng.random() < 0.5:
            self.raised += 1
            raise self.rng.choice(
                [
                    MemoryError(),
                    StoreUnavailable("down"),
                    OSError(errno.EIO, "I/O error"),
                    TypeError("bug"),
                    KeyError("k"),
                    RuntimeError("what"),
                    ValueError("odd"),
                    RecursionError(),
                ]
            )

    def put(self, hashes: object, payloads: object) -> int:
        self._maybe_raise()
        return 0

    def get(self, hashes: list[bytes]) -> list[bytes | None]:
        self._maybe_raise()
        return [None] * len(hashes) if self.rng.random() < 0.8 else [None]

    def exists_prefix(self, hashes: object) -> int:
        self._maybe_raise()
        return 0

    def delete(self, hashes: object) -> int:
        self._maybe_raise()
        return 0

    def stats(self) -> StoreStats:
        return self._counters.snapshot()

    def close(self) -> None:
        self._maybe_raise()


def test_nothing_a_store_raises_escapes_the_breaker() -> None:
    rng = _rng("exploding")
    clock = Clock()
    inner = _Exploding(rng)
    store = ResilientStore(inner, base_delay_s=0.0, clock=clock)
    for n in range(CASES["store raising anything"]):
        hashes = [rng.randbytes(16) for _ in range(rng.randint(0, 4))]
        op = rng.choice(("put", "get", "exists", "delete", "close"))
        if op == "put":
            assert store.put(hashes, [b"x"] * len(hashes)) == 0, n
        elif op == "get":
            assert store.get(hashes) == [None] * len(hashes), n
        elif op == "exists":
            assert store.exists_prefix(hashes) == 0, n
        elif op == "delete":
            assert store.delete(hashes) == 0, n
        else:
            store.close()
        clock.now += 1.0
    assert store.stats().errors > 0 and inner.raised > 0
    assert store.last_error is not None and "\n" not in store.last_error


# -- Redis ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("fuzz-redis")) as srv:
        yield srv


def _raw(server: RedisServer):  # type: ignore[no-untyped-def]
    import redis

    return redis.Redis.from_url(server.url)


def _wrong_type(raw, key: str, rng: random.Random) -> None:  # type: ignore[no-untyped-def]
    raw.delete(key)
    kind = rng.randrange(5)
    if kind == 0:
        raw.hset(key, "f", rng.randbytes(8))
    elif kind == 1:
        raw.rpush(key, rng.randbytes(8), b"y")
    elif kind == 2:
        raw.sadd(key, rng.randbytes(8))
    elif kind == 3:
        raw.zadd(key, {rng.randbytes(8): 1.0})
    else:
        raw.xadd(key, {"f": rng.randbytes(8)})


def _damaged_value(raw, key: str, blob: bytes, rng: random.Random, h: bytes) -> bool:  # type: ignore[no-untyped-def]
    """Damage a stored value; True when a header check can see it."""
    kind = rng.randrange(5)
    if kind == 0:
        data = blob[: rng.randrange(len(blob))]
    elif kind == 1:
        flipped = bytearray(blob)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        data = bytes(flipped)
    elif kind == 2:
        data = encode_blob(OTHER_FP.digest, h, blob[HEADER_SIZE + len(h) :])
    elif kind == 3:
        data = _old_format_blob(h, blob[HEADER_SIZE + len(h) :])
    else:
        data = blob + rng.randbytes(rng.randint(1, 20))
    raw.set(key, data)
    return not _passes_header_check(data, h)


@needs_redis
@pytest.mark.redis
@pytest.mark.parametrize("fault_name", ["redis wrong-type key", "redis damaged value"])
def test_redis_entry_faults(redis_server: RedisServer, fault_name: str) -> None:
    rng = _rng(fault_name)
    ttl = rng.choice([None, 600])
    store = ResilientStore(RedisStore(redis_server.url, FP, ttl_s=ttl))
    inner: RedisStore = store.inner  # type: ignore[assignment]
    raw = _raw(redis_server)
    for n in range(CASES[fault_name]):
        where = f"{fault_name} case {n} (KVTIER_FUZZ_SEED={SEED})"
        hashes = [rng.randbytes(16) for _ in range(rng.randint(2, 6))]
        payloads = [rng.randbytes(rng.choice((1, 64, 600))) for _ in hashes]
        assert store.put(hashes, payloads) == len(hashes), where
        k = rng.randrange(len(hashes))
        key = inner.key(hashes[k])
        visible = True
        if fault_name == "redis wrong-type key":
            _wrong_type(raw, key, rng)
        else:
            blob = encode_blob(FP.digest, hashes[k], payloads[k])
            visible = _damaged_value(raw, key, blob, rng, hashes[k])
        op = rng.choice(("get", "get_into", "exists", "put"))
        if op in ("get", "get_into"):
            got = store.get(hashes) if op == "get" else _redis_get_into(store, payloads, hashes)
            want = [None if i == k else p for i, p in enumerate(payloads)]
            assert got == want, where
            assert raw.exists(key) == 0, f"{where}: bad key left in place"
        elif op == "exists":
            prefix = store.exists_prefix(hashes)
            assert prefix == (k if visible else len(hashes)), where
            if visible:
                assert raw.exists(key) == 0, f"{where}: bad key left in place"
        else:
            assert store.put(hashes, payloads) == len(hashes), where
        store.put(hashes, payloads)
        assert store.get(hashes) == payloads, where
    stats = store.stats()
    assert (stats.errors, stats.skipped) == (0, 0), stats
    store.close()


def _redis_get_into(
    store: ResilientStore, payloads: list[bytes], hashes: list[bytes]
) -> list[bytes | None]:
    """`get_into` targets of each page's size, split in two runs; None where it missed."""
    targets = [bytearray(len(p)) for p in payloads]
    runs = [[memoryview(t)[: len(t) // 2], memoryview(t)[len(t) // 2 :]] for t in targets]
    found = store.get_into(hashes, runs)
    return [bytes(t) if ok else None for t, ok in zip(targets, found, strict=True)]


def _mid_batch(srv: RedisServer, action: str, store: ResilientStore, rng: random.Random) -> None:
    """Run batches while another thread kills or stops the server after a random delay."""
    hashes = [rng.randbytes(16) for _ in range(64)]
    payloads = [rng.randbytes(4096) for _ in hashes]
    store.put(hashes, payloads)
    hit = threading.Timer(rng.uniform(0, 0.004), srv.kill if action == "kill" else srv.pause)
    hit.start()
    try:
        for _ in range(6):
            got = store.get(hashes)
            assert all(g is None or g == p for g, p in zip(got, payloads, strict=True))
            got = _redis_get_into(store, payloads, hashes)
            assert all(g is None or g == p for g, p in zip(got, payloads, strict=True))
            store.put(hashes, payloads)
            assert 0 <= store.exists_prefix(hashes) <= len(hashes)
            store.delete(hashes[-1:])
    finally:
        hit.join()


@needs_redis
@pytest.mark.redis
@pytest.mark.parametrize("action", ["kill", "stop"])
def test_redis_killed_or_stopped_mid_batch(tmp_path: Path, action: str) -> None:
    fault_name = "redis killed mid-batch" if action == "kill" else "redis stopped mid-batch"
    rng = _rng(fault_name)
    srv = RedisServer(tmp_path)
    srv.start()
    failed = 0  # cases where the server went away while a call was in flight
    try:
        for n in range(CASES[fault_name]):
            where = f"{fault_name} case {n} (KVTIER_FUZZ_SEED={SEED})"
            clock = Clock()
            store = ResilientStore(RedisStore(srv.url, FP, timeout_s=0.2), clock=clock)
            _mid_batch(srv, action, store, rng)
            failed += store.stats().errors > 0
            if action == "kill":
                srv.start()  # the same port, empty
            else:
                srv.resume()
            clock.now += 100.0
            hashes, payloads = [rng.randbytes(16)], [rng.randbytes(100)]
            assert store.put(hashes, payloads) == 1, where
            assert store.get(hashes) == payloads, where
            assert not store.is_open, where
            store.close()
    finally:
        srv.stop()
    assert failed >= CASES[fault_name] // 2, f"only {failed} cases hit the server mid-batch"
