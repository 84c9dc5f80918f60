#!/usr/bin/env bash
# The SGLang virtualenv tests/test_sglang_hicache.py runs SGLang's side in:
# benchmarks/peers/.venv-sglang, SGLang 0.5.23 without its GPU dependencies, as
# benchmarks/peers/setup.sh makes it, plus redis-py for kvtier's Redis store and xxhash for its
# page checksum, and what SGLang's scheduler imports on the way to its PrefillAdder
# (tests/test_sim_sglang_scheduler.py): openai and xgrammar at sglang 0.5.23's own pins,
# partial-json-parser (unpinned there) at its current release. Nothing is installed when the
# virtualenv already has them; the time taken is printed either way.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=benchmarks/peers/.venv-sglang
start=$SECONDS
has() { "$venv/bin/python" -c "$1" >/dev/null 2>&1; }
if ! has 'from importlib.metadata import version; assert version("sglang") == "0.5.23"
import sglang.srt.mem_cache.hicache_storage'; then
  benchmarks/peers/setup.sh sglang
fi
if ! has 'import redis'; then
  "$venv/bin/pip" install --quiet 'redis>=5'
fi
if ! has 'import xxhash'; then  # kvtier's store checksum (pyproject's range); SGLang needs it too
  "$venv/bin/pip" install --quiet 'xxhash>=3.1,<5'
fi
if ! has 'import openai, xgrammar, partial_json_parser'; then
  "$venv/bin/pip" install --quiet 'openai==2.8.0' 'xgrammar==0.2.7' 'partial-json-parser==0.2.1.1.post7'
fi
echo ".ci/sglang-venv.sh: SGLang virtualenv ready in $((SECONDS - start)) s"
