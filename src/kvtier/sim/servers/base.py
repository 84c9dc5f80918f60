"""The simulated server as the event loop sees it: one interface, one module per engine.

The loop (`kvtier.sim.simulation.Simulation`) knows nothing of an engine's queues, cache or
batching. For each request it calls `never_fits` once, then `arrive`; whenever the server is
idle it calls `start_step`, which returns how long the step takes (None: nothing to do), and
when that time has passed `finish_step`, which applies the step and returns the requests that
finished. `next_wake` is the next time an idle server may find work without a new arrival
(a prefetch that may stop); `running` and `queued` are sampled after every event.

Each engine module (`sglang`, `vllm`) has a `build(config) -> ServerModel` over the resolved
`SimConfig`; `kvtier.sim.servers.build_server` picks it by `config.engine`. A server writes into
the request's record (`RequestRecord.hit_tokens`, `admit_s`, `first_token_s`, `finish_s`) and
reports what it counted in `counters()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kvtier.sim.decode_log import DecodeLog
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.trace import TraceRequest


@dataclass(frozen=True, slots=True)
class ServerCounters:
    """What a server counted over a run."""

    evictions: dict[str, int]  # pages (trace blocks, or engine blocks) evicted per tier name
    pcie_busy_s: float  # seconds host->device loads kept the link busy
    preemptions: int | None = None  # requests sent back to waiting (vLLM's num_preemptions);
    # None: the model never preempts
    prefetches: dict[str, object] | None = None  # an L3 prefetch's policy and counts
    decode_log: DecodeLog | None = None  # when each decode iteration ended (token times)


class ServerModel(Protocol):
    """One simulated server; times in seconds on the loop's clock."""

    @property
    def busy(self) -> bool:
        """A step is in flight (between `start_step` and `finish_step`)."""
        ...

    @property
    def running(self) -> int:
        """Requests admitted and not finished."""
        ...

    @property
    def queued(self) -> int:
        """Requests waiting to be admitted."""
        ...

    def never_fits(self, req: TraceRequest) -> str:
        """Why `req` can never run on this server ('' when it can); it is then rejected."""
        ...

    def arrive(self, req: TraceRequest, rec: RequestRecord, now: float) -> None:
        """`req` arrives at `now`; the server fills in `rec` as it serves it."""
        ...

    def next_wake(self) -> float:
        """When an idle server may next find work without an arrival (inf: never)."""
        ...

    def start_step(self, now: float, horizon: float) -> float | None:
        """Begin the next step at `now`; its duration, or None when there is nothing to do.
        `horizon` is the next arrival: a run of decode steps advanced at once stops there."""
        ...

    def finish_step(self, now: float) -> list[RequestRecord]:
        """Apply the step that ends at `now`; the records of the requests that finished."""
        ...

    def counters(self) -> ServerCounters:
        """Evictions, link time, preemptions and prefetches so far."""
        ...
