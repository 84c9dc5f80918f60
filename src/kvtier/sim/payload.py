"""What `kvtier simulate --json` prints, as frozen dataclasses (`kvtier.payload.to_json`).

One run prints its `SimResult` keys; a sweep `{"sweep": {"param", "runs": [{"value", ...}]}}`;
a run on a deployment adds the notes its setup wrote; `--from-log` the fitted workload, the
calibration, the fitted trace and the baseline beside the log, then any sweep. Keys come in the
order the fields are declared: a new key is one field, placed where it goes, and read in the
part's `of` from the object the part describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtier.logs.workload import Inference
from kvtier.payload import INLINE, OMITTED, copied
from kvtier.sim.baseline import Comparison
from kvtier.sim.fleet.payload import FleetPart
from kvtier.sim.metrics import SimResult
from kvtier.sim.sweep import SweepResult, SweepRun

if TYPE_CHECKING:
    from kvtier.logs.workload import FittedWorkload
    from kvtier.sim.calibrate import Calibration
    from kvtier.sim.from_log import FittedTrace


@dataclass(frozen=True, slots=True)
class FitSummary:
    window_s: float
    requests: float
    running_at_start: int
    prompt_tokens: int
    output_tokens: int
    reuse: float
    pool_tokens: int | None
    inferred: tuple[Inference, ...]

    @classmethod
    def of(cls, fit: FittedWorkload) -> FitSummary:
        return copied(cls, fit, window_s=fit.window.duration_s, inferred=fit.inferences)


@dataclass(frozen=True, slots=True)
class CalibrationSummary:
    compute_efficiency: float
    compute_how: str
    hbm_efficiency: float
    hbm_how: str

    @classmethod
    def of(cls, calibration: Calibration) -> CalibrationSummary:
        return copied(cls, calibration, hbm_efficiency=calibration.flags.hbm_efficiency)


@dataclass(frozen=True, slots=True)
class FittedTraceSummary:
    requests: int
    before_window: int
    window_opens_s: float
    block_tokens: int

    @classmethod
    def of(cls, fitted: FittedTrace) -> FittedTraceSummary:
        trace = fitted.trace
        return cls(len(trace.requests), fitted.before, fitted.offset_s, trace.block_size)


@dataclass(frozen=True, slots=True)
class LogBaseline:
    """`--from-log`: the workload fitted to a serving log and the simulation beside it."""

    source: str
    engine: str
    fit: FitSummary
    calibration: CalibrationSummary
    trace: FittedTraceSummary
    baseline: tuple[Comparison, ...]


@dataclass(frozen=True, slots=True)
class SimulatePayload:
    run: SimResult | None = field(default=None, metadata=INLINE)
    fleet: FleetPart | None = field(default=None, metadata=INLINE)  # a fleet run's
    from_log: LogBaseline | None = field(default=None, metadata=INLINE)
    sweep: SweepResult | None = field(default=None, metadata=OMITTED)
    notes: tuple[str, ...] | None = field(default=None, metadata=OMITTED)

    def runs(self) -> tuple[str, tuple[SweepRun, ...]]:
        """(swept parameter, runs); a single run is a sweep of one, named ''; none: ('', ())."""
        if self.sweep is not None:
            return self.sweep.param, self.sweep.runs
        return "", () if self.run is None else (SweepRun(None, self.run, self.fleet),)
