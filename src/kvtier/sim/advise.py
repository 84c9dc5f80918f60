"""`kvtier advise --workload`: the menu's options as simulated on a workload, ranked.

Each option's figures are one `kvtier simulate` run's (`Outcome.of` reads them from the run's
result); this module only orders them. An option ranks above the baseline only with a gain of at
least GAIN_MIN on the objective's figure; the rest follow the baseline, then those that miss the
SLO, then those that do not fit (host RAM, OOM margin) or could not be simulated.

Objectives:
  ttft-p90     the lowest TTFT p90
  throughput   the highest output throughput
  cost         the fewest extra GPUs, then the least host RAM, then the lowest TTFT p90; its
               gain is TTFT p90's
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvtier.payload import OMITTED, Amount, Count, Share
from kvtier.sim.metrics import SimResult

OBJECTIVES = ("ttft-p90", "throughput", "cost")
GAIN_MIN = 0.005  # a relative gain below this is not a gain (half a percent)
MAX_COMBINATIONS = 3  # pairs of the top options simulated together


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `kvtier simulate` gave for one option (its SimResult's figures)."""

    hit_rate: Share
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    throughput_tok_s: Amount
    preemptions: int | None  # vLLM's preemptions, SGLang's retractions; None: not counted
    rejected: Count
    pcie_busy_fraction: Share
    device_tokens: int | None
    host_tokens: int | None
    max_running_requests: int | None
    chunk: int | None  # the prefill chunk in force (tokens)

    @classmethod
    def of(cls, run: SimResult) -> Outcome:
        ttft = run.ttft_s
        params = run.params

        def whole(key: str) -> int | None:
            value = params.get(key)
            return value if isinstance(value, int) else None

        return cls(
            hit_rate=run.hit_rate,
            ttft_p50_s=None if ttft is None else ttft.p50,
            ttft_p90_s=None if ttft is None else ttft.p90,
            throughput_tok_s=run.throughput_tok_s,
            preemptions=whole("preemptions"),
            rejected=run.rejected,
            pcie_busy_fraction=run.pcie_busy_fraction,
            device_tokens=whole("device_tokens"),
            host_tokens=whole("host_tokens"),
            max_running_requests=whole("max_running_requests"),
            chunk=whole("chunked_prefill_size"),
        )


@dataclass(frozen=True, slots=True)
class AdvisedOption:
    name: str
    kind: str  # baseline, fraction, kv-dtype, host-tier, store, page-size, running-cap, ...
    flags: tuple[str, ...]  # the engine flags to add to the launch command
    simulate_args: tuple[str, ...]  # the `kvtier simulate` words that gave `outcome`
    fits: bool
    why_not: str | None  # why it does not fit, or was not simulated
    risk: str
    host_gb_per_node: Amount  # host RAM the option pins (decimal GB)
    gpus: int  # GPUs the option takes
    outcome: Outcome | None = None
    meets_slo: bool | None = None  # None: no --ttft-p90-max
    gain: float | None = None  # relative gain on the objective's figure over the baseline
    rank: int | None = None  # 1 best; None for the baseline and what was not simulated


@dataclass(frozen=True, slots=True)
class Verdict:
    """observe's answer for the serving log or /metrics given as the workload."""

    source: str
    verdict: str
    reason: str
    evidence: tuple[str, ...]  # the lines that show it, "line N: text"
    next_steps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkloadAdvice:
    headline: str
    workload: str
    objective: str
    ttft_p90_max_s: float | None
    baseline: AdvisedOption
    options: tuple[AdvisedOption, ...]  # ranked
    combinations: tuple[AdvisedOption, ...]  # ranked
    verdict: Verdict | None = field(default=None, metadata=OMITTED)
    notes: tuple[str, ...] = ()


def gain(objective: str, base: Outcome, option: Outcome) -> float | None:
    """Relative gain on the objective's figure (positive: better than the baseline)."""
    if objective == "throughput":
        if not base.throughput_tok_s:
            return None
        return (option.throughput_tok_s - base.throughput_tok_s) / base.throughput_tok_s
    if base.ttft_p90_s is None or option.ttft_p90_s is None or base.ttft_p90_s <= 0:
        return None
    return (base.ttft_p90_s - option.ttft_p90_s) / base.ttft_p90_s


def _meets(outcome: Outcome | None, slo: float | None) -> bool | None:
    if slo is None or outcome is None:
        return None
    return outcome.ttft_p90_s is not None and outcome.ttft_p90_s <= slo


def _key(objective: str, o: AdvisedOption) -> tuple[float, ...]:
    out = o.outcome
    assert out is not None
    p90 = out.ttft_p90_s if out.ttft_p90_s is not None else float("inf")
    if objective == "throughput":
        return (-out.throughput_tok_s, p90)
    if objective == "cost":
        return (o.gpus, o.host_gb_per_node, p90)
    return (p90, -out.throughput_tok_s)


def _group(o: AdvisedOption) -> int:
    """0: a gain; 1: no gain; 2: misses the SLO; 3: does not fit or was not simulated."""
    if not o.fits or o.outcome is None:
        return 3
    if o.meets_slo is False:
        return 2
    return 0 if o.gain is not None and o.gain >= GAIN_MIN else 1


def rank(
    baseline: AdvisedOption,
    options: Sequence[AdvisedOption],
    objective: str,
    slo: float | None,
) -> tuple[AdvisedOption, tuple[AdvisedOption, ...]]:
    """The baseline with its SLO check, and the options in rank order, each with its gain."""
    assert baseline.outcome is not None
    base = dataclasses.replace(baseline, meets_slo=_meets(baseline.outcome, slo))
    scored = [
        dataclasses.replace(
            o,
            meets_slo=_meets(o.outcome, slo),
            gain=None if o.outcome is None else gain(objective, baseline.outcome, o.outcome),
        )
        for o in options
    ]

    def order(o: AdvisedOption) -> tuple[float, ...]:
        group = _group(o)
        return (group, *(_key(objective, o) if group < 3 else ()))

    ranked = sorted(scored, key=order)
    return base, tuple(
        dataclasses.replace(o, rank=i + 1 if _group(o) < 3 else None) for i, o in enumerate(ranked)
    )


def beats_baseline(o: AdvisedOption) -> bool:
    return _group(o) == 0


COMPUTE_LEVERS = "chunked prefill, replicas, speculative decoding, fewer running requests"


def headline(verdict: Verdict | None, ranked: Sequence[AdvisedOption], objective: str) -> str:
    """The answer's first line: the verdict (when more KV cannot help, that first) and the
    best option on the objective, or that none beats the baseline."""
    best = next((o for o in ranked if beats_baseline(o)), None)
    if best is None or best.gain is None:
        tail = f"no option beats the baseline on {objective}"
    else:
        tail = f"best on {objective}: {best.name} ({best.gain:+.1%})"
    if verdict is None:
        return tail
    if verdict.verdict == "compute-bound":
        return (
            f"compute-bound: more KV space cannot shorten the queue; what would: "
            f"{COMPUTE_LEVERS}; {tail}"
        )
    if verdict.verdict == "kv-bound":
        return f"kv-bound: more KV space is the lever; {tail}"
    if verdict.verdict == "not-saturated":
        return f"not saturated: no request waited, more KV adds only prefix hits; {tail}"
    return f"{verdict.verdict}: {verdict.reason}; {tail}"
