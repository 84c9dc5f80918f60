"""`kvtier simulate --replicas N --router POLICY`: a fleet end to end, its shared store, its
output, the shared-prefix generator, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import error_line, run_json
from kvtier.cli import main
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.shared_prefix import SharedPrefixSpec, shared_prefix

SMALL = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]
GEN = [
    "--generate",
    "shared-prefix",
    "--groups",
    "12",
    "--prompts-per-group",
    "4",
    "--system-tokens",
    "3000",
    "--question-tokens",
    "600",
    "--output-tokens",
    "64",
    "--rate",
    "8",
    "--requests",
    "240",
    "--seed",
    "2",
]


@pytest.fixture(scope="module")
def sp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "sp.jsonl"
    assert main(["simulate", *GEN, "-o", str(path)]) == 0
    return path


def test_shared_prefix_ids_by_hand() -> None:
    spec = SharedPrefixSpec(2, 3, 1100, 300, 8, 1.0, 12, 512)
    reqs = shared_prefix(spec, seed=0)
    prompts = {r.blocks for r in reqs}
    assert len(prompts) == 6 and all(r.input_len == 1400 and r.output_len == 8 for r in reqs)
    # 1100 // 512 = 2 whole system blocks shared by a group; ceil(1400 / 512) - 2 = 1 of its own
    groups = {b[:2] for b in prompts}
    assert groups == {(0, 1), (3, 4)} or groups == {(0, 1), (5, 6)}
    assert all(len(b) == 3 for b in prompts)
    # the shuffled 6 prompts, sent twice in the same order
    assert [r.blocks for r in reqs[:6]] == [r.blocks for r in reqs[6:]]
    assert reqs == shared_prefix(spec, seed=0) and reqs != shared_prefix(spec, seed=1)


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("extra", [[], ["--json"], ["--quiet"]])
def test_one_replica_prints_what_one_server_does(
    sp: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    base = ["simulate", str(sp), *SMALL, "--device-tokens", "60000", *extra]
    today = _out(capsys, base)
    assert _out(capsys, [*base, "--replicas", "1"]) == today
    assert _out(capsys, [*base, "--replicas", "1", "--router", "round-robin"]) == today


def test_fleet_json_carries_the_fleet_figures(sp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys,
        ["simulate", str(sp), *SMALL, "--device-tokens", "60000", "--replicas", "3", "--json"],
    )
    assert out["fleet"]["replicas"] == 3 and out["fleet"]["router"] == "sglang-cache-aware"
    assert set(out["ttft_s"]) == {"mean", "p50", "p90", "p99"}
    reps = out["replicas"]
    assert sum(r["requests"] for r in reps) == out["requests"] == 240
    assert out["finished"] + out["rejected"] == 240
    loads = [r["requests"] for r in reps]
    assert out["imbalance"] == pytest.approx(max(loads) / (sum(loads) / 3))
    assert all(0 < r["busy_fraction"] <= 1 for r in reps)
    assert out["fleet"]["preemptions"] == 0  # SGLang's retractions: no output passes the clip
    decisions = out["fleet"]["router_decisions"]
    assert sum(decisions.values()) == 240 and decisions["cache_hit"] > 150


def test_llmd_precise_kv_events_arriving_late_lower_the_hit_rate(
    sp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(sp), *SMALL, "--device-tokens", "20000", "--replicas", "4"]
    argv += ["--router", "llm-d-precise", "--json"]
    at_once = _out(capsys, argv)
    assert _out(capsys, [*argv, "--router-opt", "event-delay-ms=0"]) == at_once
    # 2 s late: a group's next prompt (1.5 s apart on average) is routed before the events
    # of its last one have told the index where its prefix went
    late = json.loads(_out(capsys, [*argv, "--router-opt", "event-delay-ms=2000"]))
    now = json.loads(at_once)
    assert now["fleet"]["router_options"]["event-delay-ms"] == 0
    assert late["hit_rate"] < now["hit_rate"] - 0.05
    assert late["ttft_s"]["p90"] > now["ttft_s"]["p90"]


def test_a_vllm_fleet_counts_its_preemptions(sp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", str(sp), "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100"]
    out = run_json(capsys, [*argv, "--replicas", "2", "--router", "power-of-two", "--json"])
    assert isinstance(out["fleet"]["preemptions"], int)
    assert sum(r["requests"] for r in out["replicas"]) == 240


def test_cache_aware_keeps_groups_together_and_beats_round_robin(
    sp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(sp), *SMALL, "--device-tokens", "20000", "--replicas", "4"]
    out = run_json(capsys, [*argv, "--sweep", "router=random,sglang-cache-aware", "--json"])
    runs = {r["value"]: r for r in out["sweep"]["runs"]}
    assert out["sweep"]["param"] == "router"
    # 12 groups of 3,600 tokens do not fit one 20,000-token replica, but do fit four
    assert runs["sglang-cache-aware"]["hit_rate"] > runs["random"]["hit_rate"] + 0.1


def test_replica_sweep_and_rates(sp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", str(sp), *SMALL, "--device-tokens", "20000", "--router", "round-robin"]
    out = run_json(capsys, [*argv, "--sweep", "replicas=2,4", "--json"])
    runs = out["sweep"]["runs"]
    assert [r["fleet"]["replicas"] for r in runs] == [2, 4]
    assert [len(r["replicas"]) for r in runs] == [2, 4]
    assert all(r["imbalance"] == pytest.approx(1.0) for r in runs)  # 240 split evenly


def test_a_sweep_in_processes_equals_one_in_order(
    sp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(sp), *SMALL, "--device-tokens", "20000", "--replicas", "3", "--json"]
    argv += ["--sweep", "router=random,least-load,sglang-cache-aware,llm-d-precise"]
    assert _out(capsys, [*argv, "--jobs", "4"]) == _out(capsys, argv)


def test_shared_store_serves_one_replicas_prefix_to_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # one long prompt, then other prompts that push it out of device and host, then it again
    # on the other replica (round-robin, 2 replicas: request 21 goes to replica 1): only the
    # shared store can hit it. Replica 0 writes 11 x 8 blocks through a 64-block host tier.
    lines = [(0, list(range(0, 8)))]
    lines += [(1000 + 500 * i, list(range(100 + 10 * i, 108 + 10 * i))) for i in range(1, 21)]
    lines.append((20_000, list(range(0, 8))))
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 4096, "output_length": 4, "hash_ids": ids})
            + "\n"
            for t, ids in lines
        )
    )
    argv = ["simulate", str(trace), *SMALL, "--device-tokens", "16384", "--hicache-ratio", "2"]
    argv += ["--replicas", "2", "--router", "round-robin", "--json"]
    out = run_json(
        capsys,
        [
            *argv,
            "--shared-store-tokens",
            "1000000",
            "--shared-store-gbps",
            "50",
            "--hicache-storage-prefetch-policy",
            "wait_complete",
        ],
    )
    assert set(out["hit_rate_by_tier"]) == {"device", "host", "shared"}
    # the last request, whole from the store but its last token (Req._compute_max_prefix_len)
    assert out["hit_tokens_by_tier"]["store"] == 4095
    assert out["fleet"]["shared_store"] is True
    without = run_json(capsys, argv)
    assert without["hit_tokens_by_tier"]["store"] == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replicas", "0"], "argument --replicas: must be a whole number from 1 to 4,096"),
        (["--replicas", "100000"], "argument --replicas"),
        (["--replicas", "2", "--router", "magic"], "--router 'magic': unknown policy"),
        (["--router-opt", "nope=1"], "--router-opt nope: not an option"),
        (["--router-opt", "balance-rel-threshold=-1"], "--router-opt balance-rel-threshold"),
        (["--router-opt", "cache-threshold=nan"], "--router-opt cache-threshold"),
        (["--replicas", "2", "--sweep", "router=random,magic"], "--router 'magic'"),
        (["--replicas", "2", "--sweep", "replicas=2,0"], "--replicas must be from 1 to 4096"),
        (["--replicas", "2", "--sweep", "replicas=2,x"], "--sweep replicas: 'x'"),
        (["--shared-store-gbps", "4"], "give --shared-store-tokens"),
        (
            ["--replicas", "2", "--shared-store-tokens", "100", "--hicache-ratio", "2"],
            "holds no whole block",
        ),
        (["--replicas", "2", "--unbounded"], "--unbounded / --lru-tokens runs one server"),
        (["--groups", "3"], "--groups apply to --generate shared-prefix"),
        (["--replicas", "2", "--jobs", "2"], "--jobs runs a fleet sweep's points in parallel"),
    ],
)
def test_bad_fleet_input_is_one_line(
    sp: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    err = error_line(capsys, ["simulate", str(sp), *SMALL, "--device-tokens", "60000", *extra])
    assert message in err


def test_generator_needs_its_shape(capsys: pytest.CaptureFixture[str]) -> None:
    err = error_line(capsys, ["simulate", "--generate", "shared-prefix", "--groups", "2"])
    assert "needs --prompts-per-group, --system-tokens, --question-tokens" in err


def _same_requests(one: list[RequestRecord], fleet: list[RequestRecord]) -> None:
    # a run of k decode steps and the same run stopped at every arrival end within float
    # rounding of each other; everything counted is the same
    assert len(one) == len(fleet) == 240
    for a, b in zip(one, fleet, strict=True):
        assert a.first_token_s == pytest.approx(b.first_token_s, rel=1e-9, abs=1e-9)
        assert a.finish_s == pytest.approx(b.finish_s, rel=1e-9, abs=1e-9)
        assert a.hit_tokens == b.hit_tokens and a.admit_s == pytest.approx(b.admit_s, abs=1e-9)


@pytest.mark.parametrize(("engine", "cuts"), [("sglang", 50), ("vllm", 50)])
def test_a_replica_cut_at_its_own_arrivals_runs_as_one_server_cut_at_every_arrival(
    sp: Path, engine: str, cuts: int
) -> None:
    # one replica behind the fleet loop (decode runs cut only when a request reaches it) against
    # the single-server loop (runs stopped at every arrival): the same request times
    from kvtier.engines.deployment import Deployment, Engine
    from kvtier.sim.fleet.loop import FleetLoop
    from kvtier.sim.fleet.rotation import RoundRobin
    from kvtier.sim.servers import build_server
    from kvtier.sim.setup import build_config
    from kvtier.sim.simulation import Simulation
    from kvtier.sim.trace import load_trace, scale_time

    trace = scale_time(load_trace(sp), 4.0)  # 2 requests/s: arrivals meet decode runs
    d = Deployment(engine=Engine(engine), model="llama-3.1-8b", gpu="h100")
    config = build_config(d, trace.block_size, 20000)
    one = Simulation(trace, build_server(config)).run()
    loop = FleetLoop(trace, [build_server(config)], RoundRobin(1))
    fleet = loop.run()
    assert loop._version[0] > cuts  # decode runs were cut at arrivals (SGLang 92, vLLM 93)
    _same_requests(one, fleet)
    # four replicas: cut at their own arrivals, or stopped at every one of the fleet's
    uncut = FleetLoop(trace, [build_server(config) for _ in range(4)], RoundRobin(4))
    uncut._cuts = [None] * 4
    cut = FleetLoop(trace, [build_server(config) for _ in range(4)], RoundRobin(4))
    _same_requests(uncut.run(), cut.run())
    assert sum(cut._version) > 0 and cut.replica_of == uncut.replica_of


def test_the_report_draws_each_replicas_load_and_the_policies_side_by_side(
    sp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", str(sp), *SMALL, "--device-tokens", "20000", "--replicas", "3", "--json"]
    one = tmp_path / "one.json"
    one.write_text(_out(capsys, [*base, "--router", "round-robin"]))
    sweep = tmp_path / "sweep.json"
    sweep.write_text(_out(capsys, [*base, "--sweep", "router=random,sglang-cache-aware"]))
    pages = {}
    for name, saved in (("one", one), ("sweep", sweep)):
        html = tmp_path / f"{name}.html"
        assert main(["report", "--from", f"simulate={saved}", "-o", str(html)]) == 0
        pages[name] = html.read_text()
    assert "Load per replica over time" in pages["one"] and "replica 2" in pages["one"]
    assert "Load per replica" not in pages["sweep"]  # a sweep compares the policies instead
    assert "sglang-cache-aware" in pages["sweep"] and "Time to first token" in pages["sweep"]
    assert json.loads(one.read_text())["replicas"][2]["series"][0][0] >= 0
