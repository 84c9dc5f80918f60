"""Cold-start wall time of `kvtier plan` (a fresh interpreter each run) and whether torch loads.

    .venv/bin/python benchmarks/bench_cli_startup.py [--runs 20]

Each run is `python -m kvtier plan ... --quiet -- <founding launch command>` in a new process,
timed from spawn to exit (wall) and by the CPU time the child used (user + sys; the wall figure
inflates on a loaded machine, the CPU figure does not). Bytecode is cached in a private
PYTHONPYCACHEPREFIX after one warm-up run, as in an installed package; the "no bytecode" row
compiles every module each time (PYTHONDONTWRITEBYTECODE=1 with no cache). A last probe runs
the plan in-process and reports whether `torch` ended up in sys.modules (it must not).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from founding_support import KIMI_LAUNCH  # noqa: E402

PLAN = ["plan", "--gpu", "RTX PRO 6000", "--gpus", "8", "--free-before-load-gib", "94.04",
        "--free-after-load-gib", "21.71", "--quiet", "--", *KIMI_LAUNCH]  # fmt: skip
BUDGET_S = 0.5


def time_runs(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall seconds and child CPU seconds of each run."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def torch_loaded() -> bool:
    code = f"import sys; from kvtier.cli import main; main({PLAN!r}); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    cached = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="kvtier-pyc-"))
    cached.pop("PYTHONDONTWRITEBYTECODE", None)
    uncached = dict(
        os.environ,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="kvtier-nopyc-"),
    )
    plan = [sys.executable, "-m", "kvtier", *PLAN]
    subprocess.run(plan, check=True, capture_output=True, env=cached)  # writes the bytecode
    rows = [
        (
            "python -c pass (interpreter floor)",
            time_runs([sys.executable, "-c", "pass"], args.runs, cached),
        ),
        ("kvtier --help", time_runs([sys.executable, "-m", "kvtier", "--help"], args.runs, cached)),
        ("kvtier plan (founding, --quiet)", time_runs(plan, args.runs, cached)),
        ("kvtier plan, no bytecode cache", time_runs(plan, args.runs, uncached)),
    ]
    print(f"{'command':36} {'wall min':>8} {'wall med':>8} {'cpu med':>8}   ({args.runs} runs, s)")
    for name, (walls, cpus) in rows:
        print(
            f"{name:36} {min(walls):8.3f} {statistics.median(walls):8.3f} "
            f"{statistics.median(cpus):8.3f}"
        )
    median = statistics.median(rows[2][1][0])
    loaded = torch_loaded()
    print(f"torch imported by plan: {loaded} (goal: False)")
    verdict = "ok" if median <= BUDGET_S else "OVER"
    print(f"plan wall median {median:.3f} s vs budget {BUDGET_S} s: {verdict}")
    return 0 if median <= BUDGET_S and not loaded else 1


if __name__ == "__main__":
    raise SystemExit(main())
