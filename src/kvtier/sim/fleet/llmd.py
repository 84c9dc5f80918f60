"""llm-d-approximate and llm-d-precise: llm-d's inference scheduler (the Gateway API inference
extension's endpoint picker) with a prefix scorer, a queue scorer, a KV-usage scorer and an
active-request scorer.

Each replica's score is the weighted sum of its scorers' scores; the max-score picker takes the
highest (ties at random, seeded by --seed: `max_score_picker.go` shuffles, then sorts stably).
Weights default to llm-d's well-lit-path guides (`EndpointPickerConfig`: prefix 3,
kv-cache-utilization 2, queue 2).

* queue-scorer (gateway-api-inference-extension `pkg/epp/scheduling/framework/plugins/scorer/
  queue.go`): (max waiting - waiting) / (max waiting - min waiting) over the replicas, 1 when all
  are equal. kv-cache-utilization-scorer (`kvcache_utilization.go`): 1 - KV usage. Both read
  the pod metrics the picker scrapes every `metrics-interval-ms` (`refreshMetricsInterval`,
  50 ms: `DefaultRefreshMetricsInterval`, v0.5.1 and v1.0.0); neither counts the picker's own
  picks. A vLLM pod's metrics are its last completed iteration's scheduler stats (`make_stats`
  at the end of `Scheduler.update_from_output`, set on /metrics as its output is handled), so
  a pod's score stays where it was until a step ends and a scrape follows: a burst between
  them herds onto one pod. An SGLang pod's (`sglang:num_queue_reqs`, `sglang:token_usage`) are
  its last report's: after each prefill batch, every 40th decode batch and when idle (SGLang
  0.5.23 `report_prefill_stats`, `report_decode_stats`; `kvtier.sim.servers.sglang_reports`).
  `step-stats=0` reads each pod's state at the scrape instead.
* active-request-scorer (llm-d-inference-scheduler `pkg/plugins/scorer/active_request.go`, from
  v0.3.0; weight 0 unless `active-weight` is set, as llm-d's guides leave it out): the picker's
  own count of requests it sent each pod, taken at the pick (PreRequest); a pod with none scores
  1, the others (max count - count) / max count. Where the count falls back is the release's:
  v0.4.0 on (`active-until-finish=1`) when the response completes (ResponseComplete);
  v0.3.0 - v0.3.2 (`active-until-finish=0`) in PostResponse, which gateway-api-inference-
  extension v0.5.1 - v1.0.x runs when the response headers come back (`HandleResponseHeaders`
  -> `Director.HandleResponse`), and a streaming vLLM or SGLang server sends its headers
  before the first token: the count is back to 0 before the next pick, every pod scores 1 and
  the scorer orders nothing.
* llm-d-approximate, prefix-cache-scorer (`pkg/epp/scheduling/framework/plugins/multi/prefix/
  plugin.go`, `indexer.go`): the prompt's full blocks, chained hashes, up to 256 blocks of
  64 characters (16 tokens at 4 characters a token: the first 4,096 tokens); for each block in
  turn, every server the index holds it for counts one more, until a block no server holds; a
  server scores its count over the prompt's blocks. After the pick (PreRequest) the chosen
  server's index takes the prompt's blocks, an LRU of `lru-capacity-per-server` blocks (autoTune:
  the pod's GPU blocks). It learns only from its own routing.
* llm-d-precise, precise-prefix-cache-scorer (llm-d-inference-scheduler `pkg/plugins/scorer/
  precise_prefix_cache.go` over llm-d-kv-cache-manager's index): each replica's longest prefix
  of the prompt's blocks resident on its device, as its KV events report it, min-max normalised
  over the replicas holding any (1 when they hold equally), 0 for the others. The events
  (`step-events`, `event-delay-ms`) are kv_events.py's: a vLLM pod's leave once a step, so a
  burst of one prompt group arriving during the step that prefills its first request finds no
  replica holding it; an SGLang pod's at its reports, as its gauges. llm-d-kv-cache-manager's
  kvevents pool applies a pod's batches in order.

Trace granularity: a block here is one trace block (its ids name whole prefixes, as the chained
hashes do), and a partial last block is left out, as the scorers leave it.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict

from kvtier.sim.fleet.kv_events import EventReader, event_options
from kvtier.sim.fleet.policy import FleetView, Number, Policy, Router, RouterOption, published
from kvtier.sim.trace import TraceRequest

APPROX_MAX_TOKENS = 256 * 64 // 4  # DefaultMaxPrefixBlocks x DefaultBlockSize chars / 4 a token


class PrefixIndex:
    """The approximate scorer's indexer: block -> servers, an LRU of blocks per server."""

    def __init__(self, replicas: int, capacity: int) -> None:
        self.capacity = capacity
        self.servers: dict[int, set[int]] = {}
        self.lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(replicas)]

    def add(self, blocks: tuple[int, ...], server: int) -> None:
        lru = self.lru[server]
        for block in blocks:
            if block in lru:
                lru.move_to_end(block)
                continue
            lru[block] = None
            self.servers.setdefault(block, set()).add(server)
            if len(lru) > self.capacity:
                old, _ = lru.popitem(last=False)
                holders = self.servers[old]
                holders.discard(server)
                if not holders:
                    del self.servers[old]

    def scores(self, blocks: tuple[int, ...], replicas: int) -> list[float]:
        counts = [0] * replicas
        for block in blocks:
            holders = self.servers.get(block)
            if not holders:
                break
            for s in holders:
                counts[s] += 1
        return [c / len(blocks) if blocks else 0.0 for c in counts]


