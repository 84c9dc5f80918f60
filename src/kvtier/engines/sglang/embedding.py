"""The ranks SGLang splits a model's input embedding over, by model file and release.

`VocabParallelEmbedding` (layers/vocab_parallel_embedding.py) splits the padded vocabulary over
the full TP group by default, over the attention-TP group (tp / dp) with `use_attn_tp_group`,
and keeps it whole with `enable_tp=False`. Under --enable-dp-attention (dp > 1) each model file
chooses, and the choice moved release by release (the `embed_tokens` construction):

- deepseek_v2.py (DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5's GlmMoeDsaForCausalLM): whole through
  v0.4.8 (`enable_tp=not global_server_args_dict["enable_dp_attention"]`), attention TP in
  v0.4.9 (`use_attn_tp_group=True`), whole again v0.4.10 - v0.5.7 (v0.5.7 line 3042
  `enable_tp=not is_dp_attention_enabled()`), attention TP from v0.5.8 (line 2523
  `use_attn_tp_group=is_dp_attention_enabled()`), and from v0.5.13 `get_embedding_tp_kwargs()`
  (vocab_parallel_embedding.py line 166; deepseek_v2.py v0.5.13 line 2255, v0.5.23 line 2946):
  attention TP, or whole on every rank, DP attention or not, when SGLANG_ENABLE_EMBED_REPLICATION
  is true (environ.py EnvBool: true/1/yes/y, false/0/no/n, any other value warns and reads as
  the default, False).
- qwen2_moe.py (Qwen3-MoE, Qwen3-VL-MoE): full TP through v0.4.6, whole v0.4.7 - v0.5.8 (v0.5.8
  line 573), attention TP from v0.5.9 (line 577).
- qwen2.py (Qwen2, Qwen2.5-VL, Qwen3 dense): full TP through v0.4.8, whole v0.4.9 - v0.5.8
  (v0.5.8 line 280), attention TP from v0.5.9 (line 281).
- glm4_moe.py, glm4_moe_lite.py, gpt_oss.py, llama4.py, qwen3_next.py: whole through v0.5.8,
  attention TP from v0.5.9 (v0.5.9 lines 900, 443, 519, 490, 822).
- minimax_m2.py: full TP through v0.5.10, attention TP from v0.5.11 (line 1090).
- qwen3_5.py (Qwen3.5): whole in every release (v0.5.9 line 673, v0.5.23 line 1872).
- llama.py (Llama, Phi-3), mistral.py, mixtral.py, gemma2.py, granitemoehybrid.py, lfm2.py:
  full TP, DP attention or not (no DP-attention argument).
- gemma3_causal.py (Gemma 3, from v0.4.5) and gemma4_causal.py (Gemma 4, from v0.5.11): whole on
  every rank at any TP, DP attention or not: `embed_tokens` is `Gemma3TextScaledWordEmbedding`
  (Gemma 4's is the same class), a plain `nn.Embedding` of the whole vocabulary (v0.4.5 line 442,
  v0.5.23 line 532; gemma4_causal.py v0.5.11 line 63), and the tied LM head is that module.

The LM head is not ruled here: every file builds `ParallelLMHead(use_attn_tp_group=
enable_dp_lm_head)`, full TP unless --enable-dp-lm-head, in every release v0.5.5 - v0.5.23.
"""

from __future__ import annotations

from enum import Enum

from kvtier.engines.deployment import Deployment
from kvtier.engines.sglang import versions
from kvtier.engines.sglang.versions import (
    V0_3_0,
    V0_4_7,
    V0_4_9,
    V0_4_10,
    V0_5_8,
    V0_5_9,
    V0_5_11,
    V0_5_13,
)
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.description import ModelSpec

REPLICATION_ENV = "SGLANG_ENABLE_EMBED_REPLICATION"
# environ.py EnvBool.parse: these words, any case; another value is warned about and ignored
_TRUE = ("true", "1", "yes", "y")
_FALSE = ("false", "0", "no", "n")


