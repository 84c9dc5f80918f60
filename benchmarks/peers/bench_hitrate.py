"""Hit rate and time: `kvtier simulate --lru-tokens` against kvcache-simulator's LRU.

Both replay the same Mooncake trace in file order through an LRU prefix cache of the same
number of 512-token blocks and count hit tokens over the requests after the first half.
kvcache-simulator sizes its cache as floor(GiB x 2^30 / (bytes per token x 512)) blocks; the
bytes per token come from kvtier's catalog (DeepSeek-V3 MLA: (512 + 64) x 61 x 2 B) and are
checked against the peer's own figure.

Then all budgets at once: the peer's one command against kvtier's one command (`--lru-tokens
A,B,C,D`, every size replayed in one pass over one trace load), whose hit rates must equal the
per-budget runs. The command exits 1 when that one kvtier command is slower than the peer's in
CPU or wall time (the best of --repeat runs each), or when a hit rate differs unexplained.

    .venv/bin/python benchmarks/peers/bench_hitrate.py [--budgets-gib 10,40,160,640] [--repeat 3]
        [--check-granularity]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from common import (
    KVTIER,
    TOOLS_VENV,
    TRACE,
    machine,
    markdown_table,
    need,
    report_outcome,
    run_timed,
)

from kvtier.model.catalog import resolve_model

BLOCK = 512
GIB = 2**30
TOLERANCE_PP = 0.1


def bytes_per_token(model: str) -> int:
    """bf16 KV bytes of one token on one rank (MLA latent: not split by tensor parallelism)."""
    kv = resolve_model(model).kv
    return kv.elements_per_token_per_layer(1) * kv.num_layers * 2


def peer(trace: Path, budgets: list[float], repeat: int) -> tuple[dict, float, float]:
    cmd = [
        str(need(TOOLS_VENV / "bin" / "kvcache-simulator", "kvcache-simulator venv")),
        "run",
        "--trace",
        str(trace),
        "--model",
        "deepseek-v3",
        "--block-size",
        str(BLOCK),
        "--budgets-gib",
        ",".join(f"{b:g}" for b in budgets),
        "--policies",
        "lru",
        "--format",
        "json",
        "--no-progress",
    ]
    t = run_timed(cmd, repeat)
    return json.loads(t.stdout), t.wall_s, t.cpu_s


def kvtier_cli(trace: Path, blocks: list[int], repeat: int) -> tuple[dict, float, float]:
    cmd = [
        str(KVTIER),
        "simulate",
        str(trace),
        "--lru-tokens",
        ",".join(str(b * BLOCK) for b in blocks),
        "--warmup-fraction",
        "0.5",
        "--json",
    ]
    t = run_timed(cmd, repeat)
    return json.loads(t.stdout), t.wall_s, t.cpu_s


def kvtier_library(trace: Path, blocks: list[int]) -> tuple[list[float], float, float]:
    """The same replays in this process, the trace loaded once (what a sweep script does)."""
    from kvtier.sim import reference
    from kvtier.sim.trace import load_trace

    t0, c0 = time.perf_counter(), time.process_time()
    loaded = load_trace(trace)
    rates = [r.hit_rate for r in reference.replay(loaded, [b * BLOCK for b in blocks], 0.5)]
    return rates, time.perf_counter() - t0, time.process_time() - c0


def kvtier_block_nodes(trace: Path, blocks: list[int]) -> list[int]:
    """Hit tokens when kvtier's tree holds one block per node (inserted block by block), so its
    whole-node eviction frees exactly one block, as the peer's trie does. A diagnostic run
    where the hit rates differ: equal hit tokens here isolate eviction granularity as the one
    difference between the two LRUs. Quadratic in blocks per request: slow, not timed."""
    from kvtier.cache.hierarchy import TieredCache
    from kvtier.cache.storage import AccountingStorage, Tier
    from kvtier.sim.trace import load_trace

    loaded = load_trace(trace)
    start = math.floor(len(loaded.requests) * 0.5)
    out = []
    for pages in blocks:
        cache = TieredCache(AccountingStorage(Tier.DEVICE, pages))
        hits = 0
        for i, req in enumerate(loaded.requests):
            keys = list(req.blocks[:pages])
            m = cache.match_prefix(keys)
            if i >= start:
                hits += req.prefix_tokens(m.num_device_pages, BLOCK)
            cache.lock(m.last_device_node)  # the peer protects the matched path likewise
            held = list(m.device_pages)
            for j in range(len(held), len(keys)):
                page = cache.alloc_device(1)
                if page is None:
                    break
                held += page
                cache.insert(keys[: j + 1], held)
            cache.unlock(m.last_device_node)
        out.append(hits)
    return out


def _seconds(theirs: tuple[float, float], ours: tuple[float, float]) -> list[object]:
    """A row's timing cells: the peer's and kvtier's wall seconds, their CPU seconds, and the
    peer's CPU over kvtier's."""
    (t_wall, t_cpu), (o_wall, o_cpu) = theirs, ours
    return [
        f"{t_wall:.2f}",
        f"{o_wall:.2f}",
        f"{t_cpu:.2f}",
        f"{o_cpu:.2f}",
        f"{t_cpu / o_cpu:.2f}x",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--budgets-gib", default="10,40,160,640")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command; the best counts")
    ap.add_argument(
        "--check-granularity",
        action="store_true",
        help="replay every budget with one block per node (slow), not only the "
        "budgets whose hit rates differ by more than the tolerance",
    )
    args = ap.parse_args()
    trace = need(args.trace, "trace")
    budgets = [float(b) for b in args.budgets_gib.split(",")]
    bpt = bytes_per_token("deepseek-v3")
    blocks = [math.floor(b * GIB / (bpt * BLOCK)) for b in budgets]
    print(f"machine: {machine()}")
    print(f"trace: {trace.name}; LRU, {BLOCK}-token blocks, {bpt} B/token; best of {args.repeat}")

    peer(trace, budgets[:1], 1)  # builds the peer's C++ backend once, untimed
    rows: list[list[object]] = []
    notes: list[str] = []
    failures: list[str] = []
    peer_total = [0.0, 0.0]
    ours_total = [0.0, 0.0]
    alone_rates: list[float] = []
    for gib, n in zip(budgets, blocks, strict=True):
        theirs, p_wall, p_cpu = peer(trace, [gib], args.repeat)
        if theirs["metadata"]["bytesPerToken"] != bpt:
            raise SystemExit(
                f"bytes per token differ: {theirs['metadata']['bytesPerToken']} "
                f"(peer) vs {bpt} (kvtier)"
            )
        if not theirs["points"]:
            raise SystemExit(f"{gib} GiB: the peer reports no point (cache underfilled)")
        point = theirs["points"][0]
        lru = point["results"]["lru"]
        ours, o_wall, o_cpu = kvtier_cli(trace, [n], args.repeat)
        if point["cacheBlocks"] != n or ours["params"]["lru_blocks"] != n:
            raise SystemExit(f"{gib} GiB: capacities differ ({point['cacheBlocks']} vs {n})")
        if lru["totalTokens"] != ours["input_tokens"]:
            raise SystemExit(
                f"{gib} GiB: measured windows differ "
                f"({lru['totalTokens']} vs {ours['input_tokens']} tokens)"
            )
        alone_rates.append(ours["hit_rate"])
        diff_pp = 100 * (ours["hit_rate"] - lru["hitRate"])
        if abs(diff_pp) > TOLERANCE_PP or args.check_granularity:
            [granular] = kvtier_block_nodes(trace, [n])
            if granular != lru["hitTokens"]:
                gap = granular - lru["hitTokens"]
                verdict = f"still {gap:+,} hit tokens with one block per node"
            elif diff_pp:
                verdict = "equal with one block per node: the gap is eviction granularity"
            else:
                verdict = "equal with one block per node too"
            notes.append(f"{gib:g} GiB: hit rates differ by {diff_pp:+.4f} pp; {verdict}")
            if granular != lru["hitTokens"]:
                failures.append(notes[-1])
        peer_total[0] += p_wall
        peer_total[1] += p_cpu
        ours_total[0] += o_wall
        ours_total[1] += o_cpu
        rows.append(
            [
                f"{gib:g}",
                f"{n:,}",
                f"{100 * lru['hitRate']:.4f}%",
                f"{100 * ours['hit_rate']:.4f}%",
                f"{diff_pp:+.4f}",
                f"{lru['hitTokens'] - ours['hit_tokens_by_tier']['device']:,}",
                *_seconds((p_wall, p_cpu), (o_wall, o_cpu)),
            ]
        )
    _, all_wall, all_cpu = peer(trace, budgets, args.repeat)
    together, one_wall, one_cpu = kvtier_cli(trace, blocks, args.repeat)
    one_rates = [run["hit_rate"] for run in together["sweep"]["runs"]]
    if one_rates != alone_rates:
        failures.append(f"one-pass hit rates {one_rates} differ from the runs alone {alone_rates}")
    for what, theirs, ours_s in (("cpu", all_cpu, one_cpu), ("wall", all_wall, one_wall)):
        if ours_s > theirs:
            failures.append(
                f"all budgets: kvtier's one command {ours_s:.2f} s vs the peer's {theirs:.2f} s "
                f"({what}); goal: at least as fast"
            )
    lib_rates, lib_wall, lib_cpu = kvtier_library(trace, blocks)
    if lib_rates != alone_rates:
        failures.append(f"in-process hit rates {lib_rates} differ from the commands' {alone_rates}")
    for name, ours_s in (
        ("all, one command each", (one_wall, one_cpu)),
        ("all, kvtier one command per budget", (ours_total[0], ours_total[1])),
        ("all, kvtier in-process", (lib_wall, lib_cpu)),
    ):
        rows.append([name, "-", "-", "-", "-", "-", *_seconds((all_wall, all_cpu), ours_s)])
    print()
    print(
        markdown_table(
            [
                "GiB",
                "blocks",
                "peer hit",
                "kvtier hit",
                "diff pp",
                "peer - kvtier hit tokens",
                "peer wall s",
                "kvtier wall s",
                "peer cpu s",
                "kvtier cpu s",
                "speed (peer/kvtier cpu)",
            ],
            rows,
        )
    )
    print(f"\nkvtier in-process hit rates: {', '.join(f'{100 * r:.4f}%' for r in lib_rates)}")
    return report_outcome(notes, failures)


if __name__ == "__main__":
    sys.exit(main())
