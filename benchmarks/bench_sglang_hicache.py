"""SGLang HiCache L3 backends side by side: kvtier's store vs SGLang's `file` backend.

Both run inside SGLang 0.5.23 as its cache controller calls them: kvtier's backend, loaded by
SGLang's `dynamic` loader, through the zero-copy calls (`batch_set_v1` / `batch_get_v1`, which
`"interface_v1": 1` selects); SGLang's `HiCacheFile` through the generic path its controller uses
for it (`batch_set` of `get_data_page` tensors, `batch_get` into dummy pages, then
`set_from_flat_data_page`). Both host pools are SGLang's own `MHATokenToKVPoolHost`, on the CPU.

1. Faults. Pages are written by both backends into directories on the same filesystem, then
   damaged the same way in both, then read back; each read page is compared byte for byte with
   what was written. Fault classes: a single bit flipped anywhere in the file, the file truncated,
   two pages' files swapped, another model's page for the same key copied over the file, and the
   same model restarted with another host memory layout (`--hicache-mem-layout`) reading the
   directory. A page is *wrong* when the backend reported it read and its bytes differ; *error*
   when the call raised (SGLang's controller then drops the whole batch). Pages of the batch the
   faults did not touch are counted too: they must still be served.
2. Throughput: pages/s and GB/s (decimal, page payload) of set (host pool -> store) and get (store
   -> host pool) in batches of 1, 8, 32 and 128 pages (128 is SGLang's STORAGE_BATCH_SIZE, the
   most one call carries), for kvtier on disk and on Redis and for HiCacheFile. The page is 16
   tokens of Llama-3.1-8B on one rank, bf16 (32 layers x 2 x 8 heads x 128 x 2 B x 16 = 2 MiB).
   Neither disk backend fsyncs, and reads follow the writes, so disk figures are page-cache
   figures. The backends take turns within each of `--repeat` rounds (in alternating order), so a
   busy spell on a shared machine falls on all of them; each figure is the best of the rounds
   (least wall time for pages/s and GB/s, least CPU time for GB/cpu-s, each on its own).
   GB/cpu-s is page payload per second of this process's CPU time (not redis-server's), which
   moves less than wall time on a shared machine. Both backends copy pages in and out of the host
   pool with torch where they copy (SGLang's `get_data_page` / `set_from_flat_data_page` for
   HiCacheFile); on a small machine shared with other work, torch's default of one intra-op
   thread per core makes each strided 2 MiB copy 15 ms instead of 0.5 ms, so the bench runs
   torch on one thread (`--torch-threads`).

Exits 1 below goal, naming each goal missed: kvtier serves a wrong page under any fault; kvtier's
disk store moves less than HiCacheFile per CPU-second at any batch size, set or get; kvtier disk
get at batch 32 under 2.5 GB per CPU-second; kvtier Redis get at batch 32 under 1 GB/s.

    benchmarks/peers/.venv-sglang/bin/python benchmarks/bench_sglang_hicache.py \
        [--faults N] [--no-throughput] [--pages N] [--repeat R] [--json PATH] [--workdir DIR]

Redis rows need redis-server on PATH (a throwaway one is started on a free loopback port) and
redis-py in the SGLang virtualenv (.ci/sglang-venv.sh installs it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# SGLang's host pools built on the CPU, with stand-ins for its GPU-only imports (first: it
# installs them before anything imports SGLang)
sw = importlib.import_module("sglang_hicache_worker")

import torch  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from kvtier.integrations.sglang import extra_config  # noqa: E402
from kvtier.integrations.sglang.config import page_hash  # noqa: E402

MODEL, OTHER_MODEL = "bench/model", "bench/other-model"
FAULT_BATCH = 64  # pages written and read per round
UNTOUCHED = 16  # pages of each round left alone
THROUGHPUT_BATCHES = (1, 8, 32, 128)
# Llama-3.1-8B on one rank, 16-token pages
LLAMA = dict(layers=32, heads=8, head_dim=128, page_size=16)
# a small page for the fault rounds (2 layers x 2 x 2 heads x 64 x 2 B x 4 tokens = 4 KiB)
SMALL = dict(layers=2, heads=2, head_dim=64, page_size=4)


# -- the two backends as SGLang drives them ----------------------------------------------------


class Side:
    """One backend on one host pool, called the way SGLang's controller calls it."""

    def __init__(
        self, kind: str, where: str, pool: Any, model: str = MODEL, **options: Any
    ) -> None:
        self.kind = kind
        self.pool = pool
        self.ps = pool.page_size
        if kind == "file":
            os.environ.pop("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", None)
            config = sw.storage_config({"file_storage_path": where}, model=model)
            self.backend = StorageBackendFactory.create_backend("file", config, pool)
        else:
            config = sw.storage_config(extra_config(where, **options), model=model)
            self.backend = StorageBackendFactory.create_backend("dynamic", config, pool)
        self.backend.register_mem_pool_host(pool)
        self.page_bytes = sw.flat_bytes(pool, 0).numel()

    def path(self, key: str) -> Path:
        """The file that holds page `key` (disk backends)."""
        if self.kind == "file":
            return Path(self.backend.file_path) / f"{self.backend._get_suffixed_key(key)}.bin"
        return Path(self.backend._pools["kv"].store.inner.path_of(page_hash(key)))

    def write(self, keys: list[str], slots: list[int]) -> list[bool]:
        if self.kind == "file":  # HiCacheController._generic_page_set
            data = [self.pool.get_data_page(s * self.ps) for s in slots]
            return [bool(self.backend.batch_set(keys, data))] * len(keys)
        return list(self.backend.batch_set_v1(keys, sw.slot_indices(self.pool, slots)))

    def read(self, keys: list[str], slots: list[int]) -> list[bool]:
        if self.kind == "file":  # HiCacheController._generic_page_get
            dummies = [self.pool.get_dummy_flat_data_page() for _ in keys]
            pages = self.backend.batch_get(keys, dummies)
            for slot, page in zip(slots, pages, strict=True):
                if page is not None:
                    self.pool.set_from_flat_data_page(slot * self.ps, page)
            return [page is not None for page in pages]
        return list(self.backend.batch_get_v1(keys, sw.slot_indices(self.pool, slots)))

    def read_each(self, keys: list[str], slots: list[int]) -> list[str]:
        """Per page: "read", "miss" or "error" (the call raised), one call per page so one bad
        page's exception does not hide the others'."""
        out = []
        for key, slot in zip(keys, slots, strict=True):
            try:
                out.append("read" if self.read([key], [slot])[0] else "miss")
            except Exception:
                out.append("error")
        return out

    def clear(self) -> None:
        self.backend.clear()

    def close(self) -> None:
        close = getattr(self.backend, "close", None)  # HiCacheFile has none
        if close is not None:
            close()


