"""Page keys: tuples per page, chained digests, store names."""

from __future__ import annotations

from array import array
from hashlib import blake2b

import numpy as np
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


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), st.integers(1, 5))
def test_packed_page_keys_equal_the_tuple_per_page_model(tokens: list[int], page: int) -> None:
    model = [tuple(tokens[i : i + page]) for i in range(0, len(tokens) - page + 1, page)]
    keys = page_keys(tokens, page)
    assert keys == model and list(keys) == model and len(keys) == len(model)
    assert page_keys(array("q", tokens), page) == keys
    for i in range(len(model)):
        assert keys[i] == model[i] and keys[i - len(model)] == model[i]
        assert keys[i:] == model[i:] and keys[:i] + keys[i:] == keys
    with pytest.raises(IndexError):
        keys[len(model)]


@given(
    st.lists(st.integers(0, 3), max_size=30),
    st.lists(st.integers(0, 3), max_size=30),
    st.integers(1, 3),
    st.integers(0, 12),
)
def test_common_len_counts_the_equal_leading_pages(
    a: list[int], b: list[int], page: int, start: int
) -> None:
    run, keys = page_keys(a, page), page_keys(b, page)
    expected = 0
    while (
        expected < len(run)
        and start + expected < len(keys)
        and run[expected] == keys[start + expected]
    ):
        expected += 1
    assert run.common_len(keys, start) == expected
    own = run.owned()
    assert own.common_len(keys, start) == expected, "a run over bytes of its own"
    assert own == run and own.owned() is own


def test_token_page_keys_cannot_name_a_store_page() -> None:
    with pytest.raises(TypeError):
        store_key(page_keys([1, 2], 2)[0])


def test_int64_buffers_are_viewed_not_copied() -> None:
    """An engine's token ids stay where they are: the keys read the array itself, which
    therefore cannot be resized while keys over it exist."""
    tokens = array("q", [1, 2, 3, 4, 5])
    keys = page_keys(tokens, 2)
    assert keys == [(1, 2), (3, 4)]
    tokens[2] = 30
    assert keys[1] == (30, 4)
    with pytest.raises(BufferError):
        tokens.append(6)
    del keys
    tokens.append(6)  # no view left
    ids = np.arange(6, dtype=np.int64)
    keys = page_keys(ids, 3)
    ids[0] = 7
    assert keys == [(7, 1, 2), (3, 4, 5)]


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40), st.integers(1, 5))
def test_other_token_buffers_are_copied_as_int64(tokens: list[int], page: int) -> None:
    """int32 ids, a byte-swapped or strided int64 array: copied, with the same keys as a list."""
    model = page_keys(tokens, page)
    assert page_keys(array("i", tokens), page) == model
    assert page_keys(np.array(tokens, dtype=np.int32), page) == model
    assert page_keys(np.array(tokens, dtype=">i8"), page) == model
    assert page_keys(np.repeat(np.array(tokens, dtype=np.int64), 2)[::2], page) == model
    copied = array("i", tokens)
    keys = page_keys(copied, page)
    if keys:
        copied[0] = 0 if copied[0] else 1
        assert keys == model
