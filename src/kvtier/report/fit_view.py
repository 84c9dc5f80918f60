"""`simulate --from-log`: what was inferred from the log and how, the calibration, and the
calibrated baseline beside the log (terminal tables and the `--json` payload)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtier.logs.workload import FittedWorkload
from kvtier.sim.baseline import Comparison
from kvtier.sim.calibrate import Calibration
from kvtier.sim.from_log import FittedTrace
from kvtier.sim.payload import (
    CalibrationSummary,
    FitSummary,
    FittedTraceSummary,
    LogBaseline,
)

if TYPE_CHECKING:
    from rich.table import Table


def _figure(metric: str, value: float) -> str:
    if metric == "hit rate":
        return f"{100 * value:.2f}%"
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def baseline_tables(
    fit: FittedWorkload, calibration: Calibration, rows: tuple[Comparison, ...]
) -> list[Table]:
    from rich.table import Table

    inferred = Table(title=f"inferred from {fit.source} ({fit.engine})", title_justify="left")
    inferred.add_column("figure")
    inferred.add_column("value", justify="right")
    inferred.add_column("how")
    for n in fit.inferences:
        shown = f"{n.value:.4f}" if n.name == "reuse" else f"{n.value:,.1f}"
        inferred.add_row(n.name, shown, n.how)
    flags = calibration.flags
    inferred.add_row(
        "compute efficiency", f"{calibration.compute_efficiency:.4f}", calibration.compute_how
    )
    inferred.add_row("HBM efficiency", f"{flags.hbm_efficiency:.4f}", calibration.hbm_how)
    side = Table(title="calibrated baseline: the log vs the simulation", title_justify="left")
    for name in ("metric", "observed", "simulated", "tolerance", "within"):
        side.add_column(name, justify="left" if name in ("metric", "tolerance") else "right")
    for r in rows:
        side.add_row(
            r.metric,
            _figure(r.metric, r.observed),
            _figure(r.metric, r.simulated),
            r.tolerance,
            "yes" if r.within else "NO",
        )
    return [inferred, side]


def quiet_lines(calibration: Calibration, rows: tuple[Comparison, ...]) -> list[str]:
    """`key value` lines: the calibrated efficiencies, then each figure observed and simulated."""
    flags = calibration.flags
    out = [
        f"compute_efficiency {calibration.compute_efficiency:.4f}",
        f"hbm_efficiency {flags.hbm_efficiency:.4f}",
    ]
    for r in rows:
        key = r.metric.replace(",", "").replace(" ", "_").replace("/", "_per_")
        out += [
            f"{key}.observed {r.observed:g}",
            f"{key}.simulated {r.simulated:g}",
            f"{key}.within {'yes' if r.within else 'no'}",
        ]
    return out


def log_baseline(
    fit: FittedWorkload,
    calibration: Calibration,
    fitted: FittedTrace,
    rows: tuple[Comparison, ...],
) -> LogBaseline:
    return LogBaseline(
        source=fit.source,
        engine=fit.engine,
        fit=FitSummary.of(fit),
        calibration=CalibrationSummary.of(calibration),
        trace=FittedTraceSummary.of(fitted),
        baseline=rows,
    )
