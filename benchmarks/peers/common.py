"""What the peer benchmarks share: where things are, how a command is timed, the machine."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

PEERS = Path(__file__).resolve().parent
REPO = PEERS.parents[1]
SHARED = REPO / ".." / "shared"
TRACE = SHARED / "traces" / "mooncake-conversation.jsonl"
TOOLS_VENV = PEERS / ".venv-tools"
SGLANG_VENV = PEERS / ".venv-sglang"
KVTIER = Path(sys.executable).parent / "kvtier"


class Timed(NamedTuple):
    """One finished command: its stdout, wall seconds and CPU seconds (user + sys, children
    included), the best of the repeats."""

    stdout: str
    wall_s: float
    cpu_s: float


def run_timed(cmd: list[str], repeat: int = 1) -> Timed:
    """Run `cmd` `repeat` times; fail loudly on a non-zero exit. The minimum over repeats is the
    least disturbed run (the machine may be shared)."""
    best_wall = best_cpu = float("inf")
    out = ""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(
                f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
            )
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
        out = proc.stdout
    return Timed(out, best_wall, best_cpu)


def need(path: Path, what: str) -> Path:
    """`path`, or exit with how to get it."""
    if not path.exists():
        hint = "; run benchmarks/peers/setup.sh first" if PEERS in path.parents else ""
        raise SystemExit(f"{what} not found at {path}{hint}")
    return path


def machine() -> str:
    """CPU model name, logical CPUs and Python version, for the results header."""
    model = platform.processor() or "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    load = os.getloadavg()[0]
    return (
        f"{model}, {os.cpu_count()} logical CPUs, no GPU, Python "
        f"{platform.python_version()}, load average {load:.1f} at start"
    )


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A GitHub table, numbers right-aligned."""
    table: list[list[object]] = [list(header), *rows]
    cells = [[str(c) for c in row] for row in table]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    numeric = [all(_is_number(r[i]) for r in cells[1:]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if n else c.ljust(w)
                for c, w, n in zip(row, widths, numeric, strict=True)
            )
            + " |"
        )

    sep = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if n else ("-" * (w + 2))
            for w, n in zip(widths, numeric, strict=True)
        )
        + "|"
    )
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def report_outcome(notes: list[str], failures: list[str]) -> int:
    """Print the notes (stdout) and failures (stderr); the exit code: 1 if anything failed."""
    for line in notes:
        print(f"note: {line}")
    for line in failures:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failures else 0


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("x%").replace(",", ""))
    except ValueError:
        return text in ("-", "")
    return True
