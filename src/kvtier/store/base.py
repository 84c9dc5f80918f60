"""The L3 page store contract: what a key is, what makes pages compatible, and the counters.

A store maps chained page hashes (a page's hash covers its tokens and every page before it) to
the serialized KV bytes of that page. Pages are only interchangeable between caches that agree
on everything that shapes those bytes, so every key is qualified by a `StoreFingerprint`, and
the fingerprint is also written into each blob's header and checked on read (see `blob.py`).

Failures are of two kinds. A page that is missing, corrupt or foreign, or an entry that is not a
page at all, is a miss for that page alone: counted, never served, and removed (or, where the
store cannot be written, quarantined) so it is not read again; the rest of the batch is served.
A store that cannot be reached raises `StoreUnavailable`; `ResilientStore` turns that into
misses and backs off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Protocol, TypeAlias, runtime_checkable

from kvtier.errors import UnsupportedModel
from kvtier.model.description import AttentionKind, ModelSpec

PageHash = bytes
Buffer: TypeAlias = bytes | bytearray | memoryview
FINGERPRINT_DIGEST_SIZE = 16
# Bumped whenever the digest's input changes, so pages written under an older encoding are
# misses (other keys, other directories), never taken for this one's.
FINGERPRINT_FORMAT = 2


class StoreUnavailable(Exception):
    """The store could not be reached or did not answer in time; the caller may retry later."""


@dataclass(frozen=True, slots=True)
class StoreFingerprint:
    """Everything that must match for a stored page to be valid KV for a reader.

    `geometry` is a canonical description of one rank's page layout (see `for_model`); `layout`
    names the byte order of a serialized page (the tensor storage's memory layout).
    """

    model_id: str
    geometry: str
    kv_dtype: str
    tp_rank: int
    tp_size: int
    page_size: int
    layout: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.tp_rank < self.tp_size:
            raise ValueError(f"tp_rank {self.tp_rank} is outside tp_size {self.tp_size}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be positive, got {self.page_size}")

    @classmethod
    def for_model(
        cls,
        spec: ModelSpec,
        *,
        kv_dtype: str,
        tp_rank: int,
        tp_size: int,
        page_size: int,
        layout: str = "",
    ) -> StoreFingerprint:
        """Fingerprint of one rank's KV pages of `spec`."""
        kv = spec.kv
        if not kv.is_uniform:
            raise UnsupportedModel(f"{spec.model_id}: a store of Gemma 4's two KV shapes")
        if kv.kind is AttentionKind.MLA:
            shape = f"mla:latent={kv.kv_lora_rank}+{kv.qk_rope_head_dim}"
        else:
            shape = f"mha:heads={kv.kv_heads_per_rank(tp_size)}:k={kv.head_dim}:v={kv.v_head_dim}"
        kinds = ",".join(k.value for k in kv.layer_kinds)
        return cls(
            model_id=spec.model_id,
            geometry=f"{shape}:layers={kinds}",
            kv_dtype=kv_dtype,
            tp_rank=tp_rank,
            tp_size=tp_size,
            page_size=page_size,
            layout=layout,
        )

    @property
    def digest(self) -> bytes:
        """A 16-byte digest of every field; it prefixes keys and is stored in blob headers.

        The input is canonical JSON (field names and typed values, sorted keys), so two
        different field sets can never encode to the same text, whatever their strings hold.
        Computed once per fingerprint (every page key and blob header carries it).
        """
        return _digest(self)


@functools.lru_cache(maxsize=256)
def _digest(fp: StoreFingerprint) -> bytes:
    text = json.dumps(
        {"format": FINGERPRINT_FORMAT, "fields": {f.name: getattr(fp, f.name) for f in fields(fp)}},
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.blake2b(text.encode(), digest_size=FINGERPRINT_DIGEST_SIZE).digest()


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counters of one store since it was opened; page counts unless named bytes.

    `refused` counts pages not written because writes are stopped (full disk, Redis out of
    memory, an open circuit); `skipped` counts lookups not attempted while the circuit is open
    (each a get and a miss).
    """

    puts: int = 0
    gets: int = 0
    hits: int = 0
    errors: int = 0
    corrupt: int = 0
    foreign: int = 0
    refused: int = 0
    skipped: int = 0
    evicted: int = 0
    bytes_written: int = 0
    bytes_read: int = 0

    @property
    def misses(self) -> int:
        """Pages asked for and not served: absent, corrupt, foreign or skipped."""
        return self.gets - self.hits

    def __add__(self, other: StoreStats) -> StoreStats:
        return StoreStats(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(StoreStats))
        )


class StoreCounters:
    """Thread-safe mutable counters behind `StoreStats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys((f.name for f in fields(StoreStats)), 0)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                self._values[name] += delta

    def add_reads(self, pages: Sequence[bytes | None]) -> None:
        """Count one batch lookup: `pages` holds, per page asked for, its payload or None."""
        hits = sum(p is not None for p in pages)
        self.add(gets=len(pages), hits=hits, bytes_read=sum(len(p) for p in pages if p is not None))

    def add_reads_into(self, found: Sequence[bool], sizes: Sequence[int]) -> None:
        """Count one batch read into targets: per page asked for, whether it was read, and its
        size."""
        hits = sum(found)
        self.add(
            gets=len(found),
            hits=hits,
            bytes_read=sum(size for ok, size in zip(found, sizes, strict=True) if ok),
        )

    def snapshot(self) -> StoreStats:
        with self._lock:
            return StoreStats(**self._values)


@runtime_checkable
class PageStore(Protocol):
    """A batch key-value store of serialized pages under one fingerprint.

    Methods take a batch of page hashes in chain order. Implementations raise
    `StoreUnavailable` when the backend cannot be reached, and never return a page whose header
    does not match the fingerprint and checksum.
    """

    fingerprint: StoreFingerprint

    def put(self, hashes: Sequence[PageHash], payloads: Sequence[Buffer]) -> int:
        """Store each payload under its hash; return how many pages were written."""
        ...

    def put_parts(self, hashes: Sequence[PageHash], pages: Sequence[Sequence[Buffer]]) -> int:
        """`put` of pages each given as its runs in memory, in order (never joined)."""
        ...

    def get(self, hashes: Sequence[PageHash]) -> list[bytes | None]:
        """The verified payload of each page, or None where it is missing or invalid."""
        ...

    def get_into(
        self, hashes: Sequence[PageHash], targets: Sequence[Sequence[Buffer]]
    ) -> list[bool]:
        """Read each page into its target (writable runs of memory as long in all as the page);
        True per page read and verified. A miss may leave its target changed."""
        ...

    def exists_prefix(self, hashes: Sequence[PageHash]) -> int:
        """How many leading pages of the chain the store holds."""
        ...

    def delete(self, hashes: Sequence[PageHash]) -> int:
        """Remove pages; return how many were present."""
        ...

    def stats(self) -> StoreStats: ...

    def close(self) -> None: ...
