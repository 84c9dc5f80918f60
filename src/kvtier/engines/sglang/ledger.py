"""Assemble the per-GPU ledger of an SGLang deployment from the rules in `sglang` and `hicache`."""

from __future__ import annotations

from collections.abc import Mapping

from kvtier.engines import estimate
from kvtier.engines.deployment import Deployment
from kvtier.engines.estimate import Term
from kvtier.engines.figures import SGLangFigures
from kvtier.engines.inputs import PlanInputs, stage_layers
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.ledger import Concurrency, HostPool, Input, Ledger, LedgerItem, context_lengths
from kvtier.engines.sglang import hicache, mamba, weight_segments
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang import swa as sliding
from kvtier.engines.sglang.defaults import default_mem_fraction
from kvtier.engines.sglang.dtype import checkpoint_kv_dtype, run_dtype
from kvtier.engines.sglang.pool import PoolEra
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.spec.gpu import GpuSpec, resolve_gpu
from kvtier.spec.model import AttentionKind, KVGeometry, LayerKind
from kvtier.units import GiB, MiB

MTP_ALGORITHMS = frozenset({"NEXTN", "MTP"})
EAGLE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3"})
# An EAGLE head is one Llama decoder layer; without its config, assume the target's attention heads
# as KV heads and head_dim 128 (Kimi-K2.5 EAGLE-3 logs K size 0.30 GB at 159,277 tokens, TP8).
EAGLE_ASSUMED_HEAD_DIM = 128


def _kv_dtype(p: PlanInputs) -> KVDtype:
    """The KV element type: `auto` on a DSA model follows SGLang's own rule by GPU; otherwise
    `auto` is the dtype the model runs in (`dtype.run_dtype` under --dtype auto)."""
    d = p.deployment
    if d.kv_cache_dtype != "auto":
        return p.kv_dtype()
    if p.model.kv.index_head_dim:
        return sglang.dsa_kv_dtype(_capability(d))
    checkpoint = checkpoint_kv_dtype(sglang.era_for(d.engine_version).version, p.model)
    if checkpoint is not None:
        return resolve_kv_dtype(d.engine, checkpoint.name, p.model.dtype)
    if d.dtype == "auto":
        return resolve_kv_dtype(d.engine, "auto", run_dtype(p.model).name)
    return p.kv_dtype()


def _kv_dtype_row(p: PlanInputs, dtype: KVDtype) -> Input | None:
    """The 'kv cache dtype' input of `auto` taken from a ModelOpt checkpoint, or of a float32
    config, naming SGLang's rule; None: the common row says it."""
    d = p.deployment
    if d.kv_cache_dtype != "auto" or p.model.kv.index_head_dim:
        return None
    checkpoint = checkpoint_kv_dtype(sglang.era_for(d.engine_version).version, p.model)
    if checkpoint is not None:
        return Input("kv cache dtype", dtype.name, checkpoint.rule)
    if d.dtype != "auto":
        return None
    if p.model.config_dtype != "float32":
        return None
    return Input(
        "kv cache dtype", dtype.name, f"auto: the model's dtype; {run_dtype(p.model).rule}"
    )


class _LinearState:
    """The state-slot rule of a hybrid linear-attention deployment (engines/sglang/mamba.py)."""

    def __init__(self, p: PlanInputs, version: Version | None) -> None:
        d, state = p.deployment, p.model.kv.linear
        assert state is not None
        self.state = state
        if d.speculative_algorithm:
            raise KvtierError(
                "speculative decoding on a hybrid linear-attention model (intermediate state "
                "slots) is not modelled"
            )
        if d.pp > 1:
            raise KvtierError("hybrid linear-attention models under PP are not modelled")
        mamba.check_runs(version, p.model.architecture)
        self.rule = mamba.slot_rule(version)
        dtype = mamba.ssm_dtype(version, d.mamba_ssm_dtype, state)
        widen = self.rule is not mamba.SlotRule.FIXED
        self.per_slot = mamba.state_bytes(state, p.attn_tp, dtype, widen)
        self.ratio = d.mamba_full_memory_ratio or mamba.DEFAULT_FULL_MEMORY_RATIO
        self.checked = mamba.checks_slots(version)
        self.extra = mamba.extra_buffer(version, p.model.architecture, d.disable_radix_cache)
        self.dp = d.dp if d.enable_dp_attention else 1
        self.deployment = d
        self.source = f"SSM state {dtype}, conv state {mamba.CONV_DTYPE}"

    def no_room(self, rest_gib: float) -> KvtierError:
        split = self.split(rest_gib)
        return KvtierError(
            f"Not enough memory: {split.slots} state slots of {split.state_bytes:,} B "
            f"({split.state_gib:.2f} GiB) leave no KV cache for the full-attention layers out of "
            f"{rest_gib:.2f} GiB; lower --max-mamba-cache-size / --max-running-requests or raise "
            "--mem-fraction-static"
        )

    def split(self, rest_gib: float) -> mamba.MambaSplit:
        d = self.deployment
        return mamba.split_budget(
            self.rule,
            rest_gib,
            self.per_slot,
            self.ratio,
            d.max_mamba_cache_size,
            d.max_running_requests,
            d.disable_radix_cache or self.rule is mamba.SlotRule.FIXED,
            self.dp,
            self.checked,
        )


