"""The ranks SGLang splits the input embedding over under --enable-dp-attention, by model file and
release (each model file's `embed_tokens = VocabParallelEmbedding(...)`), and the
SGLANG_ENABLE_EMBED_REPLICATION override of deepseek_v2.py's get_embedding_tp_kwargs (v0.5.13+).
At --tp 8 --dp 2 the attention-TP group is 4 ranks: 8 is the full TP, 4 the attention TP, 1 whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.launch import read_launch
from kvtier.engines.sglang.embedding import MODEL_FILES, embedding_ranks
from kvtier.ledger.plan import resolve
from kvtier.model.catalog import resolve_model
from kvtier.model.config import TEXT_ARCHITECTURES, WRAPPER_ARCHITECTURES
from kvtier.model.params import EMBEDDING
from kvtier.model.weights import Splits, weight_bytes

REPLICATE = (("SGLANG_ENABLE_EMBED_REPLICATION", "1"),)


def _ranks(model: str, version: str, env: tuple[tuple[str, str], ...] = (), dp: int = 2) -> int:
    d = Deployment(
        Engine.SGLANG,
        model,
        tp=8,
        dp=dp,
        enable_dp_attention=dp > 1,
        engine_version=version,
        sglang_env=env,
    )
    found = embedding_ranks(resolve_model(model), d)
    return 8 if found is None else found[0]


# (model, release, ranks): each boundary's last release on one side and first on the other
BOUNDARIES = [
    # deepseek_v2.py: whole, attention TP in v0.4.9 only, whole, attention TP from v0.5.8
    ("deepseek-v3", "0.4.8", 1),
    ("deepseek-v3", "0.4.9", 4),
    ("deepseek-v3", "0.4.10", 1),
    ("deepseek-v3", "0.5.7", 1),
    ("deepseek-v3", "0.5.8", 4),
    ("deepseek-v3.2", "0.5.12", 4),
    ("kimi-k2.5", "0.5.13", 4),
    ("glm-5", "0.5.23", 4),
    # qwen2_moe.py: full TP, whole from v0.4.7, attention TP from v0.5.9
    ("qwen3-30b-a3b", "0.4.6", 8),
    ("qwen3-30b-a3b", "0.4.7", 1),
    ("qwen3-235b-a22b", "0.5.8", 1),
    ("qwen3-vl-235b-a22b", "0.5.9", 4),
    # qwen2.py (Qwen3 dense too): full TP, whole from v0.4.9, attention TP from v0.5.9
    ("qwen3-32b", "0.4.8", 8),
    ("qwen3-32b", "0.4.9", 1),
    ("qwen2.5-72b", "0.5.8", 1),
    ("qwen2.5-72b", "0.5.9", 4),
    # glm4_moe.py, glm4_moe_lite.py, gpt_oss.py, llama4.py, qwen3_next.py: whole to v0.5.8
    ("glm-4.7", "0.5.8", 1),
    ("glm-4.7", "0.5.9", 4),
    ("glm-4.7-flash", "0.5.8", 1),
    ("glm-4.7-flash", "0.5.9", 4),
    ("gpt-oss-120b", "0.5.8", 1),
    ("gpt-oss-120b", "0.5.9", 4),
    ("llama-4-scout", "0.5.8", 1),
    ("llama-4-scout", "0.5.9", 4),
    ("qwen3-next-80b-a3b", "0.5.8", 1),
    ("qwen3-next-80b-a3b", "main", 4),
    # minimax_m2.py: full TP to v0.5.10, attention TP from v0.5.11
    ("minimax-m2.5", "0.5.10", 8),
    ("minimax-m2.5", "0.5.11", 4),
    # qwen3_5.py: whole in every release; llama.py and the others: full TP in every release
    ("qwen3.5-397b-a17b", "0.5.9", 1),
    ("qwen3.5-397b-a17b", "0.5.23", 1),
    ("llama-3.1-70b", "0.5.23", 8),
    ("mixtral-8x7b", "0.5.7", 8),
]


@pytest.mark.parametrize(("model", "version", "ranks"), BOUNDARIES)
def test_the_embedding_split_at_each_release_boundary(model: str, version: str, ranks: int) -> None:
    assert _ranks(model, version) == ranks


def test_without_dp_attention_the_embedding_is_over_tp() -> None:
    assert _ranks("qwen3-30b-a3b", "0.5.7", dp=1) == 8
    assert _ranks("deepseek-v3", "0.5.7", dp=1) == 8


@pytest.mark.parametrize(
    ("version", "env", "dp", "ranks"),
    [
        ("0.5.12", REPLICATE, 2, 4),  # before get_embedding_tp_kwargs nothing reads it
        ("0.5.13", REPLICATE, 2, 1),
        ("0.5.23", (("SGLANG_ENABLE_EMBED_REPLICATION", "True"),), 2, 1),
        ("0.5.23", (("SGLANG_ENABLE_EMBED_REPLICATION", "0"),), 2, 4),
        ("0.5.23", (("SGLANG_ENABLE_EMBED_REPLICATION", "maybe"),), 2, 4),  # EnvBool: default
        ("0.5.23", REPLICATE, 1, 1),  # replicated under plain TP too
        ("0.5.12", REPLICATE, 1, 8),
    ],
)
def test_the_replication_env_on_deepseek_v2_models(
    version: str, env: tuple[tuple[str, str], ...], dp: int, ranks: int
) -> None:
    assert _ranks("deepseek-v3", version, env, dp) == ranks


def test_the_replication_env_leaves_other_model_files_alone() -> None:
    assert _ranks("qwen3-235b-a22b", "0.5.23", REPLICATE) == 4
    assert _ranks("glm-4.7", "0.5.23", REPLICATE, dp=1) == 8


@pytest.mark.parametrize(("version", "dp"), [("0.4.5", 1), ("0.5.5", 1), ("0.5.23", 2)])
def test_gemma_3s_embedding_is_whole_at_any_tp(version: str, dp: int) -> None:
    # gemma3_causal.py: embed_tokens is Gemma3TextScaledWordEmbedding, a plain nn.Embedding
    assert _ranks("gemma-3-27b", version, dp=dp) == 1


def test_gemma_3_at_tp1_carries_no_embedding_note() -> None:
    d = Deployment(Engine.SGLANG, "gemma-3-27b", tp=1, engine_version="0.5.23")
    assert embedding_ranks(resolve_model("gemma-3-27b"), d) is None


def test_gemma_3_at_tp2_holds_the_whole_tied_table() -> None:
    # 262,208 x 5,376 bf16 whole on each rank, where a vocab-parallel table holds half
    spec = resolve_model("gemma-3-27b")
    split = weight_bytes(spec, 2).total_bytes
    whole = weight_bytes(spec, 2, splits=Splits(embedding=1)).total_bytes
    assert whole - split == 262_208 * 5_376 * 2 // 2
    plan = resolve(Deployment(Engine.SGLANG, "gemma-3-27b", tp=2, gpu="H100"))
    assert plan.weights_bytes == whole
    assert "a plain nn.Embedding at any TP" in plan.weights_source


def test_every_architecture_kvtier_sizes_has_its_model_file() -> None:
    assert set(TEXT_ARCHITECTURES) | set(WRAPPER_ARCHITECTURES) <= set(MODEL_FILES)


def test_a_pasted_sglang_command_carries_its_sglang_env() -> None:
    words = "SGLANG_ENABLE_EMBED_REPLICATION=1 LMCACHE_X=2 python -m sglang.launch_server --tp 8"
    assert read_launch([words]).values["sglang_env"] == REPLICATE
    vllm = read_launch(["SGLANG_ENABLE_EMBED_REPLICATION=1 vllm serve m"]).values
    assert "sglang_env" not in vllm


def _weights(version: str, env: tuple[tuple[str, str], ...] = ()) -> int:
    d = Deployment(
        Engine.SGLANG,
        "deepseek-v3",
        tp=8,
        dp=2,
        enable_dp_attention=True,
        engine_version=version,
        sglang_env=env,
    )
    weights = resolve(d).weights_bytes
    assert weights is not None
    return weights


def test_the_plans_weights_move_by_three_quarters_of_the_embedding() -> None:
    # DeepSeek-V3: 129,280 x 7,168 bf16 = 1,853,292,544 B whole; at attention TP4 a quarter
    whole = 129_280 * 7_168 * 2
    assert _weights("0.5.7") - _weights("0.5.8") == whole - whole // 4
    assert _weights("0.5.23", REPLICATE) == _weights("0.5.7")


def test_weight_bytes_splits_the_embedding_over_its_own_ranks() -> None:
    spec = resolve_model("deepseek-v3")

    def embedding(splits: Splits) -> int:
        groups = weight_bytes(spec, 8, splits=splits).groups
        return next(g.params_per_rank for g in groups if g.name == EMBEDDING)

    assert embedding(Splits()) == 129_280 // 8 * 7_168
    # the attention's TP alone moves nothing
    assert embedding(Splits(attention=4)) == 129_280 // 8 * 7_168
    assert embedding(Splits(embedding=4)) == 129_280 // 4 * 7_168
    assert embedding(Splits(embedding=1)) == 129_280 * 7_168


LOG = "tests/fixtures/logs/public/sglang-2025-deepseek-v3.2-exp-dp8-b200-indexer.log"


@pytest.mark.parametrize(
    ("version", "count", "low", "high"),
    [
        (None, 1_023_329, 887_716, 1_801_832),  # every candidate release's rule
        ("0.5.7", 1_023_329, 967_491, 1_073_566),  # whole
        ("0.5.8", 1_023_329, 967_491, 1_073_566),  # attention TP1: the same bytes
        ("0.5.23", 887_716, 837_752, 932_700),  # v0.5.17+ cell and fraction, not the embedding
    ],
)
def test_the_dp8_log_at_attention_tp1_is_the_same_either_side(
    version: str | None, count: int, low: int, high: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSeek-V3.2-Exp at --tp 8 --dp 8 (sgl-project/sglang pull request 11309, 975,424 tokens
    logged, no weights line): the attention-TP group is one rank, so whole and attention TP hold
    the same 1.73 GiB and explain's estimate is the same on both sides of v0.5.8."""
    argv = ["explain", LOG, "--gpu", "B200", "--json"]
    argv += ["--sglang-version", version] if version else []
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["observed"]["kv_tokens"] == 975_424
    assert out["predicted"]["kv_tokens"] == count
    assert out["predicted"]["range"] == [low, high]


@pytest.mark.parametrize(
    ("env", "count"), [("SGLANG_ENABLE_EMBED_REPLICATION=1 ", 550_963), ("", 570_743)]
)
def test_explain_reads_the_replication_env_on_the_logged_launch_line(
    env: str, count: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSeek-V3 at --tp 8 --dp 2 on v0.5.23, the log printing its count only: replicated, the
    embedding takes 1.29 GiB more per GPU, 19,780 fewer tokens of 70,272 B."""
    log = tmp_path / "start.log"
    launch = "python -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --dp 2"
    log.write_text(
        f"$ {env}{launch} --enable-dp-attention\n"
        "[2025-10-07 23:17:19 DP0 TP0] KV Cache is allocated. #tokens: 575424, KV size: 43.67 GB\n"
    )
    argv = ["explain", str(log), "--gpu", "H200", "--sglang-version", "0.5.23", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["predicted"]["kv_tokens"] == count
