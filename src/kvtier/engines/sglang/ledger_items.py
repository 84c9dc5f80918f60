"""The words of an SGLang ledger: its inputs, items, notes and pool formula, from the figures
`builder.build` computed (cells -> budget -> token split -> request table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Description, HostPool, Input, LedgerItem
from kvtier.engines.sglang import hicache, mamba
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang import swa as sliding
from kvtier.engines.sglang.dtype import checkpoint_kv_dtype, run_dtype
from kvtier.engines.sglang.pool import PoolEra
from kvtier.units import GiB, MiB

if TYPE_CHECKING:
    from kvtier.engines.sglang.builder import Budget, Cells, Requests, Split

Rows = tuple[list[LedgerItem], list[str]]


def describe(
    p: PlanInputs, cells: Cells, budget: Budget, split: Split, requests: Requests
) -> Description:
    items: list[LedgerItem] = []
    notes: list[str] = []
    for part in (
        _memory_items(p, cells, budget, split),
        _state_items(p, budget, split),
        _draft_items(p, cells, budget, split),
        _request_items(p, cells, requests),
        _graph_items(p, budget),
    ):
        items += part[0]
        notes += part[1]
    free = _free(p, budget, requests, items, notes)
    return Description(
        _inputs(p, cells, budget), tuple(items), tuple(notes), free, _formula(cells, budget)
    )


def _inputs(p: PlanInputs, cells: Cells, budget: Budget) -> tuple[Input, ...]:
    d, dtype = p.deployment, cells.dtype
    row = _kv_dtype_row(p, cells)
    inputs = [row if row is not None and i.name == row.name else i for i in p.base_inputs()]
    if p.model.kv.index_head_dim:
        inputs = [i for i in inputs if i.name != "kv cache dtype"]
        dsa_rule = "default: DSA rule, fp8_e4m3 from compute capability 10.0, else bfloat16"
        origin = d.origin("kv_cache_dtype") if d.kv_cache_dtype != "auto" else dsa_rule
        inputs.append(Input("kv cache dtype", dtype.name, origin))
        if d.page_size is None:
            inputs.append(Input("page size", str(cells.page), "default: 64 for a DSA model"))
    fraction = budget.fraction
    if d.mem_fraction is not None:
        inputs.append(Input("mem_fraction_static", f"{fraction}", d.origin("mem_fraction")))
    else:
        inputs.append(
            Input("mem_fraction_static", f"{fraction}", f"default: {budget.fraction_rule}")
        )
    inputs.append(Input("version era", cells.era.label, d.origin("engine_version")))
    return tuple(inputs)


def _kv_dtype_row(p: PlanInputs, cells: Cells) -> Input | None:
    """The 'kv cache dtype' input of `auto` taken from a ModelOpt checkpoint, or of a float32
    config, naming SGLang's rule; None: the common row says it."""
    d = p.deployment
    if d.kv_cache_dtype != "auto" or p.model.kv.index_head_dim:
        return None
    checkpoint = checkpoint_kv_dtype(cells.era.version, p.model)
    if checkpoint is not None:
        return Input("kv cache dtype", cells.dtype.name, checkpoint.rule)
    if d.dtype != "auto":
        return None
    if p.model.config_dtype != "float32":
        return None
    return Input(
        "kv cache dtype", cells.dtype.name, f"auto: the model's dtype; {run_dtype(p.model).rule}"
    )


