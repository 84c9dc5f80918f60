"""How vLLM V1 pools a hybrid model's recurrent state: Gated DeltaNet (Qwen3-Next, Qwen3.5 / 3.6,
v0.19 - v0.24), Mamba2 (Granite-4.0-H) and short conv (LFM2), v0.20 - v0.24.

state page    kv_cache_interface.MambaSpec.page_size_bytes over the model's
              get_mamba_state_shape_from_config (mamba_utils.MambaStateShapeCalculator
              .gated_delta_net_state_shape, .mamba2_state_shape, .short_conv_state_shape):
              conv (conv_dim / tp) x (kernel - 1) in the model dtype plus SSM (value heads / tp)
              x value dim x key dim in the SSM dtype; Mamba2 widens groups not divisible by tp
              to tp first (extra_groups_for_head_shards), short conv keeps no SSM state
              (MambaStateDtypeCalculator: --mamba-ssm-cache-dtype, `auto` = the conv dtype;
              Qwen3.5 / 3.6 read `auto` as the config's mamba_ssm_dtype,
              Qwen3_5ForConditionalGenerationConfig)
block size    HybridAttentionMambaModelConfig.verify_and_update_config (v0.19) /
              Platform._align_hybrid_block_size (v0.21+): without mamba cache mode `all`,
              attention blocks grow to 16 x cdiv(state page, 16 x attention bytes per token)
              tokens and the state page is padded to the attention page
groups        kv_cache_utils._get_kv_cache_groups_uniform_page_size: full-attention and
              linear layers grouped like sliding-window ones (pool.hybrid_layout)
per request   MambaSpec.max_memory_usage_bytes: one block per linear group (cache mode `none`:
              prefix caching off, the default for hybrid models to v0.25,
              ModelConfig.is_prefix_caching_supported), two with prefix caching on (mode
              `align`; the default from v0.26.0). A model that implements
              SupportsMambaPrefixCaching (Granite-4.0-H, v0.20 - v0.26) takes mode `all` with
              prefix caching instead (MambaModelConfig.verify_and_update_config), whose pages
              kvtier does not size: refused
"""

from __future__ import annotations

from kvtier.engines.state_shape import rank_elements
from kvtier.engines.version import Version
from kvtier.engines.vllm.versions import V0_20, V0_26
from kvtier.errors import KvtierError
from kvtier.model.description import LinearAttention, StateKind
from kvtier.model.dtypes import DTYPE_BYTES

KERNEL_BLOCK_ALIGNMENT = 16  # FullAttentionSpec backends' kernel block size (MultipleOf(16))
# SupportsMambaPrefixCaching among the architectures kvtier reads (v0.20.0 - v0.26.0)
MAMBA_PREFIX_CACHING = frozenset({"GraniteMoeHybridForCausalLM"})
QWEN3_5_ARCHITECTURES = frozenset(
    {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
)


def check_runs(version: Version, state: LinearAttention) -> None:
    """Refuse a release whose Mamba2 / short-conv state kvtier has not read (before v0.20)."""
    if state.kind is not StateKind.GATED_DELTA_NET and version < V0_20:
        raise KvtierError(
            f"vLLM {version}: the {state.kind} state pool is modelled from v0.20 "
            "(pass --vllm-version 0.20 or later)"
        )


def ssm_dtype(flag: str | None, architecture: str, state: LinearAttention, conv: str) -> str:
    """The SSM state's dtype: the flag, else Qwen3.5's config field, else the conv dtype."""
    if flag is not None and flag != "auto":
        if flag not in ("float32", "bfloat16", "float16"):
            raise KvtierError(f"--mamba-ssm-cache-dtype {flag!r}: vLLM takes auto, float32, ...")
        return flag
    if architecture in QWEN3_5_ARCHITECTURES and state.ssm_dtype is not None:
        return state.ssm_dtype
    return conv


def state_page_bytes(state: LinearAttention, tp: int, conv: str, ssm: str) -> int:
    """MambaSpec.page_size_bytes of one linear layer on one rank (unpadded)."""
    groups = state.num_key_heads
    if state.kind is StateKind.MAMBA2 and groups % tp:
        groups = tp  # extra_groups_for_head_shards: tp - groups more
    conv_elems, ssm_elems = rank_elements(state, tp, groups, str(state.kind))
    return conv_elems * DTYPE_BYTES[conv] + ssm_elems * DTYPE_BYTES[ssm]


def attention_block_size(state_page: int, attn_bytes_per_token: int, block_size: int) -> int:
    """The attention block size after alignment to the state page (cache mode none / align)."""
    align = max(KERNEL_BLOCK_ALIGNMENT, block_size)
    need = align * -(-state_page // (align * attn_bytes_per_token))
    return max(block_size, need)


def prefix_caching(version: Version, flag: bool | None) -> bool:
    """Whether a hybrid model runs with prefix caching: the flag, else on from v0.26.0."""
    return flag if flag is not None else version >= V0_26


def blocks_per_linear_group(version: Version, flag: bool | None, architecture: str) -> int:
    """MambaSpec.max_memory_usage_bytes in pages: mode `align` keeps 2, `none` 1."""
    if not prefix_caching(version, flag):
        return 1
    if architecture in MAMBA_PREFIX_CACHING:
        raise KvtierError(
            f"vLLM {version} runs {architecture} with prefix caching in mamba cache mode 'all', "
            "which kvtier does not size (prefix caching is on by default from v0.26.0)"
        )
    return 2