def _catalog_gpu(d: Deployment) -> GpuSpec | None:
    """The named GPU (None: no GPU named, or not in the catalog)."""
    if not d.gpu:
        return None
    try:
        return resolve_gpu(d.gpu)
    except KvtierError:
        return None


def _capability(d: Deployment) -> tuple[int, int] | None:
    gpu = _catalog_gpu(d)
    return gpu.compute_capability if gpu is not None else None


def _draft_cell(p: PlanInputs) -> sglang.DraftCell | None:
    """Bytes per token of the draft's KV on one rank (Era B: draft pool of the target's size)."""
    d = p.deployment
    algo = (d.speculative_algorithm or "").upper()
    if not algo or algo == "NGRAM":
        return None
    dtype = _kv_dtype(p)
    if p.draft is not None:
        layers = p.draft.draft_layers or p.draft.kv.num_layers
        cell = sglang.cell_size(p.draft.kv, p.attn_tp, layers, dtype)
        return sglang.DraftCell(cell, layers, f"draft {p.draft.model_id}: {layers} layer(s)", True)
    if algo in MTP_ALGORITHMS or (
        algo in EAGLE_ALGORITHMS and p.model.draft_layers and not d.draft_model
    ):
        layers = p.model.draft_layers
        if not layers:
            raise KvtierError(f"{algo} needs num_nextn_predict_layers in the model config")
        cell = sglang.cell_size(p.model.kv, p.attn_tp, layers, dtype)
        return sglang.DraftCell(cell, layers, f"MTP head: num_nextn_predict_layers={layers}", True)
    if algo in EAGLE_ALGORITHMS:
        heads = p.model.num_attention_heads
        kv = KVGeometry(
            AttentionKind.MHA,
            heads,
            EAGLE_ASSUMED_HEAD_DIM,
            EAGLE_ASSUMED_HEAD_DIM,
            (LayerKind.FULL,),
        )
        cell = sglang.cell_size(kv, p.attn_tp, 1, dtype)
        return sglang.DraftCell(
            cell,
            1,
            f"assumed: 1 layer, {heads} KV heads x {EAGLE_ASSUMED_HEAD_DIM} "
            "(give --speculative-draft-model-path for the exact size)",
            False,
        )
    raise KvtierError(f"speculative algorithm {algo} needs --speculative-draft-model-path")


