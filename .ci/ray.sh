#!/usr/bin/env bash
# Ray (the `ray` extra, pinned) in the project's .venv, for tests/test_fleet_ray.py: it starts a
# local Ray head and runs a fleet sweep through `kvtier simulate --ray`. The virtualenv is made
# first as `make test` makes it; nothing is installed when ray 2.60.0 is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
make -s .venv/.installed
if ! .venv/bin/python -c 'from importlib.metadata import version
assert version("ray") == "2.60.0"' >/dev/null 2>&1; then
  .venv/bin/pip install --quiet --disable-pip-version-check 'ray==2.60.0'
fi
echo ".ci/ray.sh: ray ready in .venv in $((SECONDS - start)) s"
