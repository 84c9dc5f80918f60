"""The inputs a reconciliation needs, taken from a parsed log, then flags, then defaults.

Each input is a `Fact`: the log line it was printed on, or the flag, default or inference it
came from. A log that lacks a figure is still explained: what it lacks is estimated (and said
so), and only a log with no KV count, memory or refusal line at all is refused, naming the lines
to paste. A model kvtier cannot resolve takes its KV bytes per token from the log
(`log_geometry`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kvtier.engines import estimate
from kvtier.engines.deployment import Engine
from kvtier.engines.detect import ParsedLog
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.launch import flag_table, speculative_config
from kvtier.engines.sglang import pool as sglang_pool
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.engines.vllm import pool as vllm_budget
from kvtier.engines.vllm.log import VllmStartup
from kvtier.errors import KvtierError
from kvtier.ledger.log_geometry import LogGeometry, from_log, stand_in
from kvtier.ledger.log_model import identify_model, named_by_class
from kvtier.ledger.settings import Settings, to_bool, to_fraction, to_int, to_ratio, to_str
from kvtier.logs.facts import Fact, min_over_ranks, stated
from kvtier.logs.records import Printed
from kvtier.spec.gpu import resolve_gpu
from kvtier.spec.model import ModelSpec

# The model dtype a stand-in geometry assumes when the log does not print one.
ASSUMED_DTYPE = "bfloat16"
# Context length a stand-in model reports concurrency at when the log prints none.
STAND_IN_CONTEXT = 8192


@dataclass(frozen=True, slots=True)
class SGLangMemory:
    free_before: Fact[float]  # GiB, min over ranks
    free_after: Fact[float]
    usage: Fact[float]  # GiB the target weights took: printed, or before - after
    before_inferred: bool
    fraction: Fact[float] | None  # None: not printed, the engine's default rule applies
    max_total_tokens: int | None
    card: CardEstimate | None = None  # the card, estimated from free-before-load when needed


@dataclass(frozen=True, slots=True)
class CardEstimate:
    """A card size estimated as free before load + the before-load overheads (estimate.py)."""

    gib: float
    half: float  # half the width of the overheads' stated range
    source: str


@dataclass(frozen=True, slots=True)
class VllmMemory:
    available: Fact[float]  # GiB for the KV cache on the smallest worker


@dataclass(frozen=True, slots=True)
class LogInputs:
    engine: Engine
    parsed: ParsedLog
    model: ModelSpec
    model_source: Fact[str]
    geometry: LogGeometry | None  # the log's own bytes-per-token bracket
    model_known: bool  # False: `model` is a stand-in with the log's bytes per token
    model_by_class: bool  # taken from the model class alone (the one catalog model with it)
    tp: Fact[int]
    pp: Fact[int]
    dp: Fact[int]
    enable_dp_attention: Fact[bool]
    attn_tp: Fact[int]
    kv_dtype: KVDtype
    kv_dtype_source: Fact[str]
    kv_dtype_auto: bool  # `auto`, nothing printed: what it becomes is the engine builder's rule
    page_size: Fact[int]
    observed: Fact[int] | None  # None: a failed start that printed no count
    sglang: SGLangMemory | None
    vllm: VllmMemory | None
    settings: Settings
    plan_settings: tuple[tuple[str, Fact[object]], ...]  # Deployment fields the log or flags set
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    failure: Fact[str] | None = None  # the engine's refusal line
    estimated: tuple[tuple[str, Fact[object]], ...] = ()  # inputs estimated, not printed


def log_inputs(parsed: ParsedLog, flags: Mapping[str, object], by_class: bool = True) -> LogInputs:
    """Resolve every input of the KV-pool formula for `parsed`; raise only when the log holds
    no KV count, memory or refusal line. `by_class=False` leaves a model named only by its class
    unresolved."""
    startup = parsed.startup
    require_memory_lines(startup)
    printed = [a for a in _printed_args(startup) if a is not None]
    sglang = isinstance(startup, SGLangStartup)
    engine = Engine.SGLANG if sglang else Engine.VLLM
    settings = Settings(printed, flags, flag_table(engine))
    model_flag = _str_flag(flags, "model")
    found, model_source, model_warnings = identify_model(startup, model_flag, by_class)
    settings.warnings.extend(model_warnings)
    tp = settings.get("tp", to_int, 1)
    assert tp is not None
    estimated: list[tuple[str, Fact[object]]] = []
    seen = _tp_ranks_seen(startup)
    if tp.line is None and "tp" not in flags and seen > tp.value:
        tp = stated(seen, f"at least {seen}: the log prints ranks TP0-TP{seen - 1}, no tp argument")
        estimated.append(("tensor parallel", tp))
    pp = settings.get("pp", to_int, 1)
    dp = settings.get("dp", to_int, 1)
    dp_attention = settings.get("enable_dp_attention", to_bool, False)
    assert tp is not None and pp is not None and dp is not None and dp_attention is not None
    attn = tp.value // dp.value if dp_attention.value and dp.value else tp.value
    attn_tp = tp if attn == tp.value else stated(attn, f"tp {tp.value} / dp {dp.value}")
    notes = list(parsed.notes)
    if sglang:
        page = settings.get("page_size", to_int, 1, "default page size 1")
    else:
        assert isinstance(startup, VllmStartup)
        device = startup.kv_device.value if startup.kv_device is not None else None
        page = settings.get(
            "page_size",
            to_int,
            vllm_budget.default_block_size(device),
            f"{device or 'CUDA'} default (CacheConfig block_size)",
        )
    assert page is not None
    base = _model_dtype(settings, found)
    dsa = _dsa_auto_dtype(startup, found, settings, page.value, pp.value)
    kv_dtype, kv_source, kv_auto = _kv_dtype(engine, startup, settings, base.value, dsa)
    geometry = from_log(startup, page.value, kv_dtype.element_bytes)
    model = found
    if model is None:
        context = _printed_context(startup) or settings.get("context_length", to_int)
        ctx = context.value if context is not None and isinstance(context.value, int) else None
        name = model_source.value
        if geometry is not None:
            model = stand_in(
                name, geometry, kv_dtype.element_bytes, base.value, ctx or _ctx(startup)
            )
            notes.append(
                f"{name}: the KV geometry came from the log ({geometry.how} -> "
                f"{geometry.low:,}-{geometry.high:,} B/token per GPU, "
                f"{geometry.bytes_per_token:,} taken) and was not checked; "
                "pass --model to check it"
            )
            estimated.append(("bytes per token per GPU", _geometry_fact(geometry)))
        else:
            placeholder = LogGeometry(kv_dtype.element_bytes, 0, 0, stated(0, "none"), "none")
            model = stand_in(name, placeholder, kv_dtype.element_bytes, base.value, ctx or 1)
            notes.append(
                f"{name}: the log prints no KV size and the model is not known to kvtier; "
                "pass --model to recompute the pool"
            )
    failure = startup.failure
    if sglang:
        assert isinstance(startup, SGLangStartup)
        memory = _sglang_memory(startup, settings, tp.value * pp.value)
        if memory is not None and memory.card is not None:
            estimated.append(
                ("card memory (GiB)", stated(round(memory.card.gib, 2), memory.card.source))
            )
            implied = implied_fraction(startup, memory.free_before.value, memory.free_after.value)
            if implied is not None:
                notes.append(
                    "mem_fraction_static is not printed; the engine's default rule is applied to "
                    f"the estimated card, and the fraction that reproduces the logged pool is "
                    f"about {implied:.3f}"
                )
        observed = _sglang_observed(startup)
        vllm = None
    else:
        assert isinstance(startup, VllmStartup)
        vllm, vllm_notes = _vllm_memory(startup)
        notes.extend(vllm_notes)
        observed = _vllm_observed(startup, page)
        memory = None
    if failure is not None:
        notes.append(f"the start failed ({failure.where}): {failure.value}")
    elif found is None and geometry is None and observed is None:
        # nothing gives the bytes of one token: a count would be the budget over a placeholder
        raise KvtierError(
            f"{model_source.value}: the log prints no KV token count and no KV size, and the "
            "model is not known to kvtier; pass --model (a catalog id or a config.json) to "
            "recompute the pool, or paste the 'GPU KV cache size' / 'KV Cache is allocated' line"
        )
    plan_settings = _plan_settings(startup, settings)
    return LogInputs(
        engine=engine,
        parsed=parsed,
        model=model,
        model_source=model_source,
        geometry=geometry,
        model_known=found is not None,
        model_by_class=found is not None and named_by_class(startup, model_flag),
        tp=tp,
        pp=pp,
        dp=dp,
        enable_dp_attention=dp_attention,
        attn_tp=attn_tp,
        kv_dtype=kv_dtype,
        kv_dtype_source=kv_source,
        kv_dtype_auto=kv_auto,
        page_size=page,
        observed=observed,
        sglang=memory,
        vllm=vllm,
        settings=settings,
        plan_settings=plan_settings,
        warnings=tuple(settings.warnings),
        notes=tuple(notes),
        failure=failure,
        estimated=tuple(estimated),
    )


def _geometry_fact(geometry: LogGeometry) -> Fact[object]:
    line = geometry.line
    text = (
        f"from the log: {geometry.how} -> {geometry.low:,}-{geometry.high:,} B, "
        f"{geometry.bytes_per_token:,} taken (most factors of two); not checked"
    )
    return Fact(
        geometry.bytes_per_token, line.line, text if line.line is None else line.text, line.rank
    )


def _ctx(startup: SGLangStartup | VllmStartup) -> int:
    """A context length to report concurrency at when the log states none: the logged count
    capped at 8k (a stand-in model has no max_position_embeddings)."""
    observed = (
        _sglang_observed(startup)
        if isinstance(startup, SGLangStartup)
        else startup.kv_tokens or startup.capacity_tokens
    )
    if observed is None or observed.value <= 0:
        return STAND_IN_CONTEXT
    return min(observed.value, STAND_IN_CONTEXT)


# Deployment fields `plan` and `advise` need besides the pool formula's, and their types; the
# names each engine prints them under come from its flag table.
_TP_RANK = re.compile(r"\bTP(\d{1,4})\b")

_PLAN_SETTINGS = (
    ("context_length", to_int),
    ("max_running_requests", to_int),
    ("chunked_prefill_size", to_int),
    ("cuda_graph_max_bs", to_int),
    ("speculative_algorithm", to_str),
    ("draft_model", to_str),
    ("speculative_num_draft_tokens", to_int),
    ("max_total_tokens", to_int),
    ("kv_cache_memory_bytes", to_int),
    # hybrid linear-attention models: how the engines size the recurrent-state slots
    ("disable_radix_cache", to_bool),
    ("enable_prefix_caching", to_bool),
    ("mamba_full_memory_ratio", to_ratio),
    ("max_mamba_cache_size", to_int),
    ("mamba_ssm_dtype", to_str),
)


def _plan_settings(
    startup: SGLangStartup | VllmStartup, settings: Settings
) -> tuple[tuple[str, Fact[object]], ...]:
    """The settings `plan` and `advise` need besides the pool formula's, log first."""
    found: list[tuple[str, Fact[object]]] = []
    for name, convert in _PLAN_SETTINGS:
        fact: Fact[object] | None = settings.get(name, convert)
        if name == "context_length" and (fact is None or fact.line is None):
            fact = _printed_context(startup) or fact  # the engine's summary beats a flag
        if fact is not None and not (name == "speculative_algorithm" and fact.value == "None"):
            found.append((name, fact))
    if isinstance(startup, VllmStartup):
        found.extend(_vllm_speculative(settings, {name for name, _ in found}))
    return tuple(found)


