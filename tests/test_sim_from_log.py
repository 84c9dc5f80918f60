"""`kvtier simulate --from-log`: a workload fitted from real serving-log excerpts
(tests/fixtures/observe/, sources in its manifest.json), the timing model calibrated to it, and the
calibrated baseline within the tolerances docs/simulate.md states."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.cli.simulate_from_log import with_logged_async
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.sglang import serving
from kvtier.engines.vllm import serving as vllm_serving
from kvtier.errors import KvtierError
from kvtier.observe.samples import read_samples
from kvtier.observe.workload_fit import _spread, fit_workload
from kvtier.sim import baseline
from kvtier.sim.calibrate import refuse_unfittable

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "observe"
QUEUED = FIXTURES / "sglang-2024-10-prefill-cache-hit-rate.log"  # sgl-project/sglang#1612
STEADY = FIXTURES / "sglang-2026-04-no-rank-prefill-decode.log"  # sgl-project/sglang#22166
VLLM = FIXTURES / "vllm-2026-03-v1-waiting-prefill.log"
DECODING = FIXTURES / "vllm-2024-07-v0-low-usage.log"  # nothing queued, one decode reading
CHUNKED = FIXTURES / "sglang-2024-11-prefill-chunked.log"
SPECULATIVE = FIXTURES / "sglang-2026-07-npu-ep-accept-len.log"
DEPLOYMENT = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]


def _fit(path: Path, prompt: int | None = None, output: int | None = None):  # type: ignore[no-untyped-def]
    with path.open("rb") as stream:
        return fit_workload(read_samples(stream, str(path)), prompt, output)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_prefill_line_counts_new_sequences_in_both_readers() -> None:
    line = (
        "Prefill batch. #new-seq: 4, #new-token: 8192, #cached-token: 291, cache hit rate: 2.76%, "
        "token usage: 0.04, #running-req: 1, #queue-req: 38"
    )
    general = line.replace("Prefill batch. ", "Prefill batch, ") + ", #pending-token: 0"
    for text in (line, general):
        reading = serving.read(text)
        assert reading is not None and reading[1]["new_seqs"] == 4.0


def test_queued_log_fits_sglangs_own_cumulative_hit_rate() -> None:
    fit = _fit(QUEUED, output=256)
    # cached 0+291+2753+897+523+632+1832 over all prompt tokens: SGLang's last printed 11.92%
    assert fit.reuse == pytest.approx(6928 / (6928 + 2062 + 6 * 8192))
    assert round(100 * fit.reuse, 2) == 11.92
    # #new-seq 1+4+6+5+5+5+5 = 31, less one for each batch after a full 8,192-token chunk (5)
    assert sum(n for _, _, n in fit.arrivals) == 44  # 1, then 4 + 38 queued, then 1 more
    assert fit.admitted == 26 and fit.accept_length is None
    assert fit.prompt_tokens == round((6928 + 2062 + 6 * 8192) / 26)
    assert fit.window.duration_s == 5.0  # 16:43:29 to 16:43:33, the last second included
    assert fit.window.queued == (0, 38, 34, 30, 26, 22, 18)
    assert fit.window.saturated


def test_whole_second_stamps_are_spread_inside_their_second() -> None:
    assert _spread([0.0, 0.0, 1.0, 1.0, 2.0]) == [0.25, 0.75, 1.25, 1.75, 2.5]


WITHIN = [
    (QUEUED, ["--mean-output-tokens", "256"]),
    (FIXTURES / "sglang-2025-11-prefill-trailing-comma.log", ["--mean-output-tokens", "256"]),
    (FIXTURES / "sglang-2026-07-mamba-pending-token.log", ["--mean-output-tokens", "256"]),
]


@pytest.mark.parametrize(("log", "extra"), WITHIN, ids=[p.stem for p, _ in WITHIN])
def test_calibrated_baseline_within_the_stated_tolerances(
    log: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["simulate", "--from-log", str(log), *DEPLOYMENT, *extra, "--json"], capsys)
    assert code == 0
    payload = json.loads(out)
    rows = {r["metric"]: r for r in payload["baseline"]}
    assert all(r["within"] for r in rows.values()), rows
    hit = rows["hit rate"]
    assert abs(hit["simulated"] - hit["observed"]) <= baseline.HIT_RATE_POINTS
    tps = rows["prompt tokens/s"]
    assert abs(tps["simulated"] - tps["observed"]) <= baseline.THROUGHPUT_SHARE * tps["observed"]
    assert {n["name"] for n in payload["fit"]["inferred"]} >= {
        "reuse",
        "mean prompt tokens",
        "mean output tokens",
        "arrivals",
    }


def test_saturated_log_sets_the_compute_efficiency(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--from-log", str(QUEUED), *DEPLOYMENT, "--mean-output-tokens", "256"]
    payload = json.loads(_run([*argv, "--json"], capsys)[1])
    calibration = payload["calibration"]
    assert calibration["compute_how"].startswith("bisection")
    assert 0.01 < calibration["compute_efficiency"] < 1.0
    assert calibration["hbm_efficiency"] == 0.8  # no decode line: kept
    # a faster GPU needs a lower efficiency for the same observed prompt rate
    faster = json.loads(_run([*argv, "--bf16-tflops", "1978", "--json"], capsys)[1])
    assert faster["calibration"]["compute_efficiency"] < calibration["compute_efficiency"]


def test_decode_lines_set_the_hbm_efficiency(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--from-log", str(DECODING), *DEPLOYMENT, "--mean-prompt-tokens", "2000"]
    payload = json.loads(_run([*argv, "--json"], capsys)[1])
    assert all(r["within"] for r in payload["baseline"])
    calibration = payload["calibration"]
    assert calibration["compute_how"].startswith("kept")  # nothing queued: not identifiable
    assert 0.0 < calibration["hbm_efficiency"] <= 1.0
    assert calibration["hbm_how"].startswith("median of 1 decode step")


@pytest.mark.parametrize(
    ("sweep", "values"),
    [
        ("hicache-ratio", ["0", "2"]),
        ("kv-cache-dtype", ["auto", "fp8_e4m3"]),
        ("mem-fraction-static", ["0.7", "0.9"]),
    ],
)
def test_sweep_answers_the_options_for_the_fitted_traffic(
    sweep: str, values: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--from-log", str(QUEUED), *DEPLOYMENT, "--mean-output-tokens", "256"]
    flag = f"{sweep}={','.join(values)}"
    payload = json.loads(_run([*argv, "--sweep", flag, "--json"], capsys)[1])
    runs = payload["sweep"]["runs"]
    assert [r["value"] for r in runs] == values
    # more KV room (a host tier, FP8, a higher fraction) never loses prefix hits
    assert runs[1]["hit_rate"] >= runs[0]["hit_rate"]
    first, second = (r["params"] for r in runs)
    if sweep == "hicache-ratio":
        assert (first["host_tokens"], first["device_tokens"]) < (
            second["host_tokens"],
            second["device_tokens"],
        )
    else:
        assert first["device_tokens"] < second["device_tokens"]


def test_terminal_view_states_inferences_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--from-log", str(QUEUED), *DEPLOYMENT, "--mean-output-tokens", "256"]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    assert "observed" in out and "simulated" in out and "HBM efficiency" in out
    assert "baseline: within the stated tolerances" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--from-log", str(VLLM)], "--mean-prompt-tokens"),
        (["--from-log", str(QUEUED)], "--mean-output-tokens"),
        (["--from-log", str(FIXTURES / "manifest.json")], "no periodic serving line"),
        (["--from-log", str(FIXTURES / "missing.log")], "cannot read"),
        (["--from-log", str(STEADY), "--generate", "chat"], "fits its own trace"),
    ],
)
def test_unknown_input_fails_closed_naming_it(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["simulate", *argv, *DEPLOYMENT], capsys)
    assert code == 2
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_quiet_gives_key_value_lines(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--from-log", str(QUEUED), *DEPLOYMENT, "--mean-output-tokens", "256"]
    code, out, _ = _run([*argv, "--quiet"], capsys)
    assert code == 0
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["prompt_tokens_per_s.observed"] == "11628.4"  # (6,928 + 2,062 + 6 x 8,192) / 5 s
    assert lines["hit_rate.within"] == "yes"
    assert float(lines["compute_efficiency"]) < 1.0


def test_minimum_requests_follow_from_the_poisson_error_and_the_tolerance() -> None:
    # a count of N Poisson arrivals is +-1/sqrt(N): the fewest N whose error is within the share
    n = baseline.MIN_REQUESTS
    assert n == 25
    assert n**-0.5 <= baseline.THROUGHPUT_SHARE < (n - 1) ** -0.5


@pytest.mark.parametrize(("admitted", "refused"), [(25.0, False), (24.9, True), (24.0, True)])
def test_the_request_floor_is_the_boundary_of_the_refusal(admitted: float, refused: bool) -> None:
    fit = dataclasses.replace(_fit(QUEUED, output=256), admitted=admitted)
    if not refused:
        refuse_unfittable(fit)
        return
    with pytest.raises(KvtierError, match=r"at least 6 s \(25 requests"):  # 25 / (24 / 5 s) = 5.2
        refuse_unfittable(fit)


@pytest.mark.parametrize(
    ("log", "says"),
    [
        # seven lines of #new-seq 2, each filling the 2,048-token chunk: 14, less one for each
        # of the 6 batches after a full chunk = 8 requests over 10:28:29-10:28:30 (2 s);
        # 25 / (8 / 2 s) = 6.25 s
        (CHUNKED, "8 requests admitted in 2 s: a rate from so few is ±35%"),
        (CHUNKED, "fit a window of at least 7 s (25 requests at this log's 4/s)"),
        # 3 requests in 2 s: 25 / 1.5 = 16.7 s
        (STEADY, "3 requests admitted in 2 s: a rate from so few is ±58%"),
        (STEADY, "at least 17 s"),
        # 11 requests in 1 s: 25 / 11 = 2.3 s
        (FIXTURES / "sglang-2025-05-prefill-shared-prefix.log", "at least 3 s"),
        # accept len 3.05, 2.63, 2.83 on its three decode lines
        # a speculative log is fitted now, but this one admits 8 requests in 9 s
        (SPECULATIVE, "fit a window of at least 29 s"),
    ],
)
def test_logs_the_simulator_cannot_fit_are_refused_saying_why(
    log: Path, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--from-log", str(log), *DEPLOYMENT, "--mean-output-tokens", "256"]
    code, _, err = _run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert says in err and str(log) in err


def test_speculative_decoding_lines_give_the_tokens_a_step() -> None:
    # vLLM 0.17 / 0.21 v1/spec_decode/metrics.py, as printed in the specdecode fixture
    v1 = (
        "SpecDecoding metrics: Mean acceptance length: 2.20, Accepted throughput: 15.60 tokens/s, "
        "Drafted throughput: 38.99 tokens/s, Accepted: 78 tokens, Drafted: 195 tokens, "
        "Per-position acceptance rate: 0.615, 0.415, 0.169, Avg Draft acceptance rate: 40.0%"
    )
    assert vllm_serving.read(v1) == ("spec", {"accept_len": 2.2})
    # vLLM 0.6.6 engine/metrics.py: 600 draft tokens of 3 a step = 200 steps, 500 emitted
    v0 = (
        "Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.625, "
        "Number of speculative tokens: 3, Number of accepted tokens: 300, "
        "Number of draft tokens: 600, Number of emitted tokens: 500."
    )
    assert vllm_serving.read(v0) == ("spec", {"accept_len": 2.5})
    # SGLang 0.5.5 scheduler_metrics_mixin.py: the decode line with speculative decoding on
    line = (
        "Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, "
        "accept rate: 0.68, cuda graph: True, gen throughput (token/s): 239.06, #queue-req: 2, "
    )
    reading = serving.read(line)
    assert reading is not None and reading[1]["accept_len"] == 3.05
    with (FIXTURES / "vllm-2026-05-v1-mm-cache-specdecode.log").open("rb") as stream:
        assert read_samples(stream, "specdecode").accept_lengths[0] == 2.2


# what each engine's log leaves to assume: SGLang counts requests (the output length is assumed),
# vLLM none (the mean prompt length is)
ASSUMED = {"sglang": ["--mean-output-tokens", "256"], "vllm": ["--mean-prompt-tokens", "2000"]}
SERVING_LOGS = sorted(FIXTURES.glob("sglang-*.log")) + sorted(FIXTURES.glob("vllm-*.log"))


@pytest.mark.parametrize("log", SERVING_LOGS, ids=lambda p: p.stem)
def test_every_fixture_fits_within_tolerance_or_is_refused_in_one_line(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What runs fits within the stated tolerances; a log faster than the assumed deployment can
    be is refused in one line naming it."""
    engine = log.name.split("-")[0]
    argv = ["simulate", "--from-log", str(log), *DEPLOYMENT, *ASSUMED[engine]]
    code, out, err = _run([*argv, "--json"], capsys)
    if code == 0:
        rows = json.loads(out)["baseline"]
        assert rows and all(r["within"] for r in rows), rows
        assert engine == "vllm" or log in {path for path, _ in WITHIN}
    else:
        assert code == 2 and err.count("\n") == 1 and str(log) in err


