"""What an SGLang server publishes for a router to read: its load gauges and its KV events.

SGLang 0.5.23 sets the gauges a router scrapes (`sglang:num_queue_reqs`, `sglang:token_usage`,
the latter rounded to two places by `PoolStats.update_scheduler_stats`) and sends its queued KV
events (`KvEventsPublisher.publish_kv_events`) only at its reports
(`scheduler_components/metrics_reporter.py`): `report_prefill_stats` after every prefill batch,
`report_decode_stats` after a decode batch only when the decode batch count is a multiple of
`decode_log_interval` (40), and the scheduler's `on_idle` when it has nothing to run (the
gauges through `_maybe_log_idle_metrics`, which publishes at once when the running gauge
disagrees with the empty batch). Between reports a router reads the last one. A request that
arrived during the batch in flight is not yet in the waiting queue the report counts (the
scheduler receives requests before it forms a batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvtier.cache.radix import RadixTree

# --decode-log-interval (server_args / observability fields, SGLang 0.5.23): 40 decode batches
DECODE_LOG_INTERVAL = 40

KvListener = Callable[[float, list[int], list[int]], None]


def report_due(before: int, after: int) -> int:
    """The last decode batch count in (before, after] that reports (0: none does)."""
    k = after - after % DECODE_LOG_INTERVAL
    return k if k > before else 0


class Reports:
    """One server's published gauges and KV events, and the arrivals its batch in flight has
    not yet received."""

    def __init__(self) -> None:
        self.stats = (0, 0.0)  # the last report's requests waiting and token usage
        self.began = 0.0  # the batch in flight: when it began
        self.late: list[float] = []  # arrivals since then
        self.tree: RadixTree | None = None  # KV events on: the tree whose changes are queued
        self.published: set[Any] | None = None  # the device keys its events have announced
        self.listener: KvListener | None = None

    def begin(self, now: float) -> None:
        self.began, self.late = now, []

    def waiting(self, queued: int, edge: float) -> int:
        """The waiting queue as a report counts it: less the arrivals after `edge`, when the
        batch it follows began."""
        return queued - sum(1 for t in self.late if t > edge)

    def report(self, waiting: int, usage: float) -> None:
        self.stats = (waiting, round(usage, 2))

    def enable_kv_events(self, tree: RadixTree) -> set[Any]:
        """--kv-events-config: the tree's device changes are queued from here on; what it
        holds now counts as announced (the trace block ids returned)."""
        resident: set[Any] = set()
        stack = list(tree.root.children.values())
        while stack:
            node = stack.pop()
            if node.device is not None:
                resident.update(node.keys)
                stack.extend(node.children.values())
        self.tree, self.published = tree, resident
        tree.device_log = []
        return resident

    def publish(self, now: float) -> None:
        """`publish_kv_events`: the keys the tree stored on or removed from the device since
        the last publication, in order (BlockStored / BlockRemoved)."""
        tree, published = self.tree, self.published
        if tree is None or published is None or not tree.device_log:
            return
        final: dict[Any, bool] = {}  # trace block ids
        for stored, keys in tree.device_log:
            for key in keys:
                final[key] = stored
        tree.device_log = []
        added = [k for k, on in final.items() if on and k not in published]
        removed = [k for k, on in final.items() if not on and k in published]
        published.difference_update(removed)
        published.update(added)
        if self.listener is not None and (added or removed):
            self.listener(now, added, removed)