def _memory_items(p: PlanInputs, cells: Cells, budget: Budget, split: Split) -> Rows:
    """Before load, weights and the KV pool, with the sliding-window pools' note."""
    kv, terms, notes = p.model.kv, budget.terms, []
    if cells.swa_pool:
        notes.append(
            f"hybrid SWA pools: {split.tokens:,} tokens for the {kv.num_full_layers} global "
            f"layers, {split.swa:,} for the {kv.num_local_layers} local ones "
            f"(swa_full_tokens_ratio {sglang.SWA_FULL_TOKENS_RATIO})"
        )
    elif kv.is_hybrid:
        notes.append(
            f"the {kv.num_local_layers} sliding-window / chunked layers keep every token: "
            "this SGLang release gives this model no separate SWA pool"
        )
    items: list[LedgerItem] = []
    if p.gpu_mem_mib is not None:
        pre = terms["pre"]
        source = "card (nvidia-smi) - free before load" if pre.exact else pre.source
        card_gib = p.gpu_mem_mib * MiB / GiB
        items.append(
            LedgerItem(
                "before load: driver, CUDA context, NCCL", card_gib - budget.pre, source, pre.exact
            )
        )
    w_term = terms.get("weights")
    items.append(
        LedgerItem(
            "weights",
            budget.pre - budget.after,
            w_term.source if w_term else "free before load - free after load ('mem usage')",
            w_term.exact if w_term else True,
        )
    )
    rest_text = (
        f"rest = free_after - free_before x (1 - {budget.fraction})"
        f"{' - the VLM embedding cache' if budget.mm_reserve else ''} (profile_max_num_token)"
    )
    pool_text = (
        f"(tokens + page) x {cells.pool:,} B; tokens = int(rest x 2^30) // {cells.profiled:,}"
    )
    if cells.swa_pool:
        swa_cells = sliding.pool_cells(kv, p.attn_tp, cells.dtype, cells.target, cells.layers)
        pool_text = sliding.split_text(cells.era, kv, swa_cells, split.tokens, split.swa)
    gib, exact = split.kv_bytes / GiB, budget.rest.exact
    items.append(LedgerItem("KV cache pool", gib, f"{pool_text}, {rest_text}", exact))
    return items, notes


def _state_items(p: PlanInputs, budget: Budget, split: Split) -> Rows:
    """The linear-attention state pool: printed by the log, or sized by the slot rule."""
    items: list[LedgerItem] = []
    notes: list[str] = []
    exact, linear = budget.rest.exact, budget.linear
    if budget.logged_state:
        items.append(
            LedgerItem(
                "linear-attention state (mamba pool)",
                budget.logged_state,
                "measured: 'Mamba Cache is allocated' conv_state + ssm_state, the slots the "
                "release charges to rest (charged_state_gib)",
                exact,
            )
        )
    if linear is None:
        return items, notes
    state = split.state
    assert state is not None
    items.append(
        LedgerItem(
            "linear-attention state (mamba pool)",
            state.state_gib,
            f"{state.formula}; SSM state {linear.ssm_dtype}, conv state {mamba.CONV_DTYPE} "
            "(handle_max_mamba_cache)",
            exact,
        )
    )
    notes.append(
        f"hybrid model: {len(linear.state.layer_ids)} {linear.state.kind} layers keep "
        f"{state.state_bytes:,} B of state per request slot ({state.slots:,} slots); "
        f"KV for the {p.model.kv.num_layers} full-attention layers only"
    )
    if state.slots <= 0:
        notes.append(
            "no state slot fits the budget: this release starts and runs no request "
            "(v0.5.13+ refuse to start)"
        )
    return items, notes


def _draft_items(p: PlanInputs, cells: Cells, budget: Budget, split: Split) -> Rows:
    """The speculative draft's weights and KV pool."""
    d, draft = p.deployment, cells.draft
    items: list[LedgerItem] = []
    notes: list[str] = []
    if draft is None:
        return items, notes
    m = d.measured
    if m.draft_weights_gib is not None:
        items.append(LedgerItem("draft weights", m.draft_weights_gib, "measured", True))
    elif p.draft_weights_bytes is not None:
        weights = p.draft_weights_bytes / GiB
        source = f"spec weights of {d.draft_model}"
        items.append(LedgerItem("draft weights", weights, source, False))
    else:
        notes.append("draft weights unknown (pass --draft-weights-gib): counted in 'free'")
    draft_kv_gib = sglang.kv_size_bytes(split.tokens, cells.page, draft.cell) / GiB
    inside = sglang.draft_in_cell(cells.era)
    where = "inside the budget (v0.5.14+)" if inside else "from the reserve (before v0.5.14)"
    items.append(
        LedgerItem(
            "draft KV pool",
            draft_kv_gib,
            f"(tokens + page) x {draft.cell:,} B, {draft.source}; {where}",
            draft.exact and budget.rest.exact,
        )
    )
    if cells.era.pool is PoolEra.A:
        notes.append(
            "Era A also inflates the pool by max_num_reqs x (steps x topk + draft "
            "tokens) + 100 for speculative decoding; not included"
        )
    return items, notes


