"""Reference replays without a clock: what a cache of a given size could hit on a trace.

Requests are taken one at a time in trace order: match the prompt's blocks, then insert them,
through the same `TieredCache` the timed simulation uses, device tier only.

  unbounded   a device tier that never evicts: the trace's hit-rate ceiling. For each request,
              the longest prefix of its hash_ids seen in any earlier request, each block counted
              at its real size (the last holds input_length - 512 x (n - 1) tokens), summed over
              all requests and divided by all prompt tokens.
  lru         one tier of `capacity_tokens // block_size` whole blocks with LRU eviction of
              unlocked leaves; a prompt longer than the cache keeps only its leading blocks.
"""

from __future__ import annotations

from kvtier.cache.storage import Tier
from kvtier.errors import KvtierError
from kvtier.sim.engine.cacheport import TieredCachePort
from kvtier.sim.metrics import RequestRecord, SimResult, summarize
from kvtier.sim.trace import Trace


def replay_untimed(trace: Trace, port: TieredCachePort) -> list[RequestRecord]:
    """Match then insert every request in order; each record carries its hit tokens."""
    records = []
    for req in trace.requests:
        blocks = req.blocks[: port.device_pages]
        port.match(blocks)
        hit = port.admit(req.rid, blocks, 0)
        if hit is None:
            raise RuntimeError("an idle reference cache refused a prompt that fits")
        port.commit(req.rid)
        port.release(req.rid)
        on_device = req.prefix_tokens(hit.device, trace.block_size)
        on_host = req.prefix_tokens(hit.device + hit.host, trace.block_size)
        rec = RequestRecord(req.rid, req.arrival_s, req.input_len, req.output_len)
        rec.hit_tokens = {Tier.DEVICE: on_device, Tier.HOST: on_host - on_device}
        rec.admit_s = rec.first_token_s = rec.finish_s = req.arrival_s
        records.append(rec)
    return records


def unbounded(trace: Trace, warmup_fraction: float = 0.0) -> SimResult:
    """Hit rates of a cache that never evicts (the trace's ceiling)."""
    port = TieredCachePort(sum(len(r.blocks) for r in trace.requests))
    records = replay_untimed(trace, port)
    params: dict[str, object] = {"mode": "unbounded"}
    return summarize(records, warmup_fraction, False, port.evictions(), params=params)


def lru(trace: Trace, capacity_tokens: int, warmup_fraction: float = 0.0) -> SimResult:
    """Hit rates of a single-tier LRU prefix cache of `capacity_tokens` (whole blocks)."""
    pages = capacity_tokens // trace.block_size
    if pages < 1:
        raise KvtierError(
            f"--lru-tokens {capacity_tokens} holds no whole {trace.block_size}-token block"
        )
    port = TieredCachePort(pages)
    records = replay_untimed(trace, port)
    params: dict[str, object] = {"mode": "lru", "lru_tokens": capacity_tokens, "lru_blocks": pages}
    return summarize(records, warmup_fraction, False, port.evictions(), params=params)
