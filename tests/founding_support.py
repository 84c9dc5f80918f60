"""The founding deployment as the tests and benchmarks build it: its launch command, and the
deployment with its measured figures chosen per test."""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtier.engines.deployment import Deployment, Engine, Measured

# The founding deployment's SGLang launch command (examples/logs/sglang-kimi-k25-eagle3.log).
KIMI_LAUNCH = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "moonshotai/Kimi-K2.5",
    "--tp",
    "8",
    "--mem-fraction-static",
    "0.88",
    "--speculative-algorithm",
    "EAGLE3",
]

# The same deployment as `kvtier simulate` flags (the catalog's kimi-k2.5).
KIMI_SIMULATE = ["--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8",
                 "--mem-fraction-static", "0.88"]  # fmt: skip


def kimi(measured: Measured, **changes: Any) -> Deployment:
    """Kimi-K2.5 on SGLang, TP8 over RTX PRO 6000 cards, --mem-fraction-static 0.88
    (examples/logs/sglang-kimi-k25-eagle3.log, without its draft model)."""
    base = Deployment(
        Engine.SGLANG,
        "moonshotai/Kimi-K2.5",
        tp=8,
        gpu="RTX PRO 6000",
        mem_fraction=0.88,
        measured=measured,
    )
    return dataclasses.replace(base, **changes)
