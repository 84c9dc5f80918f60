"""SGLang's side of bench_radix: replay an operation sequence through its RadixCache.

Runs in the SGLang virtualenv (benchmarks/peers/setup.sh):
    benchmarks/peers/.venv-sglang/bin/python benchmarks/peers/sglang_radix_runner.py \
        SEQUENCE.json [REPEAT]
replays the sequence REPEAT times (default 1), each through a fresh cache, and prints JSON:
matched and evicted tokens (equal in every replay, checked), the least CPU and the least wall
seconds of the replays (token expansion excluded).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stubs

stubs.install()

import torch  # noqa: E402
from radix_ops import expand_all, read_sequence  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: E402


class MockAllocator:
    """Stands in for the token-to-KV pool: takes freed index tensors back and counts them."""

    device = "cpu"

    def __init__(self) -> None:
        self.freed = 0

    def free(self, indices: torch.Tensor) -> None:
        self.freed += len(indices)

    def free_segment(self, indices: torch.Tensor, start_pos: int = 0) -> None:
        self.freed += len(indices) - start_pos


def replay(requests: list, page: int, capacity: int) -> dict[str, float]:
    """One replay through a fresh RadixCache: the counts and this replay's seconds."""
    longest = max(len(t) for t in requests)
    fake = torch.arange(longest, dtype=torch.int64)  # fake KV indices; values are never read
    allocator = MockAllocator()
    cache = RadixCache.create_simulated(mock_allocator=allocator, page_size=page)
    matched = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for tokens in requests:
        key = RadixKey(tokens)
        matched += cache.match_prefix(MatchPrefixParams(key=key)).device_prefix_len
        cache.insert(InsertParams(key=key, value=fake[: len(tokens)]))
        excess = cache.evictable_size() + cache.protected_size() - capacity
        if excess > 0:
            cache.evict(EvictParams(num_tokens=excess))
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {
        "matched_tokens": matched,
        "evicted_tokens": allocator.freed,
        "cached_tokens": cache.total_size(),
        "wall_s": seconds,
        "cpu_s": cpu,
        "requests": len(requests),
    }


def main() -> int:
    # NOTE: one intra-op thread, as the radix cache runs on the scheduler's one thread: torch's
    # default (the host's CPUs, 4 here in a 2-CPU container) parallelises the large value clones
    # and makes the same replay 8x slower (1.37 s with 2 threads, 0.16 s with 1, measured)
    torch.set_num_threads(1)
    seq = read_sequence(Path(sys.argv[1]))
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    requests = expand_all(seq)
    runs = [replay(requests, seq["page_size"], seq["capacity_tokens"]) for _ in range(repeat)]
    counts = ("matched_tokens", "evicted_tokens", "cached_tokens")
    if any(r[k] != runs[0][k] for r in runs for k in counts):
        raise SystemExit("replays of one sequence disagree")
    best = {**runs[0], "cpu_s": min(r["cpu_s"] for r in runs)}
    best["wall_s"] = min(r["wall_s"] for r in runs)
    print(json.dumps(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
