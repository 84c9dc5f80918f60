"""Page keys: what the radix tree matches on, one key per full page of tokens.

The tree never sees tokens. A key only has to be hashable and equal for equal page contents in
equal context: a tuple of the page's token ids (`page_keys`), a chained digest (`page_hashes`,
also the L3 store's page name), or an external block id such as a Mooncake trace's `hash_ids`.
A partial last page has no key: only page-aligned prefixes are cached.

A run of keys is a list of keys or, for token ids, a `TokenPages`: the same tuples packed into
one bytes object, so the tree compares and cuts a whole run with C-level bytes operations
instead of one Python object per page. A slice is a view of the same bytes (cutting a node
copies no keys). One tree uses one kind of run.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterator, Sequence
from functools import cache
from hashlib import blake2b
from struct import Struct
from typing import overload

PageKey = Hashable

HASH_BYTES = 16
_TOKEN = "q"  # token ids packed as signed 64-bit integers
_TOKEN_BYTES = 8


class TokenPages(Sequence[tuple[int, ...]]):
    """The page keys of a token sequence, packed: item i is the tuple of page i's token ids
    (what `page_keys` yields), stored as int64 bytes (or a view of them, for a slice). Equal to
    a list of those tuples."""

    __slots__ = ("_page", "_pages", "data", "page_size", "width")

    def __init__(self, data: bytes | memoryview, page_size: int) -> None:
        self.data = data
        self.page_size = page_size
        self.width = page_size * _TOKEN_BYTES  # bytes per page
        self._pages = len(data) // self.width
        self._page = _page_struct(page_size)

    def __len__(self) -> int:
        return self._pages

    @overload
    def __getitem__(self, i: int) -> tuple[int, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> TokenPages: ...
    def __getitem__(self, i: int | slice) -> tuple[int, ...] | TokenPages:
        w = self.width
        if type(i) is int and 0 <= i < self._pages:  # the tree's child lookups
            return self._page.unpack_from(self.data, i * w)
        if isinstance(i, slice):
            start, stop, step = i.indices(self._pages)
            if step != 1:
                raise ValueError("TokenPages slices take no step")
            if start == 0 and stop >= self._pages:
                return self  # immutable: the whole run is itself
            stop = max(start, stop)
            out = TokenPages.__new__(TokenPages)  # this run's fields, not recomputed
            out.data = memoryview(self.data)[start * w : stop * w]
            out.page_size, out.width, out._page = self.page_size, w, self._page
            out._pages = stop - start
            return out
        if i < 0:
            i += self._pages
        if not 0 <= i < self._pages:
            raise IndexError("page index out of range")
        return self._page.unpack_from(self.data, i * w)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        tokens = array(_TOKEN)
        tokens.frombytes(self.data)
        return zip(*[iter(tokens)] * self.page_size, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenPages):
            return self.page_size == other.page_size and _same(self.data, other.data)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a run, like a list, is not a key

    def __add__(self, other: TokenPages) -> TokenPages:
        if not isinstance(other, TokenPages) or other.page_size != self.page_size:
            return NotImplemented
        return TokenPages(b"".join((self.data, other.data)), self.page_size)

    def common_len(self, other: TokenPages, start: int) -> int:
        """How many leading pages of this run equal other's pages from `start` on."""
        w, data, theirs = self.width, self.data, other.data
        if type(theirs) is not bytes:
            theirs = bytes(theirs)  # a view: startswith is a bytes method
        n = min(self._pages, other._pages - start)
        if n <= 0:
            return 0
        if theirs.startswith(data if n == self._pages else data[: n * w], start * w):
            return n
        # bisect on run equality: O(log n) steps, O(n) bytes compared in all
        lo, hi = 0, n - 1  # pages [0, lo) match; page hi is past the first mismatch or at it
        base = start * w
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if theirs.startswith(data[lo * w : mid * w], base + lo * w):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def __repr__(self) -> str:
        return f"TokenPages({len(self)} pages of {self.page_size})"


def page_keys(tokens: Sequence[int], page_size: int) -> TokenPages:
    """One tuple of token ids per full page, packed (`TokenPages`); a trailing partial page is
    dropped. Token ids must fit a signed 64-bit integer."""
    _check_page_size(page_size)
    full = len(tokens) - len(tokens) % page_size
    if isinstance(tokens, array) and tokens.typecode == _TOKEN:
        data = memoryview(tokens)[:full].tobytes() if full < len(tokens) else tokens.tobytes()
    else:
        data = array(_TOKEN, tokens[:full]).tobytes()
    return TokenPages(data, page_size)


def as_run(keys: Sequence[PageKey]) -> list[PageKey] | TokenPages:
    """`keys` as a run the tree takes: a list (copied only when not one) or a TokenPages over
    bytes of its own (a slice, a view, is copied once here rather than on every compare)."""
    if isinstance(keys, list):
        return keys
    if isinstance(keys, TokenPages):
        return keys if type(keys.data) is bytes else TokenPages(bytes(keys.data), keys.page_size)
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


def _same(a: bytes | memoryview, b: bytes | memoryview) -> bool:
    """Equal bytes, compared by memcmp (memoryview == compares item by item)."""
    return len(a) == len(b) and (a if type(a) is bytes else bytes(a)).startswith(b)


@cache
def _page_struct(page_size: int) -> Struct:
    """Unpacks one page's token ids to a tuple, laid out as array(_TOKEN) packs them."""
    return Struct(f"={page_size}{_TOKEN}")


def _check_page_size(page_size: int) -> None:
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
