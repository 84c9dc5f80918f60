"""Page keys: what the radix tree matches on, one key per full page of tokens.

The tree never sees tokens. A key only has to be hashable and equal for equal page contents in
equal context: a tuple of the page's token ids (`page_keys`), a chained digest (`page_hashes`,
also the L3 store's page name), or an external block id such as a Mooncake trace's `hash_ids`.
A partial last page has no key: only page-aligned prefixes are cached.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from hashlib import blake2b

PageKey = Hashable

HASH_BYTES = 16


def page_keys(tokens: Sequence[int], page_size: int) -> list[tuple[int, ...]]:
    """One tuple of token ids per full page; a trailing partial page is dropped."""
    _check_page_size(page_size)
    full = len(tokens) - len(tokens) % page_size
    return [tuple(tokens[i : i + page_size]) for i in range(0, full, page_size)]


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


def _check_page_size(page_size: int) -> None:
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
