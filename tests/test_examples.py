"""The runnable examples under examples/ do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_cache_roundtrip_example_is_bit_exact() -> None:
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "cache_roundtrip.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "loaded back from host: 8 pages; bit-exact: True" in out
