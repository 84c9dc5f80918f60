"""`kvtier observe` reading speed: a generated serving log, read as a stream, in MB per second.

The log is written to a temporary directory: an SGLang server at load (decode lines on four
tensor-parallel ranks, which count once, prefill lines, uvicorn access lines, retractions) or a
vLLM one (`--engine vllm`: V1 stats lines every few access lines, preemption warnings). Lines are
varied (timestamps, counts, usage), a block of them is generated once and written repeatedly
with fresh timestamps. The figure is the file's size over the wall time of reading it, and over
the CPU time of the reading (steadier on a shared machine); `--repeat N` reads the file N times
and keeps the best of each. Peak memory of the reading (tracemalloc) shows that it stays bounded
by the timeline, not the file.

    python benchmarks/bench_observe.py [--size-mb 1024] [--engine sglang|vllm] [--goal 50]
                                       [--repeat 3]

Exits 1 when the best wall rate is below the goal.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from kvtier.observe.logread import read_stream
from kvtier.observe.observer import Observer

GOAL_MB_S = 50.0
BLOCK_LINES = 20_000


def _time_of_day(clock: int, line: int) -> str:
    """HH:MM:SS of a log's `line`-th line, twenty lines a second from `clock` seconds."""
    t = clock + line // 20
    return f"{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"


def _sglang_lines(rng: random.Random, clock: int, ranks: int) -> list[str]:
    lines = []
    for i in range(BLOCK_LINES):
        stamp = f"2026-03-01 {_time_of_day(clock, i)}"
        kind = rng.random()
        usage = min(1.0, rng.betavariate(5, 2))
        queued = rng.choice((0, 0, 0, rng.randint(1, 300)))
        if kind < 0.15:
            body = (
                f"Decode batch, #running-req: {rng.randint(1, 512)}, "
                f"#token: {rng.randint(1000, 900_000)}, token usage: {usage:.2f}, "
                f"cuda graph: True, gen throughput (token/s): {rng.uniform(100, 9000):.2f}, "
                f"#queue-req: {queued}, "
            )
        elif kind < 0.35:
            body = (
                f"Prefill batch, #new-seq: {rng.randint(1, 16)}, "
                f"#new-token: {rng.randint(1, 16384)}, #cached-token: {rng.randint(0, 60000)}, "
                f"token usage: {usage:.2f}, #running-req: {rng.randint(1, 512)}, "
                f"#queue-req: {queued}, input throughput (token/s): {rng.uniform(0, 50000):.2f}, "
            )
        elif kind < 0.3505:
            body = (
                "KV cache pool is full. Retract requests. "
                f"#retracted_reqs: {rng.randint(1, 8)}, #new_token_ratio: 0.4121 -> 0.5534"
            )
        else:
            lines.append(
                f"[{stamp}] INFO:     10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}:"
                f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
            continue
        lines.extend(f"[{stamp} TP{rank}] {body}" for rank in range(ranks))
    return lines


def _vllm_lines(rng: random.Random, clock: int, ranks: int) -> list[str]:
    lines = []
    for i in range(BLOCK_LINES):
        stamp = f"03-01 {_time_of_day(clock, i)}"
        kind = rng.random()
        if kind < 0.2:
            lines.append(
                f"(APIServer pid=1) INFO {stamp} [loggers.py:271] Engine 000: Avg prompt "
                f"throughput: {rng.uniform(0, 30000):.1f} tokens/s, Avg generation throughput: "
                f"{rng.uniform(0, 3000):.1f} tokens/s, Running: {rng.randint(0, 256)} reqs, "
                f"Waiting: {rng.choice((0, 0, rng.randint(1, 100)))} reqs, GPU KV cache usage: "
                f"{rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 100):.1f}%"
            )
        elif kind < 0.2005:
            lines.append(
                f"WARNING {stamp} scheduler.py:1560] Sequence group {i} is preempted by "
                "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
                f"total_num_cumulative_preemption={i}"
            )
        else:
            lines.append(
                f"(APIServer pid=1) INFO:     10.0.0.{rng.randint(0, 255)}:"
                f'{rng.randint(1024, 65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
    return lines


def write_log(path: Path, size_mb: int, engine: str, ranks: int = 2, seed: int = 0) -> int:
    """A serving log of about `size_mb` MB; returns its size in bytes."""
    rng = random.Random(seed)
    make = _sglang_lines if engine == "sglang" else _vllm_lines
    target = size_mb * 1_000_000
    written = 0
    clock = 0
    blocks = [("\n".join(make(rng, c * 1000, ranks)) + "\n").encode() for c in range(4)]
    with path.open("wb") as f:
        while written < target:
            block = blocks[clock % len(blocks)]
            f.write(block)
            written += len(block)
            clock += 1
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="log size in MB (10^6 bytes)")
    parser.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    parser.add_argument(
        "--ranks", type=int, default=2, help="SGLang ranks printing each batch line (default 2)"
    )
    parser.add_argument("--goal", type=float, default=GOAL_MB_S, help="MB/s below which it fails")
    parser.add_argument("--trace-memory", action="store_true", help="peak Python memory (slower)")
    parser.add_argument("--repeat", type=int, default=1, help="reads of the file; best kept")
    args = parser.parse_args(argv)
    best_wall = best_cpu = 0.0
    with tempfile.TemporaryDirectory(prefix="kvtier-bench-observe-") as tmp:
        path = Path(tmp) / f"{args.engine}-serving.log"
        start = time.perf_counter()
        size = write_log(path, args.size_mb, args.engine, args.ranks)
        print(f"wrote {size / 1e6:,.0f} MB in {time.perf_counter() - start:.1f} s: {path.name}")
        for _ in range(max(1, args.repeat)):
            observer = Observer(str(path))
            if args.trace_memory:
                tracemalloc.start()
            start, cpu = time.perf_counter(), time.process_time()
            with path.open("rb") as stream:
                reader = read_stream(stream, observer)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            peak = tracemalloc.get_traced_memory()[1] if args.trace_memory else None
            tracemalloc.stop()
            result = observer.result()
            rate, cpu_rate = size / 1e6 / wall, size / 1e6 / cpu
            best_wall, best_cpu = max(best_wall, rate), max(best_cpu, cpu_rate)
            print(
                f"read {reader.lines:,} lines, {result.samples:,} samples, "
                f"{len(result.timeline)} timeline points, verdict {result.diagnosis.verdict}"
            )
            if peak is not None:
                print(f"peak traced memory while reading: {peak / 1e6:.1f} MB")
            print(f"{rate:.1f} MB/s wall ({cpu_rate:.1f} MB per CPU-second)")
    print(f"best: {best_wall:.1f} MB/s wall, {best_cpu:.1f} MB per CPU-second; goal {args.goal:g}")
    return 0 if best_wall >= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
