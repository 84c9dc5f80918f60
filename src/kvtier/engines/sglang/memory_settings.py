"""SGLang v0.5.14+ default `--mem-fraction-static`, chunk and decode CUDA-graph batch.

Mirrors, per release (python/sglang/srt/):
  v0.5.14 - v0.5.18  server_args.py ServerArgs._handle_gpu_memory_settings (+ reserve_for_graph_mb
                     from v0.5.16), after _handle_cuda_graph_config resolved each phase's backend
  v0.5.19 - v0.5.23  arg_groups/memory_hook.py handle_gpu_memory_settings + reserve_for_graph_mb,
                     after arg_groups/cuda_graph_hook.py handle_cuda_graph_config
  main               as v0.5.23
What changed against v0.5.10-v0.5.13: no draft reserve in the fraction (the draft is priced where
the pool is sized); the prefill CUDA graph became one phase of cuda_graph_config with a backend
(model_executor/cuda_graph_config.py default_prefill_backend: tc_piecewise in v0.5.14, breakable
on CUDA from v0.5.15), each backend with its own auto-disable rules; the decode graph reserve
needs the decode backend on. The ~1 GiB post-capture sizing path is off unless
SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is set, and is not modelled.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from kvtier.engines.deployment import Deployment
from kvtier.engines.sglang.versions import (
    V0_5_5,
    V0_5_14,
    V0_5_15,
    V0_5_16,
    V0_5_17,
    V0_5_18,
    V0_5_19,
    V0_5_20,
    V0_5_22,
    V0_5_23,
)
from kvtier.engines.version import Version
from kvtier.model.description import AttentionKind, ModelSpec

# server_args max_prefill_tokens default: the activation term when chunked prefill is off (-1)
MAX_PREFILL_TOKENS = 16384
# the MLA prefill-graph reserve ("much higher than expected with fa3"), MiB
MLA_PREFILL_GRAPH_MIB = 1.5 * 1024


# configs/model_config.py architecture lists, by first release (each list as that release has it)
_PIECEWISE_DISABLED = (
    (V0_5_20, ("Glm5NextForConditionalGeneration",)),
    (V0_5_16, ("DeepseekV4ForCausalLMDSpark",)),
    (
        V0_5_14,
        (
            "DeepseekV4ForCausalLM",
            "DeepseekV4ForCausalLMNextN",
            "Qwen3NextForCausalLM",
            "BailingMoeV2_5ForCausalLM",
            "LLaDAModelLM",
        ),
    ),
)
_MINIMAX_M3 = ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")
_KIMI_MM = ("KimiK3ForConditionalGeneration", "KimiK25ForConditionalGeneration")


def _multimodal_piecewise(v: Version) -> tuple[str, ...]:
    """multimodal_piecewise_cuda_graph_supported_model_archs."""
    cohere = () if v >= V0_5_19 else ("Cohere2VisionForConditionalGeneration",)
    if v < V0_5_16:
        return cohere
    return (*cohere, "KimiK25ForConditionalGeneration", *_MINIMAX_M3)


def _multimodal_breakable(v: Version) -> tuple[str, ...]:
    """multimodal_breakable_cuda_graph_supported_model_archs."""
    archs: tuple[str, ...] = ()
    if v >= V0_5_16:
        archs += ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")
    if v >= V0_5_18:
        archs += ("InternS2MobiusForConditionalGeneration", "MuseGlimmerForConditionalGeneration")
        archs += _KIMI_MM
    if v >= V0_5_19:
        archs += ("Cohere2VisionForConditionalGeneration", "PaddleOCRVLForConditionalGeneration")
    if v >= V0_5_20:
        archs += ("Glm5NextForConditionalGeneration",)
    if v >= V0_5_22:
        archs += ("Qwen4ExpForConditionalGeneration", *_MINIMAX_M3)
    if v >= V0_5_23:
        archs += ("MuseSparkForConditionalGeneration",)
    return archs


class PrefillGraph(Enum):
    """The prefill phase's CUDA-graph backend once the auto-disable rules ran."""

    TC_PIECEWISE = "tc_piecewise"
    BREAKABLE = "breakable"
    DISABLED = "disabled"


def _tc_piecewise_off(d: Deployment, model: ModelSpec, v: Version) -> bool:
    """_disable_tc_piecewise_cudagraph_if_incompatible, the rules a deployment can meet."""
    blocked = any(model.architecture in archs for first, archs in _PIECEWISE_DISABLED if v >= first)
    multimodal = model.multimodal and model.architecture not in _multimodal_piecewise(v)
    return blocked or multimodal or d.enable_dp_attention or d.pp > 1 or d.hicache.enable


def _breakable_off(d: Deployment, model: ModelSpec, v: Version) -> bool:
    """_disable_breakable_cudagraph_if_incompatible (v0.5.15+), the rules a deployment can meet."""
    # MLA: off to v0.5.17, which exempts DeepSeek sparse attention (is_deepseek_dsa)
    dsa_exempt = v >= V0_5_17 and model.kv.index_head_dim > 0
    if v < V0_5_18 and model.kv.kind is AttentionKind.MLA and not dsa_exempt:
        return True
    if v < V0_5_17 and d.enable_dp_attention:
        return True
    if v >= V0_5_19 and d.pp > 1:  # opt-in only under pipeline parallelism
        return True
    if v < V0_5_16:
        return model.multimodal
    return model.multimodal and model.architecture not in _multimodal_breakable(v)


