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
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.logs.requests import HashedPrompt

_DIGEST_BYTES = 16  # 2^-64 odds of two different prefixes sharing a digest, per pair of blocks
MAX_BLOCK_TOKENS = 1 << 20


@dataclass(frozen=True, slots=True)
class PromptHasher:
    """Hashes prompts in blocks of `block_tokens` tokens (a `HashPrompt` for the grammars)."""

    block_tokens: int

    def __post_init__(self) -> None:
        if not 1 <= self.block_tokens <= MAX_BLOCK_TOKENS:
            raise KvtierError(
                f"--block-tokens must be in [1, {MAX_BLOCK_TOKENS:,}], got {self.block_tokens}"
            )

    def __call__(self, token_ids: Sequence[int]) -> HashedPrompt:
        return HashedPrompt(len(token_ids), chain_digests(token_ids, self.block_tokens))


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
