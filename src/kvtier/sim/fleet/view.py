"""What the routers may read of the simulated replicas, server model by server model.

Each reading stands for something the real router consumes: SGLang's `/get_load` (tokens held
by running requests, device pages neither free nor evictable, plus the waiting prompts); the
scraped waiting-queue and KV-usage metrics (SGLang: pages in use over the pool; vLLM:
`kv_cache_usage`, 1 - free blocks / blocks, cached free blocks counting as free); the prompt
tokens a replica has yet to prefill (what a global scheduler that tracks its requests knows); and
the KV events a precise router indexes, read here as the device-resident prefix of a prompt without
touching the cache's recency.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kvtier.cache.radix import TreeNode
from kvtier.sim.fleet.policy import EventListener, Scrape
from kvtier.sim.servers.base import ServerModel
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.sglang import SGLangServer
from kvtier.sim.servers.vllm import VllmServer
from kvtier.sim.timing import TimingModel
from kvtier.sim.trace import TraceRequest


def _tree_prefix(root: TreeNode, blocks: Sequence[int]) -> int:
    node, i, n = root, 0, len(blocks)
    while i < n:
        child = node.children.get(blocks[i])
        if child is None or child.device is None:
            break
        keys, m = child.keys, 0
        while m < child.size and i + m < n and keys[m] == blocks[i + m]:
            m += 1
        i += m
        if m < child.size:
            break
        node = child
    return i


def _pool_prefix(cached: Container[int], blocks: Sequence[int]) -> int:
    n = 0
    for block in blocks:
        if block not in cached:
            break
        n += 1
    return n


def _usage(s: ServerModel) -> float:
    if isinstance(s, (SGLangServer, VllmServer)):
        return s.kv_usage()
    return 0.0


def _index(s: ServerModel) -> tuple[str, Any]:
    """What a replica's KV events would index: its radix tree's root (SGLang with a tiered
    cache), its pool's cached blocks (vLLM), or nothing."""
    if isinstance(s, SGLangServer) and isinstance(s.cache, TieredCachePort):
        return "tree", s.cache.cache.tree.root
    if isinstance(s, VllmServer):
        return "pool", s.pool.cached
    return "none", None


@dataclass(eq=False)
class ReplicaView:
    servers: Sequence[ServerModel]
    block_tokens: int
    device_blocks: int
    timing: TimingModel | None = None
    _indexes: list[tuple[str, Any]] = field(init=False, repr=False)
    _trees: list[tuple[int, Any, Any]] = field(init=False, repr=False)
    _pools: list[tuple[int, Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._indexes = [_index(s) for s in self.servers]
        self._split()

    def _split(self) -> None:
        """Each tree's root and its children (a dict kept for the tree's life); each pool."""
        self._trees = [(r, i, i.children) for r, (k, i) in enumerate(self._indexes) if k == "tree"]
        self._pools = [(r, i) for r, (kind, i) in enumerate(self._indexes) if kind == "pool"]

    def publish_kv_events(self, listener: EventListener | None = None) -> set[int]:
        """Turn on each replica's KV events: from here on its blocks are read as its published
        events give them (`VllmServer._publish`, once a step; an SGLang server's at its reports,
        `sglang_reports.Reports.publish`), not as its pool or tree holds them, and `listener`
        hears each publication with the replica's index; those replicas."""
        out = set()
        for r, s in enumerate(self.servers):
            if isinstance(s, VllmServer):
                s.enable_kv_events()
                assert s.published is not None
                self._indexes[r] = ("pool", s.published)
                if listener is not None:
                    s.kv_listener = partial(listener, r)
                out.add(r)
            elif isinstance(s, SGLangServer) and (published := s.enable_kv_events()) is not None:
                self._indexes[r] = ("pool", published)
                if listener is not None:
                    s.reports.listener = partial(listener, r)
                out.add(r)
        self._split()
        return out

    def token_loads(self) -> list[int]:
        out = []
        for s in self.servers:
            if isinstance(s, SGLangServer):
                held = (s.cache.device_pages - s.cache.room()) * self.block_tokens
                out.append(held + sum(live.req.input_len for live in s.waiting))
            else:
                out.append(-1)  # no /get_load: the router records a failed poll
        return out

    def scraped(self, replica: int, now: float, live: bool = False) -> Scrape:
        """One replica's requests waiting and KV-cache usage as its engine last published them
        (vLLM: its last completed iteration; SGLang: its last report), unless `live`; the
        others' as they stand."""
        server = self.servers[replica]
        if live or not isinstance(server, (VllmServer, SGLangServer)):
            return Scrape(server.queued, _usage(server))
        waiting, usage = server.stats(now)
        return Scrape(waiting, usage, server.stats_settled)

    def pending_prefill(self) -> list[list[tuple[int, int]]]:
        out: list[list[tuple[int, int]]] = []
        for s in self.servers:
            if isinstance(s, SGLangServer):
                mine = [(lv.req.rid, lv.req.input_len) for lv in s.waiting]
                mine += [(lv.req.rid, lv.req.input_len - lv.prefilled) for lv in s.prefilling]
                out.append(mine)
            elif isinstance(s, VllmServer):
                out.append([(r.req.rid, r.req.input_len) for r in s.waiting])
            else:
                out.append([])
        return out

    def prefill_s(self, new_tokens: int, prefix_tokens: int) -> float:
        if self.timing is None or new_tokens <= 0:
            return 0.0
        return self.timing.prefill_s(new_tokens, prefix_tokens)

    def resident(self, replica: int) -> set[int]:
        """The trace blocks resident on `replica`'s device (a vLLM replica's, once its events
        are published, as they have said so far)."""
        kind, index = self._indexes[replica]
        if kind == "pool":
            return set(index)
        out: set[int] = set()
        if kind == "tree":
            stack = list(index.children.values())
            while stack:
                node = stack.pop()
                if node.device is not None:
                    out.update(node.keys)
                    stack.extend(node.children.values())
        return out

    def held_prefixes(self, req: TraceRequest) -> dict[int, int]:
        """`device_prefixes` without the replicas holding none (most, in a large fleet)."""
        blocks = req.blocks
        out: dict[int, int] = {}
        if not blocks:
            return out
        first = blocks[0]
        for r, root, children in self._trees:
            child = children.get(first)
            if child is not None and child.device is not None:
                out[r] = _tree_prefix(root, blocks)
        for r, cached in self._pools:
            if first in cached:
                out[r] = _pool_prefix(cached, blocks)
        return out

    def device_prefixes(self, req: TraceRequest) -> list[int]:
        blocks = req.blocks
        if not blocks:
            return [0] * len(self.servers)
        first, out = blocks[0], []
        for kind, index in self._indexes:
            if kind == "tree":
                child = index.children.get(first)  # most replicas hold none: stop at once
                resident = child is not None and child.device is not None
                out.append(_tree_prefix(index, blocks) if resident else 0)
            elif kind == "pool":
                out.append(_pool_prefix(index, blocks))
            else:
                out.append(0)
        return out
