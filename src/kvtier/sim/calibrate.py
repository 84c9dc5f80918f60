"""The timing model's two efficiencies, set to what a serving log shows.

decode   every line with a generation throughput and running requests times one decode
         iteration: step = running x accept length / generation tokens/s (accept length 1
         without speculative decoding; with it, the log's mean `accept len`). The HBM
         efficiency is searched (bisection on its logarithm) until the model's iteration at
         that batch and KV (usage x pool tokens) takes that long: its weights and KV read, its
         compute where longer, its all-reduces and its draft's passes. The median over the
         lines is taken.
prefill  only a saturated server shows its prefill speed (the queue is never empty): the
         compute efficiency is searched (bisection on its logarithm, 0.01 to 1) until the
         simulated prompt tokens admitted per second over the window meet the log's. With no
         request ever waiting, the prompt rate is the arrival rate and says nothing of the
         server's speed: the efficiency keeps its value.

Refused before any of this (`refuse_unfittable`): a log that admits too few requests to
estimate a rate from (baseline.MIN_REQUESTS). Refused by the calibration: a log that shows
speculative decoding for a deployment that names no speculative algorithm, one that decodes
faster than the model allows at full HBM bandwidth, or admits prompts faster than peak compute
by more than the 20% the prompt rate is judged within (the simulated rate at peak is bounded by
the fitted arrivals, which scatter around the log's): an efficiency beyond 1 is another
deployment, not a fit. Short of the log's rate by less than that, the compute efficiency is
capped at 1 and the output says so.
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
from kvtier.sim.timing import TimingFlags, TimingModel

_LOWEST, _HIGHEST = 0.01, 1.0
_STEPS = 14  # the log of the range halved 14 times: within 0.03% of the efficiency


@dataclass(frozen=True, slots=True)
class Calibration:
    flags: TimingFlags  # its compute efficiency resolved (the fitted, the flag's or the GPU's)
    compute_how: str
    hbm_how: str

    @property
    def compute_efficiency(self) -> float:
        assert self.flags.compute_efficiency is not None
        return self.flags.compute_efficiency


def run_window(fit: FittedWorkload, config: SimConfig) -> tuple[FittedTrace, SimulatedWindow]:
    fitted = fitted_trace(fit, config)
    return fitted, measure(replay(fitted.trace, config), fitted, fit.window)


def _line_efficiency(timing: TimingModel, kv_tokens: float, running: int, step_s: float) -> float:
    """The HBM efficiency at which one decode iteration of `running` requests over `kv_tokens`
    takes `step_s` (all-reduces, compute and the draft as the model counts them); the ratio of
    the model's time at full bandwidth to `step_s` when even that is too slow (above 1)."""

    def took(eff: float) -> float:
        lines = dataclasses.replace(timing, hbm_efficiency=eff).decode_lines(kv_tokens, running)
        return lines.total(1)

    if (fastest := took(_HIGHEST)) > step_s:
        return _HIGHEST * fastest / step_s
    if took(_LOWEST) <= step_s:
        return _LOWEST
    lo, hi = math.log(_LOWEST), math.log(_HIGHEST)
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if took(math.exp(mid)) > step_s else (lo, mid)
    return math.exp(hi)


def _hbm(fit: FittedWorkload, config: SimConfig) -> tuple[float | None, str]:
    timing = config.timing
    pool = fit.pool_tokens or config.device_tokens
    per_step = timing.tokens_per_step  # tokens a request commits an iteration
    found = [
        _line_efficiency(
            timing, (d.kv_usage or 0.0) * pool, d.running, d.running * per_step / d.gen_tps
        )
        for d in fit.decode
    ]
    if not found:
        return None, "no line gives a generation throughput with requests running"
    value = statistics.median(found)
    how = (
        f"median of {len(found)} decode step(s): the efficiency at which the model's iteration "
        f"takes running x {per_step:g} / gen tokens/s"
    )
    if value > _HIGHEST:  # the model is too slow even at full bandwidth: not this deployment
        raise KvtierError(
            f"{fit.source}: the log decodes {value:.2f}x faster than the given model can read "
            f"its bytes at the GPU's full {timing.hw.hbm_gbps:,.0f} GB/s: it is not this "
            "deployment (give the log's --model / --gpu / --tp), or it decodes several tokens a "
            "step (speculative decoding) without printing an acceptance line; not fitted"
        )
    return value, how


def with_log_accept(fit: FittedWorkload, flags: TimingFlags) -> TimingFlags:
    """`flags` with the log's mean accept length (SGLang's `accept len`, vLLM's `Mean acceptance
    length`) as speculative decoding's tokens per iteration; a different --accept-length is
    refused."""
    if fit.accept_length is None:
        return flags
    given = flags.accept_length
    if given is not None and abs(given - fit.accept_length) > 1e-9:
        raise KvtierError(
            f"--accept-length {given:g} contradicts the log's mean accept length "
            f"{fit.accept_length:.3f} ({fit.source}); give one"
        )
    origin = f"the log's mean over {fit.accept_lines} line(s)"
    return dataclasses.replace(flags, accept_length=fit.accept_length, accept_origin=origin)


def refuse_unfittable(fit: FittedWorkload) -> None:
    """Raise where the simulator cannot reproduce the log, or the log is too short to fit."""
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
    if fit.accept_length is not None and config_for(flags).timing.spec is None:
        raise KvtierError(
            f"{fit.source}: the log shows speculative decoding (mean accept length "
            f"{fit.accept_length:.2f} over {fit.accept_lines} line(s)) but the deployment names "
            "no speculative algorithm: give the launch command's --speculative-algorithm "
            "(vLLM: --speculative-config)"
        )
    flags = with_log_accept(fit, flags)
    hbm, hbm_how = _hbm(fit, config_for(flags))
    if hbm is not None:
        flags = dataclasses.replace(flags, hbm_efficiency=hbm)
    else:
        hbm_how = f"kept at {flags.hbm_efficiency}: {hbm_how}"
    # the GPU's or the flag's efficiency, as the simulation runs it
    flags = dataclasses.replace(
        flags, compute_efficiency=config_for(flags).timing.compute_efficiency
    )
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
