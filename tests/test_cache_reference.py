"""The tree's matches against a dumb model: a dict from every cached prefix to its page.

Without eviction the model is exact: the longest cached prefix and every page in it must be what
the model says. With eviction the tree may have forgotten pages, but what it still returns must
be a prefix the model knows, with the pages the model recorded for it, and page-for-page
consistent across queries.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.cache import AccountingStorage, Tier, TieredCache

SEQ = st.lists(st.integers(0, 2), max_size=8)
OPS = st.lists(st.tuples(st.sampled_from(["insert", "match", "evict"]), SEQ), max_size=40)


def _insert(cache: TieredCache, model: dict[tuple[int, ...], int], seq: list[int]) -> None:
    pages = cache.alloc_device(len(seq))
    assert pages is not None
    result = cache.insert(seq, pages)
    cache.free_device(pages[: result.prefix_len])
    for i in range(result.prefix_len, len(seq)):
        model[tuple(seq[: i + 1])] = pages[i]


def _longest(model: dict[tuple[int, ...], int], seq: list[int]) -> list[int]:
    out = []
    for i in range(len(seq)):
        page = model.get(tuple(seq[: i + 1]))
        if page is None:
            break
        out.append(page)
    return out


@settings(max_examples=300)
@given(st.lists(st.tuples(st.booleans(), SEQ), max_size=40))
def test_matches_equal_the_prefix_model_without_eviction(ops: list[tuple[bool, list[int]]]) -> None:
    cache = TieredCache(AccountingStorage(Tier.DEVICE, 400))
    model: dict[tuple[int, ...], int] = {}
    for is_insert, seq in ops:
        if is_insert:
            _insert(cache, model, seq)
        assert cache.match_prefix(seq).device_pages == _longest(model, seq)
    cache.check_integrity([])


@settings(max_examples=300)
@given(OPS, st.integers(1, 6))
def test_matches_stay_true_to_the_model_under_eviction(
    ops: list[tuple[str, list[int]]], n: int
) -> None:
    cache = TieredCache(AccountingStorage(Tier.DEVICE, 24))
    model: dict[tuple[int, ...], int] = {}
    for op, seq in ops:
        if op == "insert":
            # a prefix the tree forgot is re-recorded when it is inserted again
            _insert(cache, model, seq)
        elif op == "evict":
            cache.evict(Tier.DEVICE, n)
        pages = cache.match_prefix(seq).device_pages
        assert pages == _longest(model, seq)[: len(pages)]
    cache.check_integrity([])
