"""Page keys: tuples per page, chained digests, store names."""

from __future__ import annotations

from hashlib import blake2b

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.cache import page_hashes, page_keys, store_key


def test_page_keys_drop_the_partial_last_page() -> None:
    assert page_keys([1, 2, 3, 4, 5], 2) == [(1, 2), (3, 4)]
    assert page_keys([1], 2) == []


def test_first_page_hash_is_blake2b_128_of_its_tokens() -> None:
    tokens = [7, 300, 65536, 1]
    expected = blake2b(digest_size=16)
    for t in tokens:
        expected.update(t.to_bytes(4, "little"))
    assert page_hashes(tokens, 4) == [expected.digest()]


def test_hash_chains_through_the_previous_page() -> None:
    a = page_hashes([1, 2, 9, 9], 2)
    b = page_hashes([3, 4, 9, 9], 2)
    assert a[1] != b[1], "same page tokens after a different prefix must hash differently"
    expected = blake2b(a[0], digest_size=16)
    for t in (9, 9):
        expected.update(t.to_bytes(4, "little"))
    assert a[1] == expected.digest()


@given(st.lists(st.integers(0, 2**32 - 1), max_size=40), st.integers(1, 5), st.integers(0, 40))
def test_hashes_of_a_prefix_are_a_prefix_and_prior_continues_a_chain(
    tokens: list[int], page: int, cut: int
) -> None:
    whole = page_hashes(tokens, page)
    assert len(whole) == len(tokens) // page
    k = min(cut, len(whole))
    assert page_hashes(tokens[: k * page], page) == whole[:k]
    prior = whole[k - 1] if k else b""
    assert page_hashes(tokens[k * page :], page, prior) == whole[k:]


def test_store_key_accepts_digests_and_block_ids_only() -> None:
    digest = page_hashes([1, 2], 2)[0]
    assert store_key(digest) is digest
    assert store_key(258) == (258).to_bytes(8, "little")
    with pytest.raises(TypeError):
        store_key((1, 2))
    with pytest.raises(TypeError):
        store_key(-1)


def test_page_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        page_hashes([1], 0)