def prefill_graph(d: Deployment, model: ModelSpec, v: Version, rocm: bool = False) -> PrefillGraph:
    """The prefill CUDA-graph backend _handle_cuda_graph_config settles on. On ROCm none:
    default_prefill_backend is breakable only where is_cuda() (tc_piecewise to v0.5.21, disabled
    from v0.5.22), and tc_piecewise's auto-disable rules turn it off on non-CUDA hardware."""
    if rocm:
        return PrefillGraph.DISABLED
    if v < V0_5_15:
        backend = PrefillGraph.TC_PIECEWISE
    elif (
        v >= V0_5_16
        and model.multimodal
        and model.architecture in _multimodal_piecewise(v)
        and (v < V0_5_18 or model.architecture not in _multimodal_breakable(v))
    ):
        backend = PrefillGraph.TC_PIECEWISE  # validated multimodal decoders
    else:
        backend = PrefillGraph.BREAKABLE
    if backend is PrefillGraph.TC_PIECEWISE and _tc_piecewise_off(d, model, v):
        return PrefillGraph.DISABLED
    if backend is PrefillGraph.BREAKABLE and _breakable_off(d, model, v):
        return PrefillGraph.DISABLED
    return backend


def prefill_capture_sizes(max_tokens: int) -> int:
    """How many token counts _generate_prefill_cuda_graph_batch_sizes (v0.5.10-v0.5.13:
    _generate_piecewise_cuda_graph_tokens) captures up to `max_tokens`."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return sum(1 for s in sizes if s <= max_tokens)


def _prefill_max_tokens(d: Deployment, model: ModelSpec, chunk: int, v: Version) -> int:
    """cuda_graph_config.prefill.max_bs as the memory settings default it."""
    if model.kv.kind is not AttentionKind.MLA:
        tokens = chunk
    else:
        tokens = min(8192, chunk) if v >= V0_5_23 else 2048
    if d.max_total_tokens is not None:
        tokens = min(tokens, d.max_total_tokens)
    if "llama-2" in d.model.lower():
        tokens = min(tokens, 4096)
    if v < V0_5_17 and d.context_length is not None:
        tokens = min(tokens, d.context_length)
    return tokens


def tier(gpu: int | None, tp: int, v: Version) -> tuple[int, int]:
    """chunked_prefill_size and decode max_bs by GPU memory class (nvidia-smi MiB):
    _handle_gpu_memory_settings from v0.5.3 (handle_gpu_memory_settings from v0.5.14)."""
    big_tp = tp >= 4
    if gpu is None:
        return 4096, 160
    if gpu < 20 * 1024:
        return 2048, 8
    if gpu < 35 * 1024:
        if v >= V0_5_20:  # 32 GB Blackwell cards keep decode graphs past batch 24
            return 4096, 160 if big_tp else 48
        return 2048, 80 if big_tp else (24 if v >= V0_5_5 else 16)
    if gpu < 60 * 1024:
        return 4096, 160 if big_tp else 32
    if gpu < 160 * 1024:
        return 8192, 512 if big_tp else 256
    return 16384, 512


class MemorySettings(NamedTuple):
    value: float  # before the multimodal adjustment
    rule: str
    chunked_prefill_size: int
    cuda_graph_max_bs: int


def memory_settings(
    v: Version, gpu: int | None, d: Deployment, model: ModelSpec, rocm: bool = False
) -> MemorySettings:
    """handle_gpu_memory_settings for `d` when --mem-fraction-static is unset."""
    tier_chunk, tier_bs = tier(gpu, d.tp, v)
    chunk = d.chunked_prefill_size if d.chunked_prefill_size is not None else tier_chunk
    max_bs = d.cuda_graph_max_bs if d.cuda_graph_max_bs is not None else tier_bs
    if v >= V0_5_22 and d.cuda_graph_max_bs is None and d.max_running_requests is not None:
        max_bs = min(max_bs, d.max_running_requests)
    if gpu is None:
        value = 0.95 if v >= V0_5_20 else 0.88
        return MemorySettings(value, f"v0.5.14+ rule: GPU memory unknown -> {value}", chunk, max_bs)
    reserved: float = 512
    reserved += max(chunk if chunk > 0 else MAX_PREFILL_TOKENS, 2048) * 1.5
    reserved += d.tp * d.pp / 8 * 1024
    reserved += max_bs * 2  # decode CUDA graphs
    if d.enable_dp_attention:
        reserved += max_bs * d.dp * 3
        if max_bs > 300:
            reserved += max_bs * d.dp * 1.5
    graph = prefill_graph(d, model, v, rocm)
    if graph is not PrefillGraph.DISABLED:
        if model.kv.kind is AttentionKind.MLA:
            reserved += MLA_PREFILL_GRAPH_MIB
        else:
            reserved += prefill_capture_sizes(_prefill_max_tokens(d, model, chunk, v)) * 8
    if gpu > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    text = (
        f"v0.5.14+ memory settings (prefill CUDA graph {graph.value}): "
        f"round(({gpu} - {reserved:.0f}) / {gpu}, 3)"
    )
    return MemorySettings(round((gpu - reserved) / gpu, 3), text, chunk, max_bs)