def _vllm_speculative(settings: Settings, known: set[str]) -> list[tuple[str, Fact[object]]]:
    """vLLM prints speculative decoding as one `speculative_config` dict in its arguments."""
    for args in settings.printed:
        config = args.values.get("speculative_config")
        if not isinstance(config, dict):
            continue
        try:
            values = speculative_config(config)
        except KvtierError as exc:
            settings.warnings.append(f"line {args.line}: speculative_config not read ({exc})")
            return []
        return [(k, args.fact(v)) for k, v in values.items() if k not in known]
    return []


def _printed_context(startup: SGLangStartup | VllmStartup) -> Fact[object] | None:
    """The context length the engine settled on, from its own summary line."""
    if isinstance(startup, SGLangStartup):
        summary = startup.summary
        if summary is not None and summary.context_len is not None:
            return summary.fact(summary.context_len)
        return None
    return startup.max_model_len


def _printed_args(startup: SGLangStartup | VllmStartup) -> list:
    if isinstance(startup, SGLangStartup):
        return [startup.server_args, startup.launch]
    return [startup.args, startup.launch]


def _str_flag(flags: Mapping[str, object], name: str) -> str | None:
    value = flags.get(name)
    return value if isinstance(value, str) and value else None


def _model_dtype(settings: Settings, model: ModelSpec | None) -> Fact[str]:
    """The dtype the weights load in: the argument, else the model's, else assumed bf16."""
    flag = settings.get("dtype", to_str, "auto")
    if flag is not None and flag.value != "auto":
        return stated(str(flag.value).removeprefix("torch."), flag.where)
    if model is not None:
        return stated(model.dtype, "model config")
    return stated(ASSUMED_DTYPE, f"assumed {ASSUMED_DTYPE} (the log names no dtype)")


