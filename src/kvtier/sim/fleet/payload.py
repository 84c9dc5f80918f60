"""A fleet run's part of `kvtier simulate --json`: the router, each replica's load, the imbalance;
and a policy's options as `--router-opt help --json` lists them.

It follows the fleet's `SimResult` keys (whose `ttft_s` carries the fleet's mean and whose
`hit_rate_by_tier` names a fleet-wide store `shared`). A new key is one field here, placed where
it goes, and one argument in `fleet_part`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kvtier.payload import OMITTED, Count, Share
from kvtier.sim.fleet.policy import Policy
from kvtier.sim.fleet.result import FleetResult
from kvtier.sim.metrics import SimResult


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Requests waiting: time-weighted mean and maximum."""

    mean: float
    max: Count


@dataclass(frozen=True, slots=True)
class FleetSummary:
    replicas: Count
    router: str
    router_options: dict[str, float]
    router_decisions: dict[str, int]
    queue: QueueStats
    preemptions: Count | None
    shared_store: bool


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    requests: Count
    hit_rate: Share
    busy_fraction: float
    queue: QueueStats
    series: tuple[tuple[float, int, int], ...]  # (time, running, waiting)


@dataclass(frozen=True, slots=True)
class FleetPart:
    fleet: FleetSummary
    replicas: tuple[ReplicaLoad, ...]
    imbalance: float


def fleet_run(r: FleetResult) -> tuple[SimResult, FleetPart]:
    """The fleet's summary as one run, and its fleet part."""
    ttft = r.result.ttft_s
    run = dataclasses.replace(
        r.result,
        ttft_s=None if ttft is None else dataclasses.replace(ttft, mean=r.ttft_mean_s),
        hit_rate_by_tier=r.hit_rate_by_tier(),
    )
    fleet = FleetSummary(
        replicas=len(r.replicas),
        router=r.router,
        router_options=r.router_options,
        router_decisions=r.decisions,
        queue=QueueStats(r.queue_mean, r.queue_max),
        preemptions=r.preemptions,
        shared_store=r.shared_store,
    )
    replicas = tuple(
        ReplicaLoad(
            s.requests, s.hit_rate, s.busy_fraction, QueueStats(s.queue_mean, s.queue_max), s.series
        )
        for s in r.replicas
    )
    return run, FleetPart(fleet, replicas, r.imbalance)


@dataclass(frozen=True, slots=True)
class OptionHelp:
    """One `--router-opt` key of a policy, from its `RouterOption` row."""

    key: str
    default: float | None  # None: taken from the run, as `follows` says
    allowed: str
    help: str
    follows: str | None = field(default=None, metadata=OMITTED)


@dataclass(frozen=True, slots=True)
class RouterOptions:
    """`kvtier simulate --router POLICY --router-opt help --json`."""

    router: str
    source: str
    options: tuple[OptionHelp, ...]


def router_options(name: str, policy: Policy) -> RouterOptions:
    """The policy's `--router-opt` keys in the order it declares them."""
    rows = tuple(
        OptionHelp(
            key,
            None if o.follows else o.default,
            o.parse.allowed,
            o.help,
            o.follows or None,
        )
        for key, o in policy.options.items()
    )
    return RouterOptions(name, policy.source, rows)
