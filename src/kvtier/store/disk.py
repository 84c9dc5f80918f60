"""Local-disk page store: one content-addressed file per page, shared safely between processes.

    root/
      <fingerprint hex>/          one directory per fingerprint
        <hash[0] hex>/            256 shard directories keep directories small
          <page hash hex>.page    blob (header + hash + payload, see blob.py)

Writers write a private temporary file in the shard and rename it into place, so a reader sees
either no file or a complete one, whichever process wrote it. Reads and writes stamp the files'
mtimes (see `_stamp`); when the bytes under `root` exceed `capacity_bytes`, the oldest files are
deleted (LRU across every process and fingerprint sharing the root). Each process counts its
own writes and lists the files again after writing a tenth of the cap, so several writers
overshoot the cap by at most that much each. Temporary files count toward the cap; one older
than `stale_tmp_s` belongs to a writer that died and is removed by `sweep()`, which runs when
the store is opened and whenever the files are listed for eviction. A full disk (ENOSPC) or a
store that cannot be written (EROFS, EACCES) stops writes for `full_retry_s` seconds and counts
the refused pages; reads go on. Files are not fsynced (it is a cache): a page torn by a machine
crash fails its checksum on read and is dropped.

Nothing under `root` is trusted. Every path is walked one directory at a time from a descriptor
of `root`, with O_NOFOLLOW: a symlink, a FIFO, a device, a directory or a file where a shard or
a page should be is never followed, opened for writing or read past its header. Page files are
opened with O_NOFOLLOW | O_NONBLOCK, must be regular (fstat), and their size must equal what
their header promises (at most `max_page_bytes` of payload) before any payload is read.

A bad entry costs only its own page: it is a miss (counted as corrupt or foreign), it is
removed, and where it cannot be removed (a read-only store) it is quarantined, so this process
does not read it again. A bad shard or fingerprint directory (a symlink or a file in its place)
is removed and recreated when writing. Only a store-wide failure (the root unreadable, file
descriptors exhausted, an I/O error while writing) raises `StoreUnavailable`.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kvtier.store.base import StoreCounters, StoreUnavailable
from kvtier.store.blob import (
    HEADER_SIZE,
    CorruptBlob,
    ForeignBlob,
    PayloadCheck,
    check_head,
    encode_head,
    parts_size,
    read_header,
    verify_blob,
)
from kvtier.store.pageindex import INDEX_LIMIT, PageIndex
from kvtier.store.pageio import IO_THREADS, pieces, read_into, run_parallel, split, write_all

if TYPE_CHECKING:
    from kvtier.store.base import Buffer, PageHash, StoreFingerprint, StoreStats
    from kvtier.store.blob import Parts

_T = TypeVar("_T")

SUFFIX = ".page"
TMP_SUFFIX = ".tmp"
MAX_HASH_BYTES = 64  # 128 hex characters keeps file names well under the 255-byte limit
STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died
RESCAN_FRACTION = 0.1
MAX_PAGE_BYTES = 1 << 30  # the largest payload written or read; a header claiming more is corrupt
QUARANTINE_LIMIT = 4096  # bad entries remembered where they cannot be removed

_FP_NAME = re.compile(r"[0-9a-f]{32}")
_SHARD_NAME = re.compile(r"[0-9a-f]{2}")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# failures of the whole store rather than of one entry
_STORE_WIDE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.ESTALE})
# a write failing with these stops writes for a while; reads go on
_WRITES_STOP = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ETXTBSY}
)


def _write_new(shard: int, name: str, head: bytes, parts: Parts, stamp_ns: int) -> None:
    """Create file `name` in directory `shard` (it must not exist) holding `head` and the
    payload's runs, gathered by one writev."""
    fd = os.open(name, _CREATE_FLAGS, 0o644, dir_fd=shard)
    try:
        write_all(fd, [head, *parts])
        _stamp(fd, stamp_ns)
    finally:
        os.close(fd)


def _page_name(page_hash: PageHash) -> str | None:
    """The file name of a page, or None for a hash that cannot name one."""
    if not isinstance(page_hash, bytes) or not 0 < len(page_hash) <= MAX_HASH_BYTES:
        return None
    return page_hash.hex() + SUFFIX