def test_a_log_faster_than_the_deployment_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    mtp = FIXTURES / "vllm-2026-05-v1-mtp-kv-full.log"
    argv = ["simulate", "--from-log", str(mtp), *DEPLOYMENT, "--mean-prompt-tokens", "2000"]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "decodes 1.26x faster than the given model can read its bytes" in err


def test_fitted_trace_is_written_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fitted.jsonl"
    argv = ["simulate", "--from-log", str(QUEUED), *DEPLOYMENT, "--mean-output-tokens", "256"]
    code, stdout, err = _run([*argv, "-o", str(out), "--json"], capsys)
    assert code == 0 and f"to {out}" in err
    trace = json.loads(stdout)["trace"]
    lines = out.read_text().splitlines()
    assert len(lines) == trace["requests"]
    assert {json.loads(line)["input_length"] for line in lines} == {2236}  # the fitted mean
    code, replayed, _ = _run(
        ["simulate", str(out), "--block-tokens", "16", *DEPLOYMENT, "--json"], capsys
    )
    assert code == 0 and json.loads(replayed)["requests"] == trace["requests"]


def _spec_config(algorithm: str | None):  # type: ignore[no-untyped-def]
    from kvtier.engines.deployment import Deployment, Engine
    from kvtier.sim.from_log import FIT_BLOCK_TOKENS
    from kvtier.sim.setup import build_config

    d = Deployment(Engine.SGLANG, "llama-3.1-8b", gpu="h100", speculative_algorithm=algorithm)
    return lambda flags: build_config(d, FIT_BLOCK_TOKENS, 200_000, flags)


