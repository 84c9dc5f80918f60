"""Speculative decoding in the step cost: the draft's passes, one verify pass, the accept length,
and what the draft costs and buys as the batch grows."""

from __future__ import annotations

import itertools

import pytest

from founding_support import KIMI_LAUNCH
from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.sim.setup import build_config
from kvtier.sim.speculative import accept_length, gains, shape
from kvtier.sim.timing import TimingFlags

EAGLE3 = {
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
KIMI_EAGLE3 = [
    "--",
    *KIMI_LAUNCH,
    "--speculative-draft-model-path",
    "lightseekorg/kimi-k2.5-eagle3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
BENCH = ["simulate", "--generate", "random", "--input-tokens", "2048", "--output-tokens", "512"]
BENCH += ["--range-ratio", "1", "--requests", "32", "--seed", "1", "--gpu", "RTX PRO 6000"]
BENCH += ["--device-tokens", "159277", "--draft-weights-gib", "0.95"]


def _speedups(model: str, gpu: str, tp: int, batches: tuple[int, ...]) -> list[float]:
    d = Deployment(
        Engine.SGLANG,
        model,
        tp=tp,
        gpu=gpu,
        mem_fraction=0.88,
        **EAGLE3,  # type: ignore[arg-type]
    )
    config = build_config(d, 512, device_tokens=400_000, timing=TimingFlags(accept_length=3.0))
    return [g.speedup for g in gains(config.timing, 2048, batches)]


def test_a_dense_models_gain_falls_once_its_verify_turns_compute_bound() -> None:
    # Llama-3.1-8B on an H100 at 2,048 tokens a request: while every pass is memory-bound the
    # gain rises a little (1.82x to 1.97x), the draft's fixed cost of 3 forward passes weighing
    # less against a step that reads more KV; from 64 requests verify's 4 tokens a request turn
    # compute-bound and it falls (1.97x, 1.80x, 1.63x)
    gain = _speedups("llama-3.1-8b", "h100", 1, (1, 4, 16, 64, 128, 256))
    assert all(a < b for a, b in itertools.pairwise(gain[:4]))
    assert all(a > b for a, b in itertools.pairwise(gain[3:]))
    assert gain[0] > 1.8 and gain[-1] < 1.7


def test_an_moe_gains_again_at_medium_batches_as_its_experts_saturate() -> None:
    # Kimi-K2.5 (384 experts, 8 a token) on 8 RTX PRO 6000: one token a request touches 28% of
    # the experts at 16 requests, the 64 tokens of a 4-token verify 74%; at 64 requests 74% and
    # 99.5%: the verify costs relatively less (MoESD, arXiv 2505.19645: the speedup of sparse
    # MoE is not monotonic in the batch), then falls where compute binds
    gain = _speedups("kimi-k2.5", "RTX PRO 6000", 8, (1, 16, 64, 512))
    assert gain[1] < gain[0] and gain[2] > gain[1] and gain[3] < gain[2]


def test_sglang_and_vllm_shapes() -> None:
    d = Deployment(Engine.SGLANG, "llama-3.1-8b", **EAGLE3)  # type: ignore[arg-type]
    assert shape(d, "sglang") == (3, 1, 4)
    # vLLM: num_speculative_tokens k drafts, k + 1 verified
    v = Deployment(Engine.VLLM, "llama-3.1-8b", speculative_algorithm="eagle3")
    assert shape(v.with_values("test", speculative_num_draft_tokens=2), "vllm") == (2, 1, 3)
    # the geometric default: p = 0.72 over 3 steps
    value, source = accept_length("EAGLE3", 3, None, "")
    assert value == pytest.approx((1 - 0.72**4) / 0.28, abs=1e-4) and "MT-Bench" in source


def test_the_founding_deployment_says_what_its_draft_costs_and_buys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BENCH, "--max-concurrency", "1", *KIMI_EAGLE3]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if line.startswith("note: speculative")]
    assert [n.split(": draft")[0] for n in notes] == [
        f"note: speculative decoding at {b} request(s) of 2,304 tokens" for b in (1, 16, 64)
    ]
    # 2.61 tokens for 19.44 ms (3 draft passes and a verify, each with its 1.35 ms forward cost)
    # against 9.64 ms
    assert "1.29x the tokens per second" in notes[0]


@pytest.mark.parametrize(
    ("extra", "launch", "needle"),
    [
        (["--accept-length", "0.5"], KIMI_EAGLE3, "accept length 0.5"),
        (["--accept-length", "4.5"], KIMI_EAGLE3, "the draft's 3 token(s) + 1 = 4"),
        (["--accept-length", "2"], KIMI_EAGLE3[:10], "--accept-length applies to speculative"),
        (
            [],
            [*KIMI_EAGLE3[:10], "--speculative-num-steps", "3"],
            "without --speculative-algorithm",
        ),
        (["--max-concurrency", "-4"], KIMI_EAGLE3, "--max-concurrency"),
    ],
)
def test_bad_speculative_input_exits_2_with_one_line(
    extra: list[str], launch: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main([*BENCH, *extra, *launch])
    except SystemExit as stop:
        code = int(stop.code or 0)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_vllm_speculative_config_commits_the_accept_length_a_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    argv = ["simulate", "--generate", "random", "--input-tokens", "512", "--output-tokens", "256"]
    argv += ["--range-ratio", "1", "--requests", "8", "--seed", "1", "--max-concurrency", "1"]
    argv += ["--gpu", "h100", "--json", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    spec = '{"method": "eagle3", "model": "x/eagle3", "num_speculative_tokens": 3}'
    tpot = []
    for extra in ([], ["--speculative-config", spec]):
        assert main([*argv, *extra]) == 0
        tpot.append(json.loads(capsys.readouterr().out)["tpot_s"]["mean"])
    # vLLM's server model counts tokens: each costs an iteration / 2.61 (3 drafts + a 4-token
    # verify, four forward passes' fixed cost), against a plain step's one (one forward pass);
    # one request at a time, the draft wins: 6.99 ms against 4.43 ms
    assert 1.5 < tpot[0] / tpot[1] < 1.7
