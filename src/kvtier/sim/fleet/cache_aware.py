"""sglang-cache-aware: sglang-router's `cache_aware` policy.

sglang-router 0.3.2 `src/policies/cache_aware.rs` (`CacheAwarePolicy::select_worker`), with the
defaults of its launcher (`sglang_router/router_args.py`): cache_threshold 0.3,
balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval_secs 60, max_tree_size
2**26. The load is the router's own count of requests in flight on each worker
(`WorkerLoadGuard`, taken when the request is sent, dropped when its response body ends;
`src/routers/http/router.rs` attaches it for cache_aware). Per request:

1. imbalanced = (max load - min load) > abs threshold AND max load > min load x rel threshold
   (both must hold; f32 arithmetic): route to the least-loaded worker (the first of equals in the
   router's worker order) and insert the text into the tree under it;
2. else match the text in the tree: if matched / input characters > cache_threshold, route to the
   tenant the match names; else to the least-loaded worker; insert the text under the choice.

Every eviction_interval_secs (after a first wait) the tree drops leaves, oldest first, from each
tenant over max_tree_size characters.
"""

from __future__ import annotations

import math
import struct

from kvtier.sim.fleet.approx_tree import ApproxTree
from kvtier.sim.fleet.policy import FleetView, Number, Policy, Router, RouterOption
from kvtier.sim.trace import TraceRequest


def f32(x: float) -> float:
    """`x` rounded to an IEEE single, as the router's f32 comparisons see it."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


class CacheAware:
    def __init__(self, replicas: int, opts: dict[str, float], block_size: int) -> None:
        self.load = [0] * replicas
        self.tree = ApproxTree()
        self.threshold = f32(opts["cache-threshold"])
        self.abs_threshold = int(opts["balance-abs-threshold"])
        self.rel_threshold = f32(opts["balance-rel-threshold"])
        self.interval_s = opts["eviction-interval-secs"]
        self.max_tree_size = int(opts["max-tree-size"])
        self.chars_per_token = opts["chars-per-token"]
        self.block_size = block_size
        self._next_evict = self.interval_s if self.interval_s > 0 else math.inf
        self.decisions = {"imbalanced": 0, "cache_hit": 0, "min_load": 0}
        for r in range(replicas):  # init_workers: insert("", url) for each worker
            self.tree.insert((), (), r)

    def _chars(self, req: TraceRequest) -> list[int]:
        bs = self.block_size
        return [
            round(req.block_tokens(i, bs) * self.chars_per_token) for i in range(len(req.blocks))
        ]

    def _least_loaded(self) -> int:
        return min(range(len(self.load)), key=self.load.__getitem__)

    def route(self, req: TraceRequest, now: float) -> int:
        choice, why = self.decide(req)
        self.commit(req, choice, why)
        return choice

    def decide(self, req: TraceRequest) -> tuple[int, str]:
        """The worker `select_worker` picks, and which branch picked it; the tree and loads are
        left as they were (but for the match's access time, as the router's)."""
        lo, hi = min(self.load), max(self.load)
        if hi - lo > self.abs_threshold and f32(hi) > f32(f32(lo) * self.rel_threshold):
            return self._least_loaded(), "imbalanced"
        m = self.tree.match(req.blocks, self._chars(req))
        rate = f32(f32(m.matched_chars) / f32(m.input_chars)) if m.input_chars else 0.0
        if rate > self.threshold and m.tenant is not None:
            return m.tenant, "cache_hit"
        return self._least_loaded(), "min_load"

    def commit(self, req: TraceRequest, choice: int, why: str) -> None:
        """Record `req` as routed to `choice`: the tree insert and the load guard."""
        self.decisions[why] += 1
        self.tree.insert(req.blocks, self._chars(req), choice)
        self.load[choice] += 1

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        self.load[replica] -= 1

    def next_tick(self, now: float) -> float:
        return self._next_evict

    def tick(self, now: float) -> None:
        self.tree.evict(self.max_tree_size)
        self._next_evict = now + self.interval_s


OPTIONS = {
    "cache-threshold": RouterOption(
        Number(0.0, 1.0), 0.3, "match ratio above which the tree decides"
    ),
    "balance-abs-threshold": RouterOption(
        Number(0, 1 << 40, integer=True), 64, "max - min in-flight requests to call it imbalanced"
    ),
    "balance-rel-threshold": RouterOption(
        Number(0.0, 1e9), 1.5, "max / min in-flight requests to call it imbalanced"
    ),
    "eviction-interval-secs": RouterOption(
        Number(0, 1 << 31, integer=True), 60, "seconds between tree evictions (0: none)"
    ),
    "max-tree-size": RouterOption(
        Number(1, 1 << 62, integer=True), 2**26, "characters a tenant keeps in the tree"
    ),
    "chars-per-token": RouterOption(
        Number(0.01, 1000.0),
        4.0,
        "characters of request text a token stands for (tree sizes only; the match ratio is "
        "the same at any value)",
    ),
}


def policy(block_size: int) -> Policy:
    def build(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
        return CacheAware(n, opts, block_size)

    return Policy(
        OPTIONS,
        build,
        "sglang-router 0.3.2, src/policies/cache_aware.rs and tree.rs; defaults from "
        "sglang_router/router_args.py",
    )
