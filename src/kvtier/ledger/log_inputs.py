"""The inputs a reconciliation needs, taken from a parsed log, then flags, then defaults.

Each input is a `Fact`: the log line it was printed on, or the flag, default or inference it
came from. A log that lacks a figure is still explained: what it lacks is estimated (and said
so), and only a log with no KV count, memory or refusal line at all is refused, naming the lines
to paste. A model kvtier cannot resolve takes its KV bytes per token from the log
(`engines/log_geometry.py`). What each engine prints, and where, its explain rules read
(`engines/<engine>/explain.py`); the order of precedence here is the same for every engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvtier.engines.deployment import Engine
from kvtier.engines.detect import ParsedLog
from kvtier.engines.explain import ExplainRules, LogInputs
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.launch import flag_table
from kvtier.engines.log_geometry import LogGeometry, stand_in
from kvtier.engines.log_model import identify_model, named_by_class
from kvtier.engines.rules import rules_for
from kvtier.engines.settings import (
    Settings,
    to_assignments,
    to_bool,
    to_int,
    to_ratio,
    to_str,
)
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, stated
from kvtier.model.description import ModelSpec
from kvtier.model.dtypes import canonical_dtype

# The model dtype a stand-in geometry assumes when the log does not print one.
ASSUMED_DTYPE = "bfloat16"
# Context length a stand-in model reports concurrency at when the log prints none.
STAND_IN_CONTEXT = 8192


def log_inputs(parsed: ParsedLog, flags: Mapping[str, object], by_class: bool = True) -> LogInputs:
    """Resolve every input of the KV-pool formula for `parsed`; raise only when the log holds
    no KV count, memory or refusal line. `by_class=False` leaves a model named only by its class
    unresolved."""
    startup = parsed.startup
    engine = Engine(parsed.engine)
    rules = rules_for(engine).explain
    rules.require_memory_lines(startup)
    printed = rules.printed_args(startup)
    settings = Settings(printed, flags, flag_table(engine))
    model_flag = _str_flag(flags, "model")
    architecture = rules.architecture(startup)
    found, model_source, model_warnings = identify_model(
        printed, architecture, model_flag, by_class
    )
    settings.warnings.extend(model_warnings)
    estimated: list[tuple[str, Fact[object]]] = []
    tp = _tensor_parallel(settings, flags, rules.ranks(startup), estimated)
    pp = settings.get("pp", to_int, 1)
    dp = settings.get("dp", to_int, 1)
    dp_attention = settings.get("enable_dp_attention", to_bool, False)
    assert pp is not None and dp is not None and dp_attention is not None
    attn = tp.value // dp.value if dp_attention.value and dp.value else tp.value
    attn_tp = tp if attn == tp.value else stated(attn, f"tp {tp.value} / dp {dp.value}")
    notes = list(parsed.notes)
    page = rules.page_size(startup, settings)
    base = _model_dtype(settings, found)
    printed_dtype, auto = rules.kv_dtype(startup, found, settings, page.value, pp.value)
    kv_dtype, kv_source, kv_auto = _kv_dtype(engine, printed_dtype, settings, base, auto)
    geometry = rules.geometry(startup, page.value, kv_dtype.element_bytes, pp.value)
    model = found
    if model is None:
        context = rules.context(startup) or settings.get("context_length", to_int)
        fallback = _stand_in_context(rules.printed_count(startup))
        model = _stand_in(model_source, context, fallback, geometry, kv_dtype, base, notes)
        if geometry is not None:
            estimated.append(("bytes per token per GPU", _geometry_fact(geometry)))
    failure = startup.failure
    read = rules.memory(startup, settings, tp.value * pp.value, page)
    estimated += read.estimated
    notes += read.notes
    if failure is not None:
        notes.append(f"the start failed ({failure.where}): {failure.value}")
    elif found is None and geometry is None and read.observed is None:
        # nothing gives the bytes of one token: a count would be the budget over a placeholder
        raise KvtierError(
            f"{model_source.value}: the log prints no KV token count and no KV size, and the "
            "model is not known to kvtier; pass --model (a catalog id or a config.json) to "
            "recompute the pool, or paste the 'GPU KV cache size' / 'KV Cache is allocated' line"
        )
    plan_settings = _plan_settings(rules, startup, settings)
    return LogInputs(
        engine=engine,
        parsed=parsed,
        model=model,
        model_source=model_source,
        geometry=geometry,
        model_known=found is not None,
        model_by_class=found is not None and named_by_class(printed, architecture, model_flag),
        tp=tp,
        pp=pp,
        dp=dp,
        enable_dp_attention=dp_attention,
        attn_tp=attn_tp,
        kv_dtype=kv_dtype,
        kv_dtype_source=kv_source,
        kv_dtype_auto=kv_auto,
        page_size=page,
        observed=read.observed,
        memory=read.memory,
        settings=settings,
        plan_settings=plan_settings,
        warnings=tuple(settings.warnings),
        notes=tuple(notes),
        failure=failure,
        estimated=tuple(estimated),
    )


def _tensor_parallel(
    settings: Settings,
    flags: Mapping[str, object],
    ranks: list[str],
    estimated: list[tuple[str, Fact[object]]],
) -> Fact[int]:
    """The TP size as stated, or at least the ranks the memory lines show when nothing states it."""
    tp = settings.get("tp", to_int, 1)
    assert tp is not None
    seen = _tp_ranks_seen(ranks)
    if tp.line is None and "tp" not in flags and seen > tp.value:
        tp = stated(seen, f"at least {seen}: the log prints ranks TP0-TP{seen - 1}, no tp argument")
        estimated.append(("tensor parallel", tp))
    return tp


def _stand_in(
    source: Fact[str],
    context: Fact[object] | None,
    fallback: int,
    geometry: LogGeometry | None,
    kv_dtype: KVDtype,
    base: Fact[str],
    notes: list[str],
) -> ModelSpec:
    """A model kvtier cannot resolve, with the KV bytes per token the log's figures give."""
    ctx = context.value if context is not None and isinstance(context.value, int) else None
    name = source.value
    size = kv_dtype.element_bytes
    if geometry is not None:
        notes.append(
            f"{name}: the KV geometry came from the log ({geometry.how} -> "
            f"{geometry.low:,}-{geometry.high:,} B/token per GPU, "
            f"{geometry.bytes_per_token:,} taken) and was not checked; "
            "pass --model to check it"
        )
        return stand_in(name, geometry, size, base.value, ctx or fallback)
    placeholder = LogGeometry(size, 0, 0, stated(0, "none"), "none")
    notes.append(
        f"{name}: the log prints no KV size and the model is not known to kvtier; "
        "pass --model to recompute the pool"
    )
    return stand_in(name, placeholder, size, base.value, ctx or 1)