def _dsa_auto_dtype(
    startup: SGLangStartup | VllmStartup,
    model: ModelSpec | None,
    settings: Settings,
    page: int,
    pp: int,
) -> Fact[KVDtype] | None:
    """What SGLang's `--kv-cache-dtype auto` becomes for a DSA model (server_args, v0.5.4+):
    fp8_e4m3 from compute capability 10.0 (`dsa_kv_dtype`). The card is --gpu's; without it,
    fp8 when the printed KV size per token is the fp8 pool layout (`dsa_pool_cell`)."""
    if not isinstance(startup, SGLangStartup) or model is None or not model.kv.index_head_dim:
        return None
    gpu = settings.flags.get("gpu")
    if isinstance(gpu, str):
        try:
            card = resolve_gpu(gpu)
        except KvtierError:
            card = None
        if card is not None:
            dtype = sglang_pool.dsa_kv_dtype(card.compute_capability)
            cc = card.compute_capability
            how = f"compute capability {cc[0]}.{cc[1]}" if cc else "no CUDA compute capability"
            return stated(dtype, f"DSA auto rule: {dtype.name} on {card.name} ({how})")
    fp8 = sglang_pool.dsa_kv_dtype(sglang_pool.DSA_FP8_CAPABILITY)
    layers = sglang_pool.stage_layers(model.kv.num_layers, pp)
    cell = sglang_pool.dsa_pool_cell(model.kv, layers, fp8)
    geometry = from_log(startup, page, 1)
    if geometry is None or not geometry.fits(cell):
        return None
    line = geometry.line
    how = f"DSA auto rule: {fp8.name}, the layout of {cell:,} B/token that {geometry.how} holds"
    return Fact(fp8, line.line, how if line.line is None else line.text, line.rank)


