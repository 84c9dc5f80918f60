"""The words of a vLLM ledger: its inputs, items, notes and pool formula, from the figures
`builder.build` computed (setup -> budget -> blocks and tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtier.engines import estimate
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Description, HostPool, Input, LedgerItem
from kvtier.engines.vllm import offloading, sliding
from kvtier.engines.vllm import pool as vllm
from kvtier.engines.vllm.simple_offload import SIMPLE, disabled_note
from kvtier.model.description import AttentionKind, LayerKind
from kvtier.units import GiB

if TYPE_CHECKING:
    from kvtier.engines.vllm.builder import Budget, Pool, Setup, Split


def describe(p: PlanInputs, setup: Setup, budget: Budget, split: Split) -> Description:
    items, free_end = _items(p, setup, budget, split)
    return Description(
        _inputs(p, setup),
        items,
        _notes(p, setup, split),
        free_end,
        _formula(p, setup, budget, split),
    )


def _kv_origin(p: PlanInputs, setup: Setup) -> str:
    """Why the pool has its element type: a ModelOpt checkpoint's KV format, or the flag."""
    d = p.deployment
    if setup.kv_cache_dtype == d.kv_cache_dtype:
        return d.origin("kv_cache_dtype")
    return (
        f"auto -> {setup.kv_cache_dtype}: the checkpoint's kv_cache_quant_algo "
        f"{p.model.kv_cache_quant_algo} (resolve_kv_cache_dtype_string, vLLM v0.19+)"
    )


def _inputs(p: PlanInputs, setup: Setup) -> tuple[Input, ...]:
    d, batch = p.deployment, setup.batch
    kv_origin = _kv_origin(p, setup)
    inputs = [
        Input(i.name, setup.dtype.name, kv_origin) if i.name == "kv cache dtype" else i
        for i in p.base_inputs()
    ]
    util_origin = d.origin("mem_fraction") if d.mem_fraction else "default 0.9"
    inputs.append(Input("gpu_memory_utilization", f"{setup.util}", util_origin))
    block_origin = d.origin("page_size") if d.page_size else "default 16 (CUDA)"
    inputs.append(Input("block size", str(setup.block), block_origin))
    inputs.append(Input("version era", setup.era.label, d.origin("engine_version")))
    if setup.partition and (d.pp > 1 or d.pp_layer_partition is not None):
        partition = ",".join(str(n) for n in setup.partition)
        given = d.pp_layer_partition is not None
        rule = (
            f"VLLM_PP_LAYER_PARTITION ({d.origin('pp_layer_partition')})"
            if given
            else "get_pp_indices default split"
        )
        inputs.append(Input("layers per pipeline stage", partition, rule))
    dtype_origin = (
        f"--dtype {d.dtype}: {p.model.dtype_source}" if d.dtype == "auto" else d.origin("dtype")
    )
    inputs.append(Input("model dtype", setup.run_dtype, dtype_origin))
    tokens_origin = (
        d.origin("chunked_prefill_size") if d.chunked_prefill_size else batch.tokens_rule
    )
    inputs.append(Input("max_num_batched_tokens", str(batch.tokens), tokens_origin))
    seqs_origin = d.origin("max_running_requests") if d.max_running_requests else batch.seqs_rule
    inputs.append(Input("max_num_seqs", str(batch.seqs), seqs_origin))
    return tuple(inputs)


_TERM_ITEMS = (
    ("weights", "weights"),
    ("activation", "activation peak (profile_run)"),
    ("non_torch", "non-torch memory (NCCL, backend)"),
    ("graphs", "CUDA graphs (budgeted estimate)"),
)


def _items(
    p: PlanInputs, setup: Setup, budget: Budget, split: Split
) -> tuple[tuple[LedgerItem, ...], float]:
    """The items, and what stays free outside the budget."""
    d, era, terms, available = p.deployment, setup.era, budget.terms, budget.available
    items: list[LedgerItem] = []
    for key, name in _TERM_ITEMS:
        if key in terms:
            items.append(LedgerItem(name, terms[key].value, terms[key].source, terms[key].exact))
    block_bytes = setup.page * split.pool.layers
    kv_gib = split.blocks * block_bytes / GiB
    source = (
        f"{split.blocks:,} blocks x {block_bytes:,} B; blocks = available // (page x layers) "
        "(get_num_blocks)"
    )
    items.append(LedgerItem("KV cache pool", kv_gib, source, available.exact))
    unused = available.value - kv_gib
    why = "block rounding, and PP's smallest stage" if split.stage_tokens else "block rounding"
    items.append(LedgerItem(f"unused ({why})", unused, "available - KV pool", available.exact))
    if "total" not in terms:
        return tuple(items), 0.0
    outside = terms["total"].value * (1 - setup.util)
    graphs = 0.0
    if not era.budgets_cuda_graphs:
        measured = d.measured.cuda_graph_gib
        graphs = measured if measured is not None else estimate.VLLM_CUDA_GRAPH_GIB[0]
    source = "total x (1 - gpu_memory_utilization)" + (
        "" if era.budgets_cuda_graphs else "; CUDA graphs are captured from it"
    )
    items.append(LedgerItem("outside the budget", outside, source, terms["total"].exact))
    return tuple(items), outside - graphs


