"""Page keys: what the radix tree matches on, one key per full page of tokens.

The tree never sees tokens. A key only has to be hashable and equal for equal page contents in
equal context: a tuple of the page's token ids (`page_keys`), a chained digest (`page_hashes`,
also the L3 store's page name), or an external block id such as a Mooncake trace's `hash_ids`.
A partial last page has no key: only page-aligned prefixes are cached.

A run of keys is a list of keys or, for token ids, a `TokenPages`: the same tuples as int64
bytes, so the tree compares and cuts a whole run with C-level bytes operations instead of one
Python object per page. Token ids that already sit in an int64 buffer are viewed, not copied,
and a slice is a view of the same bytes (cutting a node copies no keys). One tree uses one kind
of run.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable, Iterator, Sequence
from functools import cache
from hashlib import blake2b
from struct import Struct, calcsize
from typing import overload

PageKey = Hashable

HASH_BYTES = 16
_TOKEN = "q"  # token ids packed as signed 64-bit integers
_TOKEN_BYTES = 8
_INT64 = frozenset(
    f for f in ("q", "l", "@q", "@l", "=q") if calcsize(f) == _TOKEN_BYTES
)  # native 64-bit integers, laid out as array("q") packs them


class TokenPages(Sequence[tuple[int, ...]]):
    """The page keys of a token sequence, packed: item i is the tuple of page i's token ids
    (what `page_keys` yields), held as a memoryview of int64 token ids. Equal to a list of
    those tuples.

    `n` is its length and `unpack(tokens, i * page_bytes)` its item i: the tree's walk reads
    them directly, without the Python-level calls of `len()` and `[i]`."""

    __slots__ = ("n", "page_bytes", "page_size", "tokens", "unpack")

    def __init__(self, tokens: memoryview, page_size: int) -> None:
        self.tokens = tokens  # int64 items, a whole number of pages
        self.page_size = page_size
        self.page_bytes = page_size * _TOKEN_BYTES
        self.n = len(tokens) // page_size
        self.unpack = _unpacker(page_size)

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> tuple[int, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> TokenPages: ...
    def __getitem__(self, i: int | slice) -> tuple[int, ...] | TokenPages:
        if type(i) is slice:
            start, stop, step = i.indices(self.n)
            if step != 1:
                raise ValueError("TokenPages slices take no step")
            if start == 0 and stop >= self.n:
                return self  # immutable: the whole run is itself
            if stop < start:
                stop = start
            size = self.page_size
            out = TokenPages.__new__(TokenPages)  # this run's fields, not recomputed
            out.tokens = self.tokens[start * size : stop * size]
            out.page_size, out.page_bytes, out.unpack = size, self.page_bytes, self.unpack
            out.n = stop - start
            return out
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("page index out of range")
        return self.unpack(self.tokens, i * self.page_bytes)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return zip(*[iter(self.tokens)] * self.page_size, strict=True)

    def __eq__(self, other: object) -> bool:
        if type(other) is TokenPages:
            return self.page_size == other.page_size and _same(self.tokens, other.tokens)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a run, like a list, is not a key

    def __add__(self, other: TokenPages) -> TokenPages:
        if type(other) is not TokenPages or other.page_size != self.page_size:
            return NotImplemented
        joined = b"".join((self.tokens, other.tokens))
        return TokenPages(memoryview(joined).cast("q"), self.page_size)

    def common_len(self, other: TokenPages, start: int) -> int:
        """How many leading pages of this run equal other's pages from `start` on."""
        n = other.n - start
        if n > self.n:
            n = self.n
        if n <= 0:
            return 0
        size = self.page_size
        # bytes.startswith compares by memcmp and takes any buffer as its prefix, but must be
        # called on bytes: this run's own bytes (see `owned`), else a copy of the part compared
        tokens = self.tokens
        mine = tokens.obj
        if type(mine) is not bytes or len(mine) != tokens.nbytes:
            mine = bytes(tokens if n == self.n else tokens[: n * size])
        theirs = other.tokens[start * size : (start + n) * size]
        if mine.startswith(theirs):
            return n
        # bisect on run equality: O(log n) steps, O(n) bytes compared in all
        lo, hi = 0, n - 1  # pages [0, lo) match; page hi is past the first mismatch or at it
        step = self.page_bytes
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if mine.startswith(theirs[lo * size : mid * size], lo * step):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def owned(self) -> TokenPages:
        """This run over bytes of its own (a copy, unless it is one already): for a run that
        is compared often, such as a prefix that several requests share, which `common_len`
        then reads in place."""
        tokens = self.tokens
        if type(tokens.obj) is bytes and len(tokens.obj) == tokens.nbytes:
            return self
        return TokenPages(memoryview(bytes(tokens)).cast("q"), self.page_size)

    def __repr__(self) -> str:
        return f"TokenPages({self.n} pages of {self.page_size})"


