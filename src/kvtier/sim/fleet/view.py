"""What the routers may read of the simulated replicas, server model by server model.

Each reading stands for something the real router consumes: SGLang's `/get_load` (tokens held
by running requests, device pages neither free nor evictable, plus the waiting prompts); the
scraped waiting-queue and KV-usage metrics (SGLang: pages in use over the pool; vLLM:
`kv_cache_usage`, 1 - free blocks / blocks, cached free blocks counting as free); and the KV
events a precise router indexes, read here as the device-resident prefix of a prompt without
touching the cache's recency.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtier.sim.servers.base import ServerModel
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.sglang import SGLangServer
from kvtier.sim.servers.vllm import VllmServer
from kvtier.sim.trace import TraceRequest


def _sglang_prefix(server: SGLangServer, blocks: Sequence[int]) -> int:
    port = server.cache
    if not isinstance(port, TieredCachePort):
        return 0
    node, i, n = port.cache.tree.root, 0, len(blocks)
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


class ReplicaView:
    def __init__(self, servers: Sequence[ServerModel], block_tokens: int, blocks: int) -> None:
        self.servers = servers
        self.block_tokens = block_tokens
        self._device_blocks = blocks

    @property
    def device_blocks(self) -> int:
        return self._device_blocks

    def token_loads(self) -> list[int]:
        out = []
        for s in self.servers:
            if isinstance(s, SGLangServer):
                held = (s.cache.device_pages - s.cache.room()) * self.block_tokens
                out.append(held + sum(live.req.input_len for live in s.waiting))
            else:
                out.append(-1)  # no /get_load: the router records a failed poll
        return out

    def queues(self) -> list[int]:
        return [s.queued for s in self.servers]

    def kv_usage(self) -> list[float]:
        out = []
        for s in self.servers:
            if isinstance(s, SGLangServer):
                total = s.cache.device_pages
                out.append((total - s.cache.room()) / total if total else 0.0)
            elif isinstance(s, VllmServer):
                pool = s.pool
                out.append(1 - pool.free / pool.num_blocks if pool.num_blocks else 0.0)
            else:
                out.append(0.0)
        return out

    def device_prefix(self, replica: int, req: TraceRequest) -> int:
        s = self.servers[replica]
        if isinstance(s, SGLangServer):
            return _sglang_prefix(s, req.blocks)
        if isinstance(s, VllmServer):
            cached, n = s.pool.cached, 0
            for block in req.blocks:
                if block not in cached:
                    break
                n += 1
            return n
        return 0
