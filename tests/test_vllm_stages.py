"""vLLM V1 under pipeline parallelism: every stage sizes its own pool and the engine takes the
smallest (get_kv_cache_configs); a log prints stage 0's budget, so plan and explain state a range
whose ends are the least stage's count at each end of the stages' budgets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.launch import find_launch, parse_launch
from kvtier.engines.version import Version
from kvtier.engines.vllm.log import parse_vllm
from kvtier.engines.vllm.stages import pp_partition, stages
from kvtier.engines.vllm.versions import V0_8
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan
from kvtier.logs.lines import read_lines
from kvtier.model.catalog import resolve_model

PUBLIC = Path(__file__).parent / "fixtures" / "logs" / "public"


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [
        (36, 2, (18, 18)),
        (61, 2, (31, 30)),  # the remainder before the last stage
        (32, 3, (11, 11, 10)),
        (62, 4, (15, 16, 16, 15)),  # from the second-to-last backwards: the middle stages
        (80, 8, (10,) * 8),
    ],
)
def test_layers_split_as_get_pp_indices(layers: int, pp: int, split: tuple[int, ...]) -> None:
    assert pp_partition(layers, pp, V0_8) == split
    assert sum(split) == layers


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [(32, 3, (10, 10, 12)), (62, 4, (15, 15, 15, 17)), (80, 8, (10,) * 8)],
)
def test_before_v0_8_the_last_stage_takes_the_remainder(
    layers: int, pp: int, split: tuple[int, ...]
) -> None:
    """get_pp_indices v0.6.0 - v0.7.3: L // pp a stage, the last one to the end."""
    assert pp_partition(layers, pp, Version.parse("0.7.3", "vLLM")) == split


def test_the_env_partition_replaces_the_default_split() -> None:
    """VLLM_PP_LAYER_PARTITION: the stated counts, whatever the release's default."""
    for version in ("0.6.0", "0.12.0", "0.33.0"):
        assert pp_partition(36, 3, Version.parse(version, "vLLM"), "10, 8,18") == (10, 8, 18)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("10,x,16", "is not comma-separated layer counts"),
        ("", "is not comma-separated layer counts"),
        ("18,18,0", "names 3 stages; the pipeline has 2"),
        ("20,20", "sums to 40 layers; the model has 36"),
        ("37,-1", "leaves a stage without layers"),
        ("36,0", "leaves a stage without layers"),
    ],
)
def test_a_bad_env_partition_is_refused_naming_it(raw: str, message: str) -> None:
    with pytest.raises(KvtierError, match=f"VLLM_PP_LAYER_PARTITION=.*{message}"):
        pp_partition(36, 2, V0_8, raw)


def test_the_first_stage_holds_the_embedding_the_last_the_head() -> None:
    untied = resolve_model("Qwen/Qwen3-8B")  # lm_head of its own: both ends hold a vocabulary
    first, last = stages(untied, 1, (18, 18), None)
    assert (first.layers, last.layers) == (18, 18) and last.samples and not first.samples
    assert first.weights_bytes == last.weights_bytes
    middle = stages(untied, 1, (12, 12, 12), None)[1]
    assert middle.weights_bytes < first.weights_bytes  # no vocabulary matrix
    tied = resolve_model("Qwen/Qwen3-0.6B")  # tied: the last stage keeps the embedding for it
    first, last = stages(tied, 1, (14, 14), None)
    assert first.weights_bytes == last.weights_bytes


def _h100(pp: int, partition: str | None = None) -> Deployment:
    return Deployment(
        Engine.VLLM,
        "Qwen/Qwen3-8B",
        gpu="H100",
        pp=pp,
        engine_version="0.12.0",
        pp_layer_partition=partition,
    )


def test_plan_ranges_over_the_least_stage() -> None:
    """Qwen3-8B on H100s at PP2, vLLM 0.12: 18 layers a stage; the last stage's budget is 1.34
    GiB short of stage 0's (the sampler's 1,024 rows x 151,936 vocabulary over the forward)."""
    ledger = plan(_h100(2))
    (note,) = [n for n in ledger.notes if n.startswith("PP2 on vLLM V1")]
    assert ledger.range_why == note
    assert "stage 0 (the embedding and 18 layers) holds 885,376 tokens" in note
    assert "the last (the LM head and 18 layers, the sampler's peak) 865,840" in note
    assert ledger.kv_tokens == 865_840  # the smallest stage's
    # the least stage's count at each end of the budgets; stage 0's top (911,008) is not the top
    assert ledger.kv_tokens_range == (844_592, 891_472)
    assert not plan(_h100(1)).range_why