def _read_exact(fd: int, size: int, offset: int) -> bytes:
    """Up to `size` bytes at `offset`; fewer only at the end of the file."""
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts, got = [data], len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _usage(st: os.stat_result) -> int:
    """Bytes a file costs: its size, or its allocated blocks when fewer (a sparse file)."""
    return min(st.st_size, st.st_blocks * 512)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _store_wide(exc: OSError) -> bool:
    return exc.errno in _STORE_WIDE


class _Dirs:
    """Descriptors of the root, this fingerprint's directory and its shards, for one call.

    Opened per call rather than kept, so a root that another process wiped and rebuilt is
    found again; each level is opened with O_NOFOLLOW relative to the one above it.
    """

    def __init__(self, store: DiskStore, create: bool) -> None:
        self.store = store
        self.create = create
        self.root: int | None = None
        self.fp: int | None = None
        self.shards: dict[str, int | None] = {}
        self.denied = False  # creating a directory failed for lack of space or permission

    def open(self) -> None:
        self.root = self.store._open_root(self.create)
        if self.root is not None:
            self.fp = self._subdir(self.root, self.store._fp_name, store_wide=True)

    def shard(self, name: str) -> int | None:
        if self.fp is None:
            return None
        if name not in self.shards:
            self.shards[name] = self._subdir(self.fp, name, store_wide=False)
        return self.shards[name]

    def _subdir(self, parent: int, name: str, *, store_wide: bool) -> int | None:
        """A descriptor of directory `name` under `parent`, or None when it is absent (and not
        to be created) or cannot be made a directory. A symlink, file or other non-directory
        in its place is removed (never followed) and, when writing, a directory made."""
        for _ in range(4):
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                if not self.create:
                    return None
                try:
                    os.mkdir(name, dir_fd=parent)
                except FileExistsError:
                    pass  # another process made it, or something else is in its place
                except OSError as exc:
                    if exc.errno in _WRITES_STOP:
                        self.denied = True
                        return None
                    raise StoreUnavailable(f"cannot create {name} in the store: {exc}") from exc
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    # a symlink or a non-directory where a directory belongs
                    if not self.store._remove(parent, name, None):
                        return None
                    continue
                if store_wide or _store_wide(exc):
                    raise StoreUnavailable(f"cannot open {name} in the store: {exc}") from exc
                return None
        return None

    def close(self) -> None:
        for fd in (*self.shards.values(), self.fp, self.root):
            if fd is not None:
                os.close(fd)


