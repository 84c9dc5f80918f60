"""`kvtier explain LOG` as a user runs it: the founding log, --json, refusals with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"
VLLM = ROOT / "examples" / "logs" / "vllm-llama31-8b-h100.log"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["explain", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_founding_log_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, str(SEED), "--host-ram-gb", "396")
    assert out["engine"] == "sglang"
    assert out["model"]["id"] == "moonshotai/Kimi-K2.5"
    assert out["model"]["source"]["line"] == 1  # server_args model_path
    assert out["observed"]["kv_tokens"] == 159_277
    assert out["predicted"]["kv_tokens"] == 159_294
    assert out["verdict"] == "match"
    assert out["kv_bytes_per_token"] == 70_272
    ledger = {row["item"]: row for row in out["ledger"]}
    assert ledger["target weights"]["gib"] == 72.33
    assert ledger["KV cache pool (target)"]["gib"] == 10.42
    reserve = next(row for row in out["ledger"] if row["part"] == "reserve")
    assert reserve["gib"] == pytest.approx(11.2848)
    assert out["reserve_gib"] == pytest.approx(11.2848)
    options = {" ".join(o["flags"]): o for o in out["options"]}
    assert {"--kv-cache-dtype fp8_e4m3", "--mem-fraction-static 0.90"} <= set(options)
    host = options["--enable-hierarchical-cache --hicache-ratio 4"]
    assert host["host_tokens"] == 637_177
    assert host["host_gb_per_rank"] == pytest.approx(44.776, abs=0.001)
    assert host["host_gb_per_node"] == pytest.approx(358.2, abs=0.1)
    assert "fits in 385.3 GB usable" in host["cost"]  # 396 GB less the engine's 10 GiB reserve
    assert all({"name", "flags", "kv_tokens"} <= set(o) for o in out["options"])
    assert isinstance(out["notes"], list)


def test_flags_before_or_after_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    after = _json(capsys, str(SEED), "--model", "moonshotai/Kimi-K2.5")
    before = _json(capsys, "--model", "moonshotai/Kimi-K2.5", str(SEED))
    assert after["model"]["source"]["text"] == "from --model"
    assert after == before


def test_json_before_or_after_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--json", str(SEED)]) == 0
    before = json.loads(capsys.readouterr().out)
    assert main(["explain", str(SEED), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == before


def test_quiet_prints_key_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--quiet", str(SEED)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "observed_kv_tokens 159277",
        "predicted_kv_tokens 159294",
        "predicted_kv_tokens_range 159218 159371",
    ]
    assert {"verdict match", "kv_cache_dtype bfloat16", "reserve_gib 11.28"} <= set(lines)


def test_terminal_output_names_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(SEED)]) == 0
    out = capsys.readouterr().out
    assert "159,277" in out and "159,294" in out
    assert "match: within the rounding" in out
    assert "11.28" in out  # the reserve


def test_vllm_example(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, str(VLLM))
    assert (out["engine"], out["observed"]["kv_tokens"], out["predicted"]["kv_tokens"]) == (
        "vllm",
        476_016,
        476_032,
    )
    flags = {" ".join(o["flags"]) for o in out["options"]}
    assert "--kv-cache-dtype fp8" in flags
    assert any(f.startswith("--gpu-memory-utilization 0.9") for f in flags)


def test_wrong_engine_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(VLLM), "--engine", "sglang"]) == 2
    err = capsys.readouterr().err
    assert "this is a vLLM log, not SGLang" in err
    assert "Traceback" not in err


def test_missing_lines_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "partial.log"
    log.write_text("[t TP0] Memory pool end. avail mem=11.18 GB\n", encoding="utf-8")
    assert main(["explain", str(log), "--model", "moonshotai/Kimi-K2.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line
    assert "Load weight end." in err and "KV Cache is allocated." in err


def test_unreadable_file_and_launch_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "/nonexistent/server.log"]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["explain", str(SEED), "--", "python", "-m", "sglang.launch_server"]) == 2
    assert "reads the launch settings from the log" in capsys.readouterr().err
