"""The timing model's two efficiencies, set to what a serving log shows.

decode   every line with a generation throughput and running requests times one decode step:
         step = running / generation tokens/s (one token per running request a step). The
         model's step reads the weights the batch touches plus the batch's KV (usage x pool
         tokens); HBM efficiency = those bytes / (HBM bandwidth x step). The median over the
         lines is taken. Speculative decoding makes several tokens a step and reads high.
prefill  only a saturated server shows its prefill speed (the queue is never empty): the
         compute efficiency is searched (bisection on its logarithm, 0.01 to 1) until the
         simulated prompt tokens admitted per second over the window meet the log's. With no
         request ever waiting, the prompt rate is the arrival rate and says nothing of the
         server's speed: the efficiency keeps its value.

Refused before any of this (`refuse_unfittable`): a log that shows speculative decoding (the
timing model makes one token per running request a decode step, and models no draft), and one
that admits too few requests to estimate a rate from (baseline.MIN_REQUESTS). Refused by the
calibration: a log that decodes faster than the model's bytes allow at full HBM bandwidth (read
in closed form from the lines), or admits prompts faster than peak compute by more than the 20%
the prompt rate is judged within (the simulated rate at peak is bounded by the fitted arrivals,
which scatter around the log's): an efficiency beyond 1 is another deployment, not a fit. Short
of the log's rate by less than that, the compute efficiency is capped at 1 and the output says so.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.logs.workload import FittedWorkload
from kvtier.sim.baseline import MIN_REQUESTS, THROUGHPUT_SHARE
from kvtier.sim.from_log import FittedTrace, SimulatedWindow, fitted_trace, measure
from kvtier.sim.run import replay
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import TimingFlags

_LOWEST, _HIGHEST = 0.01, 1.0
_STEPS = 14  # the log of the range halved 14 times: within 0.03% of the efficiency


@dataclass(frozen=True, slots=True)
class Calibration:
    flags: TimingFlags
    compute_how: str
    hbm_how: str


def run_window(fit: FittedWorkload, config: SimConfig) -> tuple[FittedTrace, SimulatedWindow]:
    fitted = fitted_trace(fit, config)
    return fitted, measure(replay(fitted.trace, config), fitted, fit.window)


def _hbm(fit: FittedWorkload, config: SimConfig) -> tuple[float | None, str]:
    timing = config.timing
    pool = fit.pool_tokens or config.device_tokens
    found = []
    for d in fit.decode:
        step_s = d.running / d.gen_tps
        kv = (d.kv_usage or 0.0) * pool * timing.model.kv_bytes_per_token
        found.append(
            (timing.model.weight_bytes_read(d.running) + kv) / (timing.hw.hbm_gbps * 1e9 * step_s)
        )
    if not found:
        return None, "no line gives a generation throughput with requests running"
    value = statistics.median(found)
    how = f"median of {len(found)} decode step(s): bytes read / (HBM x running / gen tokens/s)"
    if value > _HIGHEST:  # read in closed form from the lines: above 1 is not this deployment
        raise KvtierError(
            f"{fit.source}: the log decodes {value:.2f}x faster than the given model can read "
            f"its bytes at the GPU's full {timing.hw.hbm_gbps:,.0f} GB/s: it is not this "
            "deployment (give the log's --model / --gpu / --tp), or it decodes several tokens a "
            "step (speculative decoding) without printing an acceptance line; not fitted"
        )
    return value, how


def refuse_unfittable(fit: FittedWorkload) -> None:
    """Raise where the simulator cannot reproduce the log, or the log is too short to fit."""
    if fit.accept_length is not None:
        raise KvtierError(
            f"{fit.source}: the log shows speculative decoding (mean accept length "
            f"{fit.accept_length:.2f} tokens a decode step over {fit.accept_lines} line(s)); "
            "the timing model makes one token a step and no draft: not modelled, not fitted"
        )
    if fit.admitted < MIN_REQUESTS:
        rate = fit.admitted / fit.window.duration_s
        need = math.ceil(MIN_REQUESTS / rate)
        raise KvtierError(
            f"{fit.source}: {fit.admitted:.3g} requests admitted in {fit.window.duration_s:g} s: "
            f"a rate from so few is ±{1 / math.sqrt(fit.admitted):.0%} (1/sqrt(N)), wider than "
            f"the ±{THROUGHPUT_SHARE:.0%} it is judged by; fit a window of at least {need} s "
            f"({MIN_REQUESTS} requests at this log's {rate:.3g}/s)"
        )


def calibrate(
    fit: FittedWorkload, flags: TimingFlags, config_for: Callable[[TimingFlags], SimConfig]
) -> Calibration:
    """`flags` with the efficiencies the log sets, and how each was set; refused where
    `refuse_unfittable` says."""
    refuse_unfittable(fit)
    hbm, hbm_how = _hbm(fit, config_for(flags))
    if hbm is not None:
        flags = dataclasses.replace(flags, hbm_efficiency=hbm)
    else:
        hbm_how = f"kept at {flags.hbm_efficiency}: {hbm_how}"
    if not fit.window.saturated:
        how = f"kept at {flags.compute_efficiency}: no line showed a request waiting"
        return Calibration(flags, how, hbm_how)
    target = fit.window.prompt_tps

    def rate(eff: float) -> float:
        config = config_for(dataclasses.replace(flags, compute_efficiency=eff))
        return run_window(fit, config)[1].prompt_tps

    if (peak := rate(_HIGHEST)) < target * (1 - THROUGHPUT_SHARE):
        raise KvtierError(
            f"{fit.source}: the log admits {target:,.0f} prompt tokens/s, more than the "
            f"{peak:,.0f} this deployment prefills at peak compute: it is not the log's "
            "deployment (give its --model / --gpu / --tp, and --mean-prompt-tokens if assumed); "
            "not fitted"
        )
    if peak < target:  # short of the log's rate by less than the bound it is judged by
        flags = dataclasses.replace(flags, compute_efficiency=_HIGHEST)
        how = f"capped at 1: the log admits {target:,.0f} tokens/s, peak gives {peak:,.0f}"
        return Calibration(flags, how, hbm_how)
    if rate(_LOWEST) >= target:
        flags = dataclasses.replace(flags, compute_efficiency=_LOWEST)
        return Calibration(flags, "floored at 0.01: the log admits prompts slower", hbm_how)
    lo, hi = math.log(_LOWEST), math.log(_HIGHEST)
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(math.exp(mid)) < target else (lo, mid)
    eff = math.exp(hi)
    how = f"bisection: the simulated prompt rate meets the log's {target:,.0f} tokens/s"
    return Calibration(dataclasses.replace(flags, compute_efficiency=eff), how, hbm_how)
