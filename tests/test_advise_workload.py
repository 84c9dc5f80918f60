"""`kvtier advise --workload`: every option's figures are what `kvtier simulate` prints for its
flags, the ranking follows the objective, a compute-bound log says so first, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_support import chat_trace, cli_json, run_cli
from kvtier.cli.flags.deployment import OBJECTIVES as FLAG_OBJECTIVES
from kvtier.cli.report import with_json
from kvtier.sim.advise import GAIN_MIN, OBJECTIVES

ROOT = Path(__file__).resolve().parents[1]
CHAT = "tests/fixtures/advise/chat-40.jsonl"
COMPUTE_BOUND_LOG = "tests/fixtures/observe/sglang-2025-11-prefill-trailing-comma.log"
KIMI = [
    "--gpu", "RTX PRO 6000", "--host-ram-gb", "396", "--",
    "python", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5", "--tp", "8",
    "--mem-fraction-static", "0.88", "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3", "--speculative-num-steps",
    "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip
LLAMA = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]


def _advise(*argv: str) -> dict[str, Any]:
    data: dict[str, Any] = cli_json(with_json(["advise", *argv]))
    return data


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The founding deployment on 200 chat requests, where the pool overflows."""
    trace = chat_trace(tmp_path_factory.mktemp("advise") / "chat.jsonl", 200, seed=1)
    return _advise("--workload", trace, "--jobs", "2", *KIMI)


def _simulated(data: dict[str, Any]) -> list[dict[str, Any]]:
    every = [data["baseline"], *data["options"], *data["combinations"]]
    return [o for o in every if o["outcome"] is not None]


