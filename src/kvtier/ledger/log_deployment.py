"""The deployment a startup log describes: every setting it states, its figures as measurements.

The deployment carries each setting the log states (with its line as origin) and the measured
free memory, weights, KV budget, activation and graph figures, so the engine's ledger builder
recomputes the pool from what this server actually saw, and advise prices each option from it.
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment, Measured
from kvtier.engines.sglang import mamba
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.engines.version import Version
from kvtier.engines.vllm.log import VllmStartup
from kvtier.engines.vllm.pool import DEFAULT_GPU_MEMORY_UTILIZATION
from kvtier.ledger.log_inputs import LogInputs
from kvtier.ledger.settings import to_fraction
from kvtier.logs.facts import Fact, min_over_ranks


def log_deployment(inp: LogInputs, measured_flags: Measured | None = None) -> Deployment:
    """The deployment the log describes, each value's origin naming its log line or flag."""
    values: dict[str, object] = {
        "model": inp.model_source.value,
        "tp": inp.tp.value,
        "pp": inp.pp.value,
        "dp": inp.dp.value,
        "enable_dp_attention": inp.enable_dp_attention.value,
        # an unprinted `auto` of a known model is resolved by the builder, as plan resolves it
        # (ModelOpt FP8 checkpoints, float32 configs); printed or stated, it is what the log says
        "kv_cache_dtype": "auto" if inp.kv_dtype_auto and inp.model_known else inp.kv_dtype.name,
        "page_size": inp.page_size.value,
    }
    origins = {
        "model": inp.model_source.where,
        "tp": inp.tp.where,
        "pp": inp.pp.where,
        "dp": inp.dp.where,
        "enable_dp_attention": inp.enable_dp_attention.where,
        "kv_cache_dtype": inp.kv_dtype_source.where,
        "page_size": inp.page_size.where,
    }
    startup = inp.parsed.startup
    flags = measured_flags or Measured()
    if isinstance(startup, SGLangStartup):
        measured = _sglang_measured(inp, startup, flags)
        mem = inp.sglang
        if mem is not None and mem.fraction is not None:
            values["mem_fraction"] = mem.fraction.value
            origins["mem_fraction"] = mem.fraction.where
    else:
        assert isinstance(startup, VllmStartup)
        utilization = startup.utilization or inp.settings.get("mem_fraction", to_fraction)
        measured = _vllm_measured(
            startup,
            flags,
            inp.vllm.available.value if inp.vllm is not None else None,
            utilization.value if utilization is not None else DEFAULT_GPU_MEMORY_UTILIZATION,
        )
        if utilization is not None:
            values["mem_fraction"] = utilization.value
            origins["mem_fraction"] = utilization.where
        if startup.version is not None:
            values["engine_version"] = startup.version.value
            origins["engine_version"] = startup.version.where
    for name, fact in inp.plan_settings:
        value = str(fact.value).upper() if name == "speculative_algorithm" else fact.value
        values[name], origins[name] = value, fact.where
    version = inp.settings.flags.get("engine_version")
    if isinstance(version, str) and "engine_version" not in values:
        values["engine_version"], origins["engine_version"] = version, "kvtier flag"
    gpu = inp.settings.flags.get("gpu")
    if isinstance(gpu, str):
        values["gpu"], origins["gpu"] = gpu, "kvtier flag"
    gpus = inp.settings.flags.get("gpus")
    if isinstance(gpus, int):
        values["gpus_per_node"], origins["gpus_per_node"] = gpus, "kvtier flag"
    return Deployment(
        engine=inp.engine,
        measured=measured,
        origins=tuple((k, f"log {v}" if v.startswith("line") else v) for k, v in origins.items()),
        **values,  # type: ignore[arg-type]
    )


def _value(fact: Fact[float] | None) -> float | None:
    return fact.value if fact is not None else None


def _sglang_measured(inp: LogInputs, s: SGLangStartup, flags: Measured) -> Measured:
    mem = inp.sglang
    if mem is None:  # no weight-load lines: the builder estimates from the card and the spec
        return flags
    card = mem.card.gib if mem.card is not None else None
    target_graphs = [g.usage_gib for g in s.graphs if not g.draft and g.usage_gib is not None]
    draft = next((w.usage_gib for w in s.draft_weights if w.usage_gib is not None), None)
    final = s.summary.available_gpu_mem_gib if s.summary is not None else None
    return Measured(
        free_before_load_gib=None if mem.before_inferred else mem.free_before.value,
        free_after_load_gib=mem.free_after.value,
        weights_gib=mem.usage.value,
        cuda_graph_gib=target_graphs[0] if target_graphs else flags.cuda_graph_gib,
        draft_weights_gib=draft if draft is not None else flags.draft_weights_gib,
        free_end_gib=final if final is not None else flags.free_end_gib,
        gpu_mem_gib=flags.gpu_mem_gib if flags.gpu_mem_gib is not None else card,
        state_pool_gib=_charged_state_gib(inp, s),
    )


def _charged_state_gib(inp: LogInputs, s: SGLangStartup) -> float | None:
    """The printed state pool less the padding slot the release does not charge the budget."""
    pool = max(s.state_pools, key=lambda p: p.total_gib, default=None)
    if pool is None:
        return None
    flag = inp.settings.flags.get("engine_version")
    version = Version.parse(flag, "SGLang") if isinstance(flag, str) else None
    return mamba.charged_state_gib(pool.total_gib, pool.slots, version)


def _vllm_measured(
    v: VllmStartup, flags: Measured, available_gib: float | None, utilization: float
) -> Measured:
    profile = next((p for p in v.profiles if p.torch_peak_gib is not None), None)
    weights = _value(min_over_ranks(v.weights_gib))
    activation = profile.torch_peak_gib if profile else _value(v.v0_activation_gib)
    peak = _value(v.v0_torch_peak_gib)
    if activation is None and peak is not None and weights is not None:
        activation = round(peak - weights, 2)  # V0 prints the peak with the weights in it
    non_torch = profile.non_torch_gib if profile else _value(v.v0_non_torch_gib)
    graphs = _value(v.graph_estimate_gib)
    return Measured(
        weights_gib=weights,
        activation_gib=activation,
        non_torch_gib=non_torch,
        cuda_graph_gib=graphs if graphs is not None else flags.cuda_graph_gib,
        gpu_mem_gib=_value(min_over_ranks(v.total_gib)) or flags.gpu_mem_gib,
        kv_available_gib=available_gib,
        kv_available_utilization=utilization if available_gib is not None else None,
    )
