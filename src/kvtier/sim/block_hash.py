"""Chained block hashes of a prompt, as trace ids: equal ids mean an equal whole prefix.

Block i's digest is BLAKE2b over block i-1's digest and block i's token ids (the chain vLLM's
prefix cache and Mooncake's traces use), so a block matches only behind the same prefix. The
last block is hashed with the tokens it has; it matches only a prompt that ends the same way.
Digests are numbered in the order a trace first meets them (Mooncake's ids are such numbers),
so the trace holds neither token ids nor anything they could be read back from.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

_DIGEST_BYTES = 16  # 2^-64 odds of two different prefixes sharing a digest, per pair of blocks


def chain_digests(token_ids: Sequence[int], block_tokens: int) -> tuple[bytes, ...]:
    """The chained digest of every `block_tokens`-token block of `token_ids`, the last partial."""
    digests: list[bytes] = []
    previous = b""
    for start in range(0, len(token_ids), block_tokens):
        block = array("q", token_ids[start : start + block_tokens]).tobytes()
        previous = hashlib.blake2b(previous + block, digest_size=_DIGEST_BYTES).digest()
        digests.append(previous)
    return tuple(digests)


class BlockIds:
    """Trace ids for digests: 0, 1, 2, ... in the order they are first numbered."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}

    def number(self, digests: Sequence[bytes]) -> tuple[tuple[int, ...], int]:
        """The ids of `digests`, and how many leading blocks had been numbered before (the
        prefix an earlier prompt shares: a chained digest seen implies its whole prefix seen)."""
        ids: list[int] = []
        seen = 0
        for digest in digests:
            known = self._ids.get(digest)
            if known is None:
                known = self._ids[digest] = len(self._ids)
            elif seen == len(ids):
                seen += 1
            ids.append(known)
        return tuple(ids), seen

    def __len__(self) -> int:
        return len(self._ids)