def fill(pool: Any, keys: list[str], slots: list[int], tag: str) -> None:
    nbytes = sw.flat_bytes(pool, 0).numel()
    for key, slot in zip(keys, slots, strict=True):
        sw.write_slot(pool, slot, sw.page_content(key, tag, nbytes))


def scribble(pool: Any, slots: list[int]) -> None:
    nbytes = sw.flat_bytes(pool, 0).numel()
    for slot in slots:
        sw.write_slot(pool, slot, torch.full((nbytes,), 0xAB, dtype=torch.uint8))


# -- faults ------------------------------------------------------------------------------------


def flip_bit(path: Path, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    offset = rng.randrange(len(data))
    data[offset] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def truncate(path: Path, rng: random.Random) -> None:
    size = path.stat().st_size
    os.truncate(path, rng.randrange(size))


def swap(a: Path, b: Path) -> None:
    tmp = a.with_name(a.name + ".swap")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)


def layer_first_to_page_first(page: torch.Tensor, spec: dict[str, int]) -> torch.Tensor:
    """An MHA flat page of the layer_first host layout, in page_first order."""
    shape = (2, spec["layers"], spec["page_size"], spec["heads"], spec["head_dim"])
    return page.view(torch.bfloat16).view(shape).permute(0, 2, 1, 3, 4).contiguous().view(-1)


FAULT_CLASSES = (
    ("bit flip", 4),
    ("truncation", 3),
    ("swapped files", 2),
    ("another model's page copied in", 2),
    ("same model, other host layout", 1),
)
LAYOUT_FAULT = FAULT_CLASSES[-1][0]


def faulted_per_round(fault: str) -> int:
    """Pages a round of `fault` damages: all but UNTOUCHED, or every page for a reader with
    another layout (it sees the whole directory differently)."""
    return FAULT_BATCH if fault == LAYOUT_FAULT else FAULT_BATCH - UNTOUCHED