class Layout(Enum):
    """How a model file's embedding is split under DP attention."""

    TP = "full TP"  # no DP-attention argument: split over tp
    WHOLE = "whole"  # enable_tp=not is_dp_attention_enabled()
    ATTN_TP = "attention TP"  # use_attn_tp_group=is_dp_attention_enabled()
    REPLICABLE = "attention TP unless replicated"  # get_embedding_tp_kwargs()
    UNSPLIT = "whole at any TP"  # a plain nn.Embedding: no vocab parallelism at all


# model file -> (first release, layout) from the oldest; the first entry holds from v0.3.0
_RELEASES: dict[str, tuple[tuple[Version, Layout], ...]] = {
    "deepseek_v2.py": (
        (V0_3_0, Layout.WHOLE),
        (V0_4_9, Layout.ATTN_TP),
        (V0_4_10, Layout.WHOLE),
        (V0_5_8, Layout.ATTN_TP),
        (V0_5_13, Layout.REPLICABLE),
    ),
    "qwen2_moe.py": ((V0_3_0, Layout.TP), (V0_4_7, Layout.WHOLE), (V0_5_9, Layout.ATTN_TP)),
    "qwen2.py": ((V0_3_0, Layout.TP), (V0_4_9, Layout.WHOLE), (V0_5_9, Layout.ATTN_TP)),
    "minimax_m2.py": ((V0_3_0, Layout.TP), (V0_5_11, Layout.ATTN_TP)),
    "qwen3_5.py": ((V0_3_0, Layout.WHOLE),),
}
for _file in ("glm4_moe.py", "glm4_moe_lite.py", "gpt_oss.py", "llama4.py", "qwen3_next.py"):
    _RELEASES[_file] = ((V0_3_0, Layout.WHOLE), (V0_5_9, Layout.ATTN_TP))
_PLAIN = ("llama.py", "mistral.py", "mixtral.py", "gemma2.py")
for _file in (*_PLAIN, "granitemoehybrid.py", "lfm2.py"):
    _RELEASES[_file] = ((V0_3_0, Layout.TP),)
for _file in ("gemma3_causal.py", "gemma4_causal.py"):
    _RELEASES[_file] = ((V0_3_0, Layout.UNSPLIT),)

# architecture -> the model file that builds its embed_tokens (its own or its text model's)
MODEL_FILES = {
    "DeepseekV2ForCausalLM": "deepseek_v2.py",
    "DeepseekV3ForCausalLM": "deepseek_v2.py",
    "DeepseekV32ForCausalLM": "deepseek_v2.py",
    "GlmMoeDsaForCausalLM": "deepseek_v2.py",  # glm4_moe.py, a DeepseekV2ForCausalLM
    "KimiK25ForConditionalGeneration": "deepseek_v2.py",  # kimi_k25.py, DeepseekV3ForCausalLM
    "Qwen3MoeForCausalLM": "qwen2_moe.py",  # qwen3_moe.py Qwen3MoeModel(Qwen2MoeModel)
    "Qwen3VLMoeForConditionalGeneration": "qwen2_moe.py",  # qwen3_vl_moe.py, Qwen3MoeModel
    "Qwen2ForCausalLM": "qwen2.py",
    "Qwen3ForCausalLM": "qwen2.py",  # qwen3.py Qwen3Model(Qwen2Model)
    "Qwen2_5_VLForConditionalGeneration": "qwen2.py",  # qwen2_5_vl.py, Qwen2Model
    "Glm4MoeForCausalLM": "glm4_moe.py",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite.py",
    "GptOssForCausalLM": "gpt_oss.py",
    "Llama4ForConditionalGeneration": "llama4.py",  # mllama4.py, Llama4ForCausalLM
    "Qwen3NextForCausalLM": "qwen3_next.py",
    "MiniMaxM2ForCausalLM": "minimax_m2.py",
    "Qwen3_5ForConditionalGeneration": "qwen3_5.py",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5.py",
    "LlamaForCausalLM": "llama.py",
    "Phi3ForCausalLM": "llama.py",
    "MistralForCausalLM": "mistral.py",  # MistralForCausalLM(LlamaForCausalLM)
    "MixtralForCausalLM": "mixtral.py",
    "Gemma2ForCausalLM": "gemma2.py",
    "Gemma3ForCausalLM": "gemma3_causal.py",
    "Gemma3ForConditionalGeneration": "gemma3_causal.py",  # gemma3_mm.py, Gemma3ForCausalLM
    "Gemma4ForCausalLM": "gemma4_causal.py",
    "Gemma4ForConditionalGeneration": "gemma4_causal.py",  # gemma4_mm.py, Gemma4TextModel
    "GraniteMoeHybridForCausalLM": "granitemoehybrid.py",
    "Lfm2ForCausalLM": "lfm2.py",
}


