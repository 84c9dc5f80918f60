"""Policies that ignore load and content: round-robin and random.

sglang-router 0.3.2 (`src/policies/round_robin.rs`, `random.rs`): round-robin takes
`counter.fetch_add(1) % healthy workers`; random draws a uniform index. Neither keeps a load
counter (the router attaches its load guard only for cache_aware and manual). Random is
seeded here (`--seed`), where the router draws from the thread's RNG.
"""

from __future__ import annotations

import random

from kvtier.sim.fleet.policy import FleetView, Policy, Router, Stateless
from kvtier.sim.trace import TraceRequest


class RoundRobin(Stateless):
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._count = 0

    def route(self, req: TraceRequest, now: float) -> int:
        self._count += 1
        return (self._count - 1) % self.replicas


class Uniform(Stateless):
    def __init__(self, replicas: int, seed: int) -> None:
        self.replicas = replicas
        self._rng = random.Random(seed)

    def route(self, req: TraceRequest, now: float) -> int:
        return self._rng.randrange(self.replicas)


def _round_robin(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
    return RoundRobin(n)


def _random(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
    return Uniform(n, seed)


ROUND_ROBIN = Policy({}, _round_robin, "sglang-router 0.3.2, src/policies/round_robin.rs")
RANDOM = Policy({}, _random, "sglang-router 0.3.2, src/policies/random.rs (seeded by --seed)")
