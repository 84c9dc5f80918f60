"""The on-store format of one page: a fixed header, the page hash, then the payload.

    offset  size  field
    0       4     magic b"KVL3"
    4       1     format version (2)
    5       1     page-hash length H
    6       2     reserved, zero
    8       16    fingerprint digest
    24      8     payload length N (little endian)
    32      4     CRC-32 of fingerprint digest + page hash + payload
    36      H     page hash
    36+H    N     payload

CRC-32 (zlib) rather than a cryptographic hash: it is there to catch torn writes, truncation and
bit rot at several GB/s; the fingerprint and page hash in the header catch misplaced blobs.

The header alone says how long the whole blob must be, so a reader checks a blob's size, magic,
fingerprint and page hash (`read_header`, `check_head`) before it reads any payload, and never
reads more than the header promised. Version 2 came with the fingerprint's unambiguous encoding
(`StoreFingerprint.digest`): a version-1 blob is corrupt to this code, never served.
"""

from __future__ import annotations

import struct
import zlib

from kvtier.store.base import FINGERPRINT_DIGEST_SIZE, PageHash

MAGIC = b"KVL3"
VERSION = 2
_HEADER = struct.Struct(f"<4sBBH{FINGERPRINT_DIGEST_SIZE}sQI")
HEADER_SIZE = _HEADER.size


class CorruptBlob(ValueError):
    """The blob is truncated, damaged, or not a page blob at all."""


class ForeignBlob(ValueError):
    """A well-formed blob written under another fingerprint or for another page."""


def _crc(fingerprint: bytes, page_hash: PageHash, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(page_hash, zlib.crc32(fingerprint)))


def encode_head(fingerprint: bytes, page_hash: PageHash, payload: bytes) -> bytes:
    """Header + page hash of `payload`'s blob; the blob is this followed by the payload."""
    if len(page_hash) > 255:
        raise ValueError(f"page hash of {len(page_hash)} bytes is longer than 255")
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        len(page_hash),
        0,
        fingerprint,
        len(payload),
        _crc(fingerprint, page_hash, payload),
    )
    return header + page_hash


def encode_blob(fingerprint: bytes, page_hash: PageHash, payload: bytes) -> bytes:
    """Header + page hash + payload, ready to store."""
    return encode_head(fingerprint, page_hash, payload) + payload


def head_size(blob: bytes) -> int:
    """Bytes of header + page hash at the start of `blob` (given at least `HEADER_SIZE` bytes)."""
    if len(blob) < HEADER_SIZE:
        raise CorruptBlob(f"{len(blob)} bytes is shorter than the {HEADER_SIZE}-byte header")
    return HEADER_SIZE + blob[5]


def read_header(fixed: bytes) -> tuple[int, int]:
    """(page-hash length, payload length) from a blob's first `HEADER_SIZE` bytes.

    Raises `CorruptBlob` when they are not the header of a page blob of this format version.
    """
    if len(fixed) < HEADER_SIZE:
        raise CorruptBlob(f"{len(fixed)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, hash_len, reserved, _, length, _ = _HEADER.unpack_from(fixed)
    if magic != MAGIC or version != VERSION or reserved != 0:
        raise CorruptBlob(f"bad magic {magic!r}, version {version} or reserved field")
    return hash_len, length


def check_head(fingerprint: bytes, page_hash: PageHash, head: bytes) -> int:
    """The payload length of a blob whose head (header + page hash) is `head`, after checking
    everything but the payload: `CorruptBlob` for a damaged header, `ForeignBlob` for another
    fingerprint's or another page's blob."""
    hash_len, length = read_header(head)
    if len(head) != HEADER_SIZE + hash_len:
        raise CorruptBlob("blob ends inside its header")
    if head[8 : 8 + FINGERPRINT_DIGEST_SIZE] != fingerprint:
        raise ForeignBlob("blob was written under another fingerprint")
    if head[HEADER_SIZE:] != page_hash:
        raise ForeignBlob("blob holds another page")
    return length


def verify_blob(
    fingerprint: bytes, page_hash: PageHash, head: bytes, payload: bytes | memoryview
) -> None:
    """Check a blob read as its head (header + page hash) and payload.

    Raises `CorruptBlob` for anything damaged and `ForeignBlob` for a valid blob of another
    fingerprint or page.
    """
    if len(head) != head_size(head):
        raise CorruptBlob("blob ends inside its header")
    magic, version, _, reserved, blob_fp, length, crc = _HEADER.unpack_from(head)
    if magic != MAGIC or version != VERSION or reserved != 0:
        raise CorruptBlob(f"bad magic {magic!r}, version {version} or reserved field")
    if len(payload) != length:
        raise CorruptBlob(f"payload is {len(payload)} bytes, header says {length}")
    blob_hash = head[HEADER_SIZE:]
    if _crc(blob_fp, blob_hash, payload) != crc:
        raise CorruptBlob("checksum mismatch")
    if blob_fp != fingerprint:
        raise ForeignBlob("blob was written under another fingerprint")
    if blob_hash != page_hash:
        raise ForeignBlob("blob holds another page")


def decode_blob(fingerprint: bytes, page_hash: PageHash, blob: bytes) -> bytes:
    """The payload of `blob`, after `verify_blob`."""
    start = head_size(blob)
    payload = blob[start:]
    verify_blob(fingerprint, page_hash, blob[:start], payload)
    return payload
