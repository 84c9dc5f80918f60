"""The KV events a precise router's index learns the replicas' device blocks from.

A vLLM replica's events leave once a step (`step-events`, 1): its block pool queues BlockStored
when `allocate_slots` caches a block and BlockRemoved when `get_new_blocks` evicts one, and the
scheduler takes and publishes them in `update_from_output`, after the forward pass (v0.12.0 on;
v0.10.x - v0.11.x at the end of `schedule()`, before it), over ZMQ. `step-events=0` reads the
pool as it stands. The events reach the index `event-delay-ms` after they leave (0, the default:
at once; the routers have no such setting, their delay is the publisher's and the indexer's
own): the router then reads each replica as its events had said that long ago. An SGLang
replica's radix tree queues BlockStored / BlockRemoved as it stores and evicts device pages, and
its scheduler publishes them only at its reports (SGLang 0.5.23 `publish_kv_events`: after each
prefill batch, every 40th decode batch and when idle; `kvtier.sim.servers.sglang_reports`), so a
prompt arriving during a long decode stretch reads its pod as it stood at the last report.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from kvtier.sim.fleet.policy import FleetView, Number, RouterOption, published


class DelayedEvents:
    """Each replica's device blocks as its KV events have told the index, `delay_s` after they
    left the engine: a vLLM replica's as it publishes them (once a step, `listen`); any other's
    change (its blocks stored and removed since the last look, `changed`)."""

    def __init__(self, view: FleetView, replicas: int, delay_s: float) -> None:
        self.view = view
        self.delay_s = delay_s
        self.known: list[set[int]] = [set() for _ in range(replicas)]
        self._sent: list[set[int]] = [set() for _ in range(replicas)]
        self._queue: deque[tuple[float, int, Iterable[int], Iterable[int]]] = deque()
        self.publishing: set[int] = set()  # replicas heard through `listen`

    def listen(self, replica: int, now: float, stored: list[int], removed: list[int]) -> None:
        self._queue.append((now + self.delay_s, replica, stored, removed))

    def changed(self, now: float, replica: int) -> None:
        if replica in self.publishing:
            return
        held, sent = self.view.resident(replica), self._sent[replica]
        if held != sent:
            self._queue.append((now + self.delay_s, replica, held - sent, sent - held))
            self._sent[replica] = held

    def prefixes(self, blocks: tuple[int, ...], now: float) -> list[int]:
        queue, known = self._queue, self.known
        while queue and queue[0][0] <= now:
            _, r, stored, removed = queue.popleft()
            known[r].difference_update(removed)
            known[r].update(stored)
        out = []
        for held in known:
            n = 0
            for block in blocks:
                if block not in held:
                    break
                n += 1
            out.append(n)
        return out


def subscribe(view: FleetView, replicas: int, opts: Mapping[str, float]) -> DelayedEvents | None:
    """Wire a router's index to the replicas' KV events as `event_options` set them: the
    delayed index when `event-delay-ms` is above 0 (else None: the view is read as the events
    have said at once), each replica heard as it publishes unless `step-events=0`."""
    delay = opts.get("event-delay-ms", 0.0) / 1e3
    events = DelayedEvents(view, replicas, delay) if delay else None
    if opts.get("step-events", 1):
        publishing = view.publish_kv_events(events.listen if events is not None else None)
        if events is not None:
            events.publishing = publishing
    return events


class EventReader:
    """The replicas and the view of a router whose index may learn their device blocks from
    their KV events (`events`: as `event_options` set them; else it reads none)."""

    def __init__(
        self, replicas: int, view: FleetView, opts: Mapping[str, float], events: bool = True
    ) -> None:
        self.replicas = replicas
        self.view = view
        self._events = subscribe(view, replicas, opts) if events else None

    def watch(self, now: float, replica: int) -> None:
        """The fleet loop calls this after every event on a replica."""
        if self._events is not None:
            self._events.changed(now, replica)


def event_options() -> dict[str, RouterOption]:
    """The `--router-opt` keys of a router whose index reads KV events."""
    return {
        "event-delay-ms": RouterOption(
            Number(0, 3.6e6), 0.0, "how late a replica's KV events reach the index (0: at once)"
        ),
        "step-events": published("blocks as its KV events publish them", "once a step", "at once"),
    }
