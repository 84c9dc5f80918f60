"""Real startup logs: kvtier recomputes the KV token count each engine logged, from the log alone.

The logs are copied into tests/fixtures/logs/ (sources in cases.json); when the shared case set is
present beside the repository, every case in it is checked too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import require_shared
from kvtier.ledger.explain import explain_log

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
SHARED_CASES = Path(__file__).resolve().parents[1] / ".." / "shared" / "cases"
TOLERANCE = 0.005  # predicted within 0.5% of the logged count

# What a case's log does not state, given as the flags a user would pass.
FLAGS: dict[str, dict[str, object]] = {
    # Qwen3ForCausalLM fits four catalog models, and the fraction is SGLang's default for the
    # RTX 5080 under the v0.4.9-v0.5.3 rule (an August 2025 image).
    "S09": {"model": "Qwen/Qwen3-0.6B", "gpu": "RTX 5080", "engine_version": "0.4.10"},
}


def _fixture_cases() -> list[dict[str, object]]:
    return json.loads((FIXTURES / "cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", _fixture_cases(), ids=lambda c: str(c["id"]))
def test_fixture_log_reconciles(case: dict[str, object]) -> None:
    text = (FIXTURES / str(case["file"])).read_text(encoding="utf-8")
    e = explain_log(text, FLAGS.get(str(case["id"]), {}))
    rec = e.reconciliation
    assert e.engine == case["engine"]
    assert rec.observed.value == case["kv_tokens"]
    assert abs(rec.relative_difference) < TOLERANCE, rec.formula
    assert rec.model.model_id.lower() == str(case["model"]).split()[0].lower()


def test_founding_log_matches_to_rounding() -> None:
    """Kimi-K2.5, TP8, fraction 0.88: 21.71 - 94.04 x 0.12 GiB / 70,272 B -> 159,294 vs 159,277."""
    e = explain_log((FIXTURES / "seed-sglang.log").read_text(encoding="utf-8"), {})
    rec = e.reconciliation
    assert rec.model.model_id == "moonshotai/Kimi-K2.5"
    assert rec.kv_bytes_per_token == 70_272
    assert rec.observed.value == 159_277 and rec.observed.line == 4
    assert rec.predicted == 159_294
    assert rec.matches
    assert abs(rec.relative_difference) < 0.0005
    inputs = dict(rec.inputs)
    assert inputs["free before load (GiB, min over ranks)"].value == pytest.approx(94.04)
    assert inputs["free before load (GiB, min over ranks)"].text.startswith("inferred")
    assert inputs["mem_fraction_static"].line == 1


def test_founding_ledger_and_options() -> None:
    e = explain_log(
        (FIXTURES / "seed-sglang.log").read_text(encoding="utf-8"), {"host_ram_gb": 396.0}
    )
    assert e.ledger.reserve is not None
    assert e.ledger.reserve.gib == pytest.approx(94.04 * 0.12)
    uses = {u.item: u.gib for u in e.ledger.reserve_uses}
    assert uses == {"draft KV pool": pytest.approx(0.60)}
    assert [u.item for u in e.ledger.unlogged] == [
        "draft weights",
        "CUDA graphs (target)",
        "CUDA graphs (draft)",
    ]
    menu = e.options
    assert menu.base is not None and menu.base.kv_tokens == 159_294  # priced from the log's figures
    options = {o.flags: o for o in menu.options}
    fp8 = options[("--kv-cache-dtype", "fp8_e4m3")]
    assert fp8.kv_tokens is not None and 1.99 < fp8.kv_tokens / 159_277 < 2.01
    figures = dict(options[("--enable-hierarchical-cache", "--hicache-ratio", "4")].figures)
    assert figures["host_tokens"] == 159_294 * 4 + 1  # HostKVCache aligns up by one page
    assert figures["host_gb_per_rank"] == pytest.approx(44.78, abs=0.01)
    assert figures["host_gb_per_node"] == pytest.approx(358.2, abs=0.1)  # of 396 GB available
    assert figures["node_check_ok"] == 1.0


def test_budget_plan_agrees_with_reconcile_on_every_case() -> None:
    """The log's figures as a measured deployment: `plan` predicts what reconcile predicts."""
    for case in _fixture_cases():
        if case["engine"] != "sglang":
            continue  # vLLM plans recompute the budget from its parts, not the printed total
        text = (FIXTURES / str(case["file"])).read_text(encoding="utf-8")
        e = explain_log(text, FLAGS.get(str(case["id"]), {}))
        assert e.options.base is not None, e.options.note
        assert e.options.base.kv_tokens == e.reconciliation.predicted, case["id"]


def test_vllm_chain_is_checked() -> None:
    """L05: requested 75.23 - non-KV 17.12 = 58.11 GiB; 29,751 blocks of 16 x 128 KiB."""
    e = explain_log((FIXTURES / "l05-vllm.log").read_text(encoding="utf-8"), {})
    rec = e.reconciliation
    assert rec.kv_bytes_per_token == 131_072
    assert rec.observed.value == 476_016
    assert rec.predicted == 476_032
    assert rec.matches
    assert any("= 58.11 GiB" in n for n in rec.notes)


def _shared_cases() -> list[dict[str, object]]:
    path = SHARED_CASES / "dev-logs.json"
    if not path.exists():
        return []
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", _shared_cases(), ids=lambda c: str(c["id"]))
def test_shared_case_reconciles(case: dict[str, object]) -> None:
    observed = case["observed"]
    assert isinstance(observed, dict)
    logged = observed.get("kv_cache_tokens") or observed.get("kv_cache_tokens_derived")
    e = explain_log(str(case["log"]), FLAGS.get(str(case["id"]), {}))
    assert e.reconciliation.observed.value == logged
    assert abs(e.reconciliation.relative_difference) < TOLERANCE


def test_shared_cases_present_or_skipped() -> None:
    require_shared("cases/dev-logs.json")
    assert len(_shared_cases()) >= 8


def test_unlogged_reserve_items_are_estimated_and_marked() -> None:
    """With the GPU known, the plan sizes the target's CUDA graphs; the log's figures stay exact."""
    text = (FIXTURES / "seed-sglang.log").read_text(encoding="utf-8")
    e = explain_log(text, {"gpu": "RTX PRO 6000"})
    uses = {u.item: u for u in e.ledger.reserve_uses}
    assert uses["draft KV pool"].exact
    graphs = uses["CUDA graphs (target)"]
    assert not graphs.exact and graphs.source.startswith("estimated")
    assert graphs.gib == pytest.approx(512 * 2 / 1024)  # cuda_graph_max_bs 512 x 2 MiB
    assert e.ledger.free_end is not None and not e.ledger.free_end.exact
    assert "Estimated, not in the log: CUDA graphs (target) ~1.00 GiB" in e.ledger.answer
