"""session-affinity: a routing key hashed onto a ring of the workers.

sglang-router 0.3.2 `src/policies/consistent_hashing.rs` with `HashRing`
(`src/core/worker_registry.rs`): each worker takes 150 virtual nodes at the hash of
"url#i"; a key goes to the first node at or after its own hash, clockwise. The router reads the
key from the `X-SMG-Routing-Key` header; a trace carries no session id, so the key here is the
prompt's first block id (a conversation's turns share it; so do the prompts of one system
prompt). Positions are the first 8 bytes (little-endian) of a BLAKE2b digest where the router
takes BLAKE3's: the same spread, not the same ring.
"""

from __future__ import annotations

import bisect
import hashlib

from kvtier.sim.fleet.policy import FleetView, Policy, Router, Stateless
from kvtier.sim.trace import TraceRequest

VIRTUAL_NODES_PER_WORKER = 150  # worker_registry.rs


def position(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class SessionAffinity(Stateless):
    def __init__(self, replicas: int) -> None:
        ring = sorted(
            (position(f"replica-{r}#{v}"), r)
            for r in range(replicas)
            for v in range(VIRTUAL_NODES_PER_WORKER)
        )
        self._positions = [p for p, _ in ring]
        self._owners = [r for _, r in ring]

    def route(self, req: TraceRequest, now: float) -> int:
        key = str(req.blocks[0]) if req.blocks else ""
        i = bisect.bisect_left(self._positions, position(key)) % len(self._positions)
        return self._owners[i]


def _build(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
    return SessionAffinity(n)


SESSION_AFFINITY = Policy(
    {},
    _build,
    "sglang-router 0.3.2, src/policies/consistent_hashing.rs (X-SMG-Routing-Key; 150 "
    "virtual nodes a worker, src/core/worker_registry.rs)",
)
