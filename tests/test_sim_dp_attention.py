"""SGLang's DP attention in simulate: DP ranks with their own caches, requests in turn, one step of
every rank together, the MLP over the gathered tokens at full TP."""

from __future__ import annotations

import dataclasses

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.sim.dp_attention import DPAttention, RankWork
from kvtier.sim.run import replay
from kvtier.sim.setup import build_config
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import Trace, TraceRequest

MOE = Deployment(Engine.SGLANG, "Qwen/Qwen3-30B-A3B", tp=2, gpu="H100")
DP2 = dataclasses.replace(MOE, dp=2, enable_dp_attention=True)

# a dense model of 4 layers: 1e9 active parameters of which 2e8 attention, hidden 1,000
COST = ModelCost(1_000_000_000, 1.5e9, 2_000, 4, 4_000, hidden_size=1_000)
HW = Hardware(100.0, 1000.0, 25.0, 100.0, 8, allreduce_gbps=100.0, allreduce_latency_s=1e-5)
TM = TimingModel(COST, HW, 4, 0.5, 0.5, dp_attention=DPAttention(2, 2, 1e8, 200_000_000))


def ring(ranks: int, tokens: float) -> float:
    return 1e-5 + tokens * 1_000 * 2 * 2 * (ranks - 1) / ranks / 100e9


def test_a_decode_step_pads_every_rank_to_the_largest_and_gathers_it() -> None:
    """Ranks decoding 3 and 1 requests: 2 x 4 >= 2 x 3, so MAX_LEN: the MLP over 6 tokens."""
    works = [RankWork(batch=3, kv_tokens=3_000), RankWork(batch=1, kv_tokens=500)]
    rate, peak = 1000e9 * 0.5, 100e12 * 0.5
    attention = max(
        (1e8 + 3_000 * 2_000) / rate, (2 * 2e8 * 3 + 2 * 4 * 4_000 * 3_000) / (2 * peak)
    )
    mlp = max((1.5e9 - 1e8) / rate, 2 * 8e8 * 6 / (4 * peak))
    layer = ring(2, 3) + ring(4, 3) + ring(4, 6)  # attention group, all-gather (half), MLP
    assert TM.dp_attention is not None
    assert TM.dp_attention.step_s(TM, works) == pytest.approx(attention + mlp + 4 * layer)


def test_a_prefill_in_the_step_sums_the_tokens_and_the_decode_waits_for_it() -> None:
    """SUM_LEN with an extend in the batch: a one-token decode rank pays the 4,096-token
    prefill's step, and the MLP runs over 4,097 tokens."""
    split = TM.dp_attention
    assert split is not None
    prefill = RankWork(chunks=((4_096, 0),))
    both = split.step_s(TM, [prefill, RankWork(batch=1, kv_tokens=100)])
    peak = 100e12 * 0.5
    attention = (2 * 2e8 * 4_096 + 2 * 4 * 4_000 * 4_096 * 4_097 / 2) / (2 * peak)
    mlp = 2 * 8e8 * 4_097 / (4 * peak)
    layer = ring(2, 4_096) + ring(4, 4_097) + ring(4, 4_097)
    assert both == pytest.approx(attention + mlp + 4 * layer)
    assert both > split.step_s(TM, [RankWork(batch=1, kv_tokens=100)]) * 10


def _shared(prefix_blocks: int, n: int) -> Trace:
    """`n` requests a minute apart, each `prefix_blocks` shared 512-token blocks and one own."""
    reqs = tuple(
        TraceRequest(i, 60.0 * i, 512 * (prefix_blocks + 1), 8,
                     (*range(prefix_blocks), 1_000 + i))
        for i in range(n)
    )  # fmt: skip
    return Trace(reqs)


def test_requests_go_to_the_ranks_in_turn_each_with_its_own_cache() -> None:
    """Four requests sharing 4 blocks: one server hits them in requests 1-3; two DP ranks get
    requests 0, 2 and 1, 3, so only 2 and 3 hit (each rank's own radix cache)."""
    trace = _shared(4, 4)
    one = replay(trace, build_config(MOE, 512))
    two = replay(trace, build_config(DP2, 512))
    assert [sum(r.hit_tokens.values()) for r in one.records] == [0, 2048, 2048, 2048]
    assert [sum(r.hit_tokens.values()) for r in two.records] == [0, 0, 2048, 2048]


def test_the_attention_is_split_over_the_attention_group_and_the_mlp_over_all() -> None:
    config = build_config(DP2, 512)
    split = config.timing.dp_attention
    assert split is not None and (split.dp, split.attn_tp) == (2, 1)
    plain = build_config(MOE, 512).timing.model.weight_bytes_per_rank
    # the attention projections whole on each GPU (attention TP1) where TP2 halved them; the
    # input embedding, which the ledger holds whole here (qwen2_moe.py at attention TP from
    # v0.5.9), is read as its looked-up rows only, a row of 2,048 bf16 values a token either way
    assert config.timing.model.weight_bytes_per_rank - plain == pytest.approx(
        split.attention_bytes / 2
    )
    assert config.timing.model.embedding_row_bytes == 2_048 * 2
    assert "2 DP ranks of attention TP1" in dict(config.sources)["DP attention"]


def test_dp_attention_at_dp_1_is_plain_tp() -> None:
    config = build_config(dataclasses.replace(MOE, dp=1, enable_dp_attention=True), 512)
    assert config.timing.dp_attention is None


def test_a_log_calibration_under_dp_attention_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main([
        "simulate", "--from-log", "examples/logs/sglang-serving-queue.log", "--gpu", "h100",
        "--mean-output-tokens", "256", "--", "python", "-m", "sglang.launch_server",
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2", "--dp", "2",
        "--enable-dp-attention",
    ])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--from-log with --enable-dp-attention" in err[0]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("--hicache-ratio", "2"), "the hierarchical cache"),
        (("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x/y"),
         "speculative decoding"),
        (("--replicas", "2", "--router", "round-robin"), "--replicas"),
    ],
)  # fmt: skip
def test_what_dp_attention_is_not_modelled_with_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: object, extra: tuple[str, ...], named: str
) -> None:
    code = main([
        "simulate", "--generate", "random", "--input-tokens", "512", "--output-tokens", "8",
        "--requests", "4", "--seed", "1", "--gpu", "h100", *extra, "--",
        "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-30B-A3B",
        "--tp", "2", "--dp", "2", "--enable-dp-attention",
    ])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and named in err[0], err


@pytest.mark.parametrize(("version", "gathered"), [("0.5.9", 4), ("0.5.10", 8), ("0.5.23", 8)])
def test_a_tie_between_the_paddings_follows_the_release(version: str, gathered: int) -> None:
    """Four ranks decoding 2, 1, 1, 0: 2 x 4 == 4 x 2. SUM_LEN through v0.5.9 (`>`), MAX_LEN
    from v0.5.10 (`>=`)."""
    d = dataclasses.replace(MOE, tp=4, dp=4, enable_dp_attention=True, engine_version=version)
    split = build_config(d, 512).timing.dp_attention
    assert split is not None
    assert split.gathered([2, 1, 1], extend=False) == gathered
    assert split.gathered([2, 1, 1], extend=True) == 4


def test_each_rank_prefills_the_chunk_size_over_dp() -> None:
    """server_args under DP attention: chunked_prefill_size // dp_size a rank."""
    one, two = build_config(MOE, 512), build_config(DP2, 512)
    assert two.chunked_prefill_size == one.chunked_prefill_size // 2 == 4096
    assert "// --dp 2 a DP rank" in dict(two.sources)["chunked prefill size"]