def fault_rounds(total: int) -> dict[str, int]:
    """Rounds of each fault class for about `total` faults, split by the classes' weights."""
    weight = sum(w for _, w in FAULT_CLASSES)
    return {
        name: max(1, round(total * w / weight / faulted_per_round(name)))
        for name, w in FAULT_CLASSES
    }


def apply_fault(side: Side, foreign: Side, relaid: Side, damage: tuple[Any, ...]) -> Side:
    """Damage the pages `hit` of a round as `fault` says; the side that reads them back."""
    fault, keys, hit, draws, write_slots = damage
    if fault == "bit flip":
        for i in hit:
            flip_bit(side.path(keys[i]), random.Random(draws[i]))
    elif fault == "truncation":
        for i in hit:
            truncate(side.path(keys[i]), random.Random(draws[i]))
    elif fault == "swapped files":
        for a, b in zip(hit[0::2], hit[1::2], strict=True):
            swap(side.path(keys[a]), side.path(keys[b]))
    elif fault == "another model's page copied in":
        fill(foreign.pool, keys, write_slots, "model-b")
        assert all(foreign.write([keys[i] for i in hit], [write_slots[i] for i in hit]))
        for i in hit:
            shutil.copyfile(foreign.path(keys[i]), side.path(keys[i]))
    else:  # the same model's pages read by a restart with another host layout
        return relaid
    return side


def count_outcome(t: dict[str, int], result: str, exact: bool, spared: bool) -> None:
    """Tally one page read back: an untouched page must be served; a damaged one is an error
    raised, a miss, served intact or (the failure) a wrong page."""
    if spared:
        t["untouched"] += 1
        t["untouched_served"] += result == "read" and exact
        return
    t["faults"] += 1
    if result == "error":
        t["errors"] += 1
    elif result == "miss":
        t["miss"] += 1
    elif exact:
        t["served_right"] += 1
    else:
        t["wrong"] += 1


