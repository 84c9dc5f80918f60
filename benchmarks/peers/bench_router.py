"""kvtier's sglang-cache-aware model beside the real sglang-router 0.3.2, request by request.

Starts the router (benchmarks/peers/.venv-router, made by .ci/router-venv.sh) in front of stub
workers, sends each workload's requests with a seeded script of completions, and prints how
often kvtier's model picks the worker the router picked, with every disagreement (request,
branch, in-flight counts). Exits 1 below 98%.

    .venv/bin/python benchmarks/peers/bench_router.py [--requests 400] [--workers 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

from router_harness import CASES, ROUTER_PYTHON, compare


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if not ROUTER_PYTHON.exists():
        print(f"no router virtualenv at {ROUTER_PYTHON}: run .ci/router-venv.sh", file=sys.stderr)
        return 2
    worst = 1.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            out = compare(name, args.requests, args.workers, args.seed, Path(tmp) / "router.log")
            branches = dict(Counter(out.branch))
            print(
                f"{name:<22} {len(out.real)} requests  same worker {out.agreement:.2%}  "
                f"branches {branches}"
            )
            for i, (a, b) in enumerate(zip(out.real, out.model, strict=True)):
                if a != b:
                    print(
                        f"  request {i}: router {a}, kvtier {b} ({out.branch[i]}, {out.loads[i]})"
                    )
            worst = min(worst, out.agreement)
    return 0 if worst >= 0.98 else 1


if __name__ == "__main__":
    sys.exit(main())
