"""inference-perf's load stages (`--rate-stages`): the generator's stages, the fleet loop holding
each stage until the one before has finished, the last stage measured (or every stage, or
every stage but the first, `--measure-stages`), and the refusals."""

from __future__ import annotations

import pytest

from cli_support import error_line, run_json
from kvtier.sim.metrics import ConcurrencyRecorder
from kvtier.sim.shared_prefix import (
    CONSTANT,
    LOAD_TYPES,
    SharedPrefixSpec,
    ladder,
    next_stage_start,
)

SMALL = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]
GEN = [
    *("--generate", "shared-prefix", "--groups", "4", "--prompts-per-group", "3"),
    *("--system-tokens", "3000", "--question-tokens", "600", "--output-tokens", "64"),
    "--seed",
    "2",
]


def test_ladder_by_hand() -> None:
    # 2 groups x 3 prompts; stages of int(4 x 3) = 12 and int(2.5 x 2) = 5 requests
    spec = SharedPrefixSpec(2, 3, 1100, 300, 8, 1.0, 0, 512, ((4.0, 3), (2.5, 2)))
    trace = ladder(spec, seed=0)
    reqs = trace.requests
    assert len(reqs) == 17 and [r.rid for r in reqs] == list(range(17))
    start = trace.stages[0][1]
    assert trace.stages == ((12, start),) and start == reqs[11].arrival_s + 2.0
    # request n of every stage is prompt n mod 6: the first stage twice, the next from prompt 0
    assert [r.blocks for r in reqs[6:12]] == [r.blocks for r in reqs[:6]]
    assert [r.blocks for r in reqs[12:]] == [r.blocks for r in reqs[:5]]
    assert len({r.blocks for r in reqs}) == 6
    times = [r.arrival_s for r in reqs]
    assert times == sorted(times) and times[0] > 0.0 and times[12] > start
    assert trace == ladder(spec, seed=0) and trace != ladder(spec, seed=1)


def test_constant_stages_end_at_their_last_second() -> None:
    # inference-perf's ConstantLoadTimer: int(rate x seconds) exponential gaps of mean 1 / rate,
    # scaled to sum to the stage's seconds, so the last send is at start + seconds exactly
    spec = SharedPrefixSpec(2, 3, 1100, 300, 8, 1.0, 0, 512, ((4.0, 3), (2.5, 2)), CONSTANT)
    trace = ladder(spec, seed=0)
    reqs = trace.requests
    assert len(reqs) == 17
    ((first, start),) = trace.stages
    assert first == 12 and start == pytest.approx(3.0 + 2.0)
    assert reqs[11].arrival_s == pytest.approx(3.0) and reqs[16].arrival_s == pytest.approx(7.0)
    times = [r.arrival_s for r in reqs]
    assert times == sorted(times) and times[0] > 0.0 and times[12] > start
    assert [r.blocks for r in reqs[12:]] == [r.blocks for r in reqs[:5]]
    poisson = ladder(SharedPrefixSpec(2, 3, 1100, 300, 8, 1.0, 0, 512, spec.stages), seed=0)
    assert [r.blocks for r in poisson.requests] == [r.blocks for r in reqs]
    assert [r.arrival_s for r in poisson.requests] != times


def test_the_flag_names_the_timers_and_the_stages_measured() -> None:
    from kvtier.cli.flags import simulate as table
    from kvtier.sim.fleet.run import STAGES_MEASURED

    assert table.LOAD_TYPES == LOAD_TYPES
    assert table.MEASURED_STAGES == STAGES_MEASURED


@pytest.mark.parametrize(
    ("stage_start", "drained", "start"),
    [
        (10.0, 20.3, 23.0),  # queued at 9, polled at 9 + 12 = 21, then 1 s + 1 s
        (10.0, 21.0, 23.0),  # a poll at the very moment sees it
        (10.0, 21.01, 24.0),
        (10.0, 9.0, 11.0),  # finished when queued (a refused request)
    ],
)
def test_next_stage_starts_a_poll_an_interval_and_a_head_start_after(
    stage_start: float, drained: float, start: float
) -> None:
    assert next_stage_start(stage_start, drained) == pytest.approx(start)