def _request_items(p: PlanInputs, cells: Cells, requests: Requests) -> Rows:
    """The request table (req_to_token), with the state slots' notes."""
    d, ctx = p.deployment, p.context_length
    notes: list[str] = []
    if d.max_running_requests is not None:
        rows_from = "--max-running-requests"
    elif requests.flag:
        rows_from = "speculative default (server_args)"
    else:
        rows_from = "clamp(tokens/ctx x 512, 2048, 4096)"
    if requests.extra_buffer:
        notes.append(
            "mamba radix cache strategy extra_buffer (auto, with the overlap schedule): "
            f"{mamba.SLOTS_PER_REQUEST + mamba.EXTRA_BUFFER_SLOTS} state slots a request"
        )
    if requests.capped_by_slots:
        notes.append(f"running requests capped at {requests.slot_cap} by the state slots")
    columns = sglang.REQ_TO_TOKEN_EXTRA + requests.draft_tokens
    table = LedgerItem(
        "request table (req_to_token)",
        requests.table_bytes / GiB,
        f"int32 {requests.limits.rows} x ({ctx} + {columns}); rows = {rows_from}",
        d.max_running_requests is not None,
    )
    return [table], notes


def _graph_items(p: PlanInputs, budget: Budget) -> Rows:
    """CUDA graphs: measured, else server_args' reserve rule of 2 MiB a batch size."""
    m, max_bs = p.deployment.measured, budget.max_bs
    if m.cuda_graph_gib is not None:
        source = "measured: 'Capture cuda graph end'"
        return [LedgerItem("CUDA graphs", m.cuda_graph_gib, source, True)], []
    if max_bs:
        source = f"estimated: cuda_graph_max_bs {max_bs} x 2 MiB (server_args reserve rule)"
        return [LedgerItem("CUDA graphs", max_bs * 2 * MiB / GiB, source, False)], []
    return [], ["CUDA graphs not estimated (pass --cuda-graph-gib): counted in 'free'"]


def _free(
    p: PlanInputs, budget: Budget, requests: Requests, items: list[LedgerItem], notes: list[str]
) -> float:
    """Append what is left at the end of startup to `items`, and its notes; return it."""
    m, ctx = p.deployment.measured, p.context_length
    used = sum(i.gib for i in items[1 if p.gpu_mem_mib is not None else 0 :])
    free = budget.pre - used
    if free < 0 and m.free.end_gib is None:
        notes.append(
            f"the items above exceed the memory free before load by {-free:.2f} GiB: SGLang "
            "would run out of memory after sizing the pool (the request table is "
            f"{requests.table_bytes / GiB:.2f} GiB at context {ctx:,}; --context-length or "
            "--max-running-requests shrinks it)"
        )
    if m.free.end_gib is not None:
        unattributed = free - m.free.end_gib
        source = "reserve - listed items - measured free at end"
        items.append(LedgerItem("unattributed", unattributed, source, True))
        source = "measured: 'available_gpu_mem'"
        items.append(LedgerItem("free at end of startup", m.free.end_gib, source, True))
    else:
        source = "reserve left: runtime activations (chunked prefill) draw from it"
        exact = all(i.exact for i in items)
        items.append(LedgerItem("free at end of startup", free, source, exact))
    if budget.chunk:
        chunk = budget.chunk
        notes.append(
            f"the default-fraction rule budgets {max(chunk, 2048) * 1.5 / 1024:.2f} GiB for "
            f"prefill activations (max(chunked_prefill_size {chunk}, 2048) x 1.5 MiB)"
        )
    if budget.mm_reserve:
        notes.append(
            f"{sglang.VLM_CACHE_MIB} MiB of the budget kept for the multimodal embedding cache "
            "(mm_runtime_reservation_gb, v0.5.18+)"
        )
    return free


def _formula(cells: Cells, budget: Budget) -> str:
    reserve = f" - {budget.mm_reserve:.4f}" if budget.mm_reserve else ""
    return (
        f"int(({budget.after:.2f} - {budget.pre:.2f} x (1 - {budget.fraction}){reserve}) GiB "
        f"x 2^30) // {cells.profiled} B/token, aligned down to page {cells.page}"
    )


def host_pool(p: PlanInputs, tokens: int, page: int, per_token: int) -> HostPool:
    d = p.deployment
    host = hicache.host_tokens(tokens, page, per_token, d.hicache.ratio, d.hicache.size_gb)
    per_rank = host * per_token
    how = (
        f"--hicache-size {d.hicache.size_gb} GB"
        if d.hicache.size_gb
        else f"device tokens x {d.hicache.ratio or hicache.DEFAULT_HICACHE_RATIO}"
    )
    return HostPool(
        host, per_rank, per_rank * d.gpus, f"HostKVCache: {how}, + 1 page; {per_token:,} B/token"
    )