def test_a_speculative_log_is_fitted_with_its_accept_length() -> None:
    from kvtier.sim.calibrate import calibrate
    from kvtier.sim.timing import TimingFlags

    plain = _fit(DECODING, 2000)
    spec = dataclasses.replace(plain, accept_length=2.5, accept_lines=3)
    fitted = calibrate(spec, TimingFlags(), _spec_config("EAGLE3"))
    assert fitted.flags.accept_length == 2.5
    assert "the log's mean over 3 line(s)" in fitted.flags.accept_origin
    # the same generation rate at 2.5 tokens a request an iteration: each iteration took 2.5x
    # as long, the draft and a 4-token verify included, so the HBM reads fit a slower memory
    one_token = calibrate(plain, TimingFlags(), _spec_config(None))
    assert fitted.flags.hbm_efficiency < one_token.flags.hbm_efficiency
    config = _spec_config("EAGLE3")(fitted.flags)
    d = spec.decode[0]
    step = config.timing.decode_steps_s(
        1, (d.kv_usage or 0) * (spec.pool_tokens or 200_000), d.running
    )
    assert step == pytest.approx(d.running * 2.5 / d.gen_tps, rel=1e-3)


def test_a_speculative_log_needs_the_deployments_algorithm() -> None:
    from kvtier.sim.calibrate import calibrate
    from kvtier.sim.timing import TimingFlags

    spec = dataclasses.replace(_fit(DECODING, 2000), accept_length=2.5, accept_lines=3)
    with pytest.raises(KvtierError, match="names no speculative algorithm"):
        calibrate(spec, TimingFlags(), _spec_config(None))
    with pytest.raises(KvtierError, match="contradicts the log's mean accept length"):
        calibrate(spec, TimingFlags(accept_length=3.0), _spec_config("EAGLE3"))
    with pytest.raises(KvtierError, match="must be from 1 to the draft's 3 token"):
        calibrate(
            dataclasses.replace(spec, accept_length=4.5), TimingFlags(), _spec_config("EAGLE3")
        )


