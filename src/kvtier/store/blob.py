"""The on-store format of one page: a fixed header, the page hash, then the payload.

    offset  size  field
    0       4     magic b"KVL3"
    4       1     format version (3)
    5       1     page-hash length H
    6       2     reserved, zero
    8       16    fingerprint digest
    24      8     payload length N (little endian)
    32      8     XXH3-64 of bytes 0-31 + page hash + payload (little endian)
    40      H     page hash
    40+H    N     payload

XXH3 (64-bit) rather than a cryptographic hash: it is there to catch torn writes, truncation and
bit rot, and runs at memory speed (about 40 GB per CPU-second on the benchmark machine, where
zlib's CRC-32 ran at 4.8); the fingerprint and page hash in the header catch misplaced blobs.
A payload may be given as several buffers (the runs of a strided page in memory): the checksum
is fed run by run, so a page is never joined into one buffer to be written or checked.

The header alone says how long the whole blob must be, so a reader checks a blob's size, magic,
fingerprint and page hash (`read_header`, `check_head`) before it reads any payload, and never
reads more than the header promised. A blob of another format version (1 and 2 used CRC-32) is
a `StaleBlob`: a miss for its page, never served and never an error.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TypeAlias

import xxhash

from kvtier.store.base import FINGERPRINT_DIGEST_SIZE, Buffer, PageHash

MAGIC = b"KVL3"
VERSION = 3
_HEADER = struct.Struct(f"<4sBBH{FINGERPRINT_DIGEST_SIZE}sQQ")
HEADER_SIZE = _HEADER.size
_SUMMED = HEADER_SIZE - 8  # the header bytes the checksum covers: all but itself
MAX_HASH_BYTES = 255

Parts: TypeAlias = Sequence[Buffer]  # a payload as consecutive runs of memory


class CorruptBlob(ValueError):
    """The blob is truncated, damaged, or not a page blob at all."""


class ForeignBlob(ValueError):
    """A well-formed blob written under another fingerprint or for another page."""


class StaleBlob(ForeignBlob):
    """A page blob of another format version: a miss, never served."""


def parts_size(parts: Parts) -> int:
    """Bytes in a payload given as runs."""
    return sum(p.nbytes if type(p) is memoryview else memoryview(p).nbytes for p in parts)


def _checksum(fixed: Buffer, page_hash: PageHash, parts: Parts) -> int:
    digest = xxhash.xxh3_64(memoryview(fixed)[:_SUMMED])
    digest.update(page_hash)
    for part in parts:
        digest.update(part)
    return digest.intdigest()


def encode_head(fingerprint: bytes, page_hash: PageHash, payload: Buffer | Parts) -> bytes:
    """Header + page hash of `payload`'s blob (one buffer, or its runs in order); the blob is
    this followed by the payload."""
    if len(page_hash) > MAX_HASH_BYTES:
        raise ValueError(f"page hash of {len(page_hash)} bytes is longer than {MAX_HASH_BYTES}")
    parts = _as_parts(payload)
    fixed = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        fixed, 0, MAGIC, VERSION, len(page_hash), 0, fingerprint, parts_size(parts), 0
    )
    struct.pack_into("<Q", fixed, _SUMMED, _checksum(fixed, page_hash, parts))
    return bytes(fixed) + page_hash


def encode_blob(fingerprint: bytes, page_hash: PageHash, payload: Buffer) -> bytes:
    """Header + page hash + payload, ready to store."""
    return encode_head(fingerprint, page_hash, payload) + payload


def head_size(blob: Buffer) -> int:
    """Bytes of header + page hash at the start of `blob` (given at least `HEADER_SIZE` bytes)."""
    if len(blob) < HEADER_SIZE:
        raise CorruptBlob(f"{len(blob)} bytes is shorter than the {HEADER_SIZE}-byte header")
    return HEADER_SIZE + blob[5]


def read_header(fixed: Buffer) -> tuple[int, int]:
    """(page-hash length, payload length) from a blob's first `HEADER_SIZE` bytes.

    Raises `CorruptBlob` when they are not the header of a page blob, `StaleBlob` for a page
    blob of another format version.
    """
    if len(fixed) < HEADER_SIZE:
        raise CorruptBlob(f"{len(fixed)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, hash_len, reserved, _, length, _ = _HEADER.unpack_from(fixed)
    if magic != MAGIC or reserved != 0:
        raise CorruptBlob(f"bad magic {bytes(magic)!r} or reserved field")
    if version != VERSION:
        raise StaleBlob(f"a format-{version} page; this is format {VERSION}")
    return hash_len, length


def check_head(fingerprint: bytes, page_hash: PageHash, head: Buffer) -> int:
    """The payload length of a blob whose head (header + page hash) is `head`, after checking
    everything but the payload: `CorruptBlob` for a damaged header, `ForeignBlob` for another
    fingerprint's, another page's or another format's blob."""
    hash_len, length = read_header(head)
    if len(head) != HEADER_SIZE + hash_len:
        raise CorruptBlob("blob ends inside its header")
    if head[8 : 8 + FINGERPRINT_DIGEST_SIZE] != fingerprint:
        raise ForeignBlob("blob was written under another fingerprint")
    if head[HEADER_SIZE:] != page_hash:
        raise ForeignBlob("blob holds another page")
    return length