def _memory_terms(p: PlanInputs) -> dict[str, Term]:
    """Free memory before load and the weights, measured where given, else estimated."""
    m = p.deployment.measured
    terms: dict[str, Term] = {}
    if m.free_before_load_gib is not None:
        terms["pre"] = Term.known(
            m.free_before_load_gib, "measured: 'Load weight begin. avail mem'"
        )
    elif m.free_after_load_gib is not None and m.weights_gib is not None:
        terms["pre"] = Term.known(
            m.free_after_load_gib + m.weights_gib, "measured: free after load + weights 'mem usage'"
        )
    else:
        if p.gpu_mem_mib is None:
            raise KvtierError("need the GPU (--gpu or --gpu-mem-gib) or --free-before-load-gib")
        card = p.gpu_mem_mib * MiB / GiB
        parts = {
            "driver reserve": estimate.DRIVER_RESERVED_GIB,
            "CUDA context": estimate.CUDA_CONTEXT_GIB,
        }
        if p.deployment.tp * p.deployment.pp > 1:
            gpu = _catalog_gpu(p.deployment)
            if gpu is not None and gpu.peer_to_peer is False:
                parts["NCCL without peer access"] = estimate.COMM_NO_PEER_GIB
            else:
                parts["NCCL buffers"] = estimate.COMM_BUFFERS_GIB
        stated = " + ".join(f"{name} {lo:g}-{hi:g}" for name, (_, lo, hi) in parts.items())
        terms["pre"] = Term.estimated(
            card - sum(x[0] for x in parts.values()),
            card - sum(x[2] for x in parts.values()),
            card - sum(x[1] for x in parts.values()),
            f"estimated: {stated} GiB",
        )
    if m.free_after_load_gib is not None:
        terms["after"] = Term.known(m.free_after_load_gib, "measured: 'Load weight end. avail mem'")
    else:
        nbytes, source = p.weights_bytes, p.weights_source
        rounding = weight_segments.rounding_bytes(p.model, p.deployment.tp, p.deployment.pp)
        if nbytes is not None and rounding is not None:
            nbytes += rounding
            source += f" + {rounding / MiB:,.0f} MiB of allocator segment rounding"
        terms["weights"] = estimate.weights_per_gpu(
            m.weights_gib, "measured weights", nbytes, source
        )
    return terms


def _after(v: Mapping[str, float]) -> float:
    return v["after"] if "after" in v else v["pre"] - v["weights"]


def rounded_measures(d: Deployment) -> tuple[str, ...]:
    """The measured figures the pool depends on: free before load (or, when the log omits
    'Load weight begin', the weights it adds to free after load) and free after load."""
    m = d.measured
    if m.free_before_load_gib is not None:
        return ("free_before_load_gib", "free_after_load_gib")
    return ("free_after_load_gib", "weights_gib")


