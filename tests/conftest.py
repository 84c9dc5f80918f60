"""Test-run settings and the one place that decides what a missing requirement means.

CI runs the property tests on a fixed example sequence, so a run is reproducible; local runs keep
exploring new examples.

Some tests need things outside the repository: the redis-server and chromium binaries, and the
shared material beside the repository (../shared: real logs, the Mooncake trace). On a user's
machine a missing one skips the tests that need it. Under CI (CI=true) they are always provided
(.ci/run installs the binaries), so a missing one fails the run instead: a skipped test there
would be a test that cannot fail. Tests reach them through `require_binary` and
`require_shared`; the `redis` and `browser` marks call `require_binary` before the test starts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
# mark -> the binary a test with that mark runs
MARKED_BINARIES = {"redis": "redis-server", "browser": "chromium"}


def in_ci() -> bool:
    """Whether this run is CI's: CI set to anything but empty, 0, false or no."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str) -> NoReturn:
    """Skip the calling test on a user's machine; fail it under CI, where nothing may be missing."""
    if in_ci():
        pytest.fail(
            f"{what}; CI=true, where every test requirement must be present (.ci/run installs "
            "redis-server and chromium, and ../shared sits beside the repository), so this "
            "fails instead of skipping",
            pytrace=False,
        )
    pytest.skip(what, allow_module_level=True)


def require_binary(name: str) -> str:
    """The path of executable `name` on PATH; skips or fails (under CI) when there is none."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not on PATH")
    return path


def require_shared(relative: str) -> Path:
    """`../shared/<relative>` beside the repository; skips or fails (under CI) when absent."""
    path = SHARED / relative
    if not path.exists():
        missing(f"../shared/{relative} is not beside the repository ({path})")
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark, binary in MARKED_BINARIES.items():
        if item.get_closest_marker(mark) is not None:
            require_binary(binary)


settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if in_ci():
    settings.load_profile("ci")
