"""Sweeps: the same trace over several values of one deployment parameter.

`--sweep hicache-ratio=0,1,2,4,8` runs the simulation once per value; every other setting stays.
A ratio of 0 means no host tier.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from kvtier.errors import KvtierError
from kvtier.payload import INLINE, Name
from kvtier.sim.fleet.payload import FleetPart
from kvtier.sim.metrics import SimResult

if TYPE_CHECKING:
    from kvtier.engines.deployment import Deployment
    from kvtier.sim.timing import TimingFlags


MAX_POINTS = 64  # values of one sweep, each a whole simulation


def sweep_values(name: str, text: str) -> tuple[str, ...]:
    """The comma-separated values of `--sweep NAME=...`: 1 to MAX_POINTS, none twice."""
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise KvtierError(f"--sweep {name}: no values given")
    if len(values) > MAX_POINTS:
        raise KvtierError(f"--sweep {name}: {len(values):,} values, more than {MAX_POINTS}")
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise KvtierError(f"--sweep {name}: {twice!r:.40} is given twice")
    return values


def _float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise KvtierError(f"--sweep {name}: {raw!r:.40} is not a number") from None
    if not math.isfinite(value):
        raise KvtierError(f"--sweep {name}: {raw!r:.40} is not finite")
    if value < 0:
        raise KvtierError(f"--sweep {name}: {raw} is negative")
    return value


def _hicache_ratio(d: Deployment, t: TimingFlags, raw: str) -> tuple[Deployment, TimingFlags]:
    ratio = _float("hicache-ratio", raw)
    host = {"hicache.enable": ratio != 0, "hicache.ratio": ratio or None, "hicache.size_gb": None}
    return d.with_values("sweep", **host), t


def _mem_fraction(d: Deployment, t: TimingFlags, raw: str) -> tuple[Deployment, TimingFlags]:
    return d.with_values("sweep", mem_fraction=_float("mem-fraction-static", raw)), t


def _kv_dtype(d: Deployment, t: TimingFlags, raw: str) -> tuple[Deployment, TimingFlags]:
    return d.with_values("sweep", kv_cache_dtype=raw), t


def _pcie(d: Deployment, t: TimingFlags, raw: str) -> tuple[Deployment, TimingFlags]:
    gbps = _float("pcie-gbps", raw)
    if gbps == 0:
        raise KvtierError("--sweep pcie-gbps: a bandwidth must be positive")
    return d, dataclasses.replace(t, pcie_gbps=gbps)


Apply = Callable[["Deployment", "TimingFlags", str], "tuple[Deployment, TimingFlags]"]

SWEEPABLE: dict[str, Apply] = {
    "hicache-ratio": _hicache_ratio,
    "mem-fraction-static": _mem_fraction,
    "kv-cache-dtype": _kv_dtype,
    "pcie-gbps": _pcie,
}
# These change the device pool, which --device-tokens pins.
CHANGES_DEVICE_TOKENS = frozenset({"mem-fraction-static", "kv-cache-dtype"})


class Sweep(NamedTuple):
    param: str
    values: tuple[str, ...]


def parse_sweep(text: str) -> Sweep:
    """`NAME=v1,v2,...` -> Sweep; refuses unknown names and empty lists."""
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq or name not in SWEEPABLE:
        raise KvtierError(
            f"--sweep {text!r}: expected NAME=v1,v2,... with NAME one of {', '.join(SWEEPABLE)}"
        )
    return Sweep(name, sweep_values(name, rest))


def run_sweep(
    sweep: Sweep,
    deployment: Deployment,
    timing: TimingFlags,
    run_one: Callable[[Deployment, TimingFlags, dict[str, object]], SimResult],
) -> list[SimResult]:
    """One result per value, in the order given; each result's params carry the swept value."""
    apply = SWEEPABLE[sweep.param]
    results = []
    for raw in sweep.values:
        d, t = apply(deployment, timing, raw)
        results.append(run_one(d, t, {"sweep_param": sweep.param, "sweep_value": raw}))
    return results


@dataclass(frozen=True, slots=True)
class SweepRun:
    value: str | None  # the swept value; None only in a saved file whose params carry it
    run: SimResult = field(metadata=INLINE)
    fleet: FleetPart | None = field(default=None, metadata=INLINE)  # a fleet run's


@dataclass(frozen=True, slots=True)
class SweepResult:
    param: Name
    runs: tuple[SweepRun, ...]


def sweep_result(sweep: Sweep, results: list[SimResult]) -> SweepResult:
    """Chartable sweep data: the parameter and one entry per run with its metrics."""
    runs = tuple(SweepRun(v, r) for v, r in zip(sweep.values, results, strict=True))
    return SweepResult(sweep.param, runs)