def _kv_dtype(
    engine: Engine,
    startup: SGLangStartup | VllmStartup,
    settings: Settings,
    base: str,
    dsa: Fact[KVDtype] | None = None,
) -> tuple[KVDtype, Fact[str], bool]:
    """The KV element type: the engine's own dtype line, else the argument, else the model's
    (`dsa`: what `auto` becomes for a DSA model); and whether it is an unprinted `auto` taken as
    the model's dtype (the builder has the engine's full rule for what `auto` becomes)."""
    printed: Fact[str] | None = None
    if isinstance(startup, SGLangStartup):
        printed = startup.kv_dtype or _pool_dtype(startup)
    elif startup.fp8_kv is not None:
        printed = startup.fp8_kv
    flag = settings.get("kv_cache_dtype", to_str, "auto")
    assert flag is not None
    if printed is not None and not (flag.line is not None and flag.value != "auto"):
        source = printed
        name = printed.value
    else:
        source = flag
        name = flag.value
    plain = name.removeprefix("torch.")
    plain = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}.get(plain, plain)
    try:
        dtype = resolve_kv_dtype(engine, plain, base)
    except KvtierError as exc:
        raise KvtierError(f"KV cache dtype {name!r} ({source.where}): {exc}") from None
    if plain == "auto" and dsa is not None:
        return dsa.value, Fact(dsa.value.name, dsa.line, dsa.text, dsa.rank), False
    if plain == "auto":  # say what "auto" resolved to
        how = f"auto = the model dtype ({source.where})"
        text = source.text if source.line is not None else how
        return dtype, Fact(dtype.name, source.line, text, source.rank), True
    return dtype, source, False


