"""Speed and memory of a fleet simulation against one replica carrying the same trace.

    .venv/bin/python benchmarks/bench_fleet.py [--requests 1000000] [--replicas 64]

A shared-prefix trace (inference-perf's shape: 512 groups x 8 prompts, a 2,000-token system
prompt, a 200-token question, 64 output tokens) of --requests requests at 2 requests/s per
replica runs through --replicas replicas of Llama-3.1-8B on H100s behind llm-d-precise; the
same trace then runs on one replica at 1/N the rate (--time-scale N), the load each replica
carried. Each run is a fresh `kvtier simulate` process, timed by its own CPU time (user + system:
a loaded machine stretches wall time, not this), its peak memory its own maximum resident set
(`wait4`'s rusage for that child alone, so one run's figure never includes another's).
Goals: the fleet within 1.5x the single replica's time, and under 2 GB; the command exits 1
when either is missed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEPLOYMENT = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100", "--quiet"]
TIME_GOAL = 1.5
MEMORY_GOAL_GB = 2.0


def run(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, peak GB) of `kvtier ARGV` in a fresh process: its own CPU time (a loaded
    machine stretches wall time, not this) and its own peak resident set, both from the rusage
    `wait4` returns for that one child (not the largest of all children so far)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvtier", *argv], stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    wall = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"kvtier {' '.join(argv)} failed: {stderr.strip()[-500:]}")
    print(f"  {wall:.1f} s wall, {cpu:.1f} s CPU: kvtier {' '.join(argv[:2])} ...", file=sys.stderr)
    return cpu, usage.ru_maxrss * 1024 / 1e9  # ru_maxrss is in KiB on Linux


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--replicas", type=int, default=64)
    args = p.parse_args()
    n = args.replicas
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(Path(tmp) / "sp.jsonl")
        gen = ["simulate", "--generate", "shared-prefix", "--groups", "512"]
        gen += ["--prompts-per-group", "8", "--system-tokens", "2000", "--question-tokens", "200"]
        gen += ["--output-tokens", "64", "--rate", str(2.0 * n), "--requests", str(args.requests)]
        run([*gen, "--seed", "1", "-o", trace])
        single_s, single_gb = run(["simulate", trace, *DEPLOYMENT, "--time-scale", str(n)])
        fleet_argv = ["simulate", trace, *DEPLOYMENT, "--replicas", str(n)]
        fleet_s, fleet_gb = run([*fleet_argv, "--router", "llm-d-precise"])
    ratio = fleet_s / single_s
    print(f"{args.requests:,} requests: one replica at 1/{n} the rate {single_s:.1f} s CPU")
    print(f"{n} replicas, llm-d-precise: {fleet_s:.1f} s CPU ({ratio:.2f}x, goal <= {TIME_GOAL}x)")
    print(f"peak memory: one replica {single_gb:.2f} GB, fleet {fleet_gb:.2f} GB (goal <= 2 GB)")
    return 0 if ratio <= TIME_GOAL and fleet_gb <= MEMORY_GOAL_GB else 1


if __name__ == "__main__":
    sys.exit(main())
