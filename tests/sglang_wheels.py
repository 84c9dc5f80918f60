"""SGLang release wheels for the oracle tests, downloaded once (no dependencies) into
.oracle-sglang/wheels/ (gitignored); a failed download is `missing`: a failure under CI. And the
oracle's run: a runner script over the cases, in an isolated interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import missing

CACHE = Path(__file__).resolve().parents[1] / ".oracle-sglang"


def sglang_wheel(version: str) -> Path:
    """The sglang=={version} wheel for CPython 3.11 on x86-64 Linux."""
    wheels = CACHE / "wheels"
    found = list(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64"]
        cmd += ["-d", str(wheels), f"sglang=={version}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        found = list(wheels.glob(f"sglang-{version}-*.whl"))
        if done.returncode != 0 or not found:
            missing(f"cannot download the sglang=={version} wheel: {done.stderr.strip()[-300:]}")
    return found[0]


def run_oracle(python: str, runner: Path, args: list[str], cases: list[Any]) -> list[Any]:
    """`runner` (`python -I -S`, site-packages off) given `args` and the cases as JSON on stdin:
    its answer, one per case."""
    done = subprocess.run(
        [python, "-I", "-S", str(runner), *args],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers: list[Any] = json.loads(done.stdout)
    assert len(answers) == len(cases)
    return answers


def differ(differences: list[dict[str, Any]], cases: int) -> str:
    """The assertion message for `differences` among `cases` cases: the count and the first five."""
    shown = "\n".join(json.dumps(x) for x in differences[:5])
    return f"{len(differences)} of {cases} differ:\n{shown}"