def _pool_notes(p: PlanInputs, pool: Pool) -> list[str]:
    """How the layers share the pool: MTP or uncounted draft layers, hybrid groups."""
    kv, layout = p.model.kv, pool.layout
    if kv.linear is not None and layout is not None:
        return [
            f"hybrid model: {layout.full_groups} full-attention + "
            f"{layout.local_groups} {kv.linear.kind} groups of {layout.group_size} "
            f"layers; {pool.linear_blocks} state block(s) per request per state group "
            f"(mamba_cache_mode {'align' if pool.linear_blocks == 2 else 'none'})"
        ]
    notes = []
    if pool.mtp_layers:
        notes.append(f"{pool.mtp_layers} MTP draft layer(s) share the KV pool")
    elif pool.uncounted_draft:
        notes.append(
            f"speculative {pool.uncounted_draft}: the draft's KV layers are not counted; "
            "the token count is an upper bound"
        )
    if pool.hma_off and not pool.chunked_local:
        notes.append(
            f"the hybrid KV cache manager is off ({pool.hma_off}; VllmConfig.__post_init__): "
            f"every layer, the {kv.num_local_layers} sliding-window ones too, keeps "
            "full-attention KV for the whole context"
        )
    elif pool.hma_off:
        notes.append(
            f"chunked local attention (attention_chunk_size {kv.attention_chunk_size}): the "
            f"hybrid KV cache manager is off ({pool.hma_off}) and every layer keeps "
            "full-attention KV"
        )
    elif layout is not None:
        local = "chunked-local" if pool.chunked_local else "sliding-window"
        size = "attention chunk" if pool.chunked_local else "sliding window"
        notes.append(
            f"hybrid KV groups: {layout.full_groups} full + {layout.local_groups} "
            f"{local} groups of {layout.group_size} layers "
            f"({layout.padding_layers} padding layers); {size} {pool.window}, "
            + sliding.in_flight_words(pool.era.version, pool.batched, pool.batch_tokens)
        )
    return notes


def _gemma4_note(p: PlanInputs, setup: Setup) -> list[str]:
    """Gemma 4's two page sizes and its KV-shared layers (engines/vllm/gemma4.py)."""
    pages, kv = setup.gemma4, p.model.kv
    if pages is None:
        return []
    full = kv.layer_elements(LayerKind.FULL, p.deployment.tp)
    sliding = kv.layer_elements(LayerKind.SLIDING, p.deployment.tp)
    return [
        f"Gemma 4: {full:,} KV elements a token in a full layer, {sliding:,} in a sliding "
        f"one; pages unified at {pages.page:,} B, a full block {pages.full_block} tokens and "
        f"a sliding block {pages.sliding_block} (unify_kv_cache_spec_page_size); "
        f"{kv.kv_shared_layers} KV-shared layers hold no KV (kv_sharing_target_layer_name)"
    ]


def _notes(p: PlanInputs, setup: Setup, split: Split) -> tuple[str, ...]:
    notes = _pool_notes(p, split.pool) + _gemma4_note(p, setup)
    notes += setup.transfer.notes
    notes += offloading.simple_variable_note(p.deployment, setup.transfer, setup.era.version)
    if offloading.connector(p.deployment, setup.transfer, setup.era.version) == SIMPLE:
        notes.extend(disabled_note(p.deployment))
    if setup.state is not None:
        state, conv, ssm = setup.state
        notes.append(
            f"linear-attention state page {state:,} B (conv {conv}, SSM {ssm}) padded to the "
            f"attention page of {setup.block} tokens (_align_hybrid_block_size)"
        )
    if setup.era.worker is vllm.Worker.V0:
        notes.append(f"V0 logs '# GPU blocks: {split.blocks}'")
    else:
        notes.append(
            f"logs 'GPU KV cache size: {split.tokens:,} tokens' and 'Maximum concurrency for "
            f"{p.context_length:,} tokens per request: {split.blocks / split.per_request:.2f}x'"
        )
    return tuple(notes)


def _formula(p: PlanInputs, setup: Setup, budget: Budget, split: Split) -> str:
    blocks, per_req, ctx, pool = split.blocks, split.per_request, p.context_length, split.pool
    if setup.era.logs_concurrency_tokens:
        return (
            f"int({blocks} blocks / {per_req} blocks per request x {ctx}) "
            "(max_concurrency x max_model_len)"
        )
    block, page = pool.block, setup.page
    if pool.layout is None:
        gib = budget.available.value
        return (
            f"floor({gib:.2f} GiB x 2^30 / ({block} x {page * pool.layers // block} "
            f"B/token)) x {block}"
        )
    groups = pool.layout.full_groups + pool.layout.local_groups
    return f"{blocks} blocks // {groups} KV cache groups x {block} (num_blocks // groups x block)"


def host_pool(p: PlanInputs, setup: Setup, layers: int) -> HostPool | None:
    """The CPU offloading connector's pool (engines/vllm/offloading.py): its blocks of the
    pool's `layers` on one rank, the host bytes over all TP x PP ranks split evenly."""
    d, kv = p.deployment, p.model.kv
    mla = kv.kind is AttentionKind.MLA and not kv.index_head_dim and not kv.is_hybrid
    found = offloading.offload(
        d, setup.transfer, setup.era.version, setup.block, setup.page * layers, mla
    )
    if found is None:
        return None
    world = d.tp * d.pp
    return HostPool(
        found.blocks * found.chunk_tokens,
        found.cpu_bytes // world,
        found.cpu_bytes * d.gpus // world,
        found.source,
    )
