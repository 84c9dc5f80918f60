"""The SGLang virtualenv (benchmarks/peers/.venv-sglang, made by .ci/sglang-venv.sh) the tests run
SGLang's own code in."""

from __future__ import annotations

from pathlib import Path

from conftest import missing

ROOT = Path(__file__).resolve().parents[1]
SGLANG_PYTHON = ROOT / "benchmarks" / "peers" / ".venv-sglang" / "bin" / "python"


def sglang_python() -> Path:
    """The SGLang virtualenv's python; skips (fails under CI) when it is not there."""
    if not SGLANG_PYTHON.exists():
        missing(
            f"no SGLang virtualenv at {SGLANG_PYTHON.relative_to(ROOT)}: run .ci/sglang-venv.sh"
        )
    return SGLANG_PYTHON
