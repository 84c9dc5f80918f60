"""kvtier's sglang-cache-aware model against the real sglang-router 0.3.2, request by request.

The router (its Rust binary, on CPU) runs from benchmarks/peers/.venv-router (.ci/router-venv.sh)
in front of four stub workers that answer as SGLang workers do; the same requests, with the same
completions, go through kvtier's model (benchmarks/peers/router_harness.py). Every branch of
the policy is taken: the tree's tenant, the least-loaded worker when the match is short, and
the imbalance override. The model must pick the router's worker for at least 98% of requests
(it picks it for all of them: docs/fleet.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import missing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from router_harness import CASES, ROUTER_PYTHON, compare


@pytest.mark.parametrize("case", list(CASES))
def test_cache_aware_picks_the_routers_worker(case: str, tmp_path: Path) -> None:
    if not ROUTER_PYTHON.exists():
        missing(f"sglang-router's virtualenv {ROUTER_PYTHON} (.ci/router-venv.sh)")
    out = compare(case, 300, 4, seed=2, log=tmp_path / "router.log")
    wrong = [
        (i, a, b, out.branch[i], out.loads[i])
        for i, (a, b) in enumerate(zip(out.real, out.model, strict=True))
        if a != b
    ]
    assert out.agreement >= 0.98, wrong
    assert len(set(out.real)) == 4  # every worker served some
    if case != "shared-prefix, defaults":  # 64 in flight never happens with 4 x 12 held
        assert "imbalanced" in out.branch
    assert {"cache_hit", "min_load"} <= set(out.branch)
