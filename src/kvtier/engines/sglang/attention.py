"""The ranks SGLang splits a model's attention projections over under DP attention, by model file
and release.

`QKVParallelLinear` and `RowParallelLinear` (layers/linear.py) split over the full TP group
unless the model file passes the attention-TP group (tp / dp): `tp_rank=attn_tp_rank,
tp_size=attn_tp_size` from `get_attention_tp_rank/size()` through v0.5.22, `parallel_group=
"attn_tp"` in v0.5.23. Read from each release's wheel (the attention class of the file):

- deepseek_v2.py (DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5) and llama4.py: attention TP in every
  release read (v0.4.6 lines 462, 199; v0.5.23 through get_parallel().attn_tp_size);
- qwen2_moe.py (Qwen2-MoE) and qwen3_moe.py (Qwen3-MoE, Qwen3-VL-MoE's Qwen3MoeLLMModel): full
  TP through v0.4.6, attention TP from v0.4.7 (v0.4.7 lines 241, 393);
- qwen3.py (Qwen3 dense): full TP through v0.4.8, attention TP from v0.4.9 (line 94);
- glm4_moe.py, glm4_moe_lite.py (DeepseekV2AttentionMLA), gpt_oss.py, qwen3_next.py,
  qwen3_5.py: attention TP in every release that has them (v0.5.9 lines 222, 347, 271, 244,
  124);
- minimax_m2.py: full TP through v0.5.10 (line 546 `get_tensor_model_parallel_world_size()`),
  attention TP from v0.5.11;
- llama.py (Llama, Phi-3, Mistral), qwen2.py (Qwen2, Qwen2.5-VL), mixtral.py, gemma2.py,
  gemma3_causal.py, gemma4_causal.py, granitemoehybrid.py, lfm2.py: full TP in every release
  through v0.5.23 (llama.py v0.5.23 line 181 `tp_size = get_parallel().tp_size`, no
  parallel_group).

The KV pool does not follow the file: the model runner sizes its heads per rank at attention
TP in every release (v0.4.7 model_runner.py `get_num_kv_heads(get_attention_tp_size())`, v0.5.9
model_runner_kv_cache_mixin.py, v0.5.23 pool_configurator.py `attn_tp_size`), so kvtier keeps
the pool's cell at tp / dp. SGLang checks no architecture before DP attention; a full-TP file's
layers then hold tp's share of the heads beside a pool of tp / dp's. An architecture whose file
is not read here is refused under DP attention, where its attention was taken at tp / dp.
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.engines.log_geometry import STAND_IN_ARCHITECTURE
from kvtier.engines.sglang.lm_head import HEAD_FILES
from kvtier.engines.sglang.tp_group import PartSplit
from kvtier.engines.sglang.versions import V0_3_0, V0_4_7, V0_4_9, V0_5_11
from kvtier.engines.version import Version
from kvtier.model.description import ModelSpec

# model file -> the first release its attention projections take the attention-TP group
_FOLLOWS: dict[str, Version] = {
    "deepseek_v2.py": V0_3_0,
    "llama4.py": V0_3_0,
    "qwen3_moe.py": V0_4_7,
    "qwen3.py": V0_4_9,
    "glm4_moe.py": V0_3_0,
    "glm4_moe_lite.py": V0_3_0,
    "gpt_oss.py": V0_3_0,
    "qwen3_next.py": V0_3_0,
    "qwen3_5.py": V0_3_0,
    "minimax_m2.py": V0_5_11,
}
# architecture -> the model file whose attention class its decoder layers build: its LM head's
# file, except where the text model (and its attention) comes from another file
ATTENTION_FILES = {
    **HEAD_FILES,
    "Llama4ForConditionalGeneration": "llama4.py",  # Llama4ForCausalLM(LlamaForCausalLM)
    "Qwen3VLMoeForConditionalGeneration": "qwen3_moe.py",  # Qwen3MoeLLMModel, Qwen3MoeModel
    "Qwen3_5ForConditionalGeneration": "qwen3_5.py",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5.py",
    "Qwen2_5_VLForConditionalGeneration": "qwen2.py",  # Qwen2Model
}


_ATTENTION = PartSplit("--enable-dp-attention", ATTENTION_FILES, _FOLLOWS)


def attention_ranks(model: ModelSpec, d: Deployment) -> tuple[int, str] | None:
    """The ranks `model`'s attention projections are split over under DP attention and why;
    None: no DP attention (over TP)."""
    if not (d.enable_dp_attention and d.dp > 1):
        return None
    if model.architecture == STAND_IN_ARCHITECTURE:
        return None  # explain's model from the log's geometry: no weights to split
    return _ATTENTION.ranks(model, d)
