"""SGLang's multi-turn benchmark as a trace, and what a tiered cache makes of it per round.

Every expected hit rate below follows from the benchmark's shape: round r of a client sends
P_r = (r + 1) x L + r x O tokens (its history plus a new request), and what a cache can hold of
it is the previous prompt's whole blocks, (P_{r-1} // B) x B tokens (the answer's block and what
follows are new).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_support import error_line, run_json
from kvtier.cli import main
from kvtier.errors import KvtierError
from kvtier.sim import reference
from kvtier.sim.multiturn import (
    BENCHMARK_DEFAULTS,
    READY_QUEUE_POLICIES,
    MultiturnSpec,
    multiturn,
)
from kvtier.sim.trace import Trace, load_trace, write_trace
from multiturn_support import multiturn_specs


def spec(**kw: object) -> MultiturnSpec:
    base: dict[str, object] = dict(
        clients=2, rounds=3, request_tokens=100, output_tokens=10, rate=1.0, block_tokens=64
    )
    return MultiturnSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_each_turn_resends_the_history_with_chained_block_ids() -> None:
    reqs = multiturn(spec(ready_queue="fifo", round_barrier=True), seed=1)
    # round 0: 100 tokens, 2 blocks of 64; round 1: 100 + 10 + 100 = 210 tokens, 4 blocks, the
    # first (the only whole block of round 0) kept; round 2: 320 tokens, 5 blocks, 3 kept.
    # Ids are given client by client: client 0 takes 0-6, client 1 from 7 on
    assert [(r.round, r.input_len, r.output_len, r.blocks) for r in reqs] == [
        (0, 100, 10, (0, 1)),
        (0, 100, 10, (7, 8)),
        (1, 210, 10, (0, 2, 3, 4)),
        (1, 210, 10, (7, 9, 10, 11)),
        (2, 320, 10, (0, 2, 3, 5, 6)),
        (2, 320, 10, (7, 9, 10, 12, 13)),
    ]
    assert reqs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(reqs))


@pytest.mark.parametrize("barrier", [False, True])
@pytest.mark.parametrize("queue", READY_QUEUE_POLICIES)
def test_every_client_sends_its_rounds_in_order(barrier: bool, queue: str) -> None:
    s = spec(clients=12, rounds=7, round_barrier=barrier, ready_queue=queue)
    reqs = multiturn(s, seed=5)
    assert len(reqs) == 84 and [r.rid for r in reqs] == list(range(84))
    lengths: dict[int, list[int]] = {}
    for r in reqs:  # a client's round-0 blocks start its every later prompt
        lengths.setdefault(r.blocks[0], []).append(r.input_len)
    assert len(lengths) == 12
    expected = [(k + 1) * 100 + k * 10 for k in range(7)]
    assert all(v == expected for v in lengths.values())
    assert Counter(r.round for r in reqs) == {k: 12 for k in range(7)}
    assert multiturn(s, seed=5) == reqs


def test_the_barrier_sends_whole_rounds_and_without_it_rounds_interleave() -> None:
    held = multiturn(spec(clients=20, rounds=5, round_barrier=True), seed=2)
    assert [r.round for r in held] == sorted(r.round for r in held)
    free = multiturn(spec(clients=20, rounds=5), seed=2)
    assert [r.round for r in free] != sorted(r.round for r in free)


def test_fifo_sends_the_clients_round_robin() -> None:
    reqs = multiturn(spec(clients=3, rounds=4, ready_queue="fifo"), seed=9)
    first = [r.blocks[0] for r in reqs]  # a client's first block starts all its prompts
    assert len(set(first[:3])) == 3 and first == first[:3] * 4


def test_sends_follow_a_poisson_process_of_the_given_rate() -> None:
    reqs = multiturn(spec(clients=100, rounds=20, rate=4.0), seed=3)
    rate = (len(reqs) - 1) / reqs[-1].arrival_s
    assert rate == pytest.approx(4.0, rel=0.05)  # 1,999 gaps: the mean's error is ~2.2%


def test_round_trip_through_mooncake_jsonl(tmp_path: Path) -> None:
    reqs = multiturn(spec(clients=4, rounds=3, rate=50.0), seed=4)
    path = tmp_path / "mt.jsonl"
    write_trace(reqs, path)
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {
        "timestamp": 0,
        "input_length": 100,
        "output_length": 10,
        "hash_ids": list(reqs[0].blocks),
        "round": 0,
    }
    back = load_trace(path, block_size=64)
    assert back.block_size == 64
    assert [(r.round, r.input_len, r.blocks) for r in back.requests] == [
        (r.round, r.input_len, r.blocks) for r in reqs
    ]


@settings(max_examples=60, deadline=None)
@given(multiturn_specs(st.just(3.0), st.sampled_from([1, 16, 64, 512])), st.integers(0, 1 << 32))
def test_any_benchmark_gives_the_ceiling_per_round(s: MultiturnSpec, seed: int) -> None:
    """For every shape, the unbounded cache hits (P_{r-1} // B) x B of P_r in round r."""
    rounds, request, output, block = s.rounds, s.request_tokens, s.output_tokens, s.block_tokens
    result = reference.unbounded(Trace(multiturn(s, seed), block))
    prompt = [(r + 1) * request + r * output for r in range(rounds)]
    ceiling = [0.0] + [(prompt[r - 1] // block) * block / prompt[r] for r in range(1, rounds)]
    assert result.hit_rate_by_round == pytest.approx(ceiling, rel=1e-12, abs=0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"clients": 0}, "--clients must be at least 1"),
        ({"output_tokens": 0}, "--output-tokens must be at least 1"),
        ({"rate": 0.0}, "--rate must be positive"),
        ({"ready_queue": "lifo"}, "--ready-queue must be one of random, fifo"),
        ({"rounds": 40_000, "request_tokens": 4000}, "the last round's prompt would hold"),
        ({"rounds": 1, "request_tokens": 1 << 20, "block_tokens": 1}, "more than the 262,144"),
        ({"clients": 1000, "rounds": 100, "block_tokens": 16}, "more than 16,777,216 hash ids"),
    ],
)
def test_bad_settings_are_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(KvtierError, match=message):
        multiturn(spec(**change), seed=0)


