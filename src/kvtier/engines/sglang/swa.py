"""SGLang's hybrid sliding-window pools: which models get them, and the full / SWA token split.

Sliding-window layers (gpt-oss) and chunked local attention layers (Llama 4, whose
`attention_chunk_size` SGLang uses as the window) can keep a smaller SWA pool beside the full
pool of the global layers. Which models do, by release (python/sglang/srt/):
  < v0.4.10        none: every layer keeps every token
  v0.4.10 - v0.5.6 model_executor/model_runner.py: any model whose layers report a sliding
                   window, except Llama 4 (its chunked pool needed --hybrid-kvcache-ratio) and,
                   from v0.5.1, Gemma 2 / 3 (server_args disables hybrid SWA memory for them)
  v0.5.7           none of the catalog's models (is_hybrid_model: MiMo-V2 or the ratio flag only)
  v0.5.8+          configs/model_config.py is_hybrid_swa_model: an architecture list that holds
                   Llama4ForConditionalGeneration and GptOssForCausalLM (not Gemma 2 / 3), and
                   from v0.5.11 Gemma4ForCausalLM / Gemma4ForConditionalGeneration;
                   v0.5.8 - v0.5.9 turn it off for gpt-oss on the trtllm_mha attention backend,
                   their default on compute capability 10.x
How the split is computed:
  Era A/B          set_num_tokens_hybrid_swa: the profiled tokens, priced over every layer, are
                   re-divided so that swa_tokens = full_tokens x swa_full_tokens_ratio
                   (`pool.hybrid_swa_tokens`)
  Era C            pool_configurator.py HybridSWAPoolConfigurator: full_tokens = available bytes
                   // (F x n_full + ratio x S x n_swa), then --max-total-tokens, page-aligned;
                   swa_tokens = int(full_tokens x ratio), page-aligned (`era_c_tokens`)
F and S are one layer's bytes per token on one rank: one cell for every layer, but Gemma 4's full
and sliding layers of their own shapes (`gemma4.layer_cells`).
"""

from __future__ import annotations

from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang import gemma4
from kvtier.engines.sglang.pool import Era, PoolEra, SwaTokens, cell_size
from kvtier.engines.sglang.versions import V0_4_10, V0_5_1, V0_5_7, V0_5_10
from kvtier.engines.version import Version
from kvtier.model.description import KVGeometry, LayerKind, ModelSpec
from kvtier.units import GiB

LLAMA4 = "Llama4ForConditionalGeneration"
GPT_OSS = "GptOssForCausalLM"
GEMMA_2_3 = frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"})
# is_hybrid_swa_model (v0.5.8+), the architectures of it kvtier reads
HYBRID_SWA_ARCHS = frozenset({LLAMA4, GPT_OSS})
# is_sm100_supported: the trtllm_mha default of gpt-oss
TRTLLM_MHA_MAJOR = 10


def uses_swa_pool(model: ModelSpec, version: Version, capability: tuple[int, int] | None) -> bool:
    """Whether SGLang `version` keeps a separate SWA pool for `model`."""
    kv = model.kv
    if not kv.is_hybrid:
        return False
    v = version
    arch = model.architecture
    if v < V0_4_10 or v == V0_5_7:
        return False
    if v < V0_5_7:
        if LayerKind.CHUNKED in kv.layer_kinds:
            return False
        return not (v >= V0_5_1 and arch in GEMMA_2_3)
    if arch in gemma4.ARCHITECTURES:
        return True  # gemma4.check_runs refuses releases before v0.5.11
    if arch not in HYBRID_SWA_ARCHS:
        return False
    trtllm = capability is not None and capability[0] == TRTLLM_MHA_MAJOR
    return not (arch == GPT_OSS and v < V0_5_10 and trtllm)


def era_c_tokens(
    rest_gib: float,
    kv: KVGeometry,
    attn_tp: int,
    dtype: KVDtype,
    page_size: int,
    ratio: float,
    max_total_tokens: int | None,
) -> SwaTokens:
    """HybridSWAPoolConfigurator.calculate_pool_sizes (v0.5.11+) and, under --max-total-tokens,
    calculate_pool_sizes_from_max_tokens."""
    full_cell, swa_cell = layer_cells(kv, attn_tp, dtype)
    cell = full_cell * kv.num_full_layers + ratio * swa_cell * kv.num_local_layers
    full = int(int(rest_gib * GiB) // cell)
    if max_total_tokens is not None:
        full = min(full, max_total_tokens)
    full = full // page_size * page_size
    return SwaTokens(full, int(full * ratio) // page_size * page_size)


def layer_cells(kv: KVGeometry, attn_tp: int, dtype: KVDtype) -> tuple[int, int]:
    """(F, S): one token's bytes in one global and in one local layer on one rank."""
    if not kv.is_uniform:
        return gemma4.layer_cells(kv, attn_tp, dtype)
    per_layer = cell_size(kv, attn_tp, 1, dtype)
    return per_layer, per_layer


def pool_cells(
    kv: KVGeometry, attn_tp: int, dtype: KVDtype, target: int, layers: int
) -> tuple[int, int]:
    """(F, S) of the two pools: Gemma 4's per layer type, else the target's cell (`target`
    bytes over `layers`) per layer, as the builder priced it."""
    if not kv.is_uniform:
        return gemma4.layer_cells(kv, attn_tp, dtype)
    return target // layers, target // layers


def pool_bytes(cells: tuple[int, int], kv: KVGeometry, page: int, full: int, swa: int) -> int:
    """The two pools as memory_pool.py allocates them: (tokens + page) x F x global layers +
    (SWA tokens + page) x S x local layers; `cells` is (F, S)."""
    f, s = cells
    return (full + page) * f * kv.num_full_layers + (swa + page) * s * kv.num_local_layers


def split_text(era: Era, kv: KVGeometry, cells: tuple[int, int], full: int, swa: int) -> str:
    """How the ledger states the two pools' sizes and the rule that split them; `cells` is
    (F, S) (`layer_cells`)."""
    f, s = cells
    pools = (
        f"(tokens + page) x {f:,} B x {kv.num_full_layers} global layers + "
        f"({swa:,} + page) x {s:,} B x {kv.num_local_layers} local layers"
    )
    if era.pool is PoolEra.C:
        return (
            f"{pools}; tokens = int(rest x 2^30) // ({f:,} x {kv.num_full_layers} + "
            f"ratio x {s:,} x {kv.num_local_layers}) (HybridSWAPoolConfigurator)"
        )
    return (
        f"{pools}; the tokens profiled over every layer re-divided so that SWA tokens = "
        "ratio x tokens (set_num_tokens_hybrid_swa)"
    )