def _geometry_fact(geometry: LogGeometry) -> Fact[object]:
    line = geometry.line
    text = (
        f"from the log: {geometry.how} -> {geometry.low:,}-{geometry.high:,} B, "
        f"{geometry.bytes_per_token:,} taken (most factors of two); not checked"
    )
    return Fact(
        geometry.bytes_per_token, line.line, text if line.line is None else line.text, line.rank
    )


def _stand_in_context(observed: Fact[int] | None) -> int:
    """A context length to report concurrency at when the log states none: the logged count
    capped at 8k (a stand-in model has no max_position_embeddings)."""
    if observed is None or observed.value <= 0:
        return STAND_IN_CONTEXT
    return min(observed.value, STAND_IN_CONTEXT)


# Deployment fields `plan` and `advise` need besides the pool formula's, and their types; the
# names each engine prints them under come from its flag table.
_TP_RANK = re.compile(r"\bTP(\d{1,4})\b")

_PLAN_SETTINGS = (
    # the dtype the model runs in, when stated: a float32 or float16 run sizes its KV by it
    ("dtype", to_str),
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
    ("hybrid.disable_radix_cache", to_bool),
    ("hybrid.enable_prefix_caching", to_bool),
    # vLLM: how far past its window a sliding-window group holds blocks (v0.26.0 on)
    ("async_scheduling", to_bool),
    # vLLM: the hybrid KV cache manager, which a KV connector can turn off (engines/vllm/hma.py)
    ("disable_hybrid_kv_cache_manager", to_bool),
    ("hybrid.mamba_full_memory_ratio", to_ratio),
    ("hybrid.max_mamba_cache_size", to_int),
    ("hybrid.mamba_ssm_dtype", to_str),
    # SGLang --device: a build kvtier does not model is refused, not sized as CUDA
    ("device", to_str),
    # vLLM's VLLM_PP_LAYER_PARTITION, from the assignments before a logged launch command
    ("pp_layer_partition", to_str),
    # vLLM's VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE, the same way (engines/vllm/hma.py)
    ("allow_chunked_local_hma", to_bool),
    # SGLang: the LM head over the attention-TP group under DP attention
    ("enable_dp_lm_head", to_bool),
    # SGLANG_* assignments before a logged launch command (SGLANG_ENABLE_EMBED_REPLICATION)
    ("sglang_env", to_assignments),
)


