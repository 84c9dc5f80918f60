"""`kvtier plan` and `kvtier advise` end to end, through main() as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import error_line, refusal, run_json
from founding_support import KIMI_LAUNCH
from kvtier.cli import main

SGLANG = KIMI_LAUNCH
GPU = ["--gpu", "RTX PRO 6000", "--gpus", "8"]
MEASURED = ["--free-before-load-gib", "94.04", "--free-after-load-gib", "21.71"]
CATALOG = Path(__file__).resolve().parents[1] / "src" / "kvtier" / "model" / "catalog" / "models"


def test_founding_plan_with_measured_figures(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, ["plan", *GPU, *MEASURED, "--json", "--", *SGLANG])
    assert abs(out["kv_tokens"] - 159_277) / 159_277 < 0.0005
    assert out["kv_bytes_per_token"] == 70_272
    assert out["kv_tokens_range"] is None
    pool = next(i for i in out["ledger"] if i["item"] == "KV cache pool")
    assert pool["gib"] == pytest.approx(10.42, abs=0.01) and pool["exact"]
    assert {"engine", "model", "concurrency", "ledger"} <= set(out)
    # the items divide the whole card (nvidia-smi 97,887 MiB)
    assert sum(i["gib"] for i in out["ledger"]) == pytest.approx(97_887 / 1024, abs=0.01)


def test_founding_plan_estimated(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, ["plan", *GPU, "--json", "--", *SGLANG])
    low, high = out["kv_tokens_range"]
    assert abs(out["kv_tokens"] - 159_277) / 159_277 < 0.10
    assert low <= 159_277 <= high
    weights = next(i for i in out["ledger"] if i["item"] == "weights")
    assert not weights["exact"] and "estimated" in weights["source"]


def test_quiet_prints_key_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *GPU, *MEASURED, "--quiet", "--", *SGLANG]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "kv_tokens 159294"
    assert "kv_pool_gib 10.43" in lines
    # whole requests: floor(159,294 / 8,192) = 19
    assert "requests@8192 19" in lines
    assert not any(line.startswith("kv_tokens_range") for line in lines)  # measured: exact


def test_quiet_lines_are_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["advise", *GPU, "--quiet", "--target-requests", "8", "--context", "32k", "--", *SGLANG]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    keys = [line.split()[0] for line in lines]
    assert len(keys) == len(set(keys))
    assert all(len(line.split()) >= 2 and "," not in line for line in lines), lines
    low, high = next(line for line in lines if line.startswith("kv_tokens_range ")).split()[1:]
    assert int(low) <= 159_277 <= int(high)
    assert "option.kv_cache_fp8_e4m3" in keys and "target_option" in keys


def test_table_marks_estimates_and_states_units(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *GPU, "--", *SGLANG]) == 0
    out = capsys.readouterr().out
    assert "GiB = 2^30 bytes" in out and "~" in out and "estimated" in out


def test_plain_flags_for_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    deployment = ["--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct"]
    deployment += ["--gpu-memory-utilization", "0.95", "--max-model-len", "8192"]
    measured = ["--gpu-mem-gib", "79.19", "--weights-gib", "14.99", "--activation-gib", "1.89"]
    measured += ["--non-torch-gib", "0.25"]
    argv = ["plan", *deployment, *measured, "--vllm-version", "0.19.0", "--context", "8k,32k"]
    out = run_json(capsys, [*argv, "--json"])
    assert abs(out["kv_tokens"] - 476_016) / 476_016 < 0.005
    assert [c["context"] for c in out["concurrency"]] == [8192, 32768]


def test_advise_prints_each_flag_set_whole_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["advise", *GPU, *MEASURED, "--host-ram-gb", "396", "--", *SGLANG]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  flags: --enable-hierarchical-cache --hicache-ratio 4" in lines
    assert "  flags: --kv-cache-dtype fp8_e4m3" in lines
    assert "at most max_running_requests = 48" in " ".join(" ".join(lines).split())


def test_ignored_flags_are_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *GPU, *MEASURED, "--quiet", "--", *SGLANG, "--enable-foo"]) == 0
    assert "--enable-foo" in capsys.readouterr().err


def test_unknown_model_names_closest_ids(capsys: pytest.CaptureFixture[str]) -> None:
    err = error_line(capsys, ["plan", "--engine", "sglang", "--model", "Kimi-K2.6", *GPU])
    assert "closest catalog ids" in err and "moonshotai/Kimi-K2.5" in err


def test_unknown_attention_is_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = json.loads((CATALOG / "qwen3-14b.json").read_text())["config"]
    config["layer_types"] = ["linear_attention"] * config["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    err = error_line(capsys, ["plan", "--engine", "sglang", "--model", str(tmp_path), *GPU])
    assert "layer_types" in err and "linear_attention" in err


def test_no_room_for_kv_is_said_as_the_engine_would(capsys: pytest.CaptureFixture[str]) -> None:
    """A deployment SGLang would refuse is an answer (exit 1), with the fraction that starts."""
    argv = ["plan", "--engine", "sglang", "--model", "Qwen/Qwen3-14B", "--tp", "4"]
    argv += ["--gpu", "RTX 4090", "--free-before-load-gib", "23.08", "--free-after-load-gib"]
    argv += ["16.0", "--mem-fraction-static", "0.25"]
    out = refusal(capsys, argv)
    assert "Not enough memory" in out["message"]
    assert "increase --mem-fraction-static above 0.307" in out["message"]
    # 1 - 16.0 / 23.08 = 0.3068: the first fraction in thousandths above it
    assert out["would_start"]["flag"] == "--mem-fraction-static"
    assert out["would_start"]["value"] == 0.307
    assert out["kv_tokens"] == 0
    # and at 0.307 it starts
    assert main([*argv[:-1], "0.307", "--quiet"]) == 0
    capsys.readouterr()


def test_weights_that_do_not_fit_at_all(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--engine", "sglang", "--model", "moonshotai/Kimi-K2.5", "--tp", "8"]
    out = refusal(capsys, [*argv, "--gpu", "RTX 4090"])
    assert "do not fit" in out["message"]
    # no pool was sized, and no single flag starts it
    assert out["kv_tokens"] is None and out["would_start"] is None
    assert (out["engine"], out["model"], out["tp"]) == ("sglang", "moonshotai/Kimi-K2.5", 8)


def test_a_context_the_pool_cannot_hold_says_the_longest_that_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM V1's check_enough_kv_cache_memory: Llama-3.1-8B at 131,072 tokens on an L4 does not
    start; the count it sized is the longest context that does."""
    argv = ["plan", "--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct"]
    argv += ["--gpu", "L4", "--max-model-len", "131072"]
    out = refusal(capsys, argv)
    assert "estimated maximum model length is" in out["message"]
    fits = out["would_start"]["value"]
    assert out["would_start"]["flag"] == "--max-model-len"
    assert fits == out["kv_tokens"] and fits % 16 == 0
    low, high = out["kv_tokens_range"]
    assert low <= out["kv_tokens"] <= high
    assert main([*argv[:-1], str(fits), "--quiet"]) == 0
    assert main([*argv[:-1], str(fits + 16), "--quiet"]) == 1
    text = capsys.readouterr().out
    assert f"would_start --max-model-len {fits}" in text and "starts 0" in text


