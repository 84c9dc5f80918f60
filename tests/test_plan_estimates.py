"""Estimated terms: ranges propagate to the KV token count; measured inputs make it exact."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from founding_support import kimi
from kvtier.engines import estimate
from kvtier.engines.deployment import FreeMemory, Measured
from kvtier.engines.estimate import Term, spread
from kvtier.engines.ledger import context_lengths
from kvtier.ledger.plan import plan


@given(st.floats(1, 100), st.floats(0, 5), st.floats(1, 50), st.floats(0, 5))
def test_spread_brackets_every_choice_in_the_ranges(
    a: float, da: float, b: float, db: float
) -> None:
    terms = {"a": Term.estimated(a, a - da, a + da, ""), "b": Term.estimated(b, b - db, b + db, "")}
    result = spread(terms, lambda v: 0.88 * v["a"] - v["b"])
    assert result.low <= result.value <= result.high
    assert result.high - result.low == pytest.approx(2 * (0.88 * da + db), abs=1e-6)


def test_spread_of_known_terms_is_exact() -> None:
    result = spread({"a": Term.known(3.0, "")}, lambda v: v["a"] * 2)
    assert result.exact and result.low == result.high == 6.0


def test_each_measured_figure_narrows_the_range() -> None:
    """Nothing measured: weights and pre-load overheads both loose; free-before measured: only
    the weights; both measured: exact."""
    loose = plan(kimi(Measured()))
    half = plan(kimi(Measured(free=FreeMemory(before_load_gib=94.04))))
    exact = plan(kimi(Measured(free=FreeMemory(before_load_gib=94.04, after_load_gib=21.71))))
    assert loose.kv_tokens_range and half.kv_tokens_range and exact.kv_tokens_range is None
    width = [r[1] - r[0] for r in (loose.kv_tokens_range, half.kv_tokens_range)]
    assert width[0] > width[1] > 0
    assert loose.kv_tokens_range[0] <= exact.kv_tokens <= loose.kv_tokens_range[1]
    estimated = {i.item for i in loose.items if not i.exact}
    assert {"weights", "before load: driver, CUDA context, NCCL", "KV cache pool"} <= estimated


def test_weights_uncertainty_is_the_stated_one() -> None:
    term = estimate.weights_term(100 * 2**30, "spec")
    assert (term.low, term.high) == pytest.approx((98.5, 101.5))


def test_default_context_lengths() -> None:
    assert context_lengths(None, 262_144) == (8192, 32768, 131072, 262144)
    assert context_lengths(None, 32768) == (8192, 32768)
    assert context_lengths((4096, 1000), 32768) == (1000, 4096)