def layout(architecture: str, version: Version) -> tuple[Layout, str] | None:
    """The layout `architecture`'s model file builds in `version`, and where that is said (the
    file and its releases); None: an architecture no model file here builds."""
    file = MODEL_FILES.get(architecture)
    if file is None:
        return None
    entries = _RELEASES[file]
    i = max(i for i, (since, _) in enumerate(entries) if version >= since)
    since, kind = entries[i]
    span = [f"from v{since}"] if i else []
    if i + 1 < len(entries):
        span.append(f"before v{entries[i + 1][0]}")
    return kind, f"{file} {', '.join(span) or 'in every release'}"


def check_env(env: tuple[tuple[str, str], ...]) -> None:
    """Refuse a SGLANG_ENABLE_EMBED_REPLICATION that SGLang's EnvBool cannot read: SGLang
    warns and keeps the default (false), which a typo like 'ture' would silently turn into."""
    for name, value in env:
        if name == REPLICATION_ENV and value.lower() not in _TRUE + _FALSE:
            raise KvtierError(
                f"{name}={value!r:.40}: SGLang's EnvBool reads {', '.join(_TRUE)} "
                f"or {', '.join(_FALSE)} (any case); give one"
            )


def replicated(d: Deployment) -> bool:
    """SGLANG_ENABLE_EMBED_REPLICATION as SGLang's EnvBool reads it (unset: False)."""
    value = dict(d.sglang_env).get(REPLICATION_ENV)
    return value is not None and value.lower() in _TRUE


def embedding_ranks(model: ModelSpec, d: Deployment) -> tuple[int, str] | None:
    """The ranks `model`'s input embedding is split over and why; None: over TP, as every other
    vocab-parallel layer."""
    found = layout(model.architecture, versions.DEFAULT.resolve(d.engine_version))
    if found is None:
        return None
    kind, where = found
    if kind is Layout.UNSPLIT:
        if d.tp == 1:
            return None
        return 1, f"the embedding whole ({where}: a plain nn.Embedding at any TP)"
    if kind is Layout.REPLICABLE and replicated(d):
        value = dict(d.sglang_env)[REPLICATION_ENV]
        return (
            1,
            f"the embedding whole ({REPLICATION_ENV}={value}; {where}: get_embedding_tp_kwargs)",
        )
    if not (d.enable_dp_attention and d.dp > 1):
        return None
    if kind is Layout.TP:
        return d.tp, f"the embedding at TP{d.tp} ({where}: no DP-attention argument)"
    if kind is Layout.WHOLE:
        return 1, f"the embedding whole ({where}: enable_tp=not is_dp_attention_enabled())"
    attn_tp = d.tp // d.dp
    why = "use_attn_tp_group"
    if kind is Layout.REPLICABLE:
        why = f"get_embedding_tp_kwargs, {REPLICATION_ENV} not set true"
    return attn_tp, f"the embedding at attention TP{attn_tp} ({where}: {why})"