def test_a_stage_waits_for_the_one_before() -> None:
    from kvtier.engines.deployment import Deployment, Engine
    from kvtier.sim.fleet.loop import FleetLoop
    from kvtier.sim.fleet.rotation import RoundRobin
    from kvtier.sim.servers import build_server
    from kvtier.sim.setup import build_config

    # 40 requests of 2,000 output tokens in 2 s, then 10: the first stage runs past its sends
    spec = SharedPrefixSpec(4, 3, 3000, 600, 2000, 1.0, 0, 512, ((20.0, 2), (10.0, 1)))
    trace = ladder(spec, seed=3)
    config = build_config(
        Deployment(engine=Engine("vllm"), model="llama-3.1-8b", gpu="h100"), trace.block_size, 60000
    )
    records = FleetLoop(trace, [build_server(config) for _ in range(2)], RoundRobin(2)).run()
    first, nominal = trace.stages[0]
    drained = max(r.finish_s for r in records[:first])
    assert drained > nominal + 5  # the hold matters here
    # the first stage's timer started at 0: the second starts a poll, 1 s and 1 s after it drained
    shift = next_stage_start(0.0, drained) - nominal
    for rec, req in zip(records[first:], trace.requests[first:], strict=True):
        assert rec.arrival_s == pytest.approx(req.arrival_s + shift)
    assert records[first].arrival_s > drained + 2.0


def test_the_last_stage_is_measured(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *GEN, "--rate-stages", "4:5,6:5", *SMALL, "--device-tokens", "60000"]
    out = run_json(capsys, [*argv, "--replicas", "2", "--json"])
    assert out["requests"] == out["measured_requests"] == 30
    assert out["params"]["measured_from_request"] == 20
    assert sum(r["requests"] for r in out["replicas"]) == 50
    constant = run_json(capsys, [*argv, "--replicas", "2", "--load-type", "constant", "--json"])
    assert constant["measured_requests"] == 30 and constant["ttft_s"] != out["ttft_s"]


def test_every_stage_is_measured_with_measure_stages_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # inference-perf's summary report: every stage's requests, the first included, their
    # outputs over the first send to the last response
    argv = ["simulate", *GEN, "--rate-stages", "4:5,6:5", *SMALL, "--device-tokens", "60000"]
    last = run_json(capsys, [*argv, "--replicas", "2", "--json"])
    every = run_json(capsys, [*argv, "--replicas", "2", "--measure-stages", "all", "--json"])
    assert every["requests"] == every["measured_requests"] == 50
    assert every["params"]["measured_from_request"] == 0
    assert every["input_tokens"] > last["input_tokens"] and every["ttft_s"] != last["ttft_s"]
    assert every["duration_s"] > last["duration_s"]
    assert [r["requests"] for r in every["replicas"]] == [r["requests"] for r in last["replicas"]]
    said = run_json(capsys, [*argv, "--replicas", "2", "--measure-stages", "last", "--json"])
    assert said == last


def test_a_ladder_after_its_first_stage_takes_the_mean_of_the_stages_rates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # llm-d's reports' summary across QPS: every stage but the first (the warm-up), TTFT over
    # their requests, output tokens/s the mean of the stages' own; a stage does not see the
    # ones after it, so stage k's own rate is the last stage's of the ladder cut there
    argv = ["simulate", *GEN, *SMALL, "--device-tokens", "60000", "--replicas", "2", "--json"]
    cut = run_json(capsys, [*argv, "--rate-stages", "4:5,6:5"])
    whole = ["--rate-stages", "4:5,6:5,3:5"]
    last = run_json(capsys, [*argv, *whole])
    ladder = run_json(capsys, [*argv, *whole, "--measure-stages", "ladder"])
    assert ladder["measured_requests"] == 45 and ladder["params"]["measured_from_request"] == 20
    for rate in ("throughput_tok_s", "output_tok_s"):
        assert ladder[rate] == pytest.approx((cut[rate] + last[rate]) / 2, rel=1e-12)
    every = run_json(capsys, [*argv, *whole, "--measure-stages", "all"])
    assert every["measured_requests"] == 65 and ladder["ttft_s"] != every["ttft_s"]