# ---- end to end: per-round hit rates through `kvtier simulate --json` ----------------------

L, OUT, B = 2048, 64, 64
WORKLOAD = [
    "simulate",
    "--generate",
    "multiturn",
    "--clients",
    "16",
    "--rounds",
    "6",
    "--request-tokens",
    str(L),
    "--output-tokens",
    str(OUT),
    "--rate",
    "1",
    "--round-barrier",
    "--block-tokens",
    str(B),
    "--seed",
    "1",
    "--json",
]
# Llama-3.1-8B on one H100: 131,072 KV bytes a token. 16 histories reach 16 x 12,608 tokens in
# the last round; a device pool of 30,000 tokens holds two of them.
DEPLOYMENT = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]
SMALL = [*DEPLOYMENT, "--device-tokens", "30000"]


def expected_by_round(rounds: int) -> list[float]:
    prompt = [(r + 1) * L + r * OUT for r in range(rounds)]
    return [0.0] + [(prompt[r - 1] // B) * B / prompt[r] for r in range(1, rounds)]


def test_an_unbounded_cache_hits_more_each_round(capsys: pytest.CaptureFixture[str]) -> None:
    rates = run_json(capsys, [*WORKLOAD, "--unbounded"])["hit_rate_by_round"]
    assert rates == pytest.approx(expected_by_round(6), rel=1e-12)
    assert all(a < b for a, b in itertools.pairwise(rates))


def test_a_small_device_pool_loses_late_rounds_and_a_host_tier_brings_them_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ceiling = expected_by_round(6)
    device = run_json(capsys, [*WORKLOAD, *SMALL])["hit_rate_by_round"]
    assert max(device[3:]) < 0.1 < 0.7 < min(ceiling[3:])
    hosted = run_json(capsys, [*WORKLOAD, *SMALL, "--hicache-ratio", "8"])
    assert hosted["hit_rate_by_round"] == pytest.approx(ceiling, abs=1e-12)
    assert hosted["hit_rate_by_tier"]["host"] > 0.6


def _l3(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    return run_json(capsys, [*WORKLOAD, *SMALL, "--hicache-ratio", "2", *flags])


def test_a_slow_l3_hurts_under_wait_complete_and_the_other_policies_bound_the_loss(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Host ratio 2 keeps some rounds, the L3 store every history; at 0.2 GB/s reading a
    history of ~10,000 tokens takes ~6.6 s, ~14x the ~0.47 s of recomputing it."""
    store = ["--store-tokens", "10000000"]
    none = _l3(capsys)["ttft_s"]
    fast = _l3(capsys, *store, "--hicache-storage-prefetch-policy", "wait_complete")
    slow = [*store, "--store-gbps", "0.2", "--hicache-storage-prefetch-policy"]
    wait = _l3(capsys, *slow, "wait_complete")
    best = _l3(capsys, *slow, "best_effort")
    timeout = _l3(capsys, *slow, "timeout")
    # the gain: at the default 5 GB/s a store hit comes back faster than it is recomputed
    assert fast["hit_rate_by_tier"]["store"] > 0.5
    assert fast["ttft_s"]["p50"] < 0.8 * none["p50"]
    # the loss: waiting for the slow store is worse than no store at all
    assert wait["ttft_s"]["p50"] > none["p50"] and wait["ttft_s"]["p90"] > 3 * none["p90"]
    # best_effort never waits for the store; timeout waits at most 1 s + 0.25 s per 1024 tokens
    assert best["params"]["prefetches"]["completed"] == 0
    assert best["ttft_s"]["p90"] <= 1.05 * none["p90"]
    longest = 5 * L + 4 * OUT  # the most a history in the store can hold
    assert timeout["ttft_s"]["p90"] <= none["p90"] + 1 + 0.25 * longest / 1024
    assert timeout["params"]["prefetches"]["stopped_early"] > 0
    assert max(best["ttft_s"]["p90"], timeout["ttft_s"]["p90"]) < wait["ttft_s"]["p90"]


def test_a_trace_of_small_blocks_states_its_block_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mt.jsonl"
    assert main([*WORKLOAD[:-1], "-o", str(path)]) == 0
    capsys.readouterr()
    lines = path.read_text().splitlines()
    assert all(json.loads(line)["block_tokens"] == 64 for line in lines)
    stated = run_json(capsys, ["simulate", str(path), "--unbounded", "--json"])
    back = run_json(
        capsys, ["simulate", str(path), "--unbounded", "--block-tokens", "64", "--json"]
    )
    assert stated == back
    assert back["hit_rate_by_round"] == pytest.approx(expected_by_round(6), rel=1e-12)
    line = error_line(capsys, ["simulate", str(path), "--unbounded", "--block-tokens", "512"])
    assert "mt.jsonl:1: the trace states blocks of 64 tokens; --block-tokens says 512" in line


def test_a_trace_that_does_not_state_its_block_size_is_fitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def unstated(rows: list[dict[str, object]]) -> Path:
        path = tmp_path / "unstated.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path

    # 2,048 tokens in 32 blocks: 64 to 66 tokens a block fit; 129 in 3 blocks: 43 to 64; together 64
    rows = [
        {"timestamp": 0, "input_length": 2048, "output_length": 4, "hash_ids": list(range(32))},
        {"timestamp": 1, "input_length": 129, "output_length": 4, "hash_ids": [0, 1, 40]},
    ]
    fitted = run_json(capsys, ["simulate", str(unstated(rows)), "--unbounded", "--json"])
    given = run_json(
        capsys,
        ["simulate", str(unstated(rows)), "--unbounded", "--block-tokens", "64", "--json"],
    )
    assert fitted == given
    line = error_line(capsys, ["simulate", str(unstated(rows[:1])), "--unbounded"])
    assert "unstated.jsonl:1: 32 hash_ids for input_length 2048; expected ceil(2048/512)" in line
    assert "sizes from 64 to 66 tokens all fit them: give --block-tokens" in line
    rows[1]["hash_ids"] = [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
    ]  # 129 tokens in 10 blocks: no size gives both
    line = error_line(capsys, ["simulate", str(unstated(rows)), "--unbounded"])
    assert "unstated.jsonl:1: 32 hash_ids" in line
    assert "and no block size gives every line's count of hash_ids" in line


def test_a_trace_without_rounds_reports_none(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, ["simulate", "--generate", "chat", "--requests", "50", "--unbounded", "--json"]
    )
    assert out["hit_rate_by_round"] is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--generate", "chat", "--clients", "4"], "--clients apply to --generate multiturn"),
        (["--generate", "chat", "--round-barrier"], "--round-barrier apply to --generate"),
        (["--generate", "multiturn", "--requests", "10"], "drop --requests"),
        (["--generate", "agent", "--block-tokens", "64"], "hashes 512-token blocks"),
        (["--generate", "multiturn", "--ready-queue", "lifo"], "invalid choice: 'lifo'"),
        (["--generate", "multiturn", "--clients", "0"], "argument --clients"),
        (
            ["--generate", "multiturn", "--hicache-storage-prefetch-policy", "eager"],
            "invalid choice: 'eager'",
        ),
        (
            ["--generate", "multiturn", "--prefetch-timeout-base", "2"],
            "--prefetch-timeout-base apply to an L3 store: give --store-tokens",
        ),
    ],
)
def test_flags_for_another_input_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert message in error_line(capsys, ["simulate", *argv, "--unbounded", "--json"])


def test_the_cli_names_match_the_models() -> None:
    from kvtier.cli.flags import simulate as table
    from kvtier.sim.servers import prefetch

    assert table.READY_QUEUES == READY_QUEUE_POLICIES
    assert table.MULTITURN_DEFAULTS == BENCHMARK_DEFAULTS
    assert tuple(p.value for p in prefetch.PrefetchPolicy) == table.PREFETCH_POLICIES


def test_the_sglang_version_sets_the_prefetch_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.9 waits for nothing (best_effort); 0.5.12 waits up to 2 s + 0.1 s per 1024 tokens
    (timeout); both named in the run's sources."""
    slow = [*SMALL, "--hicache-ratio", "2", "--store-tokens", "10000000", "--store-gbps", "0.2"]
    old = run_json(capsys, [*WORKLOAD, *slow, "--sglang-version", "0.5.9"])
    new = run_json(capsys, [*WORKLOAD, *slow, "--sglang-version", "0.5.12"])
    assert old["params"]["prefetches"]["policy"] == "best_effort"
    assert new["params"]["prefetches"]["policy"] == "timeout"
    assert "SGLang v0.5.12-v0.5.14 HiCache rules" in new["params"]["sources"]["store prefetch"]
    assert new["ttft_s"]["p90"] > old["ttft_s"]["p90"]
    line = error_line(capsys, [*WORKLOAD, *slow, "--sglang-version", "0.5.19"])
    assert "v0.5.3-v0.5.18, not 0.5.19" in line


def test_sglang_s_published_per_round_hit_rates(capsys: pytest.CaptureFixture[str]) -> None:
    """sglang#27010 (2026-06), bench_multiturn with 128 clients and the round barrier on a
    server whose host tier holds every history ("L2"): rounds 1-4 hit 0.470588, 0.653846,
    0.742857, 0.795455. The lengths are the benchmark's defaults, 512 and 64 (the same author's
    run in sglang#31668 prints their mean prompt, 3,104 tokens over ten rounds). SGLang caches a
    finished turn up to its last generated token, in whole 64-token pages, so of 512 + 63 tokens
    it keeps 512: the previous prompt, as the trace's 64-token blocks give."""
    argv = ["simulate", "--generate", "multiturn", "--clients", "128", "--rounds", "10"]
    argv += ["--rate", "1", "--round-barrier", "--block-tokens", "64", "--unbounded", "--json"]
    rates = run_json(capsys, argv)["hit_rate_by_round"]
    assert len(rates) == 10
    assert sum(512 * (r + 1) + 64 * r for r in range(10)) / 10 == 3104
    assert [round(r, 6) for r in rates[1:5]] == [0.470588, 0.653846, 0.742857, 0.795455]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"round": 0}, {}], r"t\.jsonl:2: `round` must be on every line of a trace or on none"),
        ([{}, {"round": 1}], r"t\.jsonl:2: `round` must be on every line"),
        ([{"round": -1}], r"t\.jsonl:1: `round` must be an integer from 0 to 1,048,576, got -1"),
        ([{"round": True}], r"t\.jsonl:1: `round` must be an integer .* got True"),
        ([{"round": 1.0}], r"t\.jsonl:1: `round` must be an integer .* got 1\.0"),
    ],
)
def test_a_bad_round_is_refused_with_its_line(
    tmp_path: Path, rows: list[dict[str, object]], message: str
) -> None:
    base = {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({**base, **row}) + "\n" for row in rows))
    with pytest.raises(KvtierError, match=message):
        load_trace(path)


def test_mean_ttft_by_round_is_each_round_s_mean(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtier.sim.metrics import summarize
    from kvtier.sim.run import replay
    from kvtier.sim.setup import SimConfig
    from kvtier.sim.timing import Hardware, ModelCost, TimingModel

    hw = Hardware(989.0, 3350.0, 25.0, 100.0, 8)
    tm = TimingModel(ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192), hw, 1)
    trace = Trace(multiturn(spec(clients=6, rounds=4, rate=2.0), seed=3), 64)
    config = SimConfig(200 * 64, 0, 1, 64, "write_through", 64, 8192, tm, ())
    records = replay(trace, config).records
    result = summarize(records, 0.0, True, {})
    for turn, mean in enumerate(result.ttft_mean_s_by_round or ()):
        ttfts = [r.first_token_s - r.arrival_s for r in records if r.round == turn]
        assert mean == pytest.approx(sum(ttfts) / len(ttfts), rel=1e-12)
    assert result.ttft_mean_s_by_round is not None and len(result.ttft_mean_s_by_round) == 4
    unbounded = run_json(capsys, [*WORKLOAD, "--unbounded"])
    assert unbounded["ttft_mean_s_by_round"] is None
