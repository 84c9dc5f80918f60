"""A host-RAM KV tier as advise prices it: an engine's pool size and RAM check, and reload time.

Each engine with a host tier states its own sizing and the check its ranks pass at startup
(`engines/sglang/hicache.py`); the time to bring tokens back over PCIe is the same for every
engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kvtier.units import GB


class HostCheck(NamedTuple):
    per_rank_bytes: int
    node_bytes: int
    engine_ok: bool  # the engine's own per-rank check (each rank alone, minus the 10 GiB reserve)
    node_ok: bool  # every rank of the node at once, minus the reserve
    message: str


@dataclass(frozen=True, slots=True)
class HostTier:
    """An engine's host-RAM KV tier: its pool's tokens and the host-RAM check it must pass."""

    # (device tokens, page size, bytes per token, ratio, size in GB per rank) -> host tokens
    tokens: Callable[[int, int, int, float | None, float | None], int]
    # (bytes per rank, ranks, available host bytes) -> the engine's check and the node's
    check_ram: Callable[[int, int, int], HostCheck]


def load_seconds(
    tokens: int, per_token: int, link_gbps: float, gpus: int, node_gbps: float | None
) -> float:
    """Seconds to bring `tokens` back from host on each GPU when all `gpus` load at once.

    Each rank moves its own copy (MLA latents are replicated across TP ranks). A GPU gets its own
    link's rate, or its share of the node's host-to-device bandwidth when that is lower.
    """
    rate = link_gbps if node_gbps is None else min(link_gbps, node_gbps / gpus)
    return tokens * per_token / (rate * GB)
