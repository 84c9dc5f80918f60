"""Throughput of the L3 stores: pages/s and GB/s for batched put and get, disk and Redis.

A page is 16 tokens of Llama-3.1-8B in bf16 on one rank (from the catalog model and the tensor
storage's page size: 32 layers x 2 (K, V) x 8 KV heads x 128 x 2 B x 16 tokens = 2 MiB). Each
measurement moves `--pages` distinct pages in batches of 1, 16, 32 and 256 and keeps the best of
`--repeat` runs (wall and CPU time each on its own); pages move as a host tier moves them, from
and into page buffers of their own (`put_parts`, `get_into`), and get checks every page arrived.
The probe line is the latency of the match-time question "how much of this chain is stored".

    python benchmarks/bench_store.py [--dir DIR] [--redis-url URL] [--pages N] [--repeat R]

Exits 1 below goal: disk get at batch 32 under 2.5 GB per CPU-second, or Redis get at batch 32
under 1 GB/s.

Without --redis-url a throwaway redis-server is started on a free loopback port (no persistence)
when the binary is installed. GB/s are decimal (10^9 bytes of page payload per second).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from kvtier.cache.keys import page_hashes
from kvtier.cache.tensor_storage import KVLayout
from kvtier.model.catalog import resolve_model
from kvtier.store.base import PageStore, StoreFingerprint, StoreUnavailable
from kvtier.store.disk import DiskStore
from kvtier.store.redis_store import RedisStore

MODEL, PAGE_TOKENS, KV_DTYPE = "meta-llama/Llama-3.1-8B", 16, "bfloat16"
BATCHES = (1, 16, 32, 256)
GOAL_BATCH = 32
DISK_GET_GB_PER_CPU_S = 2.5
REDIS_GET_GBPS = 1.0
SPEC = resolve_model(MODEL)
LAYOUT = KVLayout.from_geometry(SPEC.kv, page_size=PAGE_TOKENS, dtype=KV_DTYPE)
FINGERPRINT = StoreFingerprint.for_model(
    SPEC, kv_dtype=KV_DTYPE, tp_rank=0, tp_size=1, page_size=PAGE_TOKENS
)


class Timing(NamedTuple):
    wall_s: float
    cpu_s: float  # this process's user + system time (the client side; not redis-server's)


def measure(run: Callable[[], None], repeat: int) -> Timing:
    """The least wall and the least client CPU time of `repeat` runs (each on its own: other
    jobs on a shared machine only add to either)."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return Timing(min(walls), min(cpus))


def bench(
    store: PageStore, pages: int, batch: int, payload: bytes, repeat: int, seed: int
) -> tuple[Timing, Timing]:
    """Best (put, get) seconds for `pages` pages in batches of `batch`."""
    hashes = page_hashes([seed, *range(pages * PAGE_TOKENS - 1)], PAGE_TOKENS)
    batches = [hashes[i : i + batch] for i in range(0, pages, batch)]
    source = [memoryview(payload)]
    targets = [[memoryview(bytearray(len(payload)))] for _ in range(batch)]

    def put() -> None:
        store.delete(hashes)  # a put of a page already stored would be skipped on disk
        for b in batches:
            store.put_parts(b, [source] * len(b))

    def get() -> None:
        for b in batches:
            if not all(store.get_into(b, targets[: len(b)])):
                raise RuntimeError("a page written by the put run is missing")

    return measure(put, repeat), measure(get, repeat)


def probe_us(store: PageStore) -> float:
    """Best time of `exists_prefix` over a 16-page chain the store holds, in microseconds."""
    hashes = page_hashes(range(16 * PAGE_TOKENS), PAGE_TOKENS)
    store.put(hashes, [b"x"] * 16)

    def probe() -> None:
        for _ in range(100):
            store.exists_prefix(hashes)

    return measure(probe, 3).wall_s / 100 * 1e6


@contextmanager
def redis_url(given: str | None) -> Iterator[str | None]:
    """`given`, else the URL of a throwaway loopback redis-server, else None (no binary)."""
    binary = shutil.which("redis-server")
    if given is not None or binary is None:
        yield given
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--appendonly", "no", "--dir", workdir]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            for _ in range(200):
                try:
                    RedisStore(url, FINGERPRINT).exists_prefix([b"\0"])
                    break
                except StoreUnavailable:
                    time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="disk store root (default: a new temporary directory)")
    parser.add_argument("--redis-url", help="an existing Redis (default: start one)")
    parser.add_argument("--pages", type=int, default=256, help="pages per measurement")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    page_bytes = LAYOUT.page_nbytes
    payload = os.urandom(page_bytes)
    print(f"page: {PAGE_TOKENS} tokens of {SPEC.model_id} {KV_DTYPE}, TP1 = {page_bytes:,} bytes")
    print(f"{args.pages} pages per run, best of {args.repeat}; GB/s = 10^9 payload bytes/s\n")
    print("GB/s over wall time, and over this process's CPU time (cpu): the client's own cost")
    print(
        f"{'store':<6} {'batch':>5} {'put pages/s':>11} {'put GB/s':>8} {'cpu':>5} "
        f"{'get pages/s':>11} {'get GB/s':>8} {'cpu':>5}"
    )
    probes: list[str] = []
    missed: list[str] = []

    def report(name: str, store: PageStore) -> None:
        probes.append(f"{name} {probe_us(store):,.0f} us")  # disk: from its in-memory index
        for seed, batch in enumerate(BATCHES):
            put, get = bench(store, args.pages, batch, payload, args.repeat, seed)
            n, gb = args.pages, args.pages * page_bytes / 1e9
            if batch == GOAL_BATCH and name == "disk" and gb / get.cpu_s < DISK_GET_GB_PER_CPU_S:
                missed.append(f"disk get at batch 32: {gb / get.cpu_s:.2f} GB/cpu-s < 2.5")
            if batch == GOAL_BATCH and name == "redis" and gb / get.wall_s < REDIS_GET_GBPS:
                missed.append(f"redis get at batch 32: {gb / get.wall_s:.2f} GB/s < 1.0")
            print(
                f"{name:<6} {batch:>5} {n / put.wall_s:>11,.0f} {gb / put.wall_s:>8.2f} "
                f"{gb / put.cpu_s:>5.2f} {n / get.wall_s:>11,.0f} {gb / get.wall_s:>8.2f} "
                f"{gb / get.cpu_s:>5.2f}",
                flush=True,
            )

    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        report("disk", DiskStore(root, FINGERPRINT))
        # a store that remembers nothing checks each page's header, as another process does
        headers = DiskStore(root, FINGERPRINT, index_limit=0)
        probes.append(f"disk from headers {probe_us(headers):,.0f} us")
    with redis_url(args.redis_url) as url:
        if url is None:
            print("redis  (skipped: no redis-server binary and no --redis-url)")
        else:
            store = RedisStore(url, FINGERPRINT, timeout_s=30)
            report("redis", store)
            store.close()
    print("\nprobe (exists_prefix of a stored 16-page chain, one call): " + ", ".join(probes))
    for line in missed:
        print(f"below goal: {line}", file=sys.stderr)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
