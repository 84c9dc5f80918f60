"""A missing binary or shared file skips its tests on a user's machine and fails them under CI.

Each case runs pytest in a child process on a small test file that uses conftest's helpers, with
PATH pointing at an empty directory, so redis-server and chromium are missing whatever this
machine has installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

PROBE = """
import pytest

from conftest import require_binary, require_shared


def test_binary():
    require_binary("redis-server")


def test_shared():
    require_shared("no-such-dir/no-such-file")


@pytest.mark.redis
def test_redis_mark():
    pass


@pytest.mark.browser
def test_browser_mark():
    pass


def test_needs_nothing():
    pass
"""


def run_probe(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """pytest -rA on the probe file, conftest loaded as a plugin, with nothing on PATH."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.update(PATH=str(empty), PYTHONPATH=str(TESTS))
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rA"]
    argv += ["-W", "ignore::pytest.PytestUnknownMarkWarning", "test_probe.py"]
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("ci", ["true"])
def test_missing_requirements_fail_under_ci(tmp_path: Path, ci: str) -> None:
    result = run_probe(tmp_path, ci)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "FAILED test_probe.py::test_binary" in out
    assert "redis-server is not on PATH; CI=true" in out
    assert "FAILED test_probe.py::test_shared" in out
    assert "../shared/no-such-dir/no-such-file is not beside the repository" in out
    # a marked test fails in setup, before its body runs
    assert "ERROR test_probe.py::test_redis_mark" in out
    assert "ERROR test_probe.py::test_browser_mark" in out
    assert "chromium is not on PATH; CI=true" in out
    assert "PASSED test_probe.py::test_needs_nothing" in out
    assert "skipped" not in out.splitlines()[-1]


@pytest.mark.parametrize("ci", [None, "false"])
def test_missing_requirements_skip_outside_ci(tmp_path: Path, ci: str | None) -> None:
    result = run_probe(tmp_path, ci)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "1 passed, 4 skipped" in out.splitlines()[-1], out
    assert "redis-server is not on PATH" in out and "chromium is not on PATH" in out
    assert "../shared/no-such-dir/no-such-file is not beside the repository" in out