def build(p: PlanInputs) -> Ledger:
    """The ledger SGLang's profile_max_num_token / init_memory_pool produce for `p`."""
    d = p.deployment
    era = sglang.era_for(d.engine_version)
    kv = p.model.kv
    swa_pool = sliding.uses_swa_pool(p.model, era.version, _capability(d))
    sglang.check_layers(kv, d.pp, swa_pool)
    dtype = _kv_dtype(p)
    page = d.page_size or (sglang.DSA_PAGE_SIZE if kv.index_head_dim else 1)
    layers = stage_layers(kv.num_layers, d.pp)
    target_cell = sglang.cell_size(kv, p.attn_tp, layers, dtype)
    pool_cell = sglang.dsa_pool_cell(kv, layers, dtype) if kv.index_head_dim else target_cell
    if sglang.prices_dsa_layout(era.version):
        target_cell = pool_cell
    draft = _draft_cell(p)
    cell = target_cell
    if draft is not None and sglang.draft_in_cell(era):
        cell = int(target_cell * (1 + draft.layers / layers))
    row = _kv_dtype_row(p, dtype)
    inputs = [row if row is not None and i.name == row.name else i for i in p.base_inputs()]
    if kv.index_head_dim:
        inputs = [i for i in inputs if i.name != "kv cache dtype"]
        dsa_rule = "default: DSA rule, fp8_e4m3 from compute capability 10.0, else bfloat16"
        origin = d.origin("kv_cache_dtype") if d.kv_cache_dtype != "auto" else dsa_rule
        inputs.append(Input("kv cache dtype", dtype.name, origin))
        if d.page_size is None:
            inputs.append(Input("page size", str(page), "default: 64 for a DSA model"))
    # The engine picks chunked_prefill_size and cuda_graph_max_bs by GPU tier either way.
    rule = default_mem_fraction(era.version, p.gpu_mem_mib, d, p.model)
    chunk, max_bs = rule.chunked_prefill_size, rule.cuda_graph_max_bs
    if p.gpu_mem_mib is None:  # the engine's tiers need the card: only the flags are known
        chunk, max_bs = d.chunked_prefill_size, d.cuda_graph_max_bs
    if d.mem_fraction is not None:
        fraction = d.mem_fraction
        inputs.append(Input("mem_fraction_static", f"{fraction}", d.origin("mem_fraction")))
    else:
        fraction = rule.value
        inputs.append(Input("mem_fraction_static", f"{fraction}", f"default: {rule.rule}"))
    inputs.append(Input("version era", era.label, d.origin("engine_version")))

    terms = _memory_terms(p)
    mm_reserve = sglang.multimodal_reserve_gib(era, p.model.multimodal)
    rest = estimate.spread(
        terms, lambda v: sglang.rest_gib(v["pre"], _after(v), fraction) - mm_reserve
    )
    nominal_pre = terms["pre"].value
    nominal_after = _after({k: t.value for k, t in terms.items()})
    if rest.value <= 0:
        raise sglang.not_enough_memory(nominal_pre, nominal_after)

    linear = _LinearState(p, era.version) if kv.linear is not None else None
    logged_state = d.measured.state_pool_gib if linear is None else None

    def pools_for(rest_gib: float) -> tuple[int, int]:
        """(full-layer tokens, sliding-window tokens) for a budget of `rest_gib`."""
        if linear is not None and rest_gib > 0:
            rest_gib = linear.split(rest_gib).rest_gib
        elif logged_state:  # the state pool the log printed, for a model kvtier cannot size
            rest_gib -= logged_state
        if rest_gib <= 0:
            return 0, 0
        profiled = sglang.profile_tokens(rest_gib, cell, page, d.max_total_tokens)
        if not swa_pool:
            return profiled, 0
        ratio = sglang.SWA_FULL_TOKENS_RATIO
        split = sliding.split_tokens(
            era, rest_gib, profiled, kv, p.attn_tp, dtype, page, ratio, d.max_total_tokens
        )
        return split.full_tokens, split.swa_tokens

    tokens, swa = pools_for(rest.value)
    if linear is not None and tokens <= 0:
        raise linear.no_room(rest.value)
    if tokens <= 0:
        raise sglang.not_enough_memory(nominal_pre, nominal_after)
    token_range = None if rest.exact else (pools_for(rest.low)[0], pools_for(rest.high)[0])
    notes: list[str] = []
    ctx = p.context_length
    kv_bytes = sglang.kv_size_bytes(tokens, page, pool_cell)
    if swa_pool:
        per_layer = target_cell // layers
        kv_bytes = sglang.kv_size_bytes(tokens, page, per_layer * kv.num_full_layers)
        kv_bytes += sglang.kv_size_bytes(swa, page, per_layer * kv.num_local_layers)
        notes.append(
            f"hybrid SWA pools: {tokens:,} tokens for the {kv.num_full_layers} global layers, "
            f"{swa:,} for the {kv.num_local_layers} local ones "
            f"(swa_full_tokens_ratio {sglang.SWA_FULL_TOKENS_RATIO})"
        )
    elif kv.is_hybrid:
        notes.append(
            f"the {kv.num_local_layers} sliding-window / chunked layers keep every token: "
            "this SGLang release gives this model no separate SWA pool"
        )

    exact_mem = rest.exact
    card_gib = p.gpu_mem_mib * MiB / GiB if p.gpu_mem_mib is not None else None
    weights_gib = nominal_pre - nominal_after
    items: list[LedgerItem] = []
    if card_gib is not None:
        items.append(
            LedgerItem(
                "before load: driver, CUDA context, NCCL",
                card_gib - nominal_pre,
                "card (nvidia-smi) - free before load"
                if terms["pre"].exact
                else terms["pre"].source,
                terms["pre"].exact,
            )
        )
    w_term = terms.get("weights")
    items.append(
        LedgerItem(
            "weights",
            weights_gib,
            w_term.source if w_term else "free before load - free after load ('mem usage')",
            w_term.exact if w_term else True,
        )
    )
    rest_text = (
        f"rest = free_after - free_before x (1 - {fraction})"
        f"{' - the VLM embedding cache' if mm_reserve else ''} (profile_max_num_token)"
    )
    pool_text = f"(tokens + page) x {pool_cell:,} B; tokens = int(rest x 2^30) // {cell:,}"
    if swa_pool:
        pool_text = sliding.split_text(era, kv, target_cell // layers, tokens, swa)
    pool_item = LedgerItem("KV cache pool", kv_bytes / GiB, f"{pool_text}, {rest_text}", exact_mem)
    items.append(pool_item)

    if logged_state:
        items.append(
            LedgerItem(
                "linear-attention state (mamba pool)",
                logged_state,
                "measured: 'Mamba Cache is allocated' conv_state + ssm_state, the slots the "
                "release charges to rest (charged_state_gib)",
                exact_mem,
            )
        )
    if linear is not None:
        split = linear.split(rest.value)
        items.append(
            LedgerItem(
                "linear-attention state (mamba pool)",
                split.state_gib,
                f"{split.formula}; {linear.source} (handle_max_mamba_cache)",
                exact_mem,
            )
        )
        notes.append(
            f"hybrid linear attention: {len(linear.state.layer_ids)} Gated DeltaNet layers keep "
            f"{split.state_bytes:,} B of state per request slot ({split.slots:,} slots); "
            f"KV for the {kv.num_layers} full-attention layers only"
        )
        if split.slots <= 0:
            notes.append(
                "no state slot fits the budget: this release starts and runs no request "
                "(v0.5.13+ refuse to start)"
            )

    draft_kv_gib = 0.0
    if draft is not None:
        m = d.measured
        if m.draft_weights_gib is not None:
            items.append(LedgerItem("draft weights", m.draft_weights_gib, "measured", True))
        elif p.draft_weights_bytes is not None:
            items.append(
                LedgerItem(
                    "draft weights",
                    p.draft_weights_bytes / GiB,
                    f"spec weights of {d.draft_model}",
                    False,
                )
            )
        else:
            notes.append("draft weights unknown (pass --draft-weights-gib): counted in 'free'")
        draft_kv_gib = sglang.kv_size_bytes(tokens, page, draft.cell) / GiB
        inside = sglang.draft_in_cell(era)
        where = "inside the budget (v0.5.14+)" if inside else "from the reserve (before v0.5.14)"
        items.append(
            LedgerItem(
                "draft KV pool",
                draft_kv_gib,
                f"(tokens + page) x {draft.cell:,} B, {draft.source}; {where}",
                draft.exact and exact_mem,
            )
        )
        if era.pool is PoolEra.A:
            notes.append(
                "Era A also inflates the pool by max_num_reqs x (steps x topk + draft "
                "tokens) + 100 for speculative decoding; not included"
            )

    flag = d.max_running_requests
    rows_from = "--max-running-requests"
    if flag is None:
        flag = sglang.speculative_max_running_requests(d.speculative_algorithm, era)
        rows_from = (
            "speculative default (server_args)" if flag else "clamp(tokens/ctx x 512, 2048, 4096)"
        )
    slot_cap = None
    if linear is not None:
        slots = linear.split(rest.value).slots
        slot_cap = mamba.slot_request_cap(
            linear.rule, slots, d.disable_radix_cache, linear.extra, linear.checked
        )
        if linear.extra:
            notes.append(
                "mamba radix cache strategy extra_buffer (auto, with the overlap schedule): "
                f"{mamba.SLOTS_PER_REQUEST + mamba.EXTRA_BUFFER_SLOTS} state slots a request"
            )
        if slot_cap < sglang.max_num_reqs(tokens, ctx, flag):
            notes.append(f"running requests capped at {slot_cap} by the state slots")
    attn_dp = d.dp if d.enable_dp_attention else 1
    reqs, running = sglang.request_limits(tokens, ctx, flag, attn_dp, slot_cap)
    draft_tokens = (d.speculative_num_draft_tokens or 0) if era.pool is PoolEra.B else 0
    table = sglang.req_to_token_bytes(reqs, ctx, draft_tokens)
    items.append(
        LedgerItem(
            "request table (req_to_token)",
            table / GiB,
            f"int32 {reqs} x ({ctx} + {sglang.REQ_TO_TOKEN_EXTRA + draft_tokens}); "
            f"rows = {rows_from}",
            d.max_running_requests is not None,
        )
    )
    m = d.measured
    if m.cuda_graph_gib is not None:
        graphs = LedgerItem(
            "CUDA graphs", m.cuda_graph_gib, "measured: 'Capture cuda graph end'", True
        )
    elif max_bs:
        graphs = LedgerItem(
            "CUDA graphs",
            max_bs * 2 * MiB / GiB,
            f"estimated: cuda_graph_max_bs {max_bs} x 2 MiB (server_args reserve rule)",
            False,
        )
    else:
        graphs = None
        notes.append("CUDA graphs not estimated (pass --cuda-graph-gib): counted in 'free'")
    if graphs is not None:
        items.append(graphs)
    used = sum(i.gib for i in items[1 if card_gib is not None else 0 :])
    free = nominal_pre - used
    if free < 0 and m.free_end_gib is None:
        notes.append(
            f"the items above exceed the memory free before load by {-free:.2f} GiB: SGLang "
            "would run out of memory after sizing the pool (the request table is "
            f"{table / GiB:.2f} GiB at context {ctx:,}; --context-length or "
            "--max-running-requests shrinks it)"
        )
    if m.free_end_gib is not None:
        items.append(
            LedgerItem(
                "unattributed",
                free - m.free_end_gib,
                "reserve - listed items - measured free at end",
                True,
            )
        )
        items.append(
            LedgerItem(
                "free at end of startup", m.free_end_gib, "measured: 'available_gpu_mem'", True
            )
        )
    else:
        items.append(
            LedgerItem(
                "free at end of startup",
                free,
                "reserve left: runtime activations (chunked prefill) draw from it",
                all(i.exact for i in items),
            )
        )
    if chunk:
        notes.append(
            f"the default-fraction rule budgets {max(chunk, 2048) * 1.5 / 1024:.2f} GiB for "
            f"prefill activations (max(chunked_prefill_size {chunk}, 2048) x 1.5 MiB)"
        )

    reserve = f" - {mm_reserve:.4f}" if mm_reserve else ""
    formula = (
        f"int(({nominal_after:.2f} - {nominal_pre:.2f} x (1 - {fraction}){reserve}) GiB x 2^30) "
        f"// {cell} B/token, aligned down to page {page}"
    )
    if mm_reserve:
        notes.append(
            f"{sglang.VLM_CACHE_MIB} MiB of the budget kept for the multimodal embedding cache "
            "(mm_runtime_reservation_gb, v0.5.18+)"
        )
    host_per_token = hicache.host_bytes_per_token(p.model.kv, p.attn_tp, layers, dtype)
    host_pool = _host_pool(p, tokens, page, host_per_token) if d.enable_hierarchical_cache else None
    return p.ledger(
        era=era.label,
        items=tuple(items),
        kv_tokens=tokens,
        kv_tokens_range=token_range,
        kv_bytes_per_token=target_cell,
        page_size=page,
        context_length=ctx,
        mem_fraction=fraction,
        max_running_requests=running,
        concurrency=_concurrency(p, tokens, token_range),
        inputs=tuple(inputs),
        notes=tuple(notes),
        host_pool=host_pool,
        pool_formula=formula,
        figures=SGLangFigures(
            free_before_load_gib=nominal_pre,
            free_after_load_gib=nominal_after,
            rest_gib=rest.value,
            cell_bytes=cell,
            draft_cell_bytes=draft.cell if draft else 0,
            free_end_gib=m.free_end_gib if m.free_end_gib is not None else free,
            chunked_prefill_size=chunk or 0,
            cuda_graph_max_bs=max_bs or 0,
            max_running_requests_flag=flag or 0,
            dp_attention_size=attn_dp,
            host_bytes_per_token=host_per_token,
            state_slot_request_cap=slot_cap,
        ),
    )


def _concurrency(
    p: PlanInputs, tokens: int, rng: tuple[int, int] | None
) -> tuple[Concurrency, ...]:
    rows = []
    for ctx in context_lengths(p.contexts, p.context_length):
        low, high = (rng[0] / ctx, rng[1] / ctx) if rng else (None, None)
        rows.append(Concurrency(ctx, tokens / ctx, low, high))
    return tuple(rows)


def _host_pool(p: PlanInputs, tokens: int, page: int, per_token: int) -> HostPool:
    d = p.deployment
    host = hicache.host_tokens(tokens, page, per_token, d.hicache_ratio, d.hicache_size_gb)
    per_rank = host * per_token
    how = (
        f"--hicache-size {d.hicache_size_gb} GB"
        if d.hicache_size_gb
        else f"device tokens x {d.hicache_ratio or hicache.DEFAULT_HICACHE_RATIO}"
    )
    return HostPool(
        host, per_rank, per_rank * d.gpus, f"HostKVCache: {how}, + 1 page; {per_token:,} B/token"
    )
