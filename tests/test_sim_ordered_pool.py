"""`OrderedPool` answers as a list does: the same element for every pop(i), the same order after."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvtier.sim.ordered_pool import OrderedPool

# an operation: append a new value (None) or pop at a fraction of the length (negatives too)
OPS = st.lists(st.one_of(st.none(), st.floats(-1.0, 0.999)), max_size=400)


@given(OPS, st.integers(0, 40))
def test_pops_and_appends_match_a_list(ops: list[float | None], start: int) -> None:
    pool, reference = OrderedPool(range(start)), list(range(start))
    value = start
    for op in ops:
        if op is None or not reference:
            pool.append(value)
            reference.append(value)
            value += 1
            continue
        index = int(op * len(reference))
        assert pool.pop(index) == reference.pop(index)
        assert len(pool) == len(reference)
    assert list(pool) == reference


def test_pop_out_of_range_is_an_index_error() -> None:
    pool = OrderedPool([1, 2])
    for index in (2, -3):
        try:
            pool.pop(index)
        except IndexError:
            continue
        raise AssertionError(f"pop({index}) of two elements returned")
