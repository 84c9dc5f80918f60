#!/usr/bin/env bash
# Create the peer tools' virtualenvs beside this script, apart from the project's own.
#
#   .venv-sglang  SGLang 0.5.23 without its GPU dependencies: enough to import its pure-Python
#                 RadixCache on a CPU (GPU-only imports are stood in by stubs.py).
#   .venv-tools   kvcache-simulator, ridgepoint, kvfit.
#
# torch: pip resolves torch==2.13.0; to use a local CPU wheel instead of PyPI's CUDA build, point
# pip at its folder: PIP_FIND_LINKS=/path/to/wheels benchmarks/peers/setup.sh
# Usage: benchmarks/peers/setup.sh [sglang|tools]   (default: both)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"

sglang_venv() {
    local venv="$here/.venv-sglang"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet torch==2.13.0 numpy triton
    "$venv/bin/pip" install --quiet --no-deps sglang==0.5.23
    # the pure-Python packages on the import path of sglang.srt.mem_cache.radix_cache
    "$venv/bin/pip" install --quiet orjson pybase64 psutil requests pydantic packaging pyzmq \
        msgspec zstandard xxhash pillow starlette tqdm ipython aiohttp transformers dill \
        sentencepiece compressed-tensors gguf
    "$venv/bin/python" - "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import stubs
stubs.install()
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: F401
print("sglang RadixCache imports")
PY
}

tools_venv() {
    local venv="$here/.venv-tools"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet kvcache-simulator ridgepoint kvfit
    "$venv/bin/kvcache-simulator" list-models >/dev/null
    echo "kvcache-simulator, ridgepoint, kvfit installed"
}

case "${1:-all}" in
    sglang) sglang_venv ;;
    tools) tools_venv ;;
    all) tools_venv; sglang_venv ;;
    *) echo "usage: $0 [sglang|tools]" >&2; exit 2 ;;
esac
