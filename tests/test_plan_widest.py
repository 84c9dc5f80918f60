"""plan names the estimated input its range is widest in: each estimated term moved alone over
its own range, the others nominal; passing that figure measured narrows the range."""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main
from kvtier.engines.estimate import Term, spread, widest


def test_the_widest_term_is_the_one_that_moves_the_formula_most() -> None:
    terms = {
        "pre": Term.estimated(20.0, 19.0, 21.0, "card"),
        "weights": Term.estimated(7.0, 6.9, 7.1, "spec"),
        "after": Term.known(13.0, "log"),
    }
    budget = spread(terms, lambda v: v["pre"] * 0.9 - v["weights"])
    assert (budget.low, budget.high) == pytest.approx((19 * 0.9 - 7.1, 21 * 0.9 - 6.9))
    (note,) = widest(budget)
    assert "free memory before load" in note and "1.80 of the budget's 2.00 GiB" in note
    assert widest(Term.known(3.0, "measured")) == ()


def _plan(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("argv", "widest_in", "measured"),
    [
        (
            ["--engine", "sglang", "--model", "Qwen/Qwen3-14B", "--gpu", "RTX 4090", "--tp", "4"],
            "free memory before load",
            ["--free-before-load-gib", "23.08"],
        ),
        (
            ["--engine", "vllm", "--model", "Qwen/Qwen3-8B", "--gpu", "H100"],
            "CUDA graph memory",
            ["--cuda-graph-gib", "0.84"],
        ),
    ],
)
def test_the_note_names_it_and_measuring_it_narrows_the_range(
    capsys: pytest.CaptureFixture[str], argv: list[str], widest_in: str, measured: list[str]
) -> None:
    before = _plan(capsys, argv)
    notes = [n for n in before["notes"] if n.startswith("the range is widest")]
    assert len(notes) == 1 and widest_in in notes[0]
    after = _plan(capsys, [*argv, *measured])
    width = [r[1] - r[0] for r in (before["kv_tokens_range"], after["kv_tokens_range"])]
    assert width[1] < width[0]
    assert not any(widest_in in n for n in after["notes"] if n.startswith("the range is"))
