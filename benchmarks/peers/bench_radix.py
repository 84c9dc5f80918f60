"""Prefix cache speed: kvtier's radix cache against SGLang's RadixCache, same operations.

Both replay one operation sequence (see radix_ops.py) built from a Mooncake trace: per request
match, insert, and evict down to a token capacity. SGLang's side runs in its own virtualenv
(benchmarks/peers/setup.sh) as a subprocess reading the same sequence file. The matched-token
totals must agree; the table gives requests per second and the ratio. Each side replays the
sequence --repeat times in one process, each replay through a fresh cache, and the least
disturbed replay counts (the minimum CPU and the minimum wall time; the counts are checked
equal across replays). The command exits 1 when kvtier is below GOAL x SGLang in CPU or wall
time at any page size.

    .venv/bin/python benchmarks/peers/bench_radix.py [--requests 2000] [--capacity-tokens 1000000]
        [--page-sizes 1,16] [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import PEERS, SGLANG_VENV, TRACE, machine, markdown_table, need, report_outcome
from radix_ops import expand_all, read_sequence

from kvtier.cache.hierarchy import TieredCache
from kvtier.cache.keys import page_keys
from kvtier.cache.radix import RadixTree, TreeNode
from kvtier.cache.storage import AccountingStorage, Tier

GOAL = 5.0


def write_sequence(trace: Path, requests: int, page: int, capacity: int, out: Path) -> None:
    rows: list[list[object]] = []
    with trace.open() as f:
        for line in f:
            if len(rows) == requests:
                break
            r = json.loads(line)
            rows.append([r["input_length"], r["hash_ids"]])
    out.write_text(
        json.dumps(
            {"page_size": page, "capacity_tokens": capacity, "block_size": 512, "requests": rows}
        )
    )


@contextmanager
def sglang_split_times() -> Iterator[None]:
    """Diagnostic: make kvtier's split stamp the cut node's suffix with the current access time,
    as SGLang's does (it stamps a node before cutting it, so the unmatched suffix looks freshly
    used too; kvtier stamps only the matched prefix)."""
    original = RadixTree._split

    def split(self: RadixTree, node: TreeNode, m: int) -> TreeNode:
        prefix = original(self, node, m)
        node.last_access = self.clock
        return prefix

    RadixTree._split = split  # type: ignore[method-assign]
    try:
        yield
    finally:
        RadixTree._split = original  # type: ignore[method-assign]


def kvtier_replay(path: Path, repeat: int = 1) -> dict[str, float]:
    """kvtier's side: TieredCache (device tier, accounting storage) with LRU eviction, replayed
    `repeat` times through a fresh cache; the counts (equal in every replay, checked) with the
    least CPU and the least wall time.

    The pool is sized so that allocation never evicts by itself; eviction happens only in the
    explicit step after insert, as on SGLang's side."""
    seq = read_sequence(path)
    page = seq["page_size"]
    requests = expand_all(seq)
    k0 = time.process_time()
    for tokens in requests:
        page_keys(tokens, page)
    keys_cpu = time.process_time() - k0  # shown apart; the timed loop below builds them again
    runs = [_replay(requests, page, seq["capacity_tokens"]) for _ in range(repeat)]
    counts = ("matched_tokens", "evicted_tokens", "cached_tokens")
    if any(r[k] != runs[0][k] for r in runs for k in counts):
        raise RuntimeError("replays of one sequence disagree")
    return {
        **runs[0],
        "cpu_s": min(r["cpu_s"] for r in runs),
        "wall_s": min(r["wall_s"] for r in runs),
        "keys_cpu_s": keys_cpu,
        "requests": len(requests),
    }


def _replay(requests: list[array], page: int, capacity: int) -> dict[str, float]:
    pool_pages = capacity // page + max(len(t) for t in requests) // page + 1
    cache = TieredCache(AccountingStorage(Tier.DEVICE, pool_pages))
    cap_pages = capacity // page
    matched = evicted = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for tokens in requests:
        keys = page_keys(tokens, page)  # views the request's int64 token array
        m = cache.match_prefix(keys)
        hit = m.num_device_pages
        matched += hit * page
        new = cache.alloc_device(len(keys) - hit)
        if new is None:
            raise RuntimeError("the pool is sized to never run out")
        pages = m.device_pages + new
        done = cache.insert(keys, pages)
        if done.prefix_len > hit:  # duplicates (none right after a match)
            cache.free_device(pages[hit : done.prefix_len])
        excess = cache.tree.device_total - cap_pages  # device pages the tree holds
        if excess > 0:
            evicted += cache.evict(Tier.DEVICE, excess).freed * page
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "matched_tokens": matched,
        "evicted_tokens": evicted,
        "cached_tokens": cache.tree.size(Tier.DEVICE).total * page,
        "wall_s": wall,
        "cpu_s": cpu,
    }


