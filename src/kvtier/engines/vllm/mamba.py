"""How vLLM V1 pools a hybrid linear-attention model (Qwen3-Next, Qwen3.5 / 3.6), v0.19 - v0.24.

state page    kv_cache_interface.MambaSpec.page_size_bytes over the model's
              get_mamba_state_shape_from_config (mamba_utils.MambaStateShapeCalculator
              .gated_delta_net_state_shape): conv (conv_dim / tp) x (kernel - 1) in the model
              dtype plus SSM (value heads / tp) x value dim x key dim in the SSM dtype
              (MambaStateDtypeCalculator: --mamba-ssm-cache-dtype, `auto` = the conv dtype;
              Qwen3.5 / 3.6 read `auto` as the config's mamba_ssm_dtype,
              Qwen3_5ForConditionalGenerationConfig)
block size    HybridAttentionMambaModelConfig.verify_and_update_config (v0.19) /
              Platform._align_hybrid_block_size (v0.21+): without mamba cache mode `all`,
              attention blocks grow to 16 x cdiv(state page, 16 x attention bytes per token)
              tokens and the state page is padded to the attention page
groups        kv_cache_utils._get_kv_cache_groups_uniform_page_size: full-attention and
              linear layers grouped like sliding-window ones (pool.hybrid_layout)
per request   MambaSpec.max_memory_usage_bytes: one block per linear group (cache mode `none`,
              the default: prefix caching is off for hybrid models), two with
              --enable-prefix-caching (mode `align`)
"""

from __future__ import annotations

from kvtier.errors import KvtierError
from kvtier.model.description import LinearAttention
from kvtier.model.dtypes import DTYPE_BYTES

KERNEL_BLOCK_ALIGNMENT = 16  # FullAttentionSpec backends' kernel block size (MultipleOf(16))
QWEN3_5_ARCHITECTURES = frozenset(
    {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
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
    if state.conv_dim % tp or state.num_value_heads % tp:
        raise KvtierError(
            f"linear-attention state of {state.conv_dim} conv channels and "
            f"{state.num_value_heads} value heads does not divide over tp {tp}"
        )
    conv_elems = state.conv_dim // tp * (state.conv_kernel - 1)
    ssm_elems = state.num_value_heads // tp * state.value_head_dim * state.key_head_dim
    return conv_elems * DTYPE_BYTES[conv] + ssm_elems * DTYPE_BYTES[ssm]


def attention_block_size(state_page: int, attn_bytes_per_token: int, block_size: int) -> int:
    """The attention block size after alignment to the state page (cache mode none / align)."""
    align = max(KERNEL_BLOCK_ALIGNMENT, block_size)
    need = align * -(-state_page // (align * attn_bytes_per_token))
    return max(block_size, need)


def blocks_per_linear_group(prefix_caching: bool) -> int:
    """MambaSpec.max_memory_usage_bytes in pages: mode `align` keeps 2, `none` 1."""
    return 2 if prefix_caching else 1