def test_the_measured_stage_counts_only_its_own_running_requests(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the recorder's running area covers the whole ladder; the last stage's mean and peak must
    # come from that stage alone (a mean above the peak was the sign they did not)
    argv = ["simulate", *GEN, "--rate-stages", "8:5,1:5", *SMALL, "--device-tokens", "60000"]
    running = run_json(capsys, [*argv, "--replicas", "2", "--json"])["concurrency"]
    whole_run_peak = max(n for _, n, _ in running["series"])  # the 8-a-second stage's
    assert 0 < running["mean"] <= running["max"] < whole_run_peak


def test_a_ladders_pcie_share_is_its_link_seconds_over_its_own_span(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 48 host loads of 6,000-token prefixes in the first stage, one request in the last: the
    # link's seconds over the last stage's 0.12 s read 1,409% busy; over the whole ladder's span
    gen = ["--generate", "shared-prefix", "--groups", "16", "--prompts-per-group", "3"]
    gen += ["--system-tokens", "6000", "--question-tokens", "600", "--output-tokens", "16"]
    argv = ["simulate", *gen, "--seed", "2", "--rate-stages", "60:5,1:1", *SMALL]
    argv += ["--device-tokens", "14000", "--hicache-ratio", "8", "--replicas", "2", "--json"]
    out = run_json(capsys, argv)
    assert out["measured_requests"] == 1
    assert 0.0 < out["pcie_busy_fraction"] < 1.0


def test_the_window_walks_only_the_samples_inside_it() -> None:
    c = ConcurrencyRecorder()
    for t, n in [(0.0, 4), (2.0, 10), (4.0, 2), (6.0, 0)]:
        c.observe(t, n, 0)
    assert c.window(0.0, 6.0) == (10, (4 * 2 + 10 * 2 + 2 * 2) / 6)
    assert c.window(4.0, 6.0) == (2, 2.0)
    assert c.window(3.0, 5.0) == (10, (10 * 1 + 2 * 1) / 2)
    assert c.window(5.0, 5.0) == (0, 0.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rate-stages", "4:5", "--rate", "3"], "--rate-stages replaces --rate"),
        (["--rate-stages", "4:5", "--requests", "3"], "--rate-stages replaces --requests"),
        (["--rate-stages", "4:5", "--warmup-fraction", "0.5"], "does not take --warmup-fraction"),
        (["--rate-stages", "4:5", "--replicas", "1"], "--rate-stages runs a fleet"),
        (["--rate-stages", "0.1:5", "--replicas", "2"], "every stage must send a request"),
        (["--rate-stages", "4", "--replicas", "2"], "argument --rate-stages: wants RATE:SECONDS"),
        (["--rate-stages", "4:x", "--replicas", "2"], "argument --rate-stages: wants RATE:SECONDS"),
        (["--rate-stages", "nan:5", "--replicas", "2"], "argument --rate-stages"),
        (["--load-type", "constant", "--replicas", "2"], "--load-type times --rate-stages"),
        (["--measure-stages", "all", "--replicas", "2"], "--measure-stages picks the --rate"),
        (["--rate-stages", "4:5", "--measure-stages", "one", "--replicas", "2"], "measure"),
        (
            ["--rate-stages", "4:5", "--measure-stages", "ladder", "--replicas", "2"],
            "--measure-stages ladder measures the stages after the first (its warm-up): give two "
            "or more --rate-stages, not 1",
        ),
        (["--rate-stages", "4:5", "--load-type", "even", "--replicas", "2"], "--load-type"),
    ],
)
def test_bad_stages_are_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    err = error_line(capsys, ["simulate", *GEN, *extra, *SMALL, "--device-tokens", "60000"])
    assert message in err
