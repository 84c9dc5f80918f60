"""`kvtier advise STARTUP_LOG --workload`: the deployment read from the founding startup log,
every option's figures what `kvtier simulate` prints for its simulate_args, the baseline on the
log's own KV token count; a log that is not a startup log exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_support import chat_trace, cli_json, run_cli
from kvtier.cli.report import with_json

ROOT = Path(__file__).resolve().parents[1]
LOG = "examples/logs/sglang-kimi-k25-eagle3.log"
LOGGED_KV_TOKENS = 159_277  # 'KV Cache is allocated. #tokens: 159277' in the log
CHAT = "tests/fixtures/advise/chat-40.jsonl"
CARD = ["--gpu", "RTX PRO 6000"]  # the log does not name the card


@pytest.fixture(scope="module")
def advised(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    trace = chat_trace(tmp_path_factory.mktemp("advise-log") / "chat.jsonl", 200, seed=1)
    argv = ["advise", str(ROOT / LOG), "--workload", trace, "--host-ram-gb", "396", *CARD]
    data: dict[str, Any] = cli_json(with_json([*argv, "--jobs", "2"]))
    return data


def test_every_option_is_what_simulate_prints_for_its_simulate_args(
    advised: dict[str, Any],
) -> None:
    every = [advised["baseline"], *advised["options"], *advised["combinations"]]
    simulated = [o for o in every if o["outcome"] is not None]
    assert len(simulated) >= 15 and advised["combinations"]
    for option in simulated:
        code, out, err = run_cli(with_json(["simulate", *option["simulate_args"]]))
        assert code == 0, (option["name"], err)
        run = json.loads(out)
        got = option["outcome"]
        assert got["hit_rate"] == run["hit_rate"], option["name"]
        assert got["ttft_p50_s"] == run["ttft_s"]["p50"], option["name"]
        assert got["ttft_p90_s"] == run["ttft_s"]["p90"], option["name"]
        assert got["throughput_tok_s"] == run["throughput_tok_s"], option["name"]
        assert got["rejected"] == run["rejected"], option["name"]
        assert got["device_tokens"] == run["params"]["device_tokens"], option["name"]


def test_the_baseline_runs_on_the_logged_pool_and_the_logged_deployment(
    advised: dict[str, Any],
) -> None:
    base = advised["baseline"]
    assert base["outcome"]["device_tokens"] == LOGGED_KV_TOKENS
    words = base["simulate_args"]
    pinned = words[words.index("--device-tokens") + 1]
    assert int(pinned) == LOGGED_KV_TOKENS
    for flag, value in (("--tp", "8"), ("--mem-fraction-static", "0.88"),
                        ("--model", "moonshotai/Kimi-K2.5"),
                        ("--speculative-algorithm", "EAGLE3")):  # fmt: skip
        assert words[words.index(flag) + 1] == value, flag
    assert "--free-after-load-gib" in words
    assert "159,277" in advised["notes"][0]


def test_an_option_that_changes_the_pool_is_priced_by_the_ledger(
    advised: dict[str, Any],
) -> None:
    by_name = {o["name"]: o for o in advised["options"]}
    fp8 = by_name["KV cache fp8_e4m3"]
    assert "--device-tokens" not in fp8["simulate_args"]
    assert "the ledger's" in fp8["risk"]
    assert fp8["outcome"]["device_tokens"] > LOGGED_KV_TOKENS * 1.9  # half the bytes a token
    host = by_name["HiCache ratio 2"]
    assert host["outcome"]["device_tokens"] == LOGGED_KV_TOKENS


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([CHAT, "--workload", CHAT, *CARD], f"advise {CHAT}: no SGLang or vLLM startup lines"),
        ([LOG, "--workload", CHAT], "--gpu"),
        ([LOG, *CARD], "--workload"),
        ([LOG, "--workload", CHAT, *CARD, "--", "python", "-m", "sglang.launch_server"], LOG),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(["advise", *argv])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and named in err, err