def sglang_replay(path: Path, venv: Path, repeat: int = 1) -> dict[str, float]:
    python = need(venv / "bin" / "python", "SGLang venv")
    proc = subprocess.run(
        [str(python), str(PEERS / "sglang_radix_runner.py"), str(path), str(repeat)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"SGLang runner failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--requests", type=int, default=2000, help="first N requests of the trace")
    ap.add_argument("--capacity-tokens", type=int, default=1_000_000)
    ap.add_argument("--page-sizes", default="1,16")
    ap.add_argument("--sglang-venv", type=Path, default=SGLANG_VENV)
    ap.add_argument(
        "--repeat",
        type=int,
        default=10,
        help="replays per side, in one process each; the best counts",
    )
    args = ap.parse_args()
    trace = need(args.trace, "trace")
    print(f"machine: {machine()}")
    print(
        f"trace: first {args.requests} requests of {trace.name}; capacity "
        f"{args.capacity_tokens:,} tokens; per request: match, insert, evict to capacity; "
        f"best of {args.repeat}"
    )
    rows: list[list[object]] = []
    notes: list[str] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for page in (int(p) for p in args.page_sizes.split(",")):
            seq = Path(tmp) / f"ops-page{page}.json"
            write_sequence(trace, args.requests, page, args.capacity_tokens, seq)
            theirs = sglang_replay(seq, args.sglang_venv, args.repeat)
            ours = kvtier_replay(seq, args.repeat)
            if ours["matched_tokens"] != theirs["matched_tokens"]:
                with sglang_split_times():
                    stamped = kvtier_replay(seq)["matched_tokens"]
                line = (
                    f"page {page}: matched tokens differ: kvtier {ours['matched_tokens']:,}"
                    f" vs SGLang {theirs['matched_tokens']:,}; "
                )
                if stamped == theirs["matched_tokens"]:
                    notes.append(
                        line + "equal when kvtier's split also stamps the suffix "
                        "(SGLang's access-time rule): the gap is that rule"
                    )
                else:
                    failures.append(line + f"{stamped:,} with SGLang's split rule")
            n = ours["requests"]
            for what, key in (("cpu", "cpu_s"), ("wall", "wall_s")):
                speed = theirs[key] / ours[key]
                if speed < GOAL:
                    failures.append(
                        f"page {page}: {speed:.2f}x SGLang in {what} time, goal {GOAL:g}x"
                    )
            rows.append(
                [
                    page,
                    f"{theirs['matched_tokens']:,}",
                    f"{ours['matched_tokens']:,}",
                    f"{theirs['evicted_tokens']:,}",
                    f"{ours['evicted_tokens']:,}",
                    f"{theirs['cpu_s']:.3f}",
                    f"{ours['keys_cpu_s']:.3f}",
                    f"{ours['cpu_s']:.3f}",
                    f"{theirs['wall_s']:.3f}",
                    f"{ours['wall_s']:.3f}",
                    f"{n / theirs['cpu_s']:,.0f}",
                    f"{n / ours['cpu_s']:,.0f}",
                    f"{theirs['cpu_s'] / ours['cpu_s']:.2f}x",
                    f"{theirs['wall_s'] / ours['wall_s']:.2f}x",
                ]
            )
    print()
    print(
        markdown_table(
            [
                "page",
                "SGLang matched",
                "kvtier matched",
                "SGLang evicted",
                "kvtier evicted",
                "SGLang cpu s",
                "kvtier page_keys cpu s",
                "kvtier cpu s",
                "SGLang wall s",
                "kvtier wall s",
                "SGLang req/s",
                "kvtier req/s",
                "speed-up (cpu)",
                "speed-up (wall)",
            ],
            rows,
        )
    )
    print(
        f"\ngoal: kvtier >= {GOAL:g}x SGLang's RadixCache in CPU and in wall time; kvtier cpu "
        "includes building the page keys (SGLang's includes its RadixKey); the page_keys "
        "column is that part alone"
    )
    return report_outcome(notes, failures)


if __name__ == "__main__":
    sys.exit(main())