def test_every_option_is_what_simulate_prints_for_its_flags(
    kimi: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    options = _simulated(kimi)
    assert len(options) >= 15 and kimi["combinations"]
    for option in options:
        words = option["simulate_args"]
        code, out, err = run_cli(with_json(["simulate", *words]))
        assert code == 0, (option["name"], err)
        run = json.loads(out)
        got = option["outcome"]
        assert got["hit_rate"] == run["hit_rate"], option["name"]
        assert got["ttft_p50_s"] == run["ttft_s"]["p50"]
        assert got["ttft_p90_s"] == run["ttft_s"]["p90"]
        assert got["throughput_tok_s"] == run["throughput_tok_s"]
        assert got["rejected"] == run["rejected"]
        assert got["pcie_busy_fraction"] == run["pcie_busy_fraction"]
        assert got["preemptions"] == run["params"].get("preemptions")
        assert got["device_tokens"] == run["params"]["device_tokens"]
        assert got["host_tokens"] == run["params"].get("host_tokens")


def test_the_options_flags_reach_the_simulation(kimi: dict[str, Any]) -> None:
    by_name = {o["name"]: o for o in kimi["options"]}
    base = kimi["baseline"]["outcome"]
    assert by_name["KV cache fp8_e4m3"]["outcome"]["device_tokens"] > 1.9 * base["device_tokens"]
    ratio4 = by_name["HiCache ratio 4"]
    # HostKVCache: ratio x the device pool, in whole pages (page size 1 here, plus one)
    assert 0 <= ratio4["outcome"]["host_tokens"] - 4 * base["device_tokens"] <= 1
    assert ratio4["flags"] == ["--enable-hierarchical-cache", "--hicache-ratio", "4"]
    # 8 x the pool does not fit in 396 GB of host RAM: shown, not run
    ratio8 = by_name["HiCache ratio 8"]
    assert not ratio8["fits"] and ratio8["outcome"] is None and "usable" in ratio8["why_not"]
    assert ratio8["rank"] is None
    # the fraction step past the highest safe one is shown, not run
    over = by_name["--mem-fraction-static 0.96"]
    assert not over["fits"] and over["outcome"] is None and "OOM margin" in over["why_not"]
    # a draft step fewer: the launch command's own --speculative-num-steps 3 becomes 2
    fewer = by_name["speculative steps 2"]
    assert fewer["outcome"] is not None
    launch = fewer["simulate_args"][fewer["simulate_args"].index("--") :]
    assert launch.count("--speculative-num-steps") == 1
    assert launch[launch.index("--speculative-num-steps") + 1] == "2"
    replicas = by_name["2 replicas behind sglang-cache-aware"]
    assert replicas["gpus"] == 2 * kimi["baseline"]["gpus"] == 16


def _key(objective: str, o: dict[str, Any]) -> tuple[float, ...]:
    out = o["outcome"]
    if objective == "throughput":
        return (-out["throughput_tok_s"],)
    if objective == "cost":
        return (o["gpus"], o["host_gb_per_node"])
    return (out["ttft_p90_s"],)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_the_ranking_follows_the_objective(objective: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    data = _advise("--workload", CHAT, "--objective", objective, *LLAMA)
    ranked = [o for o in data["options"] if o["rank"] is not None]
    assert [o["rank"] for o in ranked] == list(range(1, len(ranked) + 1))
    gaining = [o for o in ranked if o["gain"] is not None and o["gain"] >= GAIN_MIN]
    assert ranked[: len(gaining)] == gaining  # what beats the baseline comes first
    keys = [_key(objective, o) for o in gaining]
    assert keys == sorted(keys)
    rest = ranked[len(gaining) :]
    assert [_key(objective, o) for o in rest] == sorted(_key(objective, o) for o in rest)


def test_an_slo_puts_what_misses_it_after_what_meets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    data = _advise("--workload", CHAT, "--ttft-p90-max", "0.105", *LLAMA)
    meets = [o["meets_slo"] for o in data["options"] if o["rank"] is not None]
    assert True in meets and False in meets
    assert meets == sorted(meets, reverse=True)
    assert data["baseline"]["meets_slo"] is False


def test_a_compute_bound_log_says_so_first_and_no_option_ranks_without_a_gain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    args = ["--workload", COMPUTE_BOUND_LOG, "--mean-output-tokens", "256", *LLAMA]
    data = _advise(*args)
    assert data["verdict"]["verdict"] == "compute-bound"
    assert data["headline"].startswith("compute-bound: more KV space cannot shorten the queue")
    assert "chunked prefill, replicas, speculative decoding" in data["headline"]
    seen_no_gain = False
    for o in data["options"]:
        gained = o["gain"] is not None and o["gain"] >= GAIN_MIN and o["fits"]
        seen_no_gain = seen_no_gain or not gained
        assert gained or seen_no_gain
        if seen_no_gain:
            assert not (gained and o["rank"] is not None), o["name"]
    # a bigger pool does not shorten this queue: every larger pool and host tier gains nothing
    pools = [o for o in data["options"] if o["name"].startswith(("--mem-fraction", "HiCache"))]
    assert pools and all(o["gain"] in (None, 0.0) for o in pools)
    # fp8 KV gains only what halving the KV a decode step reads gives (0.52% at P90)
    fp8 = next(o for o in data["options"] if o["name"] == "KV cache fp8_e4m3")
    assert fp8["gain"] == pytest.approx(0.0052, abs=0.0005)
    code, out, _ = run_cli(["advise", *args])
    assert code == 0 and out.splitlines()[0] == data["headline"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--objective", "fastest"], "--objective"),
        (["--ttft-p90-max", "0"], "--ttft-p90-max"),
        (["--ttft-p90-max", "-2"], "--ttft-p90-max"),
        (["--ttft-p90-max", "nan"], "--ttft-p90-max"),
        (["--ttft-p90-max", "inf"], "--ttft-p90-max"),
        (["--ttft-p90-max", "2s"], "--ttft-p90-max"),
        (["--workload", "README.md"], "--workload README.md"),
        (["--workload", "tests/fixtures/budget_cases.json"], "--workload"),
        (["--workload", "missing.jsonl"], "missing.jsonl"),
        (["--objective", "cost"], "--objective applies to --workload"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(
    extra: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    workload = [] if "--workload" in extra or "cost" in extra else ["--workload", CHAT]
    code, out, err = run_cli(["advise", *LLAMA, *workload, *extra])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and named in err, err


def test_a_workload_is_metrics_exactly_where_observe_reads_metrics(tmp_path: Path) -> None:
    from kvtier.cli.advise_source import kind_of
    from kvtier.observe.metrics import is_metrics_text

    fixtures = ROOT / "tests" / "fixtures" / "observe"
    bare = tmp_path / "bare.prom"  # a scrape without # HELP / # TYPE lines
    bare.write_text('vllm:num_requests_running{model_name="m"} 3.0\n', encoding="utf-8")
    pasted = tmp_path / "pasted.log"  # a log with a scrape pasted after its first line
    pasted.write_text("INFO engine started\n# TYPE vllm:num_requests_running gauge\n", "utf-8")
    paths = [*sorted(fixtures.glob("*.log")), *sorted(fixtures.glob("*.prom")), bare, pasted]
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert kind_of(str(path)) == ("metrics" if is_metrics_text(text) else "log"), path
    assert kind_of(str(bare)) == "metrics" and kind_of(str(pasted)) == "log"


def test_the_flag_table_names_the_objectives() -> None:
    assert FLAG_OBJECTIVES == OBJECTIVES


def test_a_request_log_is_replayed_as_kvtier_trace_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    log = "tests/fixtures/requests/sglang-0.5.9-level3.log"
    data = _advise("--workload", log, *LLAMA)
    assert data["verdict"] is None or data["verdict"]["source"] == log
    assert any(f"kvtier trace {log} -o FILE" in note for note in data["notes"])
    assert data["baseline"]["outcome"]["hit_rate"] >= 0


def test_an_option_sets_a_launch_flag_in_its_place() -> None:
    from kvtier.cli.advise_workload import with_launch

    launch = ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "3", "--tp=8"]
    assert with_launch(launch, ["--speculative-num-steps", "2", "--tp", "4", "--new", "1"]) == [
        "python", "-m", "sglang.launch_server", "--speculative-num-steps", "2", "--tp=4",
        "--new", "1",
    ]  # fmt: skip


def _option(name: str, p90: float, tok_s: float, fits: bool = True) -> Any:
    from kvtier.sim.advise import AdvisedOption, Outcome

    outcome = Outcome(0.5, p90 / 2, p90, tok_s, None, 0, 0.0, 1000, 0, 8, 8192)
    return AdvisedOption(name, "knob", (), (), fits, None, "", 0.0, 8, outcome)


def test_no_option_ranks_above_the_baseline_without_a_gain() -> None:
    from kvtier.sim.advise import rank

    base = _option("baseline", 10.0, 100.0)
    options = [
        _option("same", 10.0, 100.0),
        _option("tiny", 9.97, 100.0),  # 0.3%: below GAIN_MIN
        _option("slower", 12.0, 100.0),
        _option("faster", 5.0, 90.0),
        _option("unfit", 1.0, 500.0, fits=False),
    ]
    _, ranked = rank(base, options, "ttft-p90", None)
    assert [o.name for o in ranked] == ["faster", "tiny", "same", "slower", "unfit"]
    assert [o.rank for o in ranked] == [1, 2, 3, 4, None]
    _, ranked = rank(base, options, "throughput", None)  # none serves more tokens a second
    assert all(o.gain is not None and o.gain < GAIN_MIN for o in ranked if o.name != "unfit")
    assert [o.name for o in ranked][:4] == ["tiny", "same", "slower", "faster"]  # ties: TTFT p90
    _, ranked = rank(base, options, "ttft-p90", 6.0)
    assert [o.meets_slo for o in ranked][:2] == [True, False]