class LlmdScheduler(EventReader):
    def __init__(
        self, replicas: int, opts: dict[str, float], seed: int, view: FleetView, precise: bool
    ) -> None:
        super().__init__(replicas, view, opts, events=precise)
        self.precise = precise
        self.weights = (opts["prefix-weight"], opts["queue-weight"], opts["kv-usage-weight"])
        # counts that stay up until the response completes move the scores at every pick; a
        # count dropped at the response headers scores every pod 1, a constant: no scorer
        self.counting = bool(opts["active-until-finish"]) and opts["active-weight"] > 0
        self.active_weight = opts["active-weight"] if self.counting else 0.0
        self._active = [0] * replicas
        self._active_scores = [1.0] * replicas
        self._active_moved = False  # a count moved since the scores were last taken
        self.interval_s = opts["metrics-interval-ms"] / 1e3
        self.live = not opts["step-stats"]
        self._rng = random.Random(seed)
        self._queue_scores: list[float] = []
        self._usage: list[float] = []
        self._base: list[float] = []
        self._by_base: list[int] = []
        self._queues = [0] * replicas
        self._scraped([0.0] * replicas)
        self._touched = set(range(replicas))  # replicas with an event since the last scrape
        self._next = 0.0
        capacity = int(opts.get("lru-capacity-per-server", 0)) or view.device_blocks
        self.index = PrefixIndex(replicas, max(1, capacity))
        self.block_size = int(opts["block-size"])
        self.max_tokens = int(opts.get("max-prefix-tokens", 0))

    def watch(self, now: float, replica: int) -> None:
        """Only the replicas with an event can have changed their metrics by the next scrape."""
        self._touched.add(replica)
        super().watch(now, replica)

    def _blocks(self, req: TraceRequest) -> tuple[int, ...]:
        full = req.input_len // self.block_size
        if self.max_tokens:
            full = min(full, self.max_tokens // self.block_size)
        return req.blocks[:full]

    def _prefix_scores(
        self, req: TraceRequest, blocks: tuple[int, ...], now: float
    ) -> dict[int, float]:
        """The replicas whose prefix score is above 0, and their scores."""
        if not self.precise:
            scores = self.index.scores(blocks, self.replicas)
            return {r: s for r, s in enumerate(scores) if s}
        cap = len(blocks)
        if self._events is not None:
            prefixes = dict(enumerate(self._events.prefixes(blocks, now)))
        else:
            prefixes = self.view.held_prefixes(req)
        held = {r: (p if p < cap else cap) for r, p in prefixes.items() if p}
        if not held:
            return {}
        lo, hi = min(held.values()), max(held.values())
        if lo == hi:
            return dict.fromkeys(held, 1.0)
        return {r: s for r, p in held.items() if (s := (p - lo) / (hi - lo))}

    def route(self, req: TraceRequest, now: float) -> int:
        """The max-score pick. A replica scoring 0 on prefix totals its queue, KV-usage and
        active-request scores alone (the same float: 0 + x is x), fixed between scrapes and
        count moves: only the replicas scoring on prefix are summed here."""
        if self._active_moved:
            self._rescore_active()
        blocks = self._blocks(req)
        prefix = self._prefix_scores(req, blocks, now)
        wp, wq, wk = self.weights
        wa, active = self.active_weight, self._active_scores
        queue, usage, base = self._queue_scores, self._usage, self._base
        total = {
            r: wp * s + wq * queue[r] + wk * (1 - usage[r]) + wa * active[r]
            for r, s in prefix.items()
        }
        best = max(total.values(), default=-math.inf)
        rest = next((base[r] for r in self._by_base if r not in prefix), -math.inf)
        best = max(best, rest)
        pick = [r for r, t in total.items() if t == best]
        if rest == best:
            for r in self._by_base:
                if base[r] != best:
                    break
                if r not in prefix:
                    pick.append(r)
        choice = self._rng.choice(sorted(pick))
        if not self.precise:
            self.index.add(blocks, choice)
        if self.counting:
            self._count(choice, 1)
        return choice

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        if self.counting:
            self._count(replica, -1)

    def _count(self, replica: int, step: int) -> None:
        """The active-request scorer's count for `replica` moved by `step`; scored at the next
        pick."""
        self._active[replica] += step
        self._active_moved = True

    @property
    def active_scores(self) -> list[float]:
        """The active-request scorer's score of each replica, as the next pick reads it."""
        if self._active_moved:
            self._rescore_active()
        return self._active_scores

    def _rescore_active(self) -> None:
        counts = self._active
        top = max(counts)
        self._active_scores = [1.0 if c <= 0 else (top - c) / top for c in counts]
        self._active_moved = False
        self._rebase()

    def next_tick(self, now: float) -> float:
        return self._next

    def tick(self, now: float) -> None:
        """The scrape: a replica without an event since the last reads as it did then."""
        if self._touched:
            usage, settling = list(self._usage), set()
            for r in self._touched:
                scrape = self.view.scraped(r, now, self.live)
                self._queues[r], usage[r] = scrape.waiting, scrape.usage
                if not scrape.settled:
                    settling.add(r)
            self._touched = settling
            self._scraped(usage)
        self._next = now + self.interval_s

    def _scraped(self, usage: list[float]) -> None:
        """The scrape's queue scores and KV usage, then `_rebase`."""
        queues = self._queues
        lo, hi = min(queues), max(queues)
        self._queue_scores = [1.0 if hi == lo else (hi - x) / (hi - lo) for x in queues]
        self._usage = usage
        self._rebase()

    def _rebase(self) -> None:
        """Each replica's total without a prefix score, and the replicas by that total, highest
        first (equals in replica order)."""
        usage = self._usage
        _, wq, wk = self.weights
        q, wa, active = self._queue_scores, self.active_weight, self._active_scores
        self._base = [
            wq * q[r] + wk * (1 - usage[r]) + wa * active[r] for r in range(self.replicas)
        ]
        self._by_base = sorted(range(self.replicas), key=lambda r: -self._base[r])


def _common(block_size: int) -> dict[str, RouterOption]:
    weight = Number(0.0, 1e6)
    return {
        "prefix-weight": RouterOption(weight, 3.0, "weight of the prefix scorer"),
        "queue-weight": RouterOption(weight, 2.0, "weight of the queue scorer"),
        "kv-usage-weight": RouterOption(weight, 2.0, "weight of the KV-cache utilization scorer"),
        "active-weight": RouterOption(weight, 0.0, "weight of the active-request scorer"),
        "active-until-finish": RouterOption(
            Number(0, 1, integer=True),
            1,
            "1: the active-request count falls back when a response completes (v0.4.0 on); "
            "0: when its headers come back, before the first token (v0.3.x)",
        ),
        "metrics-interval-ms": RouterOption(
            Number(0.001, 3.6e6), 50.0, "how stale the scraped queue and KV usage are"
        ),
        "step-stats": published(
            "metrics as its engine last published them", "each iteration", "as at the scrape"
        ),
        "block-size": RouterOption(
            Number(1, 1 << 20, integer=True), block_size, "trace block tokens", "the trace's"
        ),
    }


def policies(block_size: int) -> tuple[Policy, Policy]:
    """(llm-d-approximate, llm-d-precise)."""
    approx = dict(_common(block_size))
    approx["lru-capacity-per-server"] = RouterOption(
        Number(0, 1 << 40, integer=True), 0, "blocks the index keeps per server (0: the GPU's)"
    )
    approx["max-prefix-tokens"] = RouterOption(
        Number(0, 1 << 40, integer=True), APPROX_MAX_TOKENS, "tokens hashed (0: all)"
    )

    def build_approx(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
        return LlmdScheduler(n, opts, seed, view, precise=False)

    def build_precise(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
        return LlmdScheduler(n, opts, seed, view, precise=True)

    source = (
        "gateway-api-inference-extension scorer/queue.go, kvcache_utilization.go, "
        "multi/prefix/plugin.go + indexer.go; llm-d-inference-scheduler "
        "pkg/plugins/scorer/precise_prefix_cache.go, active_request.go; weights from llm-d's "
        "guides"
    )
    precise = _common(block_size) | event_options()
    return (
        Policy(approx, build_approx, source),
        Policy(precise, build_precise, source),
    )
