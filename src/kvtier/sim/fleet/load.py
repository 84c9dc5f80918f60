"""Policies that route by load: least-load and power-of-two.

least-load: sgl-model-gateway `src/policies/least_load.rs` (after sglang-router 0.3.2, which
has no such policy): a request's load is the length of its text (here its prompt tokens); the
worker with the smallest running sum wins (strictly smaller, so the first of equals); a
completion subtracts the OLDEST pending load of that worker (a FIFO per worker), not the
completed request's own.

power-of-two: sglang-router 0.3.2 `src/policies/power_of_two.rs`: two distinct workers drawn
at random (the second at offset 1 + uniform(n - 1) from the first); the one with the lower load
wins, the first on a tie. The load is the LoadMonitor's: every `load_check_interval_secs` (5 s,
`bindings/python/src/lib.rs`) it sums the `num_tokens` of each worker's `/get_load`, SGLang's
tokens held by running requests plus the waiting queue's prompts; the policy compares the last
poll's figures, stale in between. The first poll is at start.
"""

from __future__ import annotations

import random
from collections import deque

from kvtier.sim.fleet.policy import FleetView, Number, Policy, Router, RouterOption, Untimed
from kvtier.sim.trace import TraceRequest


class LeastLoad(Untimed):
    def __init__(self, replicas: int) -> None:
        self.load = [0] * replicas
        self._pending: list[deque[int]] = [deque() for _ in range(replicas)]

    def route(self, req: TraceRequest, now: float) -> int:
        best = min(range(len(self.load)), key=self.load.__getitem__)
        self.load[best] += req.input_len
        self._pending[best].append(req.input_len)
        return best

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        pending = self._pending[replica]
        removed = pending.popleft() if pending else 1
        self.load[replica] = max(0, self.load[replica] - removed)


class PowerOfTwo:
    def __init__(self, replicas: int, interval_s: float, seed: int, view: FleetView) -> None:
        self.replicas = replicas
        self.interval_s = interval_s
        self._rng = random.Random(seed)
        self._view = view
        self._loads: list[int] = [0] * replicas
        self._next_poll = 0.0

    def route(self, req: TraceRequest, now: float) -> int:
        n = self.replicas
        if n == 1:
            return 0
        first = self._rng.randrange(n)
        second = (first + 1 + self._rng.randrange(n - 1)) % n
        return first if self._loads[first] <= self._loads[second] else second

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        pass

    def next_tick(self, now: float) -> float:
        return self._next_poll

    def tick(self, now: float) -> None:
        self._loads = list(self._view.token_loads())
        self._next_poll = now + self.interval_s


def _least_load(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
    return LeastLoad(n)


def _power_of_two(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
    return PowerOfTwo(n, opts["load-check-interval-secs"], seed, view)


LEAST_LOAD = Policy(
    {}, _least_load, "sgl-model-gateway src/policies/least_load.rs (not in sglang-router 0.3.2)"
)
POWER_OF_TWO = Policy(
    {
        "load-check-interval-secs": RouterOption(
            Number(0.001, 86400.0), 5.0, "seconds between /get_load polls (5)"
        )
    },
    _power_of_two,
    "sglang-router 0.3.2, src/policies/power_of_two.rs and the LoadMonitor "
    "(src/core/worker_manager.rs; 5 s interval, bindings/python/src/lib.rs)",
)
