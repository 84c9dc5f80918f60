"""PagePool: O(1) allocation, exact ownership, loud failures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.cache import PagePool


def test_alloc_hands_out_distinct_pages_until_empty() -> None:
    pool = PagePool(5)
    first = pool.alloc(3)
    second = pool.alloc(2)
    assert first is not None and second is not None
    assert sorted(first + second) == [0, 1, 2, 3, 4]
    assert pool.num_free == 0 and pool.num_used == 5
    assert pool.alloc(1) is None


def test_alloc_beyond_free_takes_nothing() -> None:
    pool = PagePool(4)
    assert pool.alloc(5) is None
    assert pool.num_free == 4
    assert pool.alloc(0) == []


def test_double_free_raises_and_frees_nothing() -> None:
    pool = PagePool(4)
    pages = pool.alloc(2)
    assert pages is not None
    pool.free(pages)
    with pytest.raises(ValueError, match="not allocated"):
        pool.free(pages[:1])
    assert pool.num_free == 4
    pool.check()


@pytest.mark.parametrize("bad", [[-1], [4], [2]])
def test_freeing_a_page_never_handed_out_raises(bad: list[int]) -> None:
    pool = PagePool(4)
    pages = pool.alloc(2)  # pages 0 and 1
    assert pages == [1, 0]
    with pytest.raises(ValueError):
        pool.free(pages + bad)
    assert pool.num_free == 2, "a failed free must not free the valid pages either"
    pool.check()


def test_the_same_page_twice_in_one_free_raises() -> None:
    pool = PagePool(3)
    pages = pool.alloc(3)
    assert pages is not None
    with pytest.raises(ValueError):
        pool.free([pages[0], pages[0]])
    assert pool.num_free == 0
    pool.check()


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=60))
def test_pool_matches_a_set_model(ops: list[tuple[bool, int]]) -> None:
    pool = PagePool(10)
    held: list[int] = []
    for is_alloc, n in ops:
        if is_alloc:
            pages = pool.alloc(n)
            if n > 10 - len(held):
                assert pages is None
            else:
                assert pages is not None and not set(pages) & set(held)
                held += pages
        else:
            give, held = held[:n], held[n:]
            pool.free(give)
        assert pool.num_free == 10 - len(held)
        assert all(pool.is_allocated(p) for p in held)
        pool.check()
