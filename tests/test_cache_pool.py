"""PagePool: O(1) allocation, exact ownership, loud failures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.cache import PagePool, Pages, RunPool


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
    assert pages == [0, 1]
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


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=60), st.booleans())
def test_pool_matches_a_set_model(ops: list[tuple[bool, int]], runs: bool) -> None:
    pool = RunPool(10) if runs else PagePool(10)
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


@pytest.mark.parametrize("pool_type", [PagePool, RunPool])
def test_a_huge_tier_costs_nothing_until_used(pool_type: type[PagePool | RunPool]) -> None:
    pool = pool_type(10**18)
    pages = pool.alloc(1000)
    assert pages is not None and list(pages) == list(range(1000))
    assert pool.num_free == 10**18 - 1000
    pool.free(pages[:10])
    assert pool.alloc(10) == list(range(10)), "freed pages go out again before new ones"
    pool.check()


def test_a_run_pool_keeps_runs_and_coalesces_them() -> None:
    pool = RunPool(10**18)
    huge = pool.alloc(10**12)
    assert huge is not None and huge.runs == (range(10**12),)
    a, b, c = pool.alloc(10), pool.alloc(10), pool.alloc(10)
    assert a is not None and b is not None and c is not None
    pool.free(b)
    pool.free(a[5:])
    assert pool.num_free_runs == 1, "freed runs that touch are one run"
    pool.free(huge)
    again = pool.alloc(10**12 + 5)  # lowest free run first, the rest from the next
    assert again is not None and again.runs == (range(10**12), range(10**12 + 5, 10**12 + 10))
    pool.free(c)
    assert pool.num_free_runs == 0, "a run freed at the top lowers it, with the run below"
    assert pool.num_free == 10**18 - 10**12 - 10
    pool.check()


def test_a_run_partly_free_is_refused_whole() -> None:
    pool = RunPool(10)
    pages = pool.alloc(6)
    assert pages is not None
    pool.free(pages[2:4])
    with pytest.raises(ValueError, match="not allocated"):
        pool.free(pages[1:5])
    assert pool.num_free == 6 and all(pool.is_allocated(p) for p in (0, 1, 4, 5))
    pool.check()


def test_pages_slice_and_join_by_runs() -> None:
    p = Pages.of([7, 8, 9, 3, 4, 20])
    assert p.runs == (range(7, 10), range(3, 5), range(20, 21)) and len(p) == 6
    assert p[2:5] == [9, 3, 4] and p[-1] == 20 and list(p) == [7, 8, 9, 3, 4, 20]
    assert (p[:3] + p[3:]) == p and (p[:2] + p[2:]).runs == p.runs, "joins merge runs"
    assert (Pages.of(range(5, 9)) + Pages.of([9, 10])).runs == (range(5, 11),)


@given(
    st.lists(st.integers(0, 12), max_size=16),
    st.one_of(st.none(), st.integers(-20, 20)),
    st.one_of(st.none(), st.integers(-20, 20)),
)
def test_pages_slices_like_the_list_of_its_pages(
    pages: list[int], start: int | None, stop: int | None
) -> None:
    """Any slice of a Pages is the same slice of its pages, as canonical runs."""
    cut = Pages.of(pages)[start:stop]
    assert cut.tolist() == pages[start:stop] and len(cut) == len(pages[start:stop])
    assert cut.runs == Pages.of(pages[start:stop]).runs