def _tp_ranks_seen(startup: SGLangStartup | VllmStartup) -> int:
    """How many TP ranks the start's memory lines show, when they are TP0 to TPn-1 (else 0)."""
    if isinstance(startup, SGLangStartup):
        facts: list[Fact[object] | Printed] = [*startup.load_begin, *startup.weights]
        facts += [*startup.pools, *startup.pool_end, *startup.graphs]
    else:
        facts = [*startup.available_kv_gib, *startup.weights_gib, *startup.init_free_gib]
        facts += [*startup.total_gib, *startup.profiles]
    ranks = {int(m.group(1)) for f in facts if f.rank and (m := _TP_RANK.search(f.rank))}
    # an excerpt showing some ranks only (TP4, TP10, TP13) proves no size: require TP0..TPn-1
    return len(ranks) if ranks == set(range(len(ranks))) else 0


def _pool_dtype(startup: SGLangStartup) -> Fact[str] | None:
    """The dtype the target pool's `KV Cache is allocated. dtype: ...` line prints (2026 form)."""
    pool = next((p for p in startup.target_pools if p.dtype is not None), None)
    return pool.fact(pool.dtype) if pool is not None and pool.dtype is not None else None


def _sglang_memory(
    startup: SGLangStartup, settings: Settings, parallel: int
) -> SGLangMemory | None:
    loads = [w for w in startup.target_weights if w.avail_gib is not None]
    if not loads:
        return None
    after_load = min(loads, key=lambda w: w.avail_gib or 0.0)
    assert after_load.avail_gib is not None
    free_after = after_load.fact(after_load.avail_gib)
    for load in loads:
        if load.avail_gib is not None and load.avail_gib < 0:
            raise KvtierError(
                f"line {load.line}: avail mem={load.avail_gib:.2f} GB is negative; SGLang "
                "prints the free memory, never below 0"
            )
    begin = startup.free_before_load()
    sums = [w for w in loads if w.usage_gib is not None]
    if begin is not None:
        free_before, inferred = begin, False
        usage = stated(begin.value - free_after.value, "free before - free after load")
    elif sums:
        # the engine's MIN over ranks of the free memory before load, rank by rank
        load = min(sums, key=lambda w: (w.avail_gib or 0.0) + (w.usage_gib or 0.0))
        assert load.usage_gib is not None and load.avail_gib is not None
        usage = load.fact(load.usage_gib)
        free_before = stated(
            round(load.avail_gib + load.usage_gib, 2),
            f"inferred: avail mem {load.avail_gib:.2f} + mem usage "
            f"{load.usage_gib:.2f} GiB (line {load.line})",
        )
        inferred = True
    else:
        return None
    if free_before.value <= 0:
        raise KvtierError(
            f"free memory before load is {free_before.value:.2f} GiB ({free_before.where}); "
            "the log is cut or mangled"
        )
    fraction = settings.get("mem_fraction", to_fraction)
    card = None
    if fraction is None and not isinstance(settings.flags.get("gpu"), str):
        card = _card_from_free(free_before.value, parallel)
    cap = settings.get("max_total_tokens", to_int)
    return SGLangMemory(
        free_before, free_after, usage, inferred, fraction, cap.value if cap else None, card
    )


def _card_from_free(free_before: float, parallel: int) -> CardEstimate:
    """The card the default-fraction rule reads, as free before load + what was taken before
    it: driver reserve, CUDA context and, under TP/PP, NCCL buffers (estimate.py ranges)."""
    parts = [estimate.DRIVER_RESERVED_GIB, estimate.CUDA_CONTEXT_GIB]
    if parallel > 1:
        parts.append(estimate.COMM_BUFFERS_GIB)
    low = free_before + sum(p[1] for p in parts)
    high = free_before + sum(p[2] for p in parts)
    value = free_before + sum(p[0] for p in parts)
    return CardEstimate(
        value,
        (high - low) / 2,
        f"estimated: free before load {free_before:.2f} + driver, CUDA context"
        + (", NCCL" if parallel > 1 else "")
        + f" ({low:.2f}-{high:.2f} GiB); no server_args line states mem_fraction_static",
    )


def implied_fraction(startup: SGLangStartup, before: float, after: float) -> float | None:
    """The fraction that gives the logged pool: solves rest = after - before x (1 - f), with the
    pool's bytes from its own 'KV size' figure (two decimals of GB, so about three digits)."""
    observed = _sglang_observed(startup)
    pools = [p for p in startup.target_pools if p.total_gib is not None and p.tokens]
    if observed is None or before <= 0 or not pools:
        return None
    pool = min(pools, key=lambda p: p.tokens or 0)
    assert pool.total_gib is not None and pool.tokens
    rest = pool.total_gib * observed.value / pool.tokens
    return 1.0 - (after - rest) / before


