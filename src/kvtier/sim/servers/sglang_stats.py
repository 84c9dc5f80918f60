"""What an SGLang server's reports read from its state: the waiting queue and the token usage.

A report (`metrics_reporter.py`) reads the scheduler as it stands, or, for one inside the decode
run in flight, the run's start and the batches made by then; a router scraping between reports
reads the last one. `kvtier.sim.servers.sglang_reports` keeps what was published and queues the
KV events.
"""

from __future__ import annotations

import math

from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.sglang_reports import report_due
from kvtier.sim.servers.sglang_state import SGLangState


class SGLangStats(SGLangState):
    """The gauges an SGLang server reports and a router scrapes."""

    def kv_usage(self) -> float:
        """SGLang's token usage: the device's pages neither free nor evictable over its pages
        (`PoolStats`: num_used / max_total_num_tokens, num_used less the evictable)."""
        total = self.cache.device_pages
        return (total - self.cache.room()) / total if total else 0.0

    def _report(self, now: float, edge: float | None = None) -> None:
        """A report (`metrics_reporter.py`): the gauges as the scheduler stands, the waiting
        queue less the arrivals after `edge` (the batch's start), and the queued KV events."""
        r = self.reports
        r.report(r.waiting(len(self.waiting), r.began if edge is None else edge), self.kv_usage())
        r.publish(now)

    def _iteration_began(self, k: int, first: int, count: int) -> float:
        """When decode batch `k` of the run in flight (batches `first` + 1 to `first` +
        `count`) began."""
        return self.reports.began + (k - first - 1) * self._span / count

    def _decode_report(self, k: int) -> tuple[int, float]:
        """The gauges after decode batch `k` of the run in flight, from the state at its start
        (the batch is unchanged until its end): the waiting queue less the arrivals after batch
        `k` began; the pages used, the generated tokens' grown by the batches up to `k`."""
        first, count = self._steps, self._pending_decode
        grown = (k - first) * len(self.decoding) * self.timing.tokens_per_step
        bs, cache = self.config.block_size, self.cache
        more = math.ceil((self._decoded + self._refilled + grown) / bs) - cache.loose_pages
        total = cache.device_pages
        used = min(total - cache.room() + max(more, 0), total)
        edge = self._iteration_began(k, first, count)
        return self.reports.waiting(len(self.waiting), edge), used / total if total else 0.0

    @property
    def stats_settled(self) -> bool:
        """`stats` holds until this server's next event: no report falls inside the decode run
        in flight."""
        first = self._steps
        return not (self.busy and report_due(first, first + self._pending_decode))

    def stats(self, now: float) -> tuple[int, float]:
        """What the server's /metrics reports at `now` (`sglang:num_queue_reqs`,
        `sglang:token_usage`): its last report's."""
        first, count = self._steps, self._pending_decode
        if self.busy and count > 1 and self._span > 0:
            done = min(int((now - self.reports.began) * count / self._span), count - 1)
            due = report_due(first, first + done)  # the last report of the run by `now`
            if due:
                waiting, usage = self._decode_report(due)
                return waiting, round(usage, 2)
        return self.reports.stats

    def enable_kv_events(self) -> set[int] | None:
        """--kv-events-config: from here on the tree's device changes are published at each
        report (None: a cache without a tree); the keys announced so far."""
        if not isinstance(self.cache, TieredCachePort):
            return None
        return self.reports.enable_kv_events(self.cache.cache.tree)