def test_too_little_memory_says_the_utilization_that_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM with Llama-3.1-8B's 15 GiB of weights under 0.15 of an H100: no KV block; the
    utilization it names starts, one hundredth less does not."""
    argv = ["plan", "--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct"]
    argv += ["--gpu", "H100", "--max-model-len", "4096", "--gpu-memory-utilization"]
    out = refusal(capsys, [*argv, "0.15"])
    assert out["message"].startswith("No available memory for the cache blocks")
    assert out["kv_tokens"] == 0
    setting = out["would_start"]
    assert setting["flag"] == "--gpu-memory-utilization" and 0.15 < setting["value"] < 0.5
    assert main([*argv, str(setting["value"]), "--quiet"]) == 0
    assert main([*argv, f"{setting['value'] - 0.01:.2f}", "--quiet"]) == 1
    capsys.readouterr()
    # 15 GiB of weights on a 16 GiB card: no utilization does
    small = ["plan", "--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct"]
    assert refusal(capsys, [*small, "--gpu", "RTX 5080"])["would_start"] is None


def test_a_context_beyond_the_model_is_the_engines_refusal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--engine", "sglang", "--model", "Qwen/Qwen3-14B", "--gpu", "H100"]
    out = refusal(capsys, [*argv, "--context-length", "1000000"])
    assert "derived maximum" in out["message"]
    assert out["would_start"]["flag"] == "--context-length"
    assert out["kv_tokens"] is None


def test_bad_input_stays_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    error_line(capsys, ["plan", "--engine", "vllm", "--model", "no/such-model", "--gpu", "L4"])


@pytest.mark.parametrize("launch", [["docker", "run", "x"], ["python -m sglang.launch_server '"]])
def test_malformed_launch_command(capsys: pytest.CaptureFixture[str], launch: list[str]) -> None:
    error_line(capsys, ["plan", *GPU, "--", *launch])


def test_missing_engine_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert "engine" in error_line(capsys, ["plan", "--model", "Qwen/Qwen3-8B"])
    assert "model" in error_line(capsys, ["plan", "--engine", "vllm"])


def test_advise_founding_hicache_and_options(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, ["advise", *GPU, *MEASURED, "--host-ram-gb", "396", "--json", "--", *SGLANG]
    )
    by_name = {o["name"]: o for o in out["options"]}
    ratio4 = by_name["HiCache ratio 4"]
    assert ratio4["host_tokens"] == pytest.approx(637_000, rel=0.001)
    assert ratio4["host_gb_per_rank"] == pytest.approx(44.8, abs=0.05)
    assert ratio4["host_gb_per_node"] == pytest.approx(358, abs=0.5)
    assert ratio4["node_check_ok"] == 1.0
    assert by_name["HiCache ratio 8"]["node_check_ok"] == 0.0
    assert "--enable-hierarchical-cache" in ratio4["flags"]
    fp8 = by_name["KV cache fp8_e4m3"]
    assert fp8["kv_tokens"] == pytest.approx(2 * out["kv_tokens"], rel=0.001)
    fractions = [o for o in out["options"] if o["name"].startswith("--mem-fraction-static")]
    assert fractions and all(o["free_at_end_gib"] >= 2.0 for o in fractions)
    assert all(o["kv_tokens"] > out["kv_tokens"] for o in fractions)


def test_advise_target_inverse(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", *GPU, *MEASURED, "--json", "--target-requests", "5", "--context", "32k"]
    reach = run_json(capsys, [*argv, "--", *SGLANG])["target"]
    assert reach["option"]["flags"] == ["--mem-fraction-static", "0.89"]
    assert reach["option"]["kv_tokens"] >= 5 * 32768
    beyond = run_json(
        capsys,
        [
            "advise",
            *GPU,
            *MEASURED,
            "--json",
            "--target-requests",
            "64",
            "--context",
            "32k",
            "--",
            *SGLANG,
        ],
    )["target"]
    assert beyond["option"] is None and "none reaches it" in beyond["reason"]


def test_plan_never_imports_torch() -> None:
    code = (
        "import sys; from kvtier.cli import main; "
        f"main({['plan', *GPU, *MEASURED, '--quiet', '--', *SGLANG]!r}); "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_plan_never_imports_the_simulator_or_the_html_report() -> None:
    code = (
        "import sys; from kvtier.cli import main; "
        f"main({['plan', *GPU, *MEASURED, '--quiet', '--', *SGLANG]!r}); "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('kvtier.sim', 'kvtier.report.html'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_options_after_the_launch_command_belong_to_it(capsys: pytest.CaptureFixture[str]) -> None:
    # --json after `--` is a word of the engine command (ignored, warned about), not kvtier's
    assert main(["plan", *GPU, *MEASURED, "--quiet", "--", *SGLANG, "--json"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("kv_tokens ") and "--json" in err


def test_context_longer_than_the_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    launch = ["vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "100000"]
    out = refusal(capsys, ["plan", *GPU, "--json", "--", *launch])
    assert "40960" in out["message"] and out["would_start"]["value"] == 40960
