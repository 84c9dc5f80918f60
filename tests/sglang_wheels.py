"""SGLang release wheels for the oracle tests, downloaded once (no dependencies) into
.oracle-sglang/wheels/ (gitignored); a failed download is `missing`: a failure under CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
