"""A virtualenv holding torch and one or two vLLM wheels unpacked without their dependencies.

    .oracle-vllm/venv            python with torch==2.13.0 (the CPU wheel the project pins)
    .oracle-vllm/wheels          the vLLM wheels, downloaded once (`pip download --no-deps`)
    .oracle-vllm/site-<version>  each wheel installed with `--no-deps --target`

Every step is skipped when its output is already there; the directory is gitignored.
Usage: python tests/oracle_vllm/oracle_env.py [ROOT]  (prints the python and the site directories)
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

Ours = TypeVar("Ours")

VERSIONS = ("0.20.0", "0.21.0")  # either side of the logged-token change (_report_kv_cache_config)
TORCH = "torch==2.13.0"
ROOT = Path(__file__).resolve().parents[2] / ".oracle-vllm"


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args], check=True
    )


def prepare(
    root: Path = ROOT, versions: tuple[str, ...] = VERSIONS
) -> tuple[Path, dict[str, Path]]:
    """The oracle's python and each version's site directory, built where missing."""
    python = root / "venv" / "bin" / "python"
    stamp = root / "venv" / f".installed-{TORCH}"
    if not stamp.exists():
        venv.create(root / "venv", with_pip=True)
        _pip(python, "install", TORCH)
        stamp.touch()
    wheels, sites = root / "wheels", {}
    for version in versions:
        site = root / f"site-{version}"
        done = site / ".installed"
        if not done.exists():
            if not list(wheels.glob(f"vllm-{version}-*.whl")):
                _pip(python, "download", "--no-deps", f"vllm=={version}", "-d", str(wheels))
            (wheel,) = wheels.glob(f"vllm-{version}-*.whl")
            _pip(python, "install", "--no-deps", "--target", str(site), str(wheel))
            done.touch()
        sites[version] = site
    return python, sites


def run(python: Path, runner: Path, site: Path, cases: list[Any]) -> list[dict[str, Any]]:
    """`runner` (a script that imports vLLM from `site`) over `cases`: one result per case."""
    out = subprocess.run(
        [str(python), "-W", "ignore", str(runner), str(site)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        check=True,
    )
    results: list[dict[str, Any]] = json.loads(out.stdout)
    assert len(results) == len(cases) >= 100
    return results


def compare(
    runner: Path,
    version: str,
    cases: list[Any],
    ours: Callable[[Any, str], Ours],
    differences: Callable[[dict[str, Any], Ours], list[str]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """`runner` with vLLM `version` over `cases`, each engine result against `ours(case, version)`:
    the engine's results and every difference, led by its case."""
    python, sites = prepare(versions=(version,))
    results = run(python, runner, sites[version], cases)
    found = [
        f"{case}: {d}"
        for case, engine in zip(cases, results, strict=True)
        for d in differences(engine, ours(case, version))
    ]
    return results, found


if __name__ == "__main__":
    py, found = prepare(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print(py, *found.values())
