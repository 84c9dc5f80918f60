"""How SGLang pools Gemma 4's KV: a full pool and an SWA pool of two cell sizes, KV-shared
layers allocated like the rest.

Read in the v0.5.11 and v0.5.23 wheels (python/sglang/srt/):
- utils/hf_transformers/config.py rewrites the config SWA-first: the full layers' shape becomes
  `head_dim` / `num_key_value_heads`, the sliding layers' `swa_head_dim` /
  `swa_num_key_value_heads` (`model.gemma4` states which heads each release takes). It does so
  for the wrapper's config (model_type gemma4) only: a text-only Gemma4ForCausalLM file
  (gemma4_text) keeps one shape there, which its full layers' weights do not fit; refused;
- configs/model_config.py is_hybrid_swa_model lists Gemma4ForCausalLM and
  Gemma4ForConditionalGeneration, and get_hybrid_layer_ids puts every layer of `layer_types`
  in swa_attention_layer_ids or full_attention_layer_ids, the KV-shared layers included: the
  pools allocate them although they write nothing (`save_kv_cache=not is_kv_shared_layer`);
- model_executor/pool_configurator.py HybridSWAPoolConfigurator: full per token
  F = get_num_kv_heads x (head_dim + v_head_dim) x dtype bytes, SWA per token
  S = get_swa_num_kv_heads x (swa_head_dim + swa_v_head_dim) x dtype bytes, each a rank's
  `max(1, heads // attn_tp)`; full tokens = available // (F x n_full + ratio x S x n_swa)
  (`swa.era_c_tokens`).
- arg_groups/model_overrides/gemma4.py (v0.5.23): the attention backend is trtllm_mha on
  compute capability 10.x, triton elsewhere; trtllm_mha's page constraints are not modelled.
"""

from __future__ import annotations

from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.sglang.versions import V0_5_11
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.description import KVGeometry, LayerKind

ARCHITECTURES = frozenset({"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})
WRAPPER = "Gemma4ForConditionalGeneration"
TRTLLM_MHA_MAJOR = 10  # get_platform().is_sm100: the trtllm_mha default


def layer_cells(kv: KVGeometry, attn_tp: int, dtype: KVDtype) -> tuple[int, int]:
    """(F, S): one token's bytes in one full layer and in one sliding layer on one rank."""
    return (
        kv.layer_elements(LayerKind.FULL, attn_tp) * dtype.element_bytes,
        kv.layer_elements(LayerKind.SLIDING, attn_tp) * dtype.element_bytes,
    )


def check_runs(
    architecture: str,
    version: Version,
    dtype: KVDtype,
    capability: tuple[int, int] | None,
    page_size: int | None,
    refused: tuple[tuple[str, bool], ...],
) -> None:
    """Refuse what these rules were not read for; `refused` pairs a feature with whether the
    deployment uses it."""
    if architecture != WRAPPER:
        raise KvtierError(
            f"SGLang rewrites Gemma 4's two shapes only in a {WRAPPER} config (model_type "
            f"gemma4, utils/hf_transformers/config.py); {architecture} is not modelled"
        )
    if version < V0_5_11:
        raise KvtierError(
            f"SGLang runs Gemma 4 from v0.5.11 (models/gemma4_causal.py), not {version}: "
            "pass --sglang-version 0.5.11 or later"
        )
    if dtype.is_fp4:
        raise KvtierError(f"a {dtype.name} KV cache of Gemma 4 is not modelled on SGLang")
    if capability is not None and capability[0] == TRTLLM_MHA_MAJOR and page_size is None:
        raise KvtierError(
            "SGLang runs Gemma 4 on trtllm_mha on compute capability 10.x, whose page size is "
            "not modelled: pass --page-size"
        )
    for what, used in refused:
        if used:
            raise KvtierError(f"SGLang Gemma 4 pools under {what} are not modelled")