def run_faults(total: int, workdir: Path, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    spec = dict(SMALL)
    pool_args = dict(spec, device_tokens=256, ratio=2.0)
    pools = {
        (kind, layout): sw.host_pool("mha", layout, **pool_args)
        for kind in ("kvtier", "file")
        for layout in ("layer_first", "page_first")
    }
    dirs = {kind: workdir / f"faults-{kind}" for kind in ("kvtier", "file")}
    where = {"kvtier": dirs["kvtier"].as_uri(), "file": str(dirs["file"])}
    sides = {kind: Side(kind, where[kind], pools[kind, "layer_first"]) for kind in dirs}
    foreign = {
        kind: Side(kind, where[kind], pools[kind, "page_first"], model=OTHER_MODEL) for kind in dirs
    }
    relaid = {kind: Side(kind, where[kind], pools[kind, "page_first"]) for kind in dirs}

    rows = []
    n_round = 0
    write_slots = list(range(FAULT_BATCH))
    read_slots = list(range(FAULT_BATCH, 2 * FAULT_BATCH))
    for fault, rounds in fault_rounds(total).items():
        tally = {
            kind: dict.fromkeys(("faults", "wrong", "miss", "errors", "served_right"), 0)
            | {"untouched": 0, "untouched_served": 0}
            for kind in dirs
        }
        for _ in range(rounds):
            n_round += 1
            keys = sw.keys_for(FAULT_BATCH, 1000 + n_round, spec["page_size"])
            order = list(range(FAULT_BATCH))
            rng.shuffle(order)
            spare = FAULT_BATCH - faulted_per_round(fault)
            hit, spared = sorted(order[spare:]), set(order[:spare])
            draws = [rng.random() for _ in range(2 * FAULT_BATCH)]
            for kind in dirs:
                side = sides[kind]
                fill(side.pool, keys, write_slots, "model-a")
                assert all(side.write(keys, write_slots))
                damage = (fault, keys, hit, draws, write_slots)
                reader = apply_fault(side, foreign[kind], relaid[kind], damage)
                scribble(reader.pool, read_slots)
                outcome = reader.read_each(keys, read_slots)
                for i, result in enumerate(outcome):
                    truth = sw.page_content(keys[i], "model-a", side.page_bytes)
                    if reader is not side:
                        truth = layer_first_to_page_first(truth, spec).view(torch.uint8)
                    exact = torch.equal(sw.flat_bytes(reader.pool, read_slots[i]), truth)
                    count_outcome(tally[kind], result, exact, spared=i in spared)
                side.clear()
                if fault == "another model's page copied in":
                    foreign[kind].clear()
        for kind in dirs:
            rows.append({"fault": fault, "backend": kind, **tally[kind]})
    for side in (*sides.values(), *foreign.values(), *relaid.values()):
        side.close()
    return rows


# -- throughput --------------------------------------------------------------------------------


@contextmanager
def redis_server(workdir: Path) -> Iterator[str | None]:
    binary = shutil.which("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        binary = None
    if binary is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(
        [*cmd, "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def measure_once(side: Side, pool: Any, batch: int, n: int, run: int) -> dict[str, float]:
    """Seconds and CPU seconds of one set then get of `n` pages in batches of `batch`."""
    top = max(THROUGHPUT_BATCHES)
    src = [i % top for i in range(n)]
    dst = [top + i % top for i in range(n)]
    keys = sw.keys_for(n, 50_000 + run, LLAMA["page_size"])
    fill(pool, keys[:top], src[:top], "model-a")
    wall, cpu = time.perf_counter(), time.process_time()
    stored = sum(
        sum(side.write(keys[i : i + batch], src[i : i + batch])) for i in range(0, n, batch)
    )
    set_s, set_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    read = sum(sum(side.read(keys[i : i + batch], dst[i : i + batch])) for i in range(0, n, batch))
    get_s, get_cpu = time.perf_counter() - wall, time.process_time() - cpu
    side.clear()
    if stored != n or read != n:
        why = side.backend._pools["kv"].store.last_error if side.kind == "kvtier" else ""
        raise RuntimeError(f"{side.kind}: stored {stored}, read {read} of {n} pages {why}")
    return {"set_s": set_s, "set_cpu": set_cpu, "get_s": get_s, "get_cpu": get_cpu}


def throughput_row(label: str, batch: int, n: int, page_bytes: int, runs: list[dict]) -> dict:
    """The best of `runs` for each figure: least wall time for the rates, least CPU time for
    the per-CPU-second rates (each taken on its own; other jobs on the machine only add)."""
    gb = n * page_bytes / 1e9
    best = {key: min(r[key] for r in runs) for key in runs[0]}
    return {
        "backend": label,
        "batch": batch,
        "pages": n,
        "set_pages_s": n / best["set_s"],
        "set_gbps": gb / best["set_s"],
        "set_gb_per_cpu_s": gb / best["set_cpu"],
        "get_pages_s": n / best["get_s"],
        "get_gbps": gb / best["get_s"],
        "get_gb_per_cpu_s": gb / best["get_cpu"],
    }


def run_throughput(pages: int, repeat: int, workdir: Path) -> list[dict[str, Any]]:
    """Set then get `pages` distinct pages per measurement in each batch size; the backends
    take turns within each repeat (in alternating order), so a busy spell on the shared
    machine falls on all of them; each figure is the best of `repeat`."""
    spec = dict(LLAMA)
    host_tokens = 2 * max(THROUGHPUT_BATCHES) * spec["page_size"]
    pool = sw.host_pool("mha", "layer_first", **spec, device_tokens=512, ratio=host_tokens / 512)
    rows = []
    with redis_server(workdir) as redis_url:
        sides = {
            "kvtier disk": Side("kvtier", (workdir / "tp-kvtier").as_uri(), pool),
            "SGLang file": Side("file", str(workdir / "tp-file"), pool),
        }
        if redis_url is not None:
            # a 256 MiB batch on a loaded 2-core machine can stall a read past the 1 s default
            sides["kvtier redis"] = Side("kvtier", redis_url, pool, timeout_s=10)
        run = 0
        for batch in THROUGHPUT_BATCHES:
            n = max(pages, batch) // batch * batch
            runs: dict[str, list[dict[str, float]]] = {label: [] for label in sides}
            for r in range(repeat):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for label in order:
                    run += 1
                    runs[label].append(measure_once(sides[label], pool, batch, n, run))
            for label, side in sides.items():
                rows.append(throughput_row(label, batch, n, side.page_bytes, runs[label]))
                print(_throughput_line(rows[-1]), flush=True)
        for side in sides.values():
            side.close()
    return rows


# -- goals -------------------------------------------------------------------------------------

GOAL_BATCH = 32
DISK_GET_GB_PER_CPU_S = 2.5
REDIS_GET_GBPS = 1.0


def missed_goals(result: dict[str, Any]) -> list[str]:
    """Each goal the results miss, as a line: kvtier serves no wrong page under any fault;
    kvtier disk moves at least what HiCacheFile moves per CPU-second at every batch size, set
    and get; disk get >= 2.5 GB/cpu-s and Redis get >= 1 GB/s at batch 32."""
    missed = []
    for r in result.get("faults", []):
        if r["backend"] == "kvtier" and r["wrong"]:
            missed.append(f"kvtier served {r['wrong']} wrong pages under {r['fault']}")
    rows = {(r["backend"], r["batch"]): r for r in result.get("throughput", [])}
    for batch in THROUGHPUT_BATCHES:
        ours, theirs = rows.get(("kvtier disk", batch)), rows.get(("SGLang file", batch))
        if ours is None or theirs is None:
            continue
        for op in ("set", "get"):
            ratio = ours[f"{op}_gb_per_cpu_s"] / theirs[f"{op}_gb_per_cpu_s"]
            if ratio < 1.0:
                missed.append(
                    f"kvtier disk {op} at batch {batch}: {ratio:.2f}x HiCacheFile per CPU-s"
                )
    disk, redis = rows.get(("kvtier disk", GOAL_BATCH)), rows.get(("kvtier redis", GOAL_BATCH))
    if disk is not None and disk["get_gb_per_cpu_s"] < DISK_GET_GB_PER_CPU_S:
        missed.append(f"kvtier disk get at batch 32: {disk['get_gb_per_cpu_s']:.2f} GB/cpu-s < 2.5")
    if redis is not None and redis["get_gbps"] < REDIS_GET_GBPS:
        missed.append(f"kvtier redis get at batch 32: {redis['get_gbps']:.2f} GB/s < 1.0")
    return missed


# -- report ------------------------------------------------------------------------------------


THROUGHPUT_HEADER = (
    "| backend | batch | set pages/s | set GB/s | set GB/cpu-s | get pages/s | get GB/s "
    "| get GB/cpu-s |\n|---|--:|--:|--:|--:|--:|--:|--:|"
)


def _throughput_line(r: dict[str, Any]) -> str:
    return (
        f"| {r['backend']} | {r['batch']} | {r['set_pages_s']:.0f} | {r['set_gbps']:.2f} "
        f"| {r['set_gb_per_cpu_s']:.2f} | {r['get_pages_s']:.0f} | {r['get_gbps']:.2f} "
        f"| {r['get_gb_per_cpu_s']:.2f} |"
    )


def fault_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| fault | backend | faults | wrong pages served | misses | errors raised "
        "| served intact | untouched pages served |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        name = "kvtier" if r["backend"] == "kvtier" else "SGLang file"
        lines.append(
            f"| {r['fault']} | {name} | {r['faults']} | {r['wrong']} | {r['miss']} "
            f"| {r['errors']} | {r['served_right']} | {r['untouched_served']}/{r['untouched']} |"
        )
    for kind, name in (("kvtier", "kvtier"), ("file", "SGLang file")):
        mine = [r for r in rows if r["backend"] == kind]
        lines.append(
            f"| **all** | **{name}** | **{sum(r['faults'] for r in mine)}** "
            f"| **{sum(r['wrong'] for r in mine)}** | {sum(r['miss'] for r in mine)} "
            f"| {sum(r['errors'] for r in mine)} | {sum(r['served_right'] for r in mine)} "
            f"| {sum(r['untouched_served'] for r in mine)}/{sum(r['untouched'] for r in mine)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=1200, help="faults to inject (0: none)")
    parser.add_argument("--no-throughput", action="store_true", help="faults only")
    parser.add_argument("--pages", type=int, default=64, help="pages per throughput run")
    parser.add_argument("--repeat", type=int, default=2, help="throughput runs; the best counts")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads for the host pools' page copies (default 1: see below)",
    )
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--workdir", type=Path, help="directory for the stores (default: a temp)")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)

    result: dict[str, Any] = {
        "sglang": metadata.version("sglang"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch_threads": args.torch_threads,
    }
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        if args.faults > 0:
            result["faults"] = run_faults(args.faults, work)
            print(fault_table(result["faults"]), flush=True)
        if not args.no_throughput:
            print(THROUGHPUT_HEADER, flush=True)
            result["throughput"] = run_throughput(args.pages, args.repeat, work)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    missed = missed_goals(result)
    for line in missed:
        print(f"below goal: {line}", file=sys.stderr)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
