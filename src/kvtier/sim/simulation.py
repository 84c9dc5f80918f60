"""The discrete-event loop: arrivals and server steps on one clock (after Vidur's simulator).

Pop the earliest event, let it act, push the events it causes. At equal times arrivals go
first, so requests that arrive together are scheduled together; a step end then starts the
next step at once, and an idle server is woken by an arrival.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Protocol

from kvtier.sim.metrics import ConcurrencyRecorder, RequestRecord
from kvtier.sim.servers.base import ServerModel
from kvtier.sim.trace import Trace, TraceRequest

ARRIVAL, STEP_END, WAKE = 0, 1, 2  # tie order at equal times


class Arrivals(Protocol):
    """Where requests come from: a trace's timestamps, or clients that wait for answers."""

    def next_time(self) -> float:
        """When the next request may arrive; inf when none will."""
        ...

    def take(self, now: float) -> TraceRequest | None:
        """The request arriving at `now` (its rid its arrival position), or None."""
        ...

    def settled(self, rid: int, ok: bool) -> None:
        """Request `rid` finished (`ok`) or was rejected."""
        ...


class TraceArrivals:
    """A trace's requests at their timestamps."""

    def __init__(self, trace: Trace) -> None:
        self.requests = trace.requests
        self._next = 0

    def next_time(self) -> float:
        reqs = self.requests
        return reqs[self._next].arrival_s if self._next < len(reqs) else math.inf

    def take(self, now: float) -> TraceRequest | None:
        self._next += 1
        return self.requests[self._next - 1]

    def settled(self, rid: int, ok: bool) -> None:
        pass


class Simulation:
    """Replays `source` (a trace, or any `Arrivals`) through `server`; `run` returns every
    request's record in arrival order."""

    def __init__(self, source: Trace | Arrivals, server: ServerModel) -> None:
        self.arrivals = TraceArrivals(source) if isinstance(source, Trace) else source
        self.server = server
        self.records: list[RequestRecord] = []
        self.concurrency = ConcurrencyRecorder()
        self._seq = 0
        self._queue: list[tuple[float, int, int]] = []  # (time, kind, seq)
        self._settled = 0  # finished + rejected
        self._progress: Callable[[int], None] | None = None  # told each new `_settled`
        self._arrival_at = math.inf  # when the pending arrival event fires

    def _push(self, time: float, kind: int) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time, kind, self._seq))
        if kind == ARRIVAL:
            self._arrival_at = time

    def _settle(self, rid: int, ok: bool, now: float) -> None:
        """Count it and tell the source; clients that wait for a free slot may send earlier
        than planned."""
        self._settled += 1
        if self._progress is not None:
            self._progress(self._settled)
        self.arrivals.settled(rid, ok)
        if (after := self.arrivals.next_time()) < self._arrival_at:
            self._push(max(after, now), ARRIVAL)

    def run(self, progress: Callable[[int], None] | None = None) -> list[RequestRecord]:
        """Every request's record; `progress` hears the requests settled as each settles."""
        self._progress = progress
        if (first := self.arrivals.next_time()) < math.inf:
            self._push(first, ARRIVAL)
        while self._queue:
            now, kind, _ = heapq.heappop(self._queue)
            if kind == ARRIVAL:
                if now != self._arrival_at:
                    continue  # superseded by an earlier one
                self._arrival_at = math.inf
                self._arrive(now)
            elif kind == STEP_END:
                for rec in self.server.finish_step(now):
                    self._settle(rec.rid, True, now)
                if self._arrival_at > now:  # else the answer freed a slot: send, then step
                    self._step(now)
            elif not self.server.busy:
                self._step(now)
            self.concurrency.observe(now, self.server.running, self.server.queued)
        return self.records

    def _arrive(self, now: float) -> None:
        req = self.arrivals.take(now)
        if (after := self.arrivals.next_time()) < math.inf:
            self._push(max(after, now), ARRIVAL)  # a client held back by its cap is due now
        if req is None:
            return
        rec = RequestRecord(req.rid, req.arrival_s, req.input_len, req.output_len, req.round)
        self.records.append(rec)
        rec.rejected = self.server.never_fits(req)
        if rec.rejected:
            self._settle(req.rid, False, now)
            return
        self.server.arrive(req, rec, now)
        if not self.server.busy:
            self._push(now, WAKE)

    def _step(self, now: float) -> None:
        duration = self.server.start_step(now, self.arrivals.next_time())
        if duration is not None:
            self._push(now + duration, STEP_END)
        elif now < (wake := self.server.next_wake()) < math.inf:
            self._push(wake, WAKE)  # a waiting request's prefetch may stop then
