"""What a fleet run measured: the fleet's summary, each replica's, and the imbalance.

The fleet's figures are `kvtier.sim.metrics.summarize` over every request of every replica (in
trace order), so hit rates, TTFT and throughput mean what they mean for one server. A replica's
load is the requests routed to it; `imbalance` = max / mean of that over the replicas (1.0:
even). Busy fraction: the time a replica spent in steps over the run's duration. Queue: the
requests waiting on the replica, time-weighted mean and maximum. `preemptions` sums the
replicas' (vLLM's model preempts by recompute, SGLang's retracts a decoding request when an
output past the clip it reserved runs the pool out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtier.sim.metrics import SimResult


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    requests: int
    hit_rate: float
    busy_fraction: float
    queue_mean: float
    queue_max: int
    series: tuple[tuple[float, int, int], ...] = ()  # (time, running, waiting), for charts


@dataclass(frozen=True, slots=True)
class FleetResult:
    result: SimResult  # the fleet as one
    replicas: tuple[ReplicaStats, ...]
    router: str
    router_options: dict[str, float]
    ttft_mean_s: float | None
    queue_mean: float  # requests waiting in the fleet, time-weighted
    queue_max: int
    shared_store: bool
    decisions: dict[str, int] = field(default_factory=dict)  # a policy's branch counts
    preemptions: int | None = None

    @property
    def imbalance(self) -> float:
        loads = [r.requests for r in self.replicas]
        mean = sum(loads) / len(loads)
        return max(loads) / mean if mean else 1.0

    def hit_rate_by_tier(self) -> dict[str, float]:
        """device / host / shared when the store is the fleet's, else the run's tiers."""
        rates = self.result.hit_rate_by_tier
        if self.shared_store:
            return {("shared" if k == "store" else k): v for k, v in rates.items()}
        return rates
