"""Local-disk page store: one content-addressed file per page, shared safely between processes.

    root/
      <fingerprint hex>/          one directory per fingerprint
        <hash[0] hex>/            256 shard directories keep directories small
          <page hash hex>.page    blob (header + hash + payload, see blob.py)

Writers write a private temporary file in the shard and `os.replace` it into place, so a reader
sees either no file or a complete one, whichever process wrote it. Writes and reads bump the
files' mtimes (see `_stamp`); when the bytes under `root` exceed `capacity_bytes`, the oldest
files are deleted (LRU across every process and fingerprint sharing the root). Each process
counts its own writes and lists the files again after writing a tenth of the cap, so several
writers overshoot the cap by at most that much each. A full disk (ENOSPC) stops writes for
`full_retry_s` seconds and counts the refused pages; reads go on. Files are not fsynced (it is
a cache): a page torn by a machine crash fails its checksum on read and is dropped.
"""

from __future__ import annotations

import errno
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

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
    encode_head,
    head_size,
    verify_blob,
)

SUFFIX = ".page"
TMP_SUFFIX = ".tmp"
MAX_HASH_BYTES = 64  # 128 hex characters keeps file names well under the 255-byte limit
STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died
RESCAN_FRACTION = 0.1


def _write_new(path: Path, head: bytes, payload: bytes) -> None:
    """Create `path` (it must not exist) holding `head` then `payload`."""
    with open(path, "xb") as f:
        f.write(head)
        f.write(payload)


def _read_blob(path: Path) -> tuple[bytes, bytes]:
    """(head, payload) of a blob file, read without copying the payload."""
    # NOTE: unbuffered reads of known sizes; a buffered read() to EOF is several times slower
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        fixed = f.read(HEADER_SIZE)
        head = fixed + f.read(head_size(fixed) - HEADER_SIZE)
        return head, f.read(size - len(head))