def test_plan_takes_the_env_partition_and_the_least_stage() -> None:
    """VLLM_PP_LAYER_PARTITION=20,16 before `vllm serve`: stage 0 holds 20 of Qwen3-8B's 36
    layers and is now the smallest pool (787,408 tokens against the default 18,18's 865,840);
    16,20 moves the layers to the last stage, whose count (769,840) the engine takes."""
    command = "VLLM_PP_LAYER_PARTITION={} vllm serve Qwen/Qwen3-8B --pipeline-parallel-size 2"
    for given, tokens, least in (
        ("20,16", 787_408, "holds 787,408 tokens, the least of the stages"),
        ("16,20", 769_840, "the last (the LM head and 20 layers, the sampler's peak) 769,840"),
    ):
        launch = parse_launch([command.format(given)])
        assert launch.values["pp_layer_partition"] == given
        ledger = plan(_h100(2, given))
        assert ledger.kv_tokens == tokens and ledger.kv_tokens < plan(_h100(2)).kv_tokens
        assert least in ledger.range_why
        (row,) = [i for i in ledger.inputs if i.name == "layers per pipeline stage"]
        assert row.value == given and row.origin.startswith("VLLM_PP_LAYER_PARTITION")
    (row,) = [i for i in plan(_h100(2)).inputs if i.name == "layers per pipeline stage"]
    assert (row.value, row.origin) == ("18,18", "get_pp_indices default split")
    with pytest.raises(KvtierError, match="VLLM_PP_LAYER_PARTITION='20,20' sums to 40"):
        plan(_h100(2, "20,20"))


@pytest.mark.parametrize(
    ("partition", "tokens", "low", "high"),
    [
        ("10,8,18", 865_840, 845_216, 890_848),  # stage 0 alone: 1,669,120, was the top
        ("10,26", 570_416, 556_144, 587_728),
        ("12,12,12", 1_345_920, 1_314_736, 1_383_648),
    ],
)
def test_a_lopsided_partition_ranges_over_the_least_stage(
    partition: str, tokens: int, low: int, high: int
) -> None:
    """VLLM_PP_LAYER_PARTITION=10,8,18: stage 0 holds 10 of Qwen3-8B's 36 layers, so its count
    (1,669,120) is almost twice the engine's, the 18-layer last stage's 865,840; the range holds
    the engine's count and spreads no wider than the last stage's estimated budget does."""
    ledger = plan(_h100(partition.count(",") + 1, partition))
    assert ledger.kv_tokens == tokens and ledger.kv_tokens_range == (low, high)
    assert low <= tokens <= high < tokens * 1.035  # stage 0 alone was 1.93x - 2.93x
    if partition == "10,8,18":
        assert "stage 0 (the embedding and 10 layers) holds 1,669,120" in ledger.range_why


def test_a_logged_launch_line_carries_its_partition() -> None:
    """vllm-project/vllm#34076 pastes `VLLM_PP_LAYER_PARTITION=16,32 CUDA_DEVICE_ORDER=... vllm
    serve ...`: the assignments before the command are read with it."""
    text = (PUBLIC / "vllm-0.15-qwen3-coder-30b-fp8-pp2-failed.log").read_text(encoding="utf-8")
    args = find_launch(read_lines(text))
    assert args is not None and args.values["pp_layer_partition"] == "16,32"
    module = "X=1 VLLM_PP_LAYER_PARTITION=3,5 python3 -m vllm.entrypoints.openai.api_server -pp 2"
    args = find_launch(read_lines(f"INFO {module}\n"))
    assert args is not None and args.values["pp_layer_partition"] == "3,5"


def test_v0_sizes_the_stage_with_the_most_layers() -> None:
    """vLLM 0.7.3 (V0) takes the least pool over its workers: Llama-3.1-8B's 32 layers at PP3
    split 10,10,12, so the last worker's 12 layers size the count, not ceil(32 / 3) = 11."""
    d = Deployment(
        Engine.VLLM, "meta-llama/Llama-3.1-8B-Instruct", gpu="H100", pp=3, engine_version="0.7.3"
    )
    assert plan(d).kv_bytes_per_token == 12 * 4_096
    custom = plan(dataclasses.replace(d, pp_layer_partition="11,11,10"))
    assert custom.kv_bytes_per_token == 11 * 4_096 and custom.kv_tokens > plan(d).kv_tokens


# A v0.12+ PP2 start as its lines read: stage 0's worker prints the budget, EngineCore the count
# the engine took (the last stage's: 854,272 at this budget, between them 850,000 here).
PP2_LOG = "".join(
    f"{line}\n"
    for line in (
        "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.12.0",
        "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: "
        "{'model': 'Qwen/Qwen3-8B', 'pipeline_parallel_size': 2}",
        "(EngineCore_DP0 pid=2) (Worker_PP0 pid=3) INFO 01-01 00:00:10 [gpu_model_runner.py:1] "
        "Model loading took 7.63 GiB and 5.0 seconds",
        "(EngineCore_DP0 pid=2) (Worker_PP0 pid=3) INFO 01-01 00:00:20 [gpu_worker.py:1] "
        "Available KV cache memory: 60.00 GiB",
        "(EngineCore_DP0 pid=2) INFO 01-01 00:00:21 [kv_cache_utils.py:1] "
        "GPU KV cache size: 850,000 tokens",
    )
)