KeyRun = list[PageKey] | TokenPages


def page_keys(tokens: Sequence[int], page_size: int) -> TokenPages:
    """One tuple of token ids per full page, packed (`TokenPages`); a trailing partial page is
    dropped. Token ids must fit a signed 64-bit integer.

    A C-contiguous buffer of int64 (array('q'), a numpy int64 array) is viewed, not copied: the
    keys, and the tree nodes cut from them, read the caller's buffer for as long as they are
    cached, so its token ids must not be written afterwards (an array cannot be resized while
    viewed). Any other sequence is copied into an array of the keys' own."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    try:
        view = memoryview(tokens)  # type: ignore[arg-type]
    except TypeError:
        view = None
    if view is None or view.format not in _INT64 or view.ndim != 1 or not view.c_contiguous:
        view = memoryview(array(_TOKEN, tokens))
    full = len(view) - len(view) % page_size
    return TokenPages(view if full == len(view) else view[:full], page_size)


def as_run(keys: Sequence[PageKey]) -> list[PageKey] | TokenPages:
    """`keys` as a run the tree takes: a list (copied only when not one) or a TokenPages."""
    if isinstance(keys, list):
        return keys
    if isinstance(keys, TokenPages):
        return keys
    return list(keys)


def page_hashes(tokens: Sequence[int], page_size: int, prior: bytes = b"") -> list[bytes]:
    """Chained digest per full page: blake2b-128 of (previous page's digest, this page's tokens).

    A page's digest names its whole prefix, so equal digests mean equal KV. `prior` continues a
    chain (the digest of the page before `tokens[0]`).
    """
    _check_page_size(page_size)
    out: list[bytes] = []
    full = len(tokens) - len(tokens) % page_size
    for i in range(0, full, page_size):
        h = blake2b(prior, digest_size=HASH_BYTES)
        for t in tokens[i : i + page_size]:
            h.update(t.to_bytes(4, "little", signed=False))
        prior = h.digest()
        out.append(prior)
    return out


def store_key(key: PageKey) -> bytes:
    """The L3 store's name for a page key: chained digests as they are, integer block ids as
    8 little-endian bytes. Other keys do not name their prefix, so they cannot go to a store."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, int) and key >= 0:
        return key.to_bytes(8, "little")
    raise TypeError(f"page key {key!r} cannot name a store page: use page_hashes or integer ids")


def _same(a: memoryview, b: memoryview) -> bool:
    """Equal bytes, compared by memcmp (memoryview == compares item by item)."""
    return a.nbytes == b.nbytes and bytes(a).startswith(b)


@cache
def _unpacker(page_size: int) -> Callable[[memoryview, int], tuple[int, ...]]:
    """Reads one page's token ids as a tuple from a buffer of int64 at a byte offset (one bound
    method per page size, shared by every run)."""
    return Struct(f"={page_size}{_TOKEN}").unpack_from


def _check_page_size(page_size: int) -> None:
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
