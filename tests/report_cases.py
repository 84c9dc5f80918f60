"""Inputs the report tests share: saved --json payloads and the founding log with a short sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import require_shared

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "report"
FOUNDING_LOG = ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"
# A short sweep keeps the tests fast; the README's command runs 2,000 requests.
SMALL_SWEEP = ["--generate", "chat", "--seed", "1", "--requests", "60", "--rate", "0.1",
               "--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8",
               "--mem-fraction-static", "0.88", "--device-tokens", "159277",
               "--sweep", "hicache-ratio=0,2,4"]  # fmt: skip


def fixture(name: str) -> dict[str, Any]:
    """A saved payload from tests/fixtures/report/."""
    return json.loads((FIXTURES / name).read_text())


def founding_log() -> Path:
    """The founding scenario's startup log: the bundled example, else the shared case."""
    if FOUNDING_LOG.is_file():
        return FOUNDING_LOG
    return require_shared("cases/seed-sglang.log")
