"""Assemble the per-GPU ledger of an SGLang deployment from the rules in `sglang` and `hicache`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvtier.engines import estimate
from kvtier.engines.deployment import Deployment
from kvtier.engines.estimate import Term
from kvtier.engines.figures import SGLangFigures
from kvtier.engines.inputs import PlanInputs, stage_layers
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.ledger import Concurrency, Ledger, context_lengths
from kvtier.engines.sglang import gemma4, hicache, ledger_items, mamba, weight_segments
from kvtier.engines.sglang import pool as sglang
from kvtier.engines.sglang import swa as sliding
from kvtier.engines.sglang.defaults import default_mem_fraction
from kvtier.engines.sglang.dtype import checkpoint_kv_dtype, run_dtype
from kvtier.engines.sglang.platform import (
    as_built,
    check_device,
    default_page,
    device_memory,
    not_cuda,
    platform_notes,
)
from kvtier.engines.sglang.pool import PoolEra
from kvtier.engines.version import Version
from kvtier.errors import DoesNotStart, KvtierError
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind
from kvtier.model.gpu import GpuSpec, resolve_gpu
from kvtier.units import GiB, MiB

MTP_ALGORITHMS = frozenset({"NEXTN", "MTP"})
EAGLE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3"})
# An EAGLE head is one Llama decoder layer; without its config, assume the target's attention heads
# as KV heads and head_dim 128 (Kimi-K2.5 EAGLE-3 logs K size 0.30 GB at 159,277 tokens, TP8).
EAGLE_ASSUMED_HEAD_DIM = 128


def _kv_dtype(p: PlanInputs, version: Version) -> KVDtype:
    """The KV element type: `auto` on a DSA model follows SGLang's own rule by GPU; otherwise
    `auto` is the dtype the model runs in (`dtype.run_dtype` under --dtype auto)."""
    d = p.deployment
    if d.kv_cache_dtype != "auto":
        return p.kv_dtype()
    if p.model.kv.index_head_dim:
        return sglang.dsa_kv_dtype(_capability(d))
    checkpoint = checkpoint_kv_dtype(version, p.model)
    if checkpoint is not None:
        return resolve_kv_dtype(d.engine, checkpoint.name, p.model.dtype)
    if d.dtype == "auto":
        return resolve_kv_dtype(d.engine, "auto", run_dtype(p.model).name)
    return p.kv_dtype()


class _LinearState:
    """The state-slot rule of a hybrid linear-attention deployment (engines/sglang/mamba.py)."""

    def __init__(self, p: PlanInputs, version: Version) -> None:
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
        self.ssm_dtype = dtype = mamba.ssm_dtype(version, d.hybrid.mamba_ssm_dtype, state)
        widen = self.rule is not mamba.SlotRule.FIXED
        self.per_slot = mamba.state_bytes(state, p.attn_tp, dtype, widen)
        self.ratio = d.hybrid.mamba_full_memory_ratio or mamba.DEFAULT_FULL_MEMORY_RATIO
        self.checked = mamba.checks_slots(version)
        self.extra = mamba.extra_buffer(version, p.model.architecture, d.hybrid.disable_radix_cache)
        self.dp = d.dp if d.enable_dp_attention else 1
        self.deployment = d

    def no_room(self, rest_gib: float) -> DoesNotStart:
        split = self.split(rest_gib)
        return DoesNotStart(
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
            d.hybrid.max_mamba_cache_size,
            d.max_running_requests,
            d.hybrid.disable_radix_cache or self.rule is mamba.SlotRule.FIXED,
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


def _gemma4_refused(d: Deployment) -> tuple[tuple[str, bool], ...]:
    """The features whose Gemma 4 pools are not modelled, each with whether `d` uses it."""
    return (
        ("speculative decoding", bool(d.speculative_algorithm)),
        ("the hierarchical cache", bool(d.hicache.enable)),
        ("pipeline parallelism", d.pp > 1),
    )


def _draft_cell(p: PlanInputs, dtype: KVDtype) -> sglang.DraftCell | None:
    """Bytes per token of the draft's KV on one rank (Era B: draft pool of the target's size)."""
    d = p.deployment
    algo = (d.speculative_algorithm or "").upper()
    if not algo or algo == "NGRAM":
        return None
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
    if m.free.before_load_gib is not None:
        terms["pre"] = Term.known(
            m.free.before_load_gib, "measured: 'Load weight begin. avail mem'"
        )
    elif m.free.after_load_gib is not None and m.weights_gib is not None:
        terms["pre"] = Term.known(
            m.free.after_load_gib + m.weights_gib, "measured: free after load + weights 'mem usage'"
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
    if m.free.after_load_gib is not None:
        terms["after"] = Term.known(m.free.after_load_gib, "measured: 'Load weight end. avail mem'")
    else:
        nbytes, source = p.weights_bytes, p.weights_source
        d = p.deployment
        rounding = weight_segments.rounding_bytes(p.model, d.tp, d.pp, p.splits)
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
    if m.free.before_load_gib is not None:
        return ("free.before_load_gib", "free.after_load_gib")
    return ("free.after_load_gib", "weights_gib")


@dataclass(frozen=True)
class Cells:
    """What a token costs on one rank, in bytes (memory_pool.py's cell sizes)."""

    era: sglang.Era
    dtype: KVDtype
    page: int
    layers: int  # this pipeline stage's layers
    target: int  # the target model's KV per token (the DSA pool layout where the release prices it)
    pool: int  # what memory_pool.py allocates per token
    profiled: int  # what profile_max_num_token divides by: the draft's share inside from v0.5.14
    draft: sglang.DraftCell | None
    swa_pool: bool


def _cells(p: PlanInputs) -> Cells:
    d, kv = p.deployment, p.model.kv
    era = sglang.era_for(d.engine_version)
    swa_pool = sliding.uses_swa_pool(p.model, era.version, _capability(d))
    sglang.check_layers(kv, d.pp, swa_pool)
    dtype = _kv_dtype(p, era.version)
    if not kv.is_uniform:
        gemma4.check_runs(
            p.model.architecture,
            era.version,
            dtype,
            _capability(d),
            d.page_size,
            _gemma4_refused(d),
        )
    page = d.page_size or default_page(d) or (sglang.DSA_PAGE_SIZE if kv.index_head_dim else 1)
    layers = stage_layers(kv.num_layers, d.pp)
    target = sglang.cell_size(kv, p.attn_tp, layers, dtype)
    pool = sglang.dsa_pool_cell(kv, layers, dtype) if kv.index_head_dim else target
    if sglang.prices_dsa_layout(era.version):
        target = pool
    draft = _draft_cell(p, dtype)
    profiled = target
    if draft is not None and sglang.draft_in_cell(era):
        profiled = int(target * (1 + draft.layers / layers))
    return Cells(era, dtype, page, layers, target, pool, profiled, draft, swa_pool)


@dataclass(frozen=True)
class Budget:
    """The memory profile_max_num_token sizes the pools from, GiB per GPU."""

    fraction: float
    fraction_rule: str  # how SGLang picks the default fraction, with its arithmetic
    chunk: int | None  # chunked_prefill_size (the engine's tier pick, or the flag)
    max_bs: int | None  # cuda_graph_max_bs, likewise
    terms: Mapping[str, Term]
    mm_reserve: float  # kept for the multimodal embedding cache
    rest: Term  # the KV budget (and state slots), with its range
    pre: float  # nominal free before load
    after: float  # nominal free after load
    linear: _LinearState | None
    logged_state: float | None  # a state pool the log printed, for a model kvtier cannot size


def _budget(p: PlanInputs, cells: Cells) -> Budget:
    d, era = p.deployment, cells.era
    # The engine picks chunked_prefill_size and cuda_graph_max_bs by GPU tier either way.
    gpu = device_memory(d, p.gpu_mem_mib, era.version)
    built = as_built(d, gpu, era.version)
    rule = default_mem_fraction(era.version, gpu, built, p.model, not_cuda(d))
    chunk, max_bs = rule.chunked_prefill_size, rule.cuda_graph_max_bs
    if p.gpu_mem_mib is None:  # the engine's tiers need the card: only the flags are known
        chunk, max_bs = d.chunked_prefill_size, d.cuda_graph_max_bs
    fraction = d.mem_fraction if d.mem_fraction is not None else rule.value
    terms = _memory_terms(p)
    mm_reserve = sglang.multimodal_reserve_gib(era, p.model.multimodal)
    rest = estimate.spread(
        terms, lambda v: sglang.rest_gib(v["pre"], _after(v), fraction) - mm_reserve
    )
    pre = terms["pre"].value
    after = _after({k: t.value for k, t in terms.items()})
    if rest.value <= 0:
        raise sglang.not_enough_memory(pre, after)
    linear = _LinearState(p, era.version) if p.model.kv.linear is not None else None
    logged_state = d.measured.state_pool_gib if linear is None else None
    return Budget(
        fraction,
        rule.rule,
        chunk,
        max_bs,
        terms,
        mm_reserve,
        rest,
        pre,
        after,
        linear,
        logged_state,
    )


def _pools(p: PlanInputs, cells: Cells, budget: Budget, rest_gib: float) -> tuple[int, int]:
    """(full-layer tokens, sliding-window tokens) for a budget of `rest_gib`."""
    d = p.deployment
    if budget.linear is not None and rest_gib > 0:
        rest_gib = budget.linear.split(rest_gib).rest_gib
    elif budget.logged_state:
        rest_gib -= budget.logged_state
    if rest_gib <= 0:
        return 0, 0
    profiled = sglang.profile_tokens(rest_gib, cells.profiled, cells.page, d.max_total_tokens)
    if not cells.swa_pool:
        return profiled, 0
    ratio, kv = sglang.SWA_FULL_TOKENS_RATIO, p.model.kv
    if cells.era.pool is PoolEra.C:  # Era A/B re-divide the uniform count they profiled
        split = sliding.era_c_tokens(
            rest_gib, kv, p.attn_tp, cells.dtype, cells.page, ratio, d.max_total_tokens
        )
    else:
        split = sglang.hybrid_swa_tokens(profiled, kv, p.attn_tp, cells.page, ratio)
    return split.full_tokens, split.swa_tokens


@dataclass(frozen=True)
class Split:
    """The budget divided into tokens: full-attention and sliding-window pools, state slots."""

    tokens: int
    swa: int
    token_range: tuple[int, int] | None
    kv_bytes: int  # the KV pool as memory_pool.py allocates it
    state: mamba.MambaSplit | None


def _split(p: PlanInputs, cells: Cells, budget: Budget) -> Split:
    rest, linear, kv, page = budget.rest, budget.linear, p.model.kv, cells.page
    tokens, swa = _pools(p, cells, budget, rest.value)
    if linear is not None and tokens <= 0:
        raise linear.no_room(rest.value)
    if tokens <= 0:
        raise sglang.not_enough_memory(budget.pre, budget.after)
    token_range = None
    if not rest.exact:
        token_range = (
            _pools(p, cells, budget, rest.low)[0],
            _pools(p, cells, budget, rest.high)[0],
        )
    kv_bytes = sglang.kv_size_bytes(tokens, page, cells.pool)
    if cells.swa_pool:
        kv_bytes = sliding.pool_bytes(
            sliding.pool_cells(kv, p.attn_tp, cells.dtype, cells.target, cells.layers),
            kv,
            page,
            tokens,
            swa,
        )
    state = linear.split(rest.value) if linear is not None else None
    return Split(tokens, swa, token_range, kv_bytes, state)


@dataclass(frozen=True)
class Requests:
    """The request table and the running-request limit over the pool (init_memory_pool)."""

    flag: int | None  # --max-running-requests, else the speculative default
    slot_cap: int | None  # the rows the state slots allow
    capped_by_slots: bool
    extra_buffer: bool  # mamba extra_buffer: more state slots a request
    attn_dp: int
    limits: sglang.RequestLimits
    draft_tokens: int  # extra req_to_token columns for speculative decoding (Era B)
    table_bytes: int


def _requests(p: PlanInputs, cells: Cells, budget: Budget, split: Split) -> Requests:
    d, era, ctx, linear = p.deployment, cells.era, p.context_length, budget.linear
    flag = d.max_running_requests
    if flag is None:
        flag = sglang.speculative_max_running_requests(d.speculative_algorithm, era)
    slot_cap, capped = None, False
    if linear is not None:
        assert split.state is not None
        slot_cap = mamba.slot_request_cap(
            linear.rule,
            split.state.slots,
            d.hybrid.disable_radix_cache,
            linear.extra,
            linear.checked,
        )
        capped = slot_cap < sglang.max_num_reqs(split.tokens, ctx, flag)
    attn_dp = d.dp if d.enable_dp_attention else 1
    limits = sglang.request_limits(split.tokens, ctx, flag, attn_dp, slot_cap)
    draft_tokens = (d.speculative_num_draft_tokens or 0) if era.pool is PoolEra.B else 0
    table = sglang.req_to_token_bytes(limits.rows, ctx, draft_tokens)
    extra = linear is not None and linear.extra
    return Requests(flag, slot_cap, capped, extra, attn_dp, limits, draft_tokens, table)


def build(p: PlanInputs) -> Ledger:
    """The ledger SGLang's profile_max_num_token / init_memory_pool produce for `p`:
    cells -> budget -> token split -> request table -> items and notes."""
    d = p.deployment
    cells = _cells(p)
    check_device(d, cells.era.version, bool(p.model.kv.index_head_dim))
    budget = _budget(p, cells)
    split = _split(p, cells, budget)
    requests = _requests(p, cells, budget, split)
    text = ledger_items.describe(p, cells, budget, split, requests)
    host_per_token = hicache.host_bytes_per_token(p.model.kv, p.attn_tp, cells.layers, cells.dtype)
    host_pool = (
        ledger_items.host_pool(p, split.tokens, cells.page, host_per_token)
        if d.hicache.enable
        else None
    )
    m = d.measured
    return p.ledger(
        era=cells.era.label,
        items=text.items,
        kv_tokens=split.tokens,
        kv_tokens_range=split.token_range,
        kv_bytes_per_token=cells.target,
        page_size=cells.page,
        context_length=p.context_length,
        mem_fraction=budget.fraction,
        max_running_requests=requests.limits.running,
        concurrency=_concurrency(p, split.tokens, split.token_range),
        inputs=text.inputs,
        notes=(*text.notes, *platform_notes(d), *estimate.widest(budget.rest)),
        host_pool=host_pool,
        pool_formula=text.pool_formula,
        figures=SGLangFigures(
            free_before_load_gib=budget.pre,
            free_after_load_gib=budget.after,
            rest_gib=budget.rest.value,
            cell_bytes=cells.profiled,
            draft_cell_bytes=cells.draft.cell if cells.draft else 0,
            free_end_gib=m.free.end_gib if m.free.end_gib is not None else text.free_end,
            chunked_prefill_size=budget.chunk or 0,
            cuda_graph_max_bs=budget.max_bs or 0,
            max_running_requests_flag=requests.flag or 0,
            dp_attention_size=requests.attn_dp,
            host_bytes_per_token=host_per_token,
            state_slot_request_cap=requests.slot_cap,
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