class DiskStore:
    """Page store in a directory tree; see the module docstring for the layout and the rules."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        fingerprint: StoreFingerprint,
        *,
        capacity_bytes: int | None = None,
        low_watermark: float = 0.9,
        full_retry_s: float = 30.0,
        max_page_bytes: int = MAX_PAGE_BYTES,
        stale_tmp_s: float = STALE_TMP_S,
        io_threads: int = IO_THREADS,
        index_limit: int = INDEX_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity_bytes is not None and capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        if max_page_bytes <= 0:
            raise ValueError(f"max_page_bytes must be positive, got {max_page_bytes}")
        if io_threads < 1:
            raise ValueError(f"io_threads must be at least 1, got {io_threads}")
        self.root = Path(root).expanduser()
        self.fingerprint = fingerprint
        self.capacity_bytes = capacity_bytes
        self.low_watermark = low_watermark
        self.full_retry_s = full_retry_s
        self.max_page_bytes = max_page_bytes
        self.stale_tmp_s = stale_tmp_s
        self.io_threads = io_threads
        self._clock = clock
        self._fp_name = fingerprint.digest.hex()
        self._dir = self.root / self._fp_name
        self._counters = StoreCounters()
        self._lock = threading.Lock()
        self._quarantine: OrderedDict[tuple[int, int, int, int], None] = OrderedDict()
        self._index = PageIndex(index_limit)
        self._writes_stopped_until: float | None = None
        try:
            with self._dirs(create=True) as dirs:
                if dirs.fp is None:
                    raise StoreUnavailable(f"cannot create store directory {self._dir}")
                # every shard now, so the fingerprint directory changes only when it is
                # removed or rebuilt (what the page index watches for)
                for shard in range(256):
                    with suppress(FileExistsError):
                        os.mkdir(f"{shard:02x}", dir_fd=dirs.fp)
        except StoreUnavailable as exc:
            message = str(exc)
            if not message.startswith("cannot create store directory"):
                message = f"cannot create store directory {self._dir}: {message}"
            raise StoreUnavailable(message) from exc
        self._index.check(self._fp_identity())
        used = self.sweep()
        self._used = used if capacity_bytes is not None else 0
        self._unscanned = 0  # bytes this process wrote since it last listed the files

    def path_of(self, page_hash: PageHash) -> Path:
        """Where the blob of `page_hash` lives."""
        name = _page_name(page_hash)
        if name is None:
            raise ValueError(f"page hash must be 1..{MAX_HASH_BYTES} bytes")
        return self._dir / name[:2] / name

    def _fp_identity(self) -> tuple[int, int, int] | None:
        """(device, inode, change time) of this fingerprint's directory entry (not followed),
        or None: a directory made again, even on a reused inode, is another identity."""
        try:
            st = os.stat(self._dir, follow_symlinks=False)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_ctime_ns

    @property
    def writes_stopped(self) -> bool:
        """True while a recent ENOSPC (or a store that refused a write) keeps writes off."""
        until = self._writes_stopped_until
        return until is not None and self._clock() < until

    def quarantined(self, page_hash: PageHash) -> bool:
        """True when the entry now at `page_hash`'s path is a bad one this store could not
        remove; it is a miss without being read again."""
        name = _page_name(page_hash)
        if name is None:
            return False
        try:
            st = os.stat(self._dir / name[:2] / name, follow_symlinks=False)
        except OSError:
            return False
        with self._lock:
            return _identity(st) in self._quarantine

    def put(self, hashes: Sequence[PageHash], payloads: Sequence[Buffer]) -> int:
        if len(hashes) != len(payloads):
            raise ValueError("hash and payload counts differ")
        return self.put_parts(hashes, [(p,) for p in payloads])

    def put_parts(self, hashes: Sequence[PageHash], pages: Sequence[Parts]) -> int:
        """`put` of pages given as their runs in memory (written by one writev each)."""
        if len(hashes) != len(pages):
            raise ValueError("hash and payload counts differ")
        if self.writes_stopped:
            self._counters.add(refused=len(hashes))
            return 0
        now, sizes = time.time_ns(), [parts_size(p) for p in pages]
        runs = split(len(hashes), sum(sizes), self.io_threads)
        done = run_parallel(
            [partial(self._put_run, hashes, pages, sizes, lo, hi, now) for lo, hi in runs]
        )
        written = sum(d[0] for d in done)
        nbytes = sum(d[1] for d in done)
        refused = sum(d[2] for d in done)
        self._counters.add(puts=written, bytes_written=nbytes, refused=refused)
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
        now = time.time_ns()
        with self._dirs(create=False) as dirs:
            out = [self._read(dirs, h, now - i) for i, h in enumerate(hashes)]
        self._counters.add_reads(out)
        return out

    def get_into(self, hashes: Sequence[PageHash], targets: Sequence[Parts]) -> list[bool]:
        """Read each page straight into its target (the runs of memory it fills, in order, as
        long in all as the page) with one preadv; True per page read and verified. A miss
        may leave its target's bytes changed."""
        if len(hashes) != len(targets):
            raise ValueError("hash and target counts differ")
        now, sizes = time.time_ns(), [parts_size(t) for t in targets]
        runs = split(len(hashes), sum(sizes), self.io_threads)
        jobs = [partial(self._get_run, hashes, targets, sizes, lo, hi, now) for lo, hi in runs]
        out = [ok for run in run_parallel(jobs) for ok in run]
        self._counters.add_reads_into(out, sizes)
        return out

    def exists_prefix(self, hashes: Sequence[PageHash]) -> int:
        """How many leading pages are held. A page this process wrote or read is answered from
        memory; any other must pass a header check (size, magic, fingerprint, page hash),
        which reads the header only. A bad entry is removed. A page answered from memory that
        was damaged or removed since is a miss when read, and forgotten then."""
        self._index.check(self._fp_identity())
        held = self._index.prefix(hashes)
        if held == len(hashes):
            return held
        with self._dirs(create=False) as dirs:
            for i in range(held, len(hashes)):
                if not self._probe(dirs, hashes[i]):
                    return i
        return len(hashes)

    def delete(self, hashes: Sequence[PageHash]) -> int:
        removed = 0
        self._index.forget(hashes)
        with self._dirs(create=False) as dirs:
            for page_hash in hashes:
                name = _page_name(page_hash)
                shard = None if name is None else dirs.shard(name[:2])
                if name is not None and shard is not None and self._remove(shard, name, None):
                    removed += 1
        return removed

    def stats(self) -> StoreStats:
        return self._counters.snapshot()

    def close(self) -> None:
        return None

    def sweep(self) -> int:
        """Remove stale temporary files and anything but a regular file at a page path, under
        every fingerprint of the root; return the bytes the remaining files use (pages and
        temporaries both)."""
        return sum(size for _, size, _, _ in self._files())

    # -- batches -----------------------------------------------------------------------------

    def _put_run(
        self,
        hashes: Sequence[PageHash],
        pages: Sequence[Parts],
        sizes: list[int],
        lo: int,
        hi: int,
        now: int,
    ) -> tuple[int, int, int]:
        """(written, bytes written, refused) for pages [lo, hi) of a put."""
        written = nbytes = refused = 0
        with self._dirs(create=True) as dirs:
            if dirs.denied or dirs.fp is None:
                self._stop_writes()
            for i in range(lo, hi):
                if self.writes_stopped:
                    return written, nbytes, refused + hi - i
                page_hash, parts = hashes[i], pages[i]
                name = _page_name(page_hash)
                shard = None if name is None else dirs.shard(name[:2])
                if name is None or shard is None or sizes[i] > self.max_page_bytes:
                    refused += 1  # a hash that names no file, or a shard that cannot be made
                    if dirs.denied:
                        self._stop_writes()
                    continue
                head = encode_head(self.fingerprint.digest, page_hash, parts)
                # content-addressed: a page already there is kept when it is byte for byte
                # the one being written; anything else in its place is replaced
                if self._holds(shard, name, page_hash, head, now - i):
                    self._index.add(page_hash)
                    continue
                if not self._write(shard, name, head, parts, now - i):
                    refused += 1
                    continue
                self._index.add(page_hash)
                written += 1
                nbytes += len(head) + sizes[i]
        return written, nbytes, refused

    def _get_run(
        self,
        hashes: Sequence[PageHash],
        targets: Sequence[Parts],
        sizes: list[int],
        lo: int,
        hi: int,
        now: int,
    ) -> list[bool]:
        with self._dirs(create=False) as dirs:
            return [
                self._read_into(dirs, hashes[i], targets[i], sizes[i], now - i)
                for i in range(lo, hi)
            ]

    # -- reading -----------------------------------------------------------------------------

    def _open_page(
        self, shard: int, name: str, *, writing: bool = False
    ) -> tuple[int, os.stat_result] | None:
        """An open descriptor and its stat of the regular file `name`, or None when there is
        none. Anything else in its place (a symlink, directory, FIFO, device, socket) is
        removed without being followed or read. A quarantined entry is not read again; when
        `writing`, removing it is tried again (the store may have become writable)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=shard)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if _store_wide(exc):
                raise StoreUnavailable(f"cannot open a page: {exc}") from exc
            # a symlink (ELOOP), a socket (ENXIO), a file this process may not read
            try:
                st = os.stat(name, dir_fd=shard, follow_symlinks=False)
            except OSError:
                return None
            if not self._is_quarantined(st):
                self._counters.add(corrupt=1)
                self._drop(shard, name, st)
            elif writing:
                self._remove(shard, name, st)
            return None
        try:
            st = os.fstat(fd)
            if self._is_quarantined(st):
                if writing:
                    self._remove(shard, name, st)
            elif not stat.S_ISREG(st.st_mode):
                self._counters.add(corrupt=1)
                self._drop(shard, name, st)
            else:
                return fd, st
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        return None

    def _head(self, fd: int, st: os.stat_result, page_hash: PageHash) -> tuple[bytes, int]:
        """(head, payload length) of an open page after the header check; the file's size
        must be exactly what the header says."""
        fixed = _read_exact(fd, HEADER_SIZE, 0) if st.st_size >= HEADER_SIZE else b""
        hash_len, length = read_header(fixed)
        if length > self.max_page_bytes:
            raise CorruptBlob(f"header claims a {length}-byte payload")
        if st.st_size != HEADER_SIZE + hash_len + length:
            raise CorruptBlob(f"file is {st.st_size} bytes, its header says otherwise")
        head = fixed + _read_exact(fd, hash_len, HEADER_SIZE)
        return head, check_head(self.fingerprint.digest, page_hash, head)

    def _read(self, dirs: _Dirs, page_hash: PageHash, stamp_ns: int) -> bytes | None:
        def payload(fd: int, st: os.stat_result) -> bytes:
            head, length = self._head(fd, st, page_hash)
            data = _read_exact(fd, length, len(head))
            verify_blob(self.fingerprint.digest, page_hash, head, data)
            _stamp(fd, stamp_ns)
            return data

        data = self._checked(dirs, page_hash, payload)
        if data is not None:
            self._index.add(page_hash)
        return data

    def _read_into(
        self, dirs: _Dirs, page_hash: PageHash, target: Parts, size: int, stamp_ns: int
    ) -> bool:
        """Read a page of `size` bytes into `target`: its head and payload in one preadv when
        the file has the size of that page's blob; else the header says what it is, a miss."""

        def scatter(fd: int, st: os.stat_result) -> bool:
            head = bytearray(HEADER_SIZE + len(page_hash))
            if st.st_size != len(head) + size:
                _, length = self._head(fd, st, page_hash)
                raise ForeignBlob(f"a {length}-byte page where {size} bytes were asked for")
            groups = pieces(target)
            offset = read_into(fd, [head, *groups[0]], 0)
            check = PayloadCheck(self.fingerprint.digest, page_hash, head)
            for n, group in enumerate(groups):
                if n:
                    offset += read_into(fd, group, offset)
                for piece in group:
                    check.update(piece)
            if offset != st.st_size:
                raise CorruptBlob("file shrank while it was read")
            check.finish()
            _stamp(fd, stamp_ns)
            return True

        ok = self._checked(dirs, page_hash, scatter) is not None
        if ok:
            self._index.add(page_hash)
        return ok

    def _probe(self, dirs: _Dirs, page_hash: PageHash) -> bool:
        def header(fd: int, st: os.stat_result) -> bool:
            self._head(fd, st, page_hash)
            return True

        if self._checked(dirs, page_hash, header) is None:
            return False
        self._index.add(page_hash)
        return True

    def _checked(
        self, dirs: _Dirs, page_hash: PageHash, use: Callable[[int, os.stat_result], _T]
    ) -> _T | None:
        """`use` on the page's open file; a corrupt, foreign or unreadable page is counted,
        dropped and None, a store-wide failure raises StoreUnavailable. A page that is not
        there (or not read) is forgotten by the index."""
        self._index.forget((page_hash,))
        name = _page_name(page_hash)
        shard = None if name is None else dirs.shard(name[:2])
        if name is None or shard is None:
            return None
        opened = self._open_page(shard, name)
        if opened is None:
            return None
        fd, st = opened
        try:
            return use(fd, st)
        except (CorruptBlob, ForeignBlob) as exc:
            self._counters.add(**{"foreign" if isinstance(exc, ForeignBlob) else "corrupt": 1})
            self._drop(shard, name, st)
        except OSError as exc:
            if _store_wide(exc):
                raise StoreUnavailable(f"cannot read a page: {exc}") from exc
            self._counters.add(corrupt=1)  # EIO and the like: this file is unreadable
            self._drop(shard, name, st)
        finally:
            os.close(fd)
        return None

    def _holds(
        self, shard: int, name: str, page_hash: PageHash, head: bytes, stamp_ns: int
    ) -> bool:
        """True when `name` is already exactly this blob (then stamped as used): the same head,
        checksum included, over a payload that still matches it. A different or damaged file
        there is dropped, to be replaced."""
        opened = self._open_page(shard, name, writing=True)
        if opened is None:
            return False
        fd, st = opened
        try:
            length = check_head(self.fingerprint.digest, page_hash, head)
            if st.st_size == len(head) + length and _read_exact(fd, len(head), 0) == head:
                verify_blob(
                    self.fingerprint.digest, page_hash, head, _read_exact(fd, length, len(head))
                )
                _stamp(fd, stamp_ns)
                return True
        except (CorruptBlob, ForeignBlob):
            pass
        except OSError as exc:
            if _store_wide(exc):
                raise StoreUnavailable(f"cannot read a page: {exc}") from exc
        finally:
            os.close(fd)
        self._counters.add(corrupt=1)
        self._drop(shard, name, st)
        return False

    # -- writing and removing ----------------------------------------------------------------

    def _write(self, shard: int, name: str, head: bytes, parts: Parts, stamp_ns: int) -> bool:
        """Write `name` atomically; False when the page is refused (a full or read-only store
        then stops writes; an entry in the way that cannot be removed costs only this page)."""
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        try:
            _write_new(shard, tmp, head, parts, stamp_ns)
            os.replace(tmp, name, src_dir_fd=shard, dst_dir_fd=shard)
        except OSError as exc:
            self._remove(shard, tmp, None)
            if exc.errno in _WRITES_STOP:
                self._stop_writes()
                return False
            if _store_wide(exc) or exc.errno == errno.EIO:
                raise StoreUnavailable(f"cannot write a page: {exc}") from exc
            # EISDIR, ENOTEMPTY and the like: something in the way that was not removable
            return False
        return True

    def _stop_writes(self) -> None:
        self._writes_stopped_until = self._clock() + self.full_retry_s

    def _drop(self, shard: int, name: str, st: os.stat_result | None) -> None:
        """Remove a bad entry; quarantine it when it cannot be removed."""
        if self._remove(shard, name, st) or st is None:
            return
        with self._lock:
            self._quarantine[_identity(st)] = None
            while len(self._quarantine) > QUARANTINE_LIMIT:
                self._quarantine.popitem(last=False)

    def _is_quarantined(self, st: os.stat_result) -> bool:
        with self._lock:
            return bool(self._quarantine) and _identity(st) in self._quarantine

    @staticmethod
    def _remove(parent: int, name: str, st: os.stat_result | None) -> bool:
        """Remove entry `name` of directory `parent`, whatever it is, without following it;
        with `st`, only if it is still that file (another process may have replaced it with a
        good page since). False when there was nothing to remove or it could not be."""
        try:
            now = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if st is not None and (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return False
            if stat.S_ISDIR(now.st_mode):
                shutil.rmtree(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)
        except OSError as exc:
            if _store_wide(exc):
                raise StoreUnavailable(f"cannot remove {name} from the store: {exc}") from exc
            return False
        return True

    # -- capacity ----------------------------------------------------------------------------

    @contextmanager
    def _dirs(self, *, create: bool) -> Iterator[_Dirs]:
        dirs = _Dirs(self, create)
        try:
            dirs.open()
            yield dirs
        finally:
            dirs.close()

    def _open_root(self, create: bool) -> int | None:
        """A descriptor of the root directory (the one path followed as given), made when
        writing; None when it is absent and not to be made."""
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot open store root {self.root}: {exc}") from exc
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create store directory {self.root}: {exc}") from exc

    def _files(self) -> list[tuple[int, int, tuple[str, str, str], bool]]:
        """(mtime in ns, bytes used, (fingerprint dir, shard, name), is a page) of every page
        and fresh temporary file under root. Stale temporaries and non-regular entries at page
        paths are removed on the way; nothing is followed."""
        root = self._open_root(create=False)
        if root is None:
            return []
        out: list[tuple[int, int, tuple[str, str, str], bool]] = []
        stale_ns = time.time_ns() - int(self.stale_tmp_s * 1e9)
        try:
            for fp_name, fp_fd in _subdir_fds(root, _FP_NAME):
                try:
                    for shard_name, shard_fd in _subdir_fds(fp_fd, _SHARD_NAME):
                        try:
                            out += self._shard_files(fp_name, shard_name, shard_fd, stale_ns)
                        finally:
                            os.close(shard_fd)
                finally:
                    os.close(fp_fd)
        finally:
            os.close(root)
        return out

    def _shard_files(
        self, fp_name: str, shard_name: str, shard: int, stale_ns: int
    ) -> list[tuple[int, int, tuple[str, str, str], bool]]:
        out = []
        for entry in _scan(shard):
            is_page, is_tmp = entry.name.endswith(SUFFIX), entry.name.endswith(TMP_SUFFIX)
            if not (is_page or is_tmp):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone already
            if not stat.S_ISREG(st.st_mode) or (is_tmp and st.st_mtime_ns < stale_ns):
                self._remove(shard, entry.name, st)
                continue
            out.append((st.st_mtime_ns, _usage(st), (fp_name, shard_name, entry.name), is_page))
        return out

    def _evict(self) -> None:
        """List the files; when they exceed the cap, delete least recently used pages until
        usage is under the low watermark."""
        assert self.capacity_bytes is not None
        files = sorted(self._files())
        used = sum(size for _, size, _, _ in files)
        target = self.capacity_bytes * self.low_watermark if used > self.capacity_bytes else used
        victims = []
        for _, size, where, is_page in files:
            if used <= target:
                break
            if is_page:
                victims.append(where)
                used -= size
        self._used = used
        self._unscanned = 0
        self._counters.add(evicted=self._unlink_all(victims))

    def _unlink_all(self, victims: list[tuple[str, str, str]]) -> int:
        """Remove pages named (fingerprint dir, shard, name), walking from the root."""
        if not victims:
            return 0
        removed = 0
        root = self._open_root(create=False)
        if root is None:
            return 0
        fds: dict[tuple[str, ...], int | None] = {}

        def open_dir(parent: int | None, key: tuple[str, ...]) -> int | None:
            if key not in fds:
                fds[key] = None
                if parent is not None:
                    with suppress(OSError):
                        fds[key] = os.open(key[-1], _DIR_FLAGS, dir_fd=parent)
            return fds[key]

        self._index.forget(
            bytes.fromhex(name.removesuffix(SUFFIX))
            for fp_name, _, name in victims
            if fp_name == self._fp_name
        )
        try:
            for fp_name, shard_name, name in victims:
                shard = open_dir(open_dir(root, (fp_name,)), (fp_name, shard_name))
                if shard is not None:
                    try:
                        os.unlink(name, dir_fd=shard)
                        removed += 1
                    except OSError:
                        continue  # another process removed it first, or a read-only share
        finally:
            for fd in fds.values():
                if fd is not None:
                    os.close(fd)
            os.close(root)
        return removed


def _stamp(fd: int, when_ns: int) -> None:
    """Mark a page as just used.

    Callers give the first page of a batch the latest time: LRU eviction then trims a chain
    from its tail, since a page is useless once a page before it is gone and lookups only ever
    take a leading run. Explicit nanosecond times keep the order where the filesystem's own
    clock is too coarse to tell the pages of one batch apart.
    """
    with suppress(OSError):  # a read-only share: the LRU order stays as it was
        os.utime(fd, ns=(when_ns, when_ns))


def _scan(fd: int) -> list[os.DirEntry[str]]:
    """The entries of an open directory (scandir lists a duplicate of `fd`)."""
    try:
        with os.scandir(fd) as it:
            return list(it)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreUnavailable(f"cannot list a store directory: {exc}") from exc


def _subdir_fds(parent: int, pattern: re.Pattern[str]) -> Iterator[tuple[str, int]]:
    """(name, descriptor) of each real subdirectory of `parent` whose name fits `pattern`;
    symlinks and other entries are skipped. The caller closes each descriptor."""
    for entry in _scan(parent):
        if not pattern.fullmatch(entry.name):
            continue
        try:
            fd = os.open(entry.name, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            continue  # gone, or a symlink or file under a directory's name
        yield entry.name, fd