class DiskStore:
    """Page store in a directory tree; see the module docstring for the layout."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        fingerprint: StoreFingerprint,
        *,
        capacity_bytes: int | None = None,
        low_watermark: float = 0.9,
        full_retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity_bytes is not None and capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.capacity_bytes = capacity_bytes
        self.low_watermark = low_watermark
        self.full_retry_s = full_retry_s
        self._clock = clock
        self._dir = self.root / fingerprint.digest.hex()
        self._counters = StoreCounters()
        self._lock = threading.Lock()
        self._writes_stopped_until: float | None = None
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create store directory {self._dir}: {exc}") from exc
        self._used = self._scan_usage() if capacity_bytes is not None else 0
        self._unscanned = 0  # bytes this process wrote since it last listed the files

    def path_of(self, page_hash: PageHash) -> Path:
        """Where the blob of `page_hash` lives."""
        if not 0 < len(page_hash) <= MAX_HASH_BYTES:
            raise ValueError(f"page hash must be 1..{MAX_HASH_BYTES} bytes, got {len(page_hash)}")
        name = page_hash.hex()
        return self._dir / name[:2] / (name + SUFFIX)

    @property
    def writes_stopped(self) -> bool:
        """True while a recent ENOSPC keeps writes off."""
        until = self._writes_stopped_until
        return until is not None and self._clock() < until

    def put(self, hashes: Sequence[PageHash], payloads: Sequence[bytes]) -> int:
        if len(hashes) != len(payloads):
            raise ValueError("hash and payload counts differ")
        written = nbytes = 0
        present: list[Path] = []
        for i, (page_hash, payload) in enumerate(zip(hashes, payloads, strict=True)):
            if self.writes_stopped:
                self._counters.add(refused=len(hashes) - i)
                break
            path = self.path_of(page_hash)
            if not path.is_file():  # content-addressed: an existing page is the same page
                head = encode_head(self.fingerprint.digest, page_hash, payload)
                if not self._write(path, head, payload):
                    self._counters.add(refused=len(hashes) - i)
                    break
                written += 1
                nbytes += len(head) + len(payload)
            present.append(path)
        _stamp(present)
        self._counters.add(puts=written, bytes_written=nbytes)
        if self.capacity_bytes is not None and written:
            with self._lock:
                self._used += nbytes
                self._unscanned += nbytes
                # other processes write too: look at the real usage every RESCAN_FRACTION of cap
                slack = self.capacity_bytes * RESCAN_FRACTION
                if self._used > self.capacity_bytes or self._unscanned > slack:
                    self._evict()
        return written

    def get(self, hashes: Sequence[PageHash]) -> list[bytes | None]:
        paths = [self.path_of(h) for h in hashes]
        out = [self._read(path, h) for path, h in zip(paths, hashes, strict=True)]
        _stamp([path for path, page in zip(paths, out, strict=True) if page is not None])
        self._counters.add_reads(out)
        return out

    def exists_prefix(self, hashes: Sequence[PageHash]) -> int:
        for i, page_hash in enumerate(hashes):
            if not self.path_of(page_hash).is_file():
                return i
        return len(hashes)

    def delete(self, hashes: Sequence[PageHash]) -> int:
        return sum(self._unlink(self.path_of(h)) for h in hashes)

    def stats(self) -> StoreStats:
        return self._counters.snapshot()

    def close(self) -> None:
        return None

    def _read(self, path: Path, page_hash: PageHash) -> bytes | None:
        try:
            head, payload = _read_blob(path)
            verify_blob(self.fingerprint.digest, page_hash, head, payload)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path}: {exc}") from exc
        except CorruptBlob:
            self._counters.add(corrupt=1)
            self._unlink(path)
            return None
        except ForeignBlob:
            self._counters.add(foreign=1)
            self._unlink(path)
            return None
        return payload

    def _write(self, path: Path, head: bytes, payload: bytes) -> bool:
        """Write atomically; False when the disk is full (writes are then stopped)."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_new(tmp, head, payload)
            os.replace(tmp, path)
        except OSError as exc:
            self._unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                self._writes_stopped_until = self._clock() + self.full_retry_s
                return False
            raise StoreUnavailable(f"cannot write {path}: {exc}") from exc
        return True

    @staticmethod
    def _unlink(path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False  # another process removed it first
        except OSError as exc:
            raise StoreUnavailable(f"cannot delete {path}: {exc}") from exc
        return True

    def _files(self) -> Iterator[tuple[int, int, Path]]:
        """(mtime in ns, size, path) of every page under root; stale temporaries are removed."""
        now = time.time()
        for fp_dir in _subdirs(self.root):
            for shard in _subdirs(fp_dir):
                for entry in _entries(shard):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    if entry.name.endswith(SUFFIX):
                        yield st.st_mtime_ns, st.st_size, Path(entry.path)
                    elif entry.name.endswith(TMP_SUFFIX) and now - st.st_mtime > STALE_TMP_S:
                        self._unlink(Path(entry.path))

    def _scan_usage(self) -> int:
        return sum(size for _, size, _ in self._files())

    def _evict(self) -> None:
        """List the files; when they exceed the cap, delete least recently used pages until
        usage is under the low watermark."""
        assert self.capacity_bytes is not None
        files = sorted(self._files())
        used = sum(size for _, size, _ in files)
        target = self.capacity_bytes * self.low_watermark if used > self.capacity_bytes else used
        evicted = 0
        for _, size, path in files:
            if used <= target:
                break
            if self._unlink(path):
                evicted += 1
            used -= size
        self._used = used
        self._unscanned = 0
        self._counters.add(evicted=evicted)


def _stamp(chain: list[Path]) -> None:
    """Mark pages as just used, the first of a chain as the most recent.

    LRU eviction then trims a chain from its tail: a page is useless once a page before it is
    gone, since lookups only ever take a leading run. Explicit nanosecond times keep the order
    where the filesystem's own clock is too coarse to tell the pages of one batch apart.
    """
    now = time.time_ns()
    for i, path in enumerate(chain):
        try:
            os.utime(path, ns=(now - i, now - i))
        except OSError:
            continue  # gone already, or a read-only share: the LRU order stays as it was


def _subdirs(path: Path) -> Iterator[Path]:
    return (Path(e.path) for e in _entries(path) if e.is_dir(follow_symlinks=False))


def _entries(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreUnavailable(f"cannot list {path}: {exc}") from exc