def _plan_settings(
    rules: ExplainRules, startup: object, settings: Settings
) -> tuple[tuple[str, Fact[object]], ...]:
    """The settings `plan` and `advise` need besides the pool formula's, log first."""
    found: list[tuple[str, Fact[object]]] = []
    for name, convert in _PLAN_SETTINGS:
        fact: Fact[object] | None = settings.get(name, convert)
        if name == "context_length" and (fact is None or fact.line is None):
            fact = rules.context(startup) or fact  # the engine's summary beats a flag
        if name == "dtype" and fact is not None:
            plain = canonical_dtype(str(fact.value))
            fact = None if plain == "auto" else Fact(plain, fact.line, fact.text, fact.rank)
        if fact is not None and not (name == "speculative_algorithm" and fact.value == "None"):
            found.append((name, fact))
    found += rules.plan_settings(startup, settings, {name for name, _ in found})
    return tuple(found)


def _str_flag(flags: Mapping[str, object], name: str) -> str | None:
    value = flags.get(name)
    return value if isinstance(value, str) and value else None


def _model_dtype(settings: Settings, model: ModelSpec | None) -> Fact[str]:
    """The dtype the weights load in: the argument, else the model's, else assumed bf16."""
    flag = settings.get("dtype", to_str, "auto")
    if flag is not None and flag.value != "auto":
        return stated(canonical_dtype(str(flag.value)), flag.where)
    if model is not None:
        return stated(model.dtype, "model config")
    return stated(ASSUMED_DTYPE, f"assumed {ASSUMED_DTYPE} (the log names no dtype)")


def _kv_dtype(
    engine: Engine,
    printed: Fact[str] | None,
    settings: Settings,
    base: Fact[str],
    auto: Fact[KVDtype] | None = None,
) -> tuple[KVDtype, Fact[str], bool]:
    """The KV element type: the engine's own dtype line, else the argument, else the model's
    (`auto`: what `auto` becomes under the engine's own rule, a DSA model's); and whether it is
    an unprinted `auto` taken as the model's dtype (the builder has the engine's full rule for
    what `auto` becomes)."""
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
        dtype = resolve_kv_dtype(engine, plain, base.value)
    except KvtierError as exc:
        raise KvtierError(f"KV cache dtype {name!r} ({source.where}): {exc}") from None
    if plain == "auto" and auto is not None:
        return auto.value, Fact(auto.value.name, auto.line, auto.text, auto.rank), False
    if plain == "auto":  # say what "auto" resolved to
        how = f"auto = the model dtype ({source.where}; {base.value}: {base.where})"
        text = source.text if source.line is not None else how
        return dtype, Fact(dtype.name, source.line, text, source.rank), True
    return dtype, source, False


def _tp_ranks_seen(tags: list[str]) -> int:
    """How many TP ranks the start's memory lines show, when they are TP0 to TPn-1 (else 0)."""
    ranks = {int(m.group(1)) for tag in tags if (m := _TP_RANK.search(tag))}
    # an excerpt showing some ranks only (TP4, TP10, TP13) proves no size: require TP0..TPn-1
    return len(ranks) if ranks == set(range(len(ranks))) else 0
