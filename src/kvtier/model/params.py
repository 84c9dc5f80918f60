"""Parameter groups of a decoder from its (text) config: counts, TP split and quantization.

Counts follow the Hugging Face module layout of each architecture family; the split follows
how SGLang and vLLM build the layers (vocab-parallel embedding and lm_head, column/row-parallel
projections, TP-sharded experts; the MLA down-projections `q_a_proj` + `kv_a_proj_with_mqa`,
norms and the MoE router are replicated). A representative HF module name for each group is
matched against the checkpoint's quantization rules to decide whether it is stored quantized.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvtier.errors import UnsupportedModel
from kvtier.model.description import ParamGroup
from kvtier.model.quant import ModuleFilter

EMBEDDING = "embedding"
ATTENTION = "attention"  # q/o projections (MHA) or the TP-sharded MLA up-projections
ATTENTION_KV = "attention_kv"  # k/v projections: replicated across ranks once tp > kv heads
# Gemma 4's full-attention k/v projections: replicated once tp > their own (global) KV heads
ATTENTION_KV_FULL = "attention_kv_full"
ATTENTION_LATENT = "attention_latent"  # MLA q_a_proj + kv_a_proj_with_mqa, replicated
DENSE_MLP = "dense_mlp"
ROUTED_EXPERTS = "routed_experts"
SHARED_EXPERTS = "shared_experts"
ROUTER = "router"
ROUTER_FP32 = "router_fp32"  # a router both engines hold in float32 whatever the model dtype
INDEXER = "indexer"  # DSA indexer query projection wq_b, replicated
INDEXER_KEYS = "indexer_keys"  # DSA indexer wk, weights_proj and k_norm, replicated
NORMS = "norms"
LM_HEAD = "lm_head"
VISION_TOWER = "vision_tower"
ROPE_CACHE = "rope_cache"
MLA_ABSORBED = "mla_absorbed"
# the groups built from LinearBase or FusedMoE layers (what online fp8 quantizes)
LINEAR_GROUPS = frozenset(
    {ATTENTION, ATTENTION_KV, ATTENTION_KV_FULL, ATTENTION_LATENT, DENSE_MLP}
    | {ROUTED_EXPERTS, SHARED_EXPERTS}
)

# Architectures whose MLP modules sit under `block_sparse_moe` / `feed_forward` rather than `mlp`
_MLP_PREFIX = {
    "MixtralForCausalLM": "block_sparse_moe",
    "Llama4ForConditionalGeneration": "feed_forward",
    "MiniMaxM2ForCausalLM": "block_sparse_moe",
}
_GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")
# Qwen3 MoE layouts (decoder_sparse_step, mlp_only_layers), hybrid linear-attention ones included
_QWEN3_MOE = (
    "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration",
)
_QK_NORM = (
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration",
)
# GLM-4.5 / 4.6 / 4.7 (SGLang models/glm4_moe.py v0.5.3 - v0.5.23, vLLM models/glm4_moe.py
# v0.10.2 - v0.21.0): qkv bias per `attention_bias` but none on o_proj, q/k RMSNorm per
# `use_qk_norm`, the first `first_k_dense_replace` layers dense, and a float32 router (vLLM's
# gate is an nn.Linear built in torch.float32, SGLang's Glm4MoeGate from v0.5.19; before it
# SGLang holds the weight in the model dtype: engines/sglang/router.py)
_GLM4_MOE = "Glm4MoeForCausalLM"
# GLM-4.7-Flash: DeepSeek-V2 MLA attention with GLM-4's MoE (the same float32 router and
# correction bias); MoE from `first_k_dense_replace` every `moe_layer_freq` layers, a field
# SGLang forces to 1 (models/glm4_moe_lite.py v0.5.8 - v0.5.23) and vLLM reads
# (models/glm4_moe_lite.py v0.21.0)
_GLM4_MOE_LITE = "Glm4MoeLiteForCausalLM"
_GLM_ROUTER = (_GLM4_MOE, _GLM4_MOE_LITE)


def moe_layout(arch: str, text: Mapping[str, Any]) -> tuple[list[bool], int, int, int]:
    """Per layer whether its MLP is a MoE block, plus experts, experts per token, shared experts."""
    n = int(text["num_hidden_layers"])
    experts = int(
        text.get("n_routed_experts")
        or text.get("num_local_experts")
        or text.get("num_experts")
        or 0
    )
    if experts == 0:
        return [False] * n, 0, 0, 0
    top_k = int(text.get("num_experts_per_tok") or text.get("experts_per_token") or 0)
    if top_k <= 0:
        raise UnsupportedModel("MoE config without num_experts_per_tok")
    shared = int(text.get("n_shared_experts") or 0)
    # GLM-5 (GlmMoeDsaForCausalLM) is built as DeepseekV2ForCausalLM by both engines
    if arch.startswith(("Deepseek", "KimiK", "GlmMoeDsa")):
        first_dense = int(text.get("first_k_dense_replace", 0))
        freq = int(text.get("moe_layer_freq", 1))
        moe = [i >= first_dense and i % freq == 0 for i in range(n)]
    elif arch == _GLM4_MOE:
        moe = [i >= int(text.get("first_k_dense_replace", 0)) for i in range(n)]
    elif arch == _GLM4_MOE_LITE:
        if int(text.get("moe_layer_freq", 1)) != 1:
            raise UnsupportedModel("unsupported Glm4MoeLite moe_layer_freq other than 1")
        moe = [i >= int(text["first_k_dense_replace"]) for i in range(n)]
    elif arch in _QWEN3_MOE:
        step = int(text.get("decoder_sparse_step", 1))
        dense_only = set(text.get("mlp_only_layers") or [])
        moe = [i not in dense_only and (i + 1) % step == 0 for i in range(n)]
        # Qwen3-Next and Qwen3.5 MoE blocks carry one gated shared expert
        shared = int(
            arch != "Qwen3MoeForCausalLM" and bool(text.get("shared_expert_intermediate_size"))
        )
    elif arch == "Llama4ForConditionalGeneration":
        step = int(text.get("interleave_moe_layer_step", 1))
        moe = [(i + 1) % step == 0 for i in range(n)]
        shared = 1  # every Llama 4 MoE block carries one shared expert
    elif arch in ("MixtralForCausalLM", "GptOssForCausalLM"):
        moe = [True] * n
    elif arch == "GraniteMoeHybridForCausalLM":
        moe = [True] * n
        shared = 1  # every Granite-4.0-H layer runs its shared_mlp beside the experts
    elif arch == "MiniMaxM2ForCausalLM":
        if text.get("shared_intermediate_size"):
            raise UnsupportedModel("unsupported MiniMax-M2 shared_intermediate_size > 0")
        moe = [True] * n
    else:
        raise UnsupportedModel(f"unsupported MoE architecture {arch!r}")
    return moe, experts, top_k, shared


class Groups:
    """Parameter groups as a decoder adds them, each asking `quantized` whether its module is
    quantized; a group of no parameters is left out."""

    def __init__(self, quantized: ModuleFilter) -> None:
        self.quantized = quantized
        self.groups: list[ParamGroup] = []

    def add(
        self,
        name: str,
        count: int,
        sharded: bool,
        module: str,
        linear: bool = True,
        active: int | None = None,
    ) -> None:
        if count:
            active_count = count if active is None else active
            quantized = self.quantized(module, linear)
            self.groups.append(ParamGroup(name, count, active_count, sharded, quantized))


def decoder_params(
    arch: str,
    text: Mapping[str, Any],
    quantized: ModuleFilter,
    prefix: str = "",
) -> tuple[ParamGroup, ...]:
    """Parameter groups of the text decoder (no MTP/draft layers: engines load those apart)."""
    h = int(text["hidden_size"])
    n = int(text["num_hidden_layers"])
    vocab = int(text["vocab_size"])
    layer = f"{prefix}model.layers"
    g = Groups(quantized)
    g.add(EMBEDDING, vocab * h, True, f"{prefix}model.embed_tokens", linear=False)
    norms = n * (4 if arch in _GEMMA else 2) * h + h
    norms += _attention_params(g, arch, text, layer)
    _mlp_params(g, arch, text, layer)
    g.add(NORMS, norms, False, f"{prefix}model.norm", linear=False)
    if not text.get("tie_word_embeddings", False):
        g.add(LM_HEAD, vocab * h, True, f"{prefix}lm_head")
    return tuple(g.groups)


def _attention_params(g: Groups, arch: str, text: Mapping[str, Any], layer: str) -> int:
    """The attention projections of every layer (MLA latent and up-projections, or q/k/v/o);
    returns the parameters of their norms."""
    h = int(text["hidden_size"])
    n = int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    norms = 0
    if text.get("kv_lora_rank"):
        q_lora = int(text.get("q_lora_rank") or 0)
        kv_lora = int(text["kv_lora_rank"])
        rope = int(text["qk_rope_head_dim"])
        nope = int(text["qk_nope_head_dim"])
        v = int(text["v_head_dim"])
        latent = h * (kv_lora + rope) + (h * q_lora if q_lora else 0)
        q_up = q_lora * heads * (nope + rope) if q_lora else h * heads * (nope + rope)
        up = q_up + kv_lora * heads * (nope + v) + heads * v * h
        g.add(ATTENTION_LATENT, n * latent, False, f"{layer}.0.self_attn.kv_a_proj_with_mqa")
        g.add(ATTENTION, n * up, True, f"{layer}.0.self_attn.kv_b_proj")
        norms += n * (q_lora + kv_lora)
        if text.get("index_topk") is not None:
            _add_indexer(g.add, text, n, q_lora, f"{layer}.0.self_attn.indexer")
        return norms
    kv_heads = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    qkv_bias = arch.startswith("Qwen2") or bool(text.get("attention_bias"))
    o_bias = bool(text.get("attention_bias")) and not arch.startswith(("Qwen2", "Glm4"))
    sinks = heads if arch == "GptOssForCausalLM" else 0
    q_o = 2 * h * heads * hd + (heads * hd if qkv_bias else 0) + (h if o_bias else 0) + sinks
    kv = 2 * h * kv_heads * hd + (2 * kv_heads * hd if qkv_bias else 0)
    g.add(ATTENTION, n * q_o, True, f"{layer}.0.self_attn.q_proj")
    g.add(ATTENTION_KV, n * kv, True, f"{layer}.0.self_attn.k_proj")
    if arch in _QK_NORM or (arch == _GLM4_MOE and text.get("use_qk_norm")):
        norms += n * 2 * hd
    elif arch == "MiniMaxM2ForCausalLM" and text.get("use_qk_norm", True):
        norms += n * _minimax_qk_norm(text, heads, kv_heads, hd)
    return norms


def _mlp_params(g: Groups, arch: str, text: Mapping[str, Any], layer: str) -> None:
    """The dense MLPs, and the routed experts, shared experts and router of the MoE layers."""
    h = int(text["hidden_size"])
    n = int(text["num_hidden_layers"])
    mlp = _MLP_PREFIX.get(arch, "mlp")
    moe, experts, top_k, n_shared = moe_layout(arch, text)
    first_moe = moe.index(True) if any(moe) else 0
    first_dense = moe.index(False) if not all(moe) else 0
    n_moe = sum(moe)
    dense_inter = int(text.get("intermediate_size_mlp") or text.get("intermediate_size") or 0)
    dense_module = f"{layer}.{first_dense}.{mlp}.down_proj"
    g.add(DENSE_MLP, (n - n_moe) * 3 * h * dense_inter, True, dense_module)
    if not n_moe:
        return
    inter = int(text.get("moe_intermediate_size") or text["intermediate_size"])
    per_expert = 3 * h * inter
    if arch == "GptOssForCausalLM":
        per_expert += 2 * inter + h  # gate_up and down biases
    experts_module = f"{layer}.{first_moe}.{mlp}.experts.0.down_proj"
    active = n_moe * top_k * per_expert
    g.add(ROUTED_EXPERTS, n_moe * experts * per_expert, True, experts_module, active=active)
    shared_module = f"{layer}.{first_moe}.{mlp}.shared_experts.down_proj"
    g.add(SHARED_EXPERTS, n_moe * n_shared * 3 * h * inter, True, shared_module)
    has_bias = (
        arch == "GptOssForCausalLM"
        or arch in _GLM_ROUTER
        or text.get("topk_method") == "noaux_tc"
        or (arch == "MiniMaxM2ForCausalLM" and bool(text.get("use_routing_bias")))
    )
    router_bias = experts if has_bias else 0
    router = "router" if arch in ("GptOssForCausalLM", "Llama4ForConditionalGeneration") else "gate"
    # DeepSeek's MoEGate is not an nn.Linear; the others' routers are
    g.add(
        ROUTER_FP32 if arch in _GLM_ROUTER else ROUTER,
        n_moe * (experts * h + router_bias),
        False,
        f"{layer}.{first_moe}.{mlp}.{router}",
        linear=not arch.startswith(("Deepseek", "Kimi", "Glm")),
    )


def _add_indexer(
    add: Callable[..., None], text: Mapping[str, Any], n: int, q_lora: int, module: str
) -> None:
    """DSA lightning indexer per layer: wq_b (q_lora_rank -> index_n_heads x index_head_dim),
    wk (hidden -> index_head_dim), weights_proj (hidden -> index_n_heads), k_norm (a LayerNorm:
    weight and bias), all replicated. vLLM builds wk and weights_proj as one unquantized
    projection (`Indexer.wk_weights_proj`, quant_config None, v0.20.0 - v0.21.0), so only wq_b
    follows the checkpoint's format."""
    if not q_lora:
        raise UnsupportedModel("DSA indexer without q_lora_rank")
    h = int(text["hidden_size"])
    dim = int(text["index_head_dim"])
    heads = int(text["index_n_heads"])
    add(INDEXER, n * q_lora * heads * dim, False, f"{module}.wq_b")
    add(INDEXER_KEYS, n * (h * dim + h * heads + 2 * dim), False, f"{module}.wk", linear=False)


