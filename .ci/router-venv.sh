#!/usr/bin/env bash
# The sglang-router virtualenv tests/test_fleet_sglang_router.py and
# benchmarks/peers/bench_router.py start the real router from: benchmarks/peers/.venv-router,
# sglang-router 0.3.2 (its Rust router, CPU only) from PyPI. Nothing is installed when the
# virtualenv already has it; the time taken is printed either way.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=benchmarks/peers/.venv-router
start=$SECONDS
if ! "$venv/bin/python" -c 'from importlib.metadata import version
assert version("sglang-router") == "0.3.2"' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'sglang-router==0.3.2'
fi
echo ".ci/router-venv.sh: sglang-router virtualenv ready in $((SECONDS - start)) s"