def verify_blob(
    fingerprint: bytes, page_hash: PageHash, head: Buffer, payload: Buffer | Parts
) -> None:
    """Check a blob read as its head (header + page hash) and payload (one buffer or runs).

    Raises `CorruptBlob` for anything damaged and `ForeignBlob` for a valid blob of another
    fingerprint, page or format version.
    """
    if len(head) != head_size(head):
        raise CorruptBlob("blob ends inside its header")
    read_header(head)
    parts = _as_parts(payload)
    _, _, _, _, blob_fp, length, checksum = _HEADER.unpack_from(head)
    if parts_size(parts) != length:
        raise CorruptBlob(f"payload is {parts_size(parts)} bytes, header says {length}")
    blob_hash = bytes(head[HEADER_SIZE:])
    if _checksum(head, blob_hash, parts) != checksum:
        raise CorruptBlob("checksum mismatch")
    if blob_fp != fingerprint:
        raise ForeignBlob("blob was written under another fingerprint")
    if blob_hash != page_hash:
        raise ForeignBlob("blob holds another page")


class PayloadCheck:
    """The checksum of a payload fed piece by piece as it arrives (each piece hashed while it
    is still in the CPU's cache), against a head that passed `check_head`."""

    def __init__(self, fingerprint: bytes, page_hash: PageHash, head: Buffer) -> None:
        self.length = check_head(fingerprint, page_hash, head)
        self._want = struct.unpack_from("<Q", head, _SUMMED)[0]
        self._digest = xxhash.xxh3_64(memoryview(head)[:_SUMMED])
        self._digest.update(page_hash)
        self._seen = 0

    def update(self, part: Buffer) -> None:
        self._digest.update(part)
        self._seen += part.nbytes if type(part) is memoryview else memoryview(part).nbytes

    def finish(self) -> None:
        """Raise `CorruptBlob` unless the pieces were the whole payload the head vouches for."""
        if self._seen != self.length:
            raise CorruptBlob(f"payload is {self._seen} bytes, header says {self.length}")
        if self._digest.intdigest() != self._want:
            raise CorruptBlob("checksum mismatch")


def decode_blob(fingerprint: bytes, page_hash: PageHash, blob: bytes) -> bytes:
    """The payload of `blob`, after `verify_blob`."""
    start = head_size(blob)
    payload = blob[start:]
    verify_blob(fingerprint, page_hash, blob[:start], payload)
    return payload


def _as_parts(payload: Buffer | Parts) -> Parts:
    return (payload,) if isinstance(payload, (bytes, bytearray, memoryview)) else payload
