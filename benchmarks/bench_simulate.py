"""Speed of `kvtier simulate` on the Mooncake conversation trace with device + host tiers.

    .venv/bin/python benchmarks/bench_simulate.py [--runs 5] [--trace PATH]

The founding deployment (Kimi-K2.5, 8 x RTX PRO 6000, TP8, 159,277 device tokens, HiCache
ratio 4, timing on). In-process phases are timed by wall clock and by this process's CPU time
(the wall figure inflates on a loaded machine, the CPU figure does not); then the whole command
runs in a fresh process the same way. Then both server models, SGLang's and vLLM V1's, replay
the same trace on the same deployment (Llama-3.1-8B on one H100, 159,277 device tokens, no host
tier), each timed by CPU. The trace is read from ../shared when present. The command exits 1 when
the fresh process's median wall time misses the budget it prints.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "traces" / "mooncake-conversation.jsonl"
sys.path.insert(0, str(ROOT / "tests"))
from founding_support import KIMI_SIMULATE  # noqa: E402

FLAGS = [*KIMI_SIMULATE, "--device-tokens", "159277", "--hicache-ratio", "4"]
BUDGET_S = 3.0


def timed(fn, *args):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def both_models(trace, runs: int) -> None:  # type: ignore[no-untyped-def]
    """Each engine's server model on one deployment and trace: median CPU seconds."""
    from kvtier.engines.deployment import Deployment, Engine
    from kvtier.sim.run import simulate
    from kvtier.sim.setup import build_config

    print("| server model | cpu median s | hit rate | preemptions |\n|---|---:|---:|---:|")
    for engine in (Engine.SGLANG, Engine.VLLM):
        config = build_config(Deployment(engine, "llama-3.1-8b", gpu="h100"), 512, 159_277)
        cpus = []
        for _ in range(runs):
            result, _, cpu = timed(simulate, trace, config)
            cpus.append(cpu)
        preempted = result.params.get("preemptions", "-")
        print(
            f"| {engine.value} | {statistics.median(cpus):.2f} | {result.hit_rate:.4f} | "
            f"{preempted} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 1

    from kvtier.engines.deployment import Deployment, Engine, HiCache
    from kvtier.sim.run import simulate
    from kvtier.sim.setup import build_config
    from kvtier.sim.trace import load_trace

    deployment = Deployment(
        Engine.SGLANG,
        "kimi-k2.5",
        tp=8,
        gpu="RTX PRO 6000",
        mem_fraction=0.88,
        hicache=HiCache(enable=True, ratio=4.0),
    )
    config = build_config(deployment, 512, device_tokens=159_277)
    rows: dict[str, list[tuple[float, float]]] = {"load trace": [], "simulate": [], "total": []}
    result = None
    for _ in range(args.runs):
        trace, lw, lc = timed(load_trace, args.trace)
        result, sw, sc = timed(simulate, trace, config)
        rows["load trace"].append((lw, lc))
        rows["simulate"].append((sw, sc))
        rows["total"].append((lw + sw, lc + sc))
    assert result is not None
    cli = []
    for _ in range(args.runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtier",
                "simulate",
                str(args.trace),
                *FLAGS,
                "--quiet",
                "--json",
            ],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli.append((wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
    rows["`kvtier simulate` (fresh process)"] = cli

    print(
        f"{len(trace.requests)} requests, device {config.device_blocks} blocks, host "
        f"{config.host_blocks} blocks; hit rate {result.hit_rate:.4f}, finished "
        f"{result.finished}, rejected {result.rejected}"
    )
    print("| phase | wall min s | wall median s | cpu median s |\n|---|---:|---:|---:|")
    for name, values in rows.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        print(
            f"| {name} | {min(walls):.2f} | {statistics.median(walls):.2f} | "
            f"{statistics.median(cpus):.2f} |"
        )
    both_models(trace, args.runs)
    command = statistics.median(w for w, _ in cli)
    print(
        f"budget {BUDGET_S} s wall for the whole command (median {command:.2f} s); load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    if command > BUDGET_S:
        print(f"FAIL the command took {command:.2f} s, over {BUDGET_S} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
