"""The fleet's discrete-event loop: one clock, N servers, a router in front.

The single-server loop (`kvtier.sim.simulation`) with a replica on every event: an arrival
is routed when it arrives and joins that replica's queue; a step end or a wake-up belongs to one
replica; the router's own timers (a load poll, a tree eviction) are events too, first at equal
times, then arrivals, then step ends, then wake-ups. A response completes, for the router, when
the request finishes on its replica (or is refused there at arrival).

One server stops a run of decode steps at every arrival, so the next request can be scheduled;
in a fleet a run stops only when a request reaches its replica (the server's `cut`, to the same
step boundary the arrival would have stopped it at), so N replicas do not split their runs at
every one of the fleet's arrivals. A server without `cut` stops at every arrival as alone.

A trace in load stages (`Trace.stages`) holds each later stage's arrivals until every earlier
request has finished, then moves the stage's times to start when the load generator would have
started it (`next_stage_start`), as inference-perf runs its stages.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvtier.sim.fleet.policy import Router
from kvtier.sim.metrics import ConcurrencyRecorder, RequestRecord
from kvtier.sim.servers.base import ServerModel
from kvtier.sim.shared_prefix import next_stage_start
from kvtier.sim.trace import Trace, TraceRequest

TICK, ARRIVAL, STEP_END, WAKE = -1, 0, 1, 2


@dataclass(slots=True)
class ReplicaLog:
    """What one replica did: its requests, busy time and queue over time."""

    rids: list[int] = field(default_factory=list)
    busy_s: float = 0.0
    concurrency: ConcurrencyRecorder = field(default_factory=ConcurrencyRecorder)


class FleetLoop:
    def __init__(self, trace: Trace, engines: Sequence[ServerModel], router: Router) -> None:
        self.requests: Sequence[TraceRequest] = (
            list(trace.requests) if trace.stages else trace.requests
        )
        self._gates = dict(trace.stages)  # a held stage's first request -> its nominal start
        self._stage_start = 0.0  # when the stage being sent started
        self.engines = list(engines)
        self.router = router
        self.records: list[RequestRecord] = []
        self.replica_of: list[int] = []
        self.logs = [ReplicaLog() for _ in engines]
        self.concurrency = ConcurrencyRecorder()
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._next = 0
        self._settled = 0
        self._progress: Callable[[int], None] | None = None  # told each new `_settled`
        self._cuts = [getattr(e, "cut", None) for e in self.engines]
        self._started = [0.0] * len(self.engines)  # when each replica's step in flight began
        self._length = [0.0] * len(self.engines)  # and how long it takes
        self._version = [0] * len(self.engines)  # a cut step's old end is ignored
        self._seen = [(0, 0)] * len(self.engines)  # (running, queued) last observed per replica
        self._running = self._queued = 0  # their sums: the fleet's, kept as replicas change
        self._watch = getattr(router, "watch", None)  # told after every event on a replica

    def _push(self, time: float, kind: int, replica: int = -1, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, self._seq, replica, version))

    def _next_arrival(self) -> float:
        reqs = self.requests
        if self._next >= len(reqs) or self._next in self._gates:
            return math.inf
        return reqs[self._next].arrival_s

    def _settle(self, now: float) -> None:
        """One more request finished (or refused); the last of a stage releases the next."""
        self._settled += 1
        if self._progress is not None:
            self._progress(self._settled)
        first = self._next
        if self._settled != first or first not in self._gates:
            return
        start = next_stage_start(self._stage_start, now)
        shift = start - self._gates.pop(first)
        end = min(self._gates, default=len(self.requests))
        held = self.requests
        assert isinstance(held, list)
        for i in range(first, end):
            held[i] = dataclasses.replace(held[i], arrival_s=held[i].arrival_s + shift)
        self._stage_start = start
        self._push(held[first].arrival_s, ARRIVAL)

    def run(self, progress: Callable[[int], None] | None = None) -> list[RequestRecord]:
        """Every request's record; `progress` hears the requests settled as each settles."""
        self._progress = progress
        if self.requests:
            self._push(self.requests[0].arrival_s, ARRIVAL)
        self._schedule_tick(0.0)
        while self._heap:
            now, kind, _, r, version = heapq.heappop(self._heap)
            if kind == TICK:
                if self._settled < len(self.requests):
                    self.router.tick(now)
                    self._schedule_tick(now)
                continue
            if kind == ARRIVAL:
                r = self._arrive(now)
            elif kind == STEP_END:
                if version != self._version[r]:
                    continue  # the step was cut short; its new end is queued
                self._finish_step(now, r)
            elif not self.engines[r].busy:
                self._step(now, r)
            if r >= 0:
                self._observe(now, r)
        return self.records

    def _schedule_tick(self, now: float) -> None:
        t = self.router.next_tick(now)
        if t < math.inf:
            self._push(max(t, now), TICK)

    def _observe(self, now: float, r: int) -> None:
        e = self.engines[r]
        running, queued = e.running, e.queued
        self.logs[r].concurrency.observe(now, running, queued)
        old_running, old_queued = self._seen[r]
        self._seen[r] = (running, queued)
        self._running += running - old_running
        self._queued += queued - old_queued
        self.concurrency.observe(now, self._running, self._queued)
        if self._watch is not None:
            self._watch(now, r)

    def _arrive(self, now: float) -> int:
        req = self.requests[self._next]
        self._next += 1
        if (after := self._next_arrival()) < math.inf:
            self._push(after, ARRIVAL)
        r = self.router.route(req, now)
        engine = self.engines[r]
        rec = RequestRecord(req.rid, req.arrival_s, req.input_len, req.output_len, req.round)
        self.records.append(rec)
        self.replica_of.append(r)
        self.logs[r].rids.append(req.rid)
        rec.rejected = engine.never_fits(req)
        if rec.rejected:
            self._settle(now)
            self.router.finished(r, req, now)
            return r
        engine.arrive(req, rec, now)
        if not engine.busy:
            self._push(now, WAKE, r)
        elif (cut := self._cuts[r]) is not None:
            start = self._started[r]
            if (duration := cut(start, now)) is not None:
                self.logs[r].busy_s += duration - self._length[r]
                self._length[r] = duration
                self._version[r] += 1
                self._push(start + duration, STEP_END, r, self._version[r])
        return r

    def _finish_step(self, now: float, r: int) -> None:
        for rec in self.engines[r].finish_step(now):
            self._settle(now)
            self.router.finished(r, self.requests[rec.rid], now)
        self._step(now, r)

    def _step(self, now: float, r: int) -> None:
        engine = self.engines[r]
        horizon = math.inf if self._cuts[r] is not None else self._next_arrival()
        duration = engine.start_step(now, horizon)
        if duration is not None:
            self._started[r], self._length[r] = now, duration
            self.logs[r].busy_s += duration
            self._push(now + duration, STEP_END, r, self._version[r])
        elif now < (wake := engine.next_wake()) < math.inf:
            self._push(wake, WAKE, r)
