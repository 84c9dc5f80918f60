"""The deployment a startup log describes: every setting it states, its figures as measurements.

The deployment carries each setting the log states (with its line as origin) and the measured
free memory, weights, KV budget, activation and graph figures, so the engine's ledger builder
recomputes the pool from what this server actually saw, and advise prices each option from it.
Which figures a log prints, and what they measure, is the engine's (`engines/<engine>/explain.py`).
"""

from __future__ import annotations

from kvtier.engines.deployment import Deployment, Measured, grouped
from kvtier.engines.explain import LogInputs, Rows


def measured_deployment(inp: LogInputs, measured: Measured, logged: Rows) -> Deployment:
    """The deployment the log describes, from the engine's reading of the log's figures
    (`measured`) and the settings they imply (`logged`), each value's origin naming its log
    line or flag."""
    values: dict[str, object] = {
        "model": inp.model_source.value,
        "tp": inp.tp.value,
        "pp": inp.pp.value,
        "dp": inp.dp.value,
        "enable_dp_attention": inp.enable_dp_attention.value,
        # an unprinted `auto` is resolved by the builder, as plan resolves it (ModelOpt FP8
        # checkpoints, float32 configs, the stated --dtype); printed or stated, it is what the
        # log says
        "kv_cache_dtype": "auto" if inp.kv_dtype_auto else inp.kv_dtype.name,
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
    for name, fact in logged:
        values[name], origins[name] = fact.value, fact.where
    for name, fact in inp.plan_settings:
        value = str(fact.value).upper() if name == "speculative_algorithm" else fact.value
        values[name], origins[name] = value, fact.where
    version = inp.settings.flags.get("engine_version")
    if isinstance(version, str) and "engine_version" not in values:
        values["engine_version"], origins["engine_version"] = version, "kvtier flag"
    gpu = inp.settings.flags.get("gpu")
    if isinstance(gpu, str):
        values["gpu"], origins["gpu"] = gpu, "kvtier flag"
    gpus = inp.settings.flags.get("gpus_per_node")
    if isinstance(gpus, int):
        values["gpus_per_node"], origins["gpus_per_node"] = gpus, "kvtier flag"
    return Deployment(
        engine=inp.engine,
        measured=measured,
        origins=tuple((k, f"log {v}" if v.startswith("line") else v) for k, v in origins.items()),
        **grouped(values),  # type: ignore[arg-type]
    )
