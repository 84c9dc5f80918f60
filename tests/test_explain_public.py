"""Every public startup log with a KV count or a memory line is explained, and its count is inside
the recomputed range; partial, older and failed forms of each era are explained, not refused.

Fixtures: tests/fixtures/logs/public (real public logs, index.json names each source) and
tests/fixtures/logs/eras (small logs built from the documented line templates, manifest.json says
so for each).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.ledger.explain import explain_log

LOGS = Path(__file__).parent / "fixtures" / "logs"
PUBLIC = LOGS / "public"
ERAS = LOGS / "eras"


def _index() -> list[dict[str, object]]:
    return json.loads((PUBLIC / "index.json").read_text(encoding="utf-8"))


def _explain_json(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    assert main(["explain", str(path), "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("entry", _index(), ids=lambda e: str(e["id"]))
def test_public_log_is_explained_and_its_count_is_in_range(
    entry: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _explain_json(PUBLIC / f"{entry['id']}.log", capsys)
    predicted = out["predicted"]
    assert isinstance(predicted["kv_tokens"], int)
    low, high = predicted["range"]
    observed = entry["observed_kv_tokens"]
    assert out["observed"]["kv_tokens"] == observed
    if observed is None:  # a failed start that printed no count allocated no pool
        assert out["verdict"] == "failed" and predicted["kv_tokens"] == 0
        return
    assert low <= observed <= high
    assert out["verdict"] in ("match", "failed", "observed only")


def _local_outside_catalog() -> list[dict[str, object]]:
    """Public logs of models served from a local path that kvtier does not resolve, whose lines
    print the pool's bytes next to a count."""
    from kvtier.errors import KvtierError
    from kvtier.model.catalog import resolve_model

    picked = []
    for entry in _index():
        if not entry["model_in_log_is_local_path"] or entry["observed_kv_tokens"] is None:
            continue
        if not any(str(k).endswith(("_gib", "_gb")) for k in entry["printed"]):
            continue  # a count with no bytes beside it gives no geometry
        try:
            resolve_model(str(entry["model"]).split(" ")[0])
            continue
        except KvtierError:
            picked.append(entry)
    return picked


def test_ten_public_logs_of_unknown_local_models() -> None:
    """The set that shows explain needs no --model: at least ten public logs, each of a model
    served from a local path that the catalog does not resolve."""
    picked = _local_outside_catalog()
    assert len(picked) >= 10, [e["id"] for e in picked]
    assert all(str(e["source"]).startswith("https://github.com/") for e in picked)


@pytest.mark.parametrize("entry", _local_outside_catalog(), ids=lambda e: str(e["id"]))
def test_unknown_local_model_takes_its_geometry_from_the_log(
    entry: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _explain_json(PUBLIC / f"{entry['id']}.log", capsys)
    assert out["model"]["geometry"] == "from the log"
    assert any(i["estimated"] for i in out["inputs"])
    assert any("KV geometry came from the log" in n for n in out["notes"])
    low, high = out["predicted"]["range"]
    assert low <= entry["observed_kv_tokens"] <= high
    if out["verdict"] != "observed only":  # recomputed from the log's own memory figures
        assert abs(out["predicted"]["kv_tokens"] - entry["observed_kv_tokens"]) <= 0.002 * high


def test_vllm_019_logs_recompute_to_the_token_range(capsys: pytest.CaptureFixture[str]) -> None:
    """CodeLlama-7B (not in the catalog): 61.66 GiB / 126,256 tokens bracket 512 KiB per token."""
    out = _explain_json(PUBLIC / "vllm-0.19-codellama-7b-h100.log", capsys)
    assert out["kv_bytes_per_token"] == 524_288
    assert out["verdict"] == "match"


def test_model_flag_checks_the_log_geometry(capsys: pytest.CaptureFixture[str]) -> None:
    out = _explain_json(
        PUBLIC / "vllm-0.19-codellama-7b-h100.log", capsys, "--model", "Qwen/Qwen3-8B"
    )
    text = " ".join(out["warnings"])
    assert "'codellama/CodeLlama-7b-hf'" in text and "Qwen/Qwen3-8B" in text
    assert "the log's figures allow" in text


def test_failed_starts_name_the_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    out = _explain_json(PUBLIC / "vllm-0.6-v0-llama-3.1-8b-3090-29k-failed.log", capsys)
    assert out["verdict"] == "failed" and out["failed"]["source"]["line"] == 5
    assert out["observed"]["kv_tokens"] == 23_648
    out = _explain_json(PUBLIC / "vllm-0.19-codellama-34b-tp2-failed.log", capsys)
    assert "below total x gpu_memory_utilization" in out["failed"]["reason"]
    out = _explain_json(PUBLIC / "sglang-2026-deepseek-v4-pro-fp8-h200-failed.log", capsys)
    assert out["failed"]["source"]["line"] == 2


def _manifest() -> list[dict[str, object]]:
    return json.loads((ERAS / "manifest.json").read_text(encoding="utf-8"))


def test_every_era_fixture_is_listed_and_marked_constructed() -> None:
    listed = {e["id"] for e in _manifest()}
    assert listed == {p.stem for p in ERAS.glob("*.log")}
    assert all(e["constructed"] and e["source"] for e in _manifest())


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: str(e["id"]))
def test_era_fixture_is_explained(
    entry: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _explain_json(ERAS / f"{entry['id']}.log", capsys)
    assert out["engine"] == entry["engine"]
    assert out["observed"]["kv_tokens"] == entry["observed_kv_tokens"]
    low, high = out["predicted"]["range"]
    assert low <= entry["observed_kv_tokens"] <= high


def test_sglang_2024_summary_line_matches_exactly() -> None:
    rec = explain_log((ERAS / "sglang-2024-summary.log").read_text(encoding="utf-8"), {})
    assert rec.reconciliation.predicted == 445_458
    assert rec.reconciliation.observed is not None and rec.reconciliation.observed.line == 5


def test_no_server_args_estimates_the_card_and_covers_every_era_rule() -> None:
    text = (ERAS / "sglang-2024-no-server-args.log").read_text(encoding="utf-8")
    rec = explain_log(text, {}).reconciliation
    assert "card memory (GiB)" in rec.estimated
    assert rec.matches and "and the estimated inputs" in rec.verdict
    assert rec.predicted_low < rec.predicted_high


def test_blocks_only_vllm_is_observed_only_without_a_gpu_and_predicted_with_one() -> None:
    text = (ERAS / "vllm-0.4-blocks-only.log").read_text(encoding="utf-8")
    rec = explain_log(text, {}).reconciliation
    assert rec.status == "observed only" and rec.observed is not None
    assert rec.observed.value == 27_869 * 16
    rec = explain_log(text, {"gpu": "A100-80GB"}).reconciliation
    assert rec.status == "match" and rec.predicted_low < rec.predicted_high


def test_mixed_engine_log_explains_the_last_start_and_says_so() -> None:
    text = (ERAS / "mixed-engines.log").read_text(encoding="utf-8")
    e = explain_log(text, {})
    assert e.engine == "sglang"
    assert any("lines of both engines" in n and "vLLM line 2" in n for n in e.reconciliation.notes)
