"""The discrete-event loop: arrivals and engine steps on one clock (after Vidur's simulator).

Pop the earliest event, let it act, push the events it causes. At equal times arrivals go
first, so requests that arrive together are scheduled together; a step end then starts the
next step at once, and an idle engine is woken by an arrival.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from kvtier.sim.engine.scheduler import Live, ServerModel
from kvtier.sim.metrics import Concurrency, RequestRecord
from kvtier.sim.trace import Trace

ARRIVAL, STEP_END, WAKE = 0, 1, 2  # tie order at equal times


class Simulation:
    """Replays `trace` through `engine`; `run` returns every request's record in trace order."""

    def __init__(self, trace: Trace, engine: ServerModel) -> None:
        self.trace = trace
        self.engine = engine
        self.records = [
            RequestRecord(r.rid, r.arrival_s, r.input_len, r.output_len, r.round)
            for r in trace.requests
        ]
        self.concurrency = Concurrency()
        self._next = 0  # index of the next arrival
        self._seq = 0
        self._queue: list[tuple[float, int, int]] = []  # (time, kind, seq)
        self._settled = 0  # finished + rejected

    def _push(self, time: float, kind: int) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time, kind, self._seq))

    def _horizon(self) -> float:
        reqs = self.trace.requests
        return reqs[self._next].arrival_s if self._next < len(reqs) else math.inf

    def run(self, progress: Callable[[int], None] | None = None) -> list[RequestRecord]:
        if self.trace.requests:
            self._push(self.trace.requests[0].arrival_s, ARRIVAL)
        reported = 0
        while self._queue:
            now, kind, _ = heapq.heappop(self._queue)
            if kind == ARRIVAL:
                self._arrive(now)
            elif kind == STEP_END:
                self._settled += len(self.engine.finish_step(now))
                self._step(now)
            elif not self.engine.busy:
                self._step(now)
            self.concurrency.observe(now, self.engine.running, len(self.engine.waiting))
            if progress is not None and self._settled != reported:
                reported = self._settled
                progress(reported)
        return self.records

    def _arrive(self, now: float) -> None:
        req = self.trace.requests[self._next]
        rec = self.records[self._next]
        self._next += 1
        if self._next < len(self.trace.requests):
            self._push(self._horizon(), ARRIVAL)
        rec.rejected = self.engine.never_fits(req)
        if rec.rejected:
            self._settled += 1
            return
        self.engine.arrive(Live(req, rec), now)
        if not self.engine.busy:
            self._push(now, WAKE)

    def _step(self, now: float) -> None:
        duration = self.engine.start_step(now, self._horizon())
        if duration is not None:
            self._push(now + duration, STEP_END)
        elif now < (wake := self.engine.next_wake()) < math.inf:
            self._push(wake, WAKE)  # a waiting request's prefetch may stop then
