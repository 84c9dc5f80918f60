"""`explain` end to end: parse a startup log, reconcile its pool, build its ledger and options."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from kvtier.engines.deployment import Deployment, Measured
from kvtier.engines.detect import DetectedLog, ParsedLog, parse_log
from kvtier.engines.explain import LogInputs, LogLedger, Reconciliation
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.log_geometry import stand_in, with_bytes
from kvtier.engines.rules import rules_for
from kvtier.ledger.log_deployment import measured_deployment
from kvtier.ledger.log_inputs import log_inputs
from kvtier.ledger.options import LogOptions, log_options
from kvtier.ledger.plan import resolve
from kvtier.ledger.reconcile import cell_words, reconcile


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything `kvtier explain` reports about one logged server start."""

    inputs: LogInputs
    reconciliation: Reconciliation
    ledger: LogLedger
    options: LogOptions | None  # None: the builder could not recompute the pool
    deployment: Deployment  # what the log describes, its figures as measurements (advise's)

    @property
    def engine(self) -> str:
        return self.inputs.engine.value


def explain_log(
    text: str | DetectedLog,
    flags: Mapping[str, object],
    measured: Measured | None = None,
    startup: int | None = None,
) -> Explanation:
    """Explain one server start in `text` (or in a log already detected): `startup`
    (1-based), else the last that printed memory lines.

    `flags` holds the user's settings by name (`engine`, `model`, `tp`, `pp`, `dp`,
    `mem_fraction`, `kv_cache_dtype`, `page_size`, `max_total_tokens`, `gpu`, `gpus_per_node`,
    `engine_version`, `host_ram_gb`); a value the log states wins over them. `measured` holds
    figures given as flags (`--draft-weights-gib`, `--cuda-graph-gib`, ...) for what the log
    does not print.
    """
    engine = flags.get("engine")
    version = flags.get("engine_version")
    parsed = parse_log(
        text,
        engine if isinstance(engine, str) else None,
        startup,
        version if isinstance(version, str) else None,
    )
    e = _explain(parsed, flags, measured, log_inputs(parsed, flags))
    inputs, geometry = e.inputs, e.inputs.geometry
    ledger = e.reconciliation.ledger
    cell = ledger.count_cell if ledger is not None else e.reconciliation.kv_bytes_per_token
    if inputs.model_by_class and geometry is not None and not geometry.fits(cell):
        # the class's one catalog model is not the one served: another size shares the class
        unknown = _explain(parsed, flags, measured, log_inputs(parsed, flags, by_class=False))
        takes = (
            cell_words(ledger)
            if ledger is not None
            else f"takes {cell:,} B of KV per token per GPU"
        )
        note = (
            f"the model class names {inputs.model.model_id} ({inputs.model_source.where}), but it "
            f"{takes} where the log's figures allow {geometry.low:,}-{geometry.high:,}: another "
            "model of that class was served"
        )
        rec = dataclasses.replace(
            unknown.reconciliation, notes=(note, *unknown.reconciliation.notes)
        )
        return dataclasses.replace(unknown, reconciliation=rec)
    return e


def _explain(
    parsed: ParsedLog, flags: Mapping[str, object], measured: Measured | None, inputs: LogInputs
) -> Explanation:
    rules = rules_for(inputs.engine).explain
    figures, logged = rules.measured(inputs, measured or Measured())
    deployment = measured_deployment(inputs, figures, logged)
    plan = resolve(deployment, model=inputs.model, logged=True)
    variants: tuple[PlanInputs, ...] = ()
    if not inputs.model_known:
        # a stand-in has no parameters: its weights are unknown, not zero
        plan = dataclasses.replace(
            plan, weights_bytes=None, weights_source="unknown (model not resolved)"
        )
        variants = _geometry_variants(inputs, plan)
    variants += _era_variants(inputs, plan)
    rec = reconcile(inputs, plan, variants=variants, release=dict(logged).get("engine_version"))
    host_ram = flags.get("host_ram_gb")
    host = float(host_ram) if isinstance(host_ram, int | float) else None
    options = log_options(plan, rec.ledger, host) if rec.ledger is not None else None
    ledger = rules.ledger(inputs, rec, measured or Measured(), rec.ledger)
    return Explanation(inputs, rec, ledger, options, deployment)


def _era_variants(inputs: LogInputs, plan: PlanInputs) -> tuple[PlanInputs, ...]:
    """The plan under each release the engine may have run when the log does not say which, so
    the range covers each release's rule (its weight rules too, when the model is known)."""
    d = plan.deployment
    variants = []
    for v in rules_for(inputs.engine).explain.candidate_versions(d):
        era = dataclasses.replace(plan, deployment=d.with_values("candidate era", engine_version=v))
        if plan.weights_bytes is not None:
            again = resolve(era.deployment, model=inputs.model, logged=True)
            era = dataclasses.replace(
                era,
                model=again.model,
                weights_bytes=again.weights_bytes,
                weights_source=again.weights_source,
                splits=again.splits,
            )
        variants.append(era)
    return tuple(variants)


def _geometry_variants(inputs: LogInputs, plan: PlanInputs) -> tuple[PlanInputs, ...]:
    """The plan with the stand-in model at both ends of the log's bytes-per-token bracket."""
    geometry = inputs.geometry
    if geometry is None:
        return ()
    size = inputs.kv_dtype.element_bytes
    ends = (-(-geometry.low // size) * size, geometry.high // size * size)
    return tuple(
        dataclasses.replace(
            plan,
            model=stand_in(
                inputs.model.model_id,
                with_bytes(geometry, cell),
                size,
                inputs.model.dtype,
                inputs.model.context_length,
            ),
        )
        for cell in ends
        if cell > 0
    )
