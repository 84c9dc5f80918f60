"""How vLLM V1 pools Gemma 4's KV: two page sizes unified, KV-shared layers left out.

Read in the v0.21.0 wheel, and found the same in v0.25.1 (which pads a page that does not divide
the largest instead of refusing it: not modelled). v0.26.0 bounds a sliding group's blocks by
`max_in_flight_tokens` instead of max_num_batched_tokens (kv_cache_interface.py
SlidingWindowSpec.max_memory_usage_bytes): Gemma 4 is refused there and later.
- models/gemma4.py Gemma4DecoderLayer / Gemma4Attention: a sliding layer's Attention holds
  `num_key_value_heads` heads of `head_dim`, a full layer's its own shape
  (`model.gemma4`); a layer of the last `num_kv_shared_layers` is built with
  `kv_sharing_target_layer_name`, and GPUModelRunner.get_kv_cache_spec skips it: it holds no
  page and joins no group.
- kv_cache_utils.get_kv_cache_groups: the specs are neither uniform nor one type, so
  `unify_kv_cache_spec_page_size` raises every smaller page to the largest by multiplying its
  block_size by the ratio (refused by vLLM when the ratio is not whole), then
  `_get_kv_cache_groups_uniform_page_size` groups the layers (`pool.hybrid_layout`).
- num_blocks = available // page // group_size (get_kv_cache_config_from_groups); one request
  holds cdiv(len, full block) blocks per full group and cdiv(min(window - 1 + batched, len),
  sliding block) + 1 per sliding group (SlidingWindowSpec.max_admission_blocks_per_request).
- model_executor/models/config.py Gemma4Config forces the TRITON_ATTN backend when the two head
  widths differ and one exceeds 256; its blocks are the cache's block size.
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.engines.deployment import Deployment
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.version import Version
from kvtier.engines.vllm.versions import V0_21, V0_26
from kvtier.errors import KvtierError
from kvtier.model.description import KVGeometry, LayerKind


class Gemma4Pages(NamedTuple):
    """The unified page and the block each layer type reaches it with."""

    page: int  # bytes of one block of one layer, every layer alike after unifying
    full_block: int  # tokens a full-attention block holds
    sliding_block: int  # tokens a sliding-window block holds
    full_layers: int  # layers that hold KV, by type (KV-shared layers left out)
    sliding_layers: int


def check_runs(version: Version, dtype: KVDtype) -> None:
    """Refuse what these rules were not read for."""
    if not V0_21 <= version < V0_26:
        raise KvtierError(
            f"vLLM Gemma 4 pools are modelled for v0.21.0 - v0.25.x, not {version} (v0.20 "
            "sizes them otherwise; v0.26 bounds sliding groups by max_in_flight_tokens): pass "
            "--vllm-version"
        )
    if dtype.is_fp4:
        raise KvtierError("an FP4 KV cache of Gemma 4 is not modelled on vLLM")


def pages(kv: KVGeometry, tp: int, block: int, dtype: KVDtype) -> Gemma4Pages:
    """unify_kv_cache_spec_page_size over the layers that hold KV."""
    holding = kv.kv_holding_kinds
    full = sum(1 for k in holding if k is LayerKind.FULL)
    sliding = len(holding) - full
    counts = {LayerKind.FULL: full, LayerKind.SLIDING: sliding}
    page = {
        kind: block * kv.layer_elements(kind, tp) * dtype.element_bytes
        for kind, n in counts.items()
        if n
    }
    top = max(page.values())
    blocks = dict.fromkeys(counts, block)
    for kind, size in page.items():
        if top % size:
            raise KvtierError(
                f"a Gemma 4 {kind} page of {size:,} B does not divide the largest page of "
                f"{top:,} B: vLLM v0.21 refuses it, v0.25 pads it "
                "(unify_kv_cache_spec_page_size); not modelled"
            )
        blocks[kind] = block * (top // size)
    return Gemma4Pages(top, blocks[LayerKind.FULL], blocks[LayerKind.SLIDING], full, sliding)


def bytes_per_token(kv: KVGeometry, tp: int, dtype: KVDtype) -> int:
    """One token's KV on one rank over the layers that hold KV, each at its own shape."""
    return sum(kv.layer_elements(k, tp) for k in kv.kv_holding_kinds) * dtype.element_bytes


def check_deployment(d: Deployment) -> None:
    """Refuse the deployments whose Gemma 4 pools these rules do not cover: a KV connector
    (--kv-transfer-config, and the OffloadingConnector --kv-offloading-size sets) turns the
    hybrid KV cache manager off (VllmConfig.__post_init__), making every layer full attention
    of two shapes."""
    for what, given in (
        ("pipeline parallelism", d.pp > 1),
        ("speculative decoding", bool(d.speculative_algorithm)),
        ("KV offloading", bool(d.kv_offloading_size_gib or d.kv_offloading_backend)),
        ("a KV connector (--kv-transfer-config)", bool(d.kv_transfer_config)),
        ("--disable-hybrid-kv-cache-manager", bool(d.disable_hybrid_kv_cache_manager)),
    ):
        if given:
            raise KvtierError(f"vLLM Gemma 4 pools under {what} are not modelled")