def test_explain_holds_the_logged_count_in_the_stages_range() -> None:
    e = explain_log(PP2_LOG, {"gpu": "H100"})
    rec = e.reconciliation
    assert rec.status == "match" and rec.verdict.endswith("and the pipeline stages")
    assert any(n.startswith("PP2 on vLLM V1") for n in rec.notes)
    assert not rec.warnings  # the count bounds stage 0's cell from above only
    # stage 0's count (873,808) is not the top: the last stage's budget, estimated from stage 0's
    # and the printed figures' rounding, holds the engine's count below it
    assert (rec.predicted_low, rec.predicted, rec.predicted_high) == (847_728, 854_272, 854_352)


def test_explain_takes_the_partition_from_the_logged_launch_line() -> None:
    """`VLLM_PP_LAYER_PARTITION=20,16 vllm serve ...` on the log's launch line: stage 0, whose
    budget the log prints, holds 20 layers and the least pool, 60 GiB / (20 x 4,096 B) =
    786,432 tokens, so the 850,000 the log (written for 18,18) states no longer matches."""
    launch = "INFO VLLM_PP_LAYER_PARTITION=20,16 vllm serve Qwen/Qwen3-8B -pp 2\n"
    rec = explain_log(launch + PP2_LOG, {"gpu": "H100"}).reconciliation
    assert rec.predicted == 786_432 and rec.status == "mismatch"
    assert rec.ledger is not None
    (row,) = [i for i in rec.ledger.inputs if i.name == "layers per pipeline stage"]
    assert (row.value, row.origin) == ("20,16", "VLLM_PP_LAYER_PARTITION (log line 1)")


def test_per_worker_counts_of_v0_11_are_read_as_their_minimum() -> None:
    """v0.9.2 - v0.11.0 log each worker's count before the engine takes the smallest."""
    lines = PP2_LOG.replace("0.12.0", "0.11.0").splitlines()
    counts = [
        "(EngineCore_DP0 pid=2) INFO 01-01 00:00:21 [kv_cache_utils.py:1] GPU KV cache size: "
        f"{n} tokens"
        for n in ("873,808", "850,000")
    ]
    text = "\n".join([*lines[:-1], *counts]) + "\n"
    s = parse_vllm(read_lines(text))
    assert s.kv_tokens is not None and (s.kv_tokens.value, s.kv_tokens.line) == (850_000, 6)


def test_every_stage_printing_its_budget_gives_stage_0s() -> None:
    """v0.9.2 - v0.11.0 log each worker's 'Available KV cache memory' (vllm-project/vllm#25650,
    PP4: 18.22, 18.02, 18.25 GiB from PP2, PP0, PP1; PP3's line is cut there, 17.80 here): the
    builder derives the others from PP0's."""
    prefix = "INFO 09-25 00:15:14 [gpu_worker.py:298] Available KV cache memory:"
    text = "".join(
        f"(Worker_PP{stage} pid={100 + stage}) {prefix} {gib} GiB\n"
        for stage, gib in ((2, "18.22"), (0, "18.02"), (1, "18.25"), (3, "17.80"))
    )
    available = parse_vllm(read_lines(text)).available_kv()
    assert available is not None and (available.value, available.rank) == (18.02, "PP0")
    plain = text.replace("Worker_PP", "VllmWorker rank=")  # no stage tags: the smallest
    smallest = parse_vllm(read_lines(plain)).available_kv()
    assert smallest is not None and smallest.value == 17.80


@pytest.mark.parametrize(
    ("case", "observed"),
    [
        ("vllm-0.15-qwen3-coder-30b-fp8-pp2-failed", 34_736),
        ("vllm-v1-2026-pp8-failed-needed-71gib", 81_392),
    ],
)
def test_public_pipeline_refusals_are_explained(case: str, observed: int) -> None:
    """vllm-project/vllm#34076 (PP2, VLLM_PP_LAYER_PARTITION=16,32) and #32105 (PP8): the
    refusal's capacity is the count, inside the range the needed figure's geometry gives."""
    text = (PUBLIC / f"{case}.log").read_text(encoding="utf-8")
    rec = explain_log(text, {}).reconciliation
    assert rec.status == "failed" and rec.observed is not None
    assert rec.observed.value == observed
    assert rec.predicted_low <= observed <= rec.predicted_high
