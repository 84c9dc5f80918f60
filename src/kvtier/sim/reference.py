"""Reference replays without a clock: what a cache of a given size could hit on a trace.

Requests are taken one at a time in trace order: match the prompt's blocks, lock the match,
allocate pages for the rest (evicting unlocked leaves), insert, unlock; through the same
`TieredCache` the timed simulation uses, device tier only.

  unbounded   a device tier that never evicts: the trace's hit-rate ceiling. For each request,
              the longest prefix of its hash_ids seen in any earlier request, each block counted
              at its real size (the last holds input_length - 512 x (n - 1) tokens), summed over
              all requests and divided by all prompt tokens.
  lru         one tier of `capacity_tokens // block_size` whole blocks with LRU eviction of
              unlocked leaves; a prompt longer than the cache keeps only its leading blocks.

`replay` runs any number of these in one pass over the trace: the caches are independent, so
each request goes through every cache before the next request is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvtier.cache.hierarchy import TieredCache
from kvtier.cache.storage import AccountingStorage, Tier
from kvtier.errors import KvtierError
from kvtier.sim.metrics import RequestRecord, SimResult, summarize
from kvtier.sim.trace import Trace

UNBOUNDED = None  # a capacity that never evicts


def replay(
    trace: Trace,
    capacities: Sequence[int | None],
    warmup_fraction: float = 0.0,
    progress: Callable[[int], None] | None = None,
) -> list[SimResult]:
    """One result per capacity in tokens (UNBOUNDED: the ceiling), in the order given, from one
    pass over the trace. `progress` gets the requests replayed so far, every 256."""
    block = trace.block_size
    total_blocks = sum(len(r.blocks) for r in trace.requests)
    sizes: list[int] = []
    for capacity in capacities:
        if capacity is UNBOUNDED:
            sizes.append(max(total_blocks, 1))
        elif capacity // block < 1:
            raise KvtierError(f"--lru-tokens {capacity} holds no whole {block}-token block")
        else:
            sizes.append(capacity // block)
    caches = [TieredCache(AccountingStorage(Tier.DEVICE, n), page_runs=False) for n in sizes]
    hits: list[list[int]] = [[] for _ in caches]
    for i, req in enumerate(trace.requests):
        blocks = list(req.blocks)
        for cache, size, out in zip(caches, sizes, hits, strict=True):
            keys = blocks if len(blocks) <= size else blocks[:size]
            m = cache.match_prefix(keys)
            prefix = m.device_pages
            cache.lock(m.last_device_node)
            new = cache.alloc_device(len(keys) - len(prefix))
            if new is None:
                raise RuntimeError("an idle reference cache refused a prompt that fits")
            cache.insert(keys, prefix + new, m)
            cache.unlock(m.last_device_node)
            out.append(len(prefix))
        if progress is not None and not i & 255:
            progress(i)
    if progress is not None:
        progress(len(trace.requests))
    results = []
    for capacity, size, cache, hit in zip(capacities, sizes, caches, hits, strict=True):
        records = []
        for req, blocks in zip(trace.requests, hit, strict=True):
            rec = RequestRecord(req.rid, req.arrival_s, req.input_len, req.output_len)
            rec.hit_tokens = {Tier.DEVICE: req.prefix_tokens(blocks, block), Tier.HOST: 0}
            rec.admit_s = rec.first_token_s = rec.finish_s = req.arrival_s
            records.append(rec)
        evictions = {Tier.DEVICE.value: cache.counters().device_evicted, Tier.HOST.value: 0}
        params: dict[str, object] = (
            {"mode": "unbounded"}
            if capacity is UNBOUNDED
            else {"mode": "lru", "lru_tokens": capacity, "lru_blocks": size}
        )
        results.append(summarize(records, warmup_fraction, False, evictions, params=params))
    return results


def unbounded(trace: Trace, warmup_fraction: float = 0.0) -> SimResult:
    """Hit rates of a cache that never evicts (the trace's ceiling)."""
    return replay(trace, [UNBOUNDED], warmup_fraction)[0]


def lru(trace: Trace, capacity_tokens: int, warmup_fraction: float = 0.0) -> SimResult:
    """Hit rates of a single-tier LRU prefix cache of `capacity_tokens` (whole blocks)."""
    return replay(trace, [capacity_tokens], warmup_fraction)[0]