# VllmConfig.__post_init__'s line (config/vllm.py, v0.2x), in the form vLLM prints it
ASYNC_OFF = (
    "(APIServer pid=11574) INFO 03-17 15:38:01 [vllm.py:754] Asynchronous scheduling is disabled.\n"
)
VLLM_SERVE = ["--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]


def _async_log(tmp_path: Path) -> Path:
    log = tmp_path / "vllm.log"
    log.write_text(ASYNC_OFF + VLLM.read_text())
    return log


def _logged_async(path: Path) -> tuple[int, bool] | None:
    with path.open("rb") as stream:
        return read_samples(stream, str(path)).async_scheduling


def test_a_vllm_deployment_takes_the_logged_async_scheduling(tmp_path: Path) -> None:
    """The serving samples read the startup's choice with the rest (no second read of the log):
    its line and the choice, the first such line of the log."""
    log = _async_log(tmp_path)
    log.write_text(log.read_text() + ASYNC_OFF.replace("disabled", "enabled"))
    assert _logged_async(log) == (1, False) and _logged_async(VLLM) is None
    d = with_logged_async(Deployment(Engine.VLLM, "llama-3.1-8b"), (1, False), str(log))
    assert d.async_scheduling is False and dict(d.origins)["async_scheduling"] == "log line 1"
    plain = Deployment(Engine.VLLM, "llama-3.1-8b")
    assert with_logged_async(plain, None, str(VLLM)) is plain


def test_a_flag_the_logged_async_scheduling_contradicts_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _async_log(tmp_path)
    argv = ["simulate", "--from-log", str(log), "--gpu", "h100", "--mean-prompt-tokens", "2000"]
    code, _, err = _run([*argv, *VLLM_SERVE, "--async-scheduling"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert (
        f"--async-scheduling contradicts {log} line 1: vLLM logged asynchronous scheduling disabled"
        in err
    )
