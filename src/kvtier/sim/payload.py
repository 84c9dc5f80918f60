"""What `kvtier simulate --json` prints, as frozen dataclasses (`kvtier.payload.to_json`).

One run prints its `SimResult` keys; a sweep `{"sweep": {"param", "runs": [{"value", ...}]}}`;
a run on a deployment adds the notes its setup wrote; `--from-log` the fitted workload, the
calibration, the fitted trace and the baseline beside the log, then any sweep. Keys come in the
order the fields are declared: a new key is one field, placed where it goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtier.logs.workload import Inference
from kvtier.payload import INLINE, OMITTED
from kvtier.sim.baseline import Comparison
from kvtier.sim.fleet.payload import FleetPart
from kvtier.sim.metrics import SimResult
from kvtier.sim.sweep import SweepResult, SweepRun


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


@dataclass(frozen=True, slots=True)
class CalibrationSummary:
    compute_efficiency: float
    compute_how: str
    hbm_efficiency: float
    hbm_how: str


@dataclass(frozen=True, slots=True)
class FittedTraceSummary:
    requests: int
    before_window: int
    window_opens_s: float
    block_tokens: int


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
