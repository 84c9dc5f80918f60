"""The peer benchmarks' operation sequence: block ids expand to the same tokens on both sides."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from radix_ops import expand

from kvtier.cache.keys import page_keys


def test_blocks_expand_to_disjoint_runs_with_the_real_partial_last_block() -> None:
    tokens = expand(600, [3, 7], 512)
    assert len(tokens) == 600
    assert list(tokens[:512]) == list(range(3 * 512, 4 * 512))
    assert list(tokens[512:]) == list(range(7 * 512, 7 * 512 + 88))


def test_shared_block_ids_share_exactly_their_tokens() -> None:
    a, b = expand(1024, [0, 1], 512), expand(1024, [0, 2], 512)
    first_difference = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    assert first_difference == 512
    # with 16-token pages the shared block is 32 equal page keys, then they part
    ka, kb = page_keys(a, 16), page_keys(b, 16)
    assert ka[:32] == kb[:32] and ka[32] != kb[32]


def test_a_partial_last_block_is_a_prefix_of_the_full_block() -> None:
    """A later turn whose last block grew keeps the same id: its tokens extend the old ones."""
    short, grown = expand(512 + 100, [5, 9], 512), expand(1024, [5, 9], 512)
    assert list(grown[: len(short)]) == list(short)
