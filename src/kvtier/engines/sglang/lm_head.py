"""The ranks SGLang splits a model's LM head over under --enable-dp-lm-head, by model file and
release.

`ParallelLMHead` (layers/vocab_parallel_embedding.py) splits the padded vocabulary over the full
TP group, or over the attention-TP group (tp / dp) with `use_attn_tp_group`. --enable-dp-lm-head
(ServerArgs.enable_dp_lm_head, from v0.4.7) asks for the second, and only the model files that
pass `use_attn_tp_group=...enable_dp_lm_head` to their `lm_head` follow it (read from each
release's wheel):

- deepseek_v2.py (DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5), qwen3_moe.py (Qwen3-MoE), llama.py
  (Llama, Phi-3, Mistral, and Llama 4's Llama4ForCausalLM(LlamaForCausalLM)): from v0.4.7
  (lines 1691, 691, 424; deepseek_v2.py v0.5.23 line 3296);
- glm4_moe.py, glm4_moe_lite.py, gpt_oss.py, qwen3_next.py: in every release that has them
  (v0.5.9 lines 1025, 491, 614, 948);
- qwen3.py (Qwen3 dense): from v0.5.8 (line 375); qwen3_vl.py (Qwen3-VL-MoE, Qwen3.5): from
  v0.5.9 (line 817);
- qwen2.py (Qwen2), qwen2_5_vl.py, minimax_m2.py, mixtral.py, gemma2.py, gemma3_causal.py,
  gemma4_causal.py, granitemoehybrid.py, lfm2.py: never (full TP; Gemma's head is tied to its
  embedding, which engines/sglang/embedding.py rules).

SGLang turns the flag off at dp 1 (server_args.py `if self.dp_size == 1`, v0.5.9;
`_data_parallelism_defaults`, v0.5.23) and, v0.4.7 - v0.5.9, refuses it without DP attention
(`assert self.enable_dp_attention`); kvtier splits the head over attention TP only where DP
attention is on at dp > 1. An architecture whose file is not read here is refused under the
flag, where its head was taken over the full TP, a guess.
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment
from kvtier.engines.log_geometry import STAND_IN_ARCHITECTURE
from kvtier.engines.sglang.tp_group import PartSplit
from kvtier.engines.sglang.versions import V0_3_0, V0_4_7, V0_5_8, V0_5_9
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.description import ModelSpec

# model file -> the first release its lm_head follows --enable-dp-lm-head
_FOLLOWS: dict[str, Version] = {
    "deepseek_v2.py": V0_4_7,
    "qwen3_moe.py": V0_4_7,
    "llama.py": V0_4_7,
    "glm4_moe.py": V0_3_0,
    "glm4_moe_lite.py": V0_3_0,
    "gpt_oss.py": V0_3_0,
    "qwen3_next.py": V0_3_0,
    "qwen3.py": V0_5_8,
    "qwen3_vl.py": V0_5_9,
}
# architecture -> the model file that builds its lm_head (its own or its text model's)
HEAD_FILES = {
    "DeepseekV2ForCausalLM": "deepseek_v2.py",
    "DeepseekV3ForCausalLM": "deepseek_v2.py",
    "DeepseekV32ForCausalLM": "deepseek_v2.py",
    "GlmMoeDsaForCausalLM": "deepseek_v2.py",
    "KimiK25ForConditionalGeneration": "deepseek_v2.py",
    "Qwen3MoeForCausalLM": "qwen3_moe.py",
    "LlamaForCausalLM": "llama.py",
    "Phi3ForCausalLM": "llama.py",
    "MistralForCausalLM": "llama.py",
    "Llama4ForConditionalGeneration": "llama.py",
    "Glm4MoeForCausalLM": "glm4_moe.py",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite.py",
    "GptOssForCausalLM": "gpt_oss.py",
    "Qwen3NextForCausalLM": "qwen3_next.py",
    "Qwen3ForCausalLM": "qwen3.py",
    "Qwen3VLMoeForConditionalGeneration": "qwen3_vl.py",
    "Qwen3_5ForConditionalGeneration": "qwen3_vl.py",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_vl.py",
    "Qwen2ForCausalLM": "qwen2.py",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl.py",
    "MiniMaxM2ForCausalLM": "minimax_m2.py",
    "MixtralForCausalLM": "mixtral.py",
    "Gemma2ForCausalLM": "gemma2.py",
    "Gemma3ForCausalLM": "gemma3_causal.py",
    "Gemma3ForConditionalGeneration": "gemma3_causal.py",
    "Gemma4ForCausalLM": "gemma4_causal.py",
    "Gemma4ForConditionalGeneration": "gemma4_causal.py",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid.py",
    "Lfm2ForCausalLM": "lfm2.py",
}

_HEAD = PartSplit("--enable-dp-lm-head", HEAD_FILES, _FOLLOWS)


def lm_head_ranks(model: ModelSpec, d: Deployment) -> tuple[int, str] | None:
    """The ranks `model`'s LM head is split over and why; None: over TP."""
    if d.enable_dp_lm_head and d.dp > 1 and not d.enable_dp_attention:
        raise KvtierError(
            f"--enable-dp-lm-head at --dp {d.dp} needs --enable-dp-attention (SGLang's "
            "server_args asserts it)"
        )
    if not (d.enable_dp_lm_head and d.enable_dp_attention and d.dp > 1):
        return None
    if model.architecture == STAND_IN_ARCHITECTURE:
        return None  # explain's model from the log's geometry: no weights to split
    return _HEAD.ranks(model, d)
