"""The options menu for a logged start: the log's figures as a measured `Deployment`, then advise.

The deployment carries every setting the log states (with its line as origin) and the measured
free memory, weights, activation and graph figures, so `kvtier.ledger.advise` prices each option
from what this server actually saw.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.deployment import Deployment, Measured
from kvtier.engines.ledger import Ledger
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.engines.vllm.log import VllmStartup
from kvtier.errors import KvtierError
from kvtier.ledger.advise import DEFAULT_MARGIN_GIB, HostSetup, Option, all_options
from kvtier.ledger.log_inputs import LogInputs
from kvtier.ledger.plan import build_ledger, resolve
from kvtier.logs.facts import Fact, min_over_ranks


@dataclass(frozen=True, slots=True)
class LogOptions:
    """The menu, the plan ledger it was priced against (None when it could not be), and why."""

    options: tuple[Option, ...]
    base: Ledger | None
    note: str | None


def log_options(
    inp: LogInputs, host_ram_gb: float | None, measured_flags: Measured | None = None
) -> LogOptions:
    """advise's options for the logged deployment; `measured_flags` fill figures the log lacks."""
    deployment = log_deployment(inp, measured_flags)
    try:
        plan_inputs = resolve(deployment)
        base = build_ledger(plan_inputs)
        options = all_options(plan_inputs, base, DEFAULT_MARGIN_GIB, HostSetup(host_ram_gb))
    except KvtierError as exc:
        return LogOptions((), None, f"options not priced: {exc}")
    return LogOptions(tuple(options), base, None)


def log_deployment(inp: LogInputs, measured_flags: Measured | None = None) -> Deployment:
    """The deployment the log describes, each value's origin naming its log line or flag."""
    values: dict[str, object] = {
        "model": inp.model_source.value,
        "tp": inp.tp.value,
        "pp": inp.pp.value,
        "kv_cache_dtype": inp.kv_dtype.name,
        "page_size": inp.page_size.value,
    }
    origins = {
        "model": inp.model_source.where,
        "tp": inp.tp.where,
        "pp": inp.pp.where,
        "kv_cache_dtype": inp.kv_dtype_source.where,
        "page_size": inp.page_size.where,
    }
    startup = inp.parsed.startup
    flags = measured_flags or Measured()
    if isinstance(startup, SGLangStartup):
        measured = _sglang_measured(inp, startup, flags)
        mem = inp.sglang
        assert mem is not None
        values["mem_fraction"], origins["mem_fraction"] = mem.fraction.value, mem.fraction.where
    else:
        assert isinstance(startup, VllmStartup)
        measured = _vllm_measured(startup, flags)
        if startup.utilization is not None:
            values["mem_fraction"] = startup.utilization.value
            origins["mem_fraction"] = startup.utilization.where
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
    assert mem is not None
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
        gpu_mem_gib=flags.gpu_mem_gib,
    )


def _vllm_measured(v: VllmStartup, flags: Measured) -> Measured:
    profile = next((p for p in v.profiles if p.torch_peak_gib is not None), None)
    activation = profile.torch_peak_gib if profile else _value(v.v0_activation_gib)
    non_torch = profile.non_torch_gib if profile else _value(v.v0_non_torch_gib)
    graphs = _value(v.graph_estimate_gib)
    return Measured(
        weights_gib=_value(min_over_ranks(v.weights_gib)),
        activation_gib=activation,
        non_torch_gib=non_torch,
        cuda_graph_gib=graphs if graphs is not None else flags.cuda_graph_gib,
        gpu_mem_gib=_value(min_over_ranks(v.total_gib)) or flags.gpu_mem_gib,
    )