_implied_fraction = implied_fraction


def _sglang_observed(startup: SGLangStartup) -> Fact[int] | None:
    counted = [p for p in startup.target_pools if p.tokens is not None]
    if counted:
        pool = min(counted, key=lambda p: p.tokens or 0)
        assert pool.tokens is not None
        return pool.fact(pool.tokens)
    if startup.summary is not None:
        return startup.summary.fact(startup.summary.max_total_num_tokens)
    return None


def _vllm_memory(startup: VllmStartup) -> tuple[VllmMemory | None, list[str]]:
    notes: list[str] = []
    if (blocks := startup.blocks_override) is not None:
        notes.append(
            f"the KV block count was set with --num-gpu-blocks-override={blocks.value:,} "
            f"({blocks.where}): the memory figures did not size the pool"
        )
    if startup.kv_memory_override_gib is not None:
        return VllmMemory(startup.kv_memory_override_gib), [
            *notes,
            "the KV cache size was set with --kv-cache-memory-bytes; memory profiling was skipped",
        ]
    printed = startup.available_kv()
    requested = min_over_ranks(startup.requested_gib)
    profile = next((p for p in startup.profiles if p.non_kv_gib is not None), None)
    chain: float | None = None
    if requested is not None and profile is not None and profile.non_kv_gib is not None:
        graphs = budgeted_graphs(startup)
        chain = requested.value - profile.non_kv_gib - graphs
        how = (
            f"requested {requested.value:.2f} ({requested.where}) - non-KV "
            f"{profile.non_kv_gib:.2f} (line {profile.line})"
            + (f" - CUDA-graph estimate {graphs:.2f}" if graphs else "")
        )
        if printed is not None:
            notes.append(f"available KV {printed.value:.2f} GiB = {how} = {chain:.2f} GiB")
        else:
            return VllmMemory(stated(round(chain, 2), f"computed: {how}")), notes
    return (VllmMemory(printed) if printed is not None else None), notes


def budgeted_graphs(startup: VllmStartup) -> float:
    """The CUDA-graph estimate, when this version subtracts it (on by default since v0.21)."""
    estimate = startup.graph_estimate_gib
    if estimate is None:
        return 0.0
    switch = startup.graph_profiling
    if switch is not None:
        return estimate.value if switch.value == "enabled" else 0.0
    version = startup.version.value if startup.version else None
    return estimate.value if vllm_budget.era_for(version).budgets_cuda_graphs else 0.0


def _vllm_observed(startup: VllmStartup, block: Fact[int]) -> Fact[int] | None:
    if startup.kv_tokens is not None:
        return startup.kv_tokens
    blocks = startup.gpu_blocks
    if blocks is None:
        return startup.capacity_tokens  # a refusal that states the capacity
    return Fact(
        blocks.value * block.value,
        blocks.line,
        f"derived: # GPU blocks {blocks.value} x block size {block.value} ({block.where}): "
        + blocks.text,
        blocks.rank,
    )


def require_memory_lines(startup: SGLangStartup | VllmStartup) -> None:
    """Refuse, naming the lines to paste, a log with no KV count, memory or refusal line."""
    if startup.failure is not None:
        return
    if isinstance(startup, SGLangStartup):
        if startup.load_begin or startup.weights or startup.pools or startup.summary:
            return
        wanted = (
            "'Load weight end. ... avail mem=X GB, mem usage=Y GB.', "
            "'KV Cache is allocated. #tokens: N, ...' or 'max_total_num_tokens=N, ...'"
        )
    else:
        if (
            startup.available_kv_gib
            or startup.kv_memory_override_gib
            or startup.requested_gib
            or startup.kv_tokens is not None
            or startup.gpu_blocks is not None
        ):
            return
        wanted = (
            "'Available KV cache memory: X GiB', 'GPU KV cache size: N tokens' "
            "(or V0 '# GPU blocks: N' / 'Memory profiling results: ...')"
        )
    raise KvtierError(
        f"the log lacks the memory lines kvtier needs: one of {wanted}. Paste the whole "
        "startup log, from the launch to the first request"
    )
