"""`explain` end to end: parse a startup log, reconcile its pool, build its ledger and options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvtier.engines.deployment import Measured
from kvtier.engines.detect import parse_log
from kvtier.ledger.log_deployment import log_deployment
from kvtier.ledger.log_inputs import LogInputs, log_inputs
from kvtier.ledger.log_ledger import LogLedger, build_ledger
from kvtier.ledger.options import LogOptions, log_options
from kvtier.ledger.plan import resolve
from kvtier.ledger.reconcile import Reconciliation, reconcile


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything `kvtier explain` reports about one logged server start."""

    inputs: LogInputs
    reconciliation: Reconciliation
    ledger: LogLedger
    options: LogOptions

    @property
    def engine(self) -> str:
        return self.inputs.engine.value


def explain_log(
    text: str, flags: Mapping[str, object], measured: Measured | None = None
) -> Explanation:
    """Explain the last server start in `text`.

    `flags` holds the user's settings by name (`engine`, `model`, `tp`, `pp`, `dp`,
    `mem_fraction`, `kv_cache_dtype`, `page_size`, `max_total_tokens`, `gpu`, `gpus`,
    `engine_version`, `host_ram_gb`); a value the log states wins over them. `measured` holds
    figures given as flags (`--draft-weights-gib`, `--cuda-graph-gib`, ...) for what the log
    does not print.
    """
    engine = flags.get("engine")
    parsed = parse_log(text, engine if isinstance(engine, str) else None)
    inputs = log_inputs(parsed, flags)
    deployment = log_deployment(inputs, measured)
    plan = resolve(deployment, model=inputs.model, logged=True)
    rec = reconcile(inputs, plan)
    host_ram = flags.get("host_ram_gb")
    host = float(host_ram) if isinstance(host_ram, int | float) else None
    options = log_options(plan, rec.ledger, host)
    ledger = build_ledger(inputs, rec, measured, rec.ledger)
    return Explanation(inputs, rec, ledger, options)