def _minimax_qk_norm(text: Mapping[str, Any], heads: int, kv_heads: int, hd: int) -> int:
    """MiniMax-M2's per_layer QK norm spans the whole query and key projections of a layer."""
    kind = text.get("qk_norm_type", "per_layer")
    if kind != "per_layer":
        raise UnsupportedModel(f"unsupported MiniMax-M2 qk_norm_type {kind!r}")
    return (heads + kv_heads) * hd


def load_buffers(arch: str, text: Mapping[str, Any]) -> tuple[ParamGroup, ...]:
    """Tensors SGLang and vLLM build from the config or the weights while loading.

    - RoPE cos/sin cache (`get_rope` -> `RotaryEmbedding._compute_cos_sin_cache`, one cache of
      [positions, rotary_dim] in the model dtype, shared by the layers): positions are
      max_position_embeddings, times the factor for linear scaling, and
      original_max_position_embeddings x factor for YaRN (`YaRNScalingRotaryEmbedding`,
      `DeepseekScalingRotaryEmbedding`); M-RoPE (`MRotaryEmbedding`) is sized as the default
      cache. Gemma 3's sliding-window layers add a second, unscaled cache
      (`rope_local_base_freq`). The cache spans the configured length whatever
      the serving context length.
    - MLA: a second copy of `kv_b_proj` split per head for the absorbed decode path (vLLM
      `MLACommonImpl.process_weights_after_loading`: W_UK_T, W_UV; SGLang
      `DeepseekV2ForCausalLM.post_load_weights`: w_kc, w_vc), TP-sharded by head.
    Granite-4.0-H builds no rotary embedding unless `position_embedding_type` is "rope"
    (GraniteMoeHybridAttention, vLLM v0.24.0 and SGLang v0.5.9 - v0.5.23); its files state "nope".
    """
    if arch == "GraniteMoeHybridForCausalLM" and text.get("position_embedding_type") != "rope":
        return ()
    scaling = text.get("rope_scaling") or text.get("rope_parameters") or {}
    if isinstance(scaling.get("full_attention"), Mapping):  # transformers v5, per layer type
        scaling = scaling["full_attention"]
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    positions = int(text["max_position_embeddings"])
    if kind == "linear":
        positions = int(positions * float(scaling["factor"]))
    elif kind == "yarn":
        positions = int(int(scaling["original_max_position_embeddings"]) * float(scaling["factor"]))
    elif kind not in ("default", "llama3", "mrope"):
        raise UnsupportedModel(f"unsupported rope_scaling type {kind!r}")
    heads = int(text["num_attention_heads"])
    buffers = []
    if text.get("kv_lora_rank"):
        rotary = int(text["qk_rope_head_dim"])
        absorbed = (
            int(text["kv_lora_rank"])
            * heads
            * (int(text["qk_nope_head_dim"]) + int(text["v_head_dim"]))
        )
        n = int(text["num_hidden_layers"])
        buffers.append(ParamGroup(MLA_ABSORBED, n * absorbed, n * absorbed, True, False))
    else:
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        # GLM-4.5 / 4.6 / 4.7 rotate half the head when the config is silent (SGLang
        # Glm4MoeModel `getattr(config, "partial_rotary_factor", 0.5)`, vLLM Glm4MoeAttention
        # `rope_parameters.setdefault("partial_rotary_factor", 0.5)`)
        unstated = 0.5 if arch == _GLM4_MOE else 1.0
        rotary = int(head_dim * float(text.get("partial_rotary_factor", unstated)))
        if arch == "MiniMaxM2ForCausalLM":
            # MiniMaxM2Attention: rotary_dim / head_dim becomes the partial rotary factor
            rotary = int(text["rotary_dim"])
    cache = positions * rotary
    if arch in ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"):
        cache += int(text["max_position_embeddings"]) * rotary
    return (ParamGroup(ROPE_CACHE, cache, cache, False, False), *buffers)
