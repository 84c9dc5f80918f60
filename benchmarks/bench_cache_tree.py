"""Radix-tree speed: page operations per second replaying the Mooncake conversation trace.

Accounting mode (AccountingStorage + ImmediateTransfer): no bytes move, so the figure is the
cost of the tree, the pools and the eviction heaps alone, the part the simulator pays per request.
Each trace block (`hash_ids`, 512 tokens) is one page key. Requests run `--concurrency` at a time:
admit (match, load back the host part, lock, allocate the rest plus one page per 512 output
tokens), then finish in arrival order (insert, free duplicates, unlock). The device tier is far
smaller than the trace's distinct pages, so eviction runs throughout; the host tier is
`--host-ratio` times the device.

Page operations counted: pages matched (keys walked by match_prefix), pages inserted, pages
evicted from the device and from the host, pages loaded back. Tree calls: match, insert, evict
and load-back calls.

    python benchmarks/bench_cache_tree.py [--trace PATH] [--device-pages N] [--host-ratio R]
        [--write-policy P] [--eviction E] [--concurrency C] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kvtier.cache import (
    AccountingStorage,
    Admission,
    EvictionPolicy,
    PageStorage,
    Tier,
    TieredCache,
    WritePolicy,
    admit,
    finish,
)

BLOCK_TOKENS = 512  # Mooncake trace block size
# What the simulator needs from the tree (docs/benchmarks.md): page operations per CPU-second,
# which load on a shared machine disturbs less than the wall-clock rate
GOAL_PAGE_OPS_PER_CPU_S = 200_000
DEFAULT_TRACE = (
    Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake-conversation.jsonl"
)


class Counting(TieredCache):
    """Counts tree calls and the pages they touch, on top of the cache's own counters."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.calls = 0
        self.matched = 0
        self.inserted = 0

    def match_prefix(self, keys):  # type: ignore[no-untyped-def]
        self.calls += 1
        self.matched += len(keys)
        return super().match_prefix(keys)

    def insert(self, keys, device_pages):  # type: ignore[no-untyped-def]
        self.calls += 1
        self.inserted += len(keys)
        return super().insert(keys, device_pages)

    def evict(self, tier, num_pages):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().evict(tier, num_pages)

    def load_back(self, match):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().load_back(match)


def load_trace(path: Path) -> list[tuple[list[int], int]]:
    """(hash_ids, output pages) per request, in trace order."""
    out = []
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            out.append((row["hash_ids"], math.ceil(row["output_length"] / BLOCK_TOKENS)))
    return out


def replay(
    requests: list[tuple[list[int], int]],
    args: argparse.Namespace,
    storage: Callable[[Tier, int], PageStorage] = AccountingStorage,
) -> dict[str, float]:
    """Replay the trace; `storage` makes each tier's storage (accounting only by default)."""
    host_pages = int(args.device_pages * args.host_ratio)
    cache = Counting(
        storage(Tier.DEVICE, args.device_pages),
        storage(Tier.HOST, host_pages) if host_pages else None,
        write_policy=args.write_policy,
        eviction=args.eviction,
        page_runs=False,  # one page per 512-token block: a few pages a request, as lists
    )
    running: list[Admission] = []
    refused = device_hit = host_hit = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for keys, out_pages in requests:
        adm = admit(cache, keys, out_pages)
        while adm is None and running:
            finish(cache, running.pop(0))
            adm = admit(cache, keys, out_pages)
        if adm is None:
            refused += 1
            continue
        device_hit += adm.device_hit
        host_hit += adm.host_hit
        running.append(adm)
        if len(running) >= args.concurrency:
            finish(cache, running.pop(0))
    for adm in running:
        finish(cache, adm)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    cache.check_integrity([])
    c = cache.counters()
    page_ops = (
        cache.matched + cache.inserted + c.device_evicted + c.host_evicted + c.loaded_from_host
    )
    pages = sum(len(k) for k, _ in requests)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "page_ops": page_ops,
        "calls": cache.calls,
        "device_evicted": c.device_evicted,
        "host_evicted": c.host_evicted,
        "loaded_from_host": c.loaded_from_host,
        "device_hit_rate": device_hit / pages,
        "host_hit_rate": host_hit / pages,
        "refused": refused,
    }


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--device-pages", type=int, default=16_384)
    parser.add_argument("--host-ratio", type=float, default=4.0)
    parser.add_argument(
        "--write-policy",
        choices=[p.value for p in WritePolicy],
        default=WritePolicy.WRITE_THROUGH.value,
    )
    parser.add_argument(
        "--eviction", choices=[p.value for p in EvictionPolicy], default=EvictionPolicy.LRU.value
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if not args.trace.exists():
        print(f"skipped: trace {args.trace.name} not found (pass --trace)")
        return 0
    requests = load_trace(args.trace)
    pages = sum(len(k) for k, _ in requests)
    distinct = len({h for k, _ in requests for h in k})
    print(
        f"trace: {len(requests)} requests, {pages} pages, {distinct} distinct; "
        f"device {args.device_pages} pages, host x{args.host_ratio}, {args.write_policy}, "
        f"{args.eviction}, {args.concurrency} concurrent"
    )
    best: dict[str, float] | None = None
    for _ in range(args.repeat):
        result = replay(requests, args)
        if best is None or result["cpu_s"] < best["cpu_s"]:
            best = result
    assert best is not None
    print(
        f"evicted: device {best['device_evicted']:,} pages, host {best['host_evicted']:,}; "
        f"loaded back {best['loaded_from_host']:,}; refused {best['refused']}"
    )
    print(f"hit rate: device {best['device_hit_rate']:.1%}, host {best['host_hit_rate']:.1%}")
    print(
        f"best of {args.repeat}: {best['page_ops']:,} page ops, {best['calls']:,} tree calls "
        f"in {best['wall_s']:.2f} s wall, {best['cpu_s']:.2f} s cpu"
    )
    print(
        f"page ops/s: {best['page_ops'] / best['wall_s']:,.0f} wall, "
        f"{best['page_ops'] / best['cpu_s']:,.0f} per cpu-s"
    )
    print(
        f"tree calls/s: {best['calls'] / best['wall_s']:,.0f} wall, "
        f"{best['calls'] / best['cpu_s']:,.0f} per cpu-s"
    )
    print(f"requests/s: {len(requests) / best['wall_s']:,.0f} wall")
    rate = best["page_ops"] / best["cpu_s"]
    met = rate >= GOAL_PAGE_OPS_PER_CPU_S
    print(
        f"goal: {GOAL_PAGE_OPS_PER_CPU_S:,} page ops per cpu-s (the simulator's need), "
        f"measured {rate:,.0f}: {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
