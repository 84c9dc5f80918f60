"""Units as the engines print them: GPU memory in GiB (2**30), SGLang host sizes in decimal GB."""

from __future__ import annotations

GiB = 1 << 30
MiB = 1 << 20
GB = 10**9


def gib(nbytes: float) -> float:
    return nbytes / GiB
