"""ttft-predict: route to the replica whose predicted time to first token is shortest.

Mooncake's conductor (FAST'25, "KVCache-centric scheduling", Algorithm 1), without its hot-block
replication: for each prefill instance, the time its queue takes (the prompt tokens it has yet
to prefill, at the deployment's prefill speed) plus the request's own prefill after the prefix
the instance holds (its device-resident prefix, from the cache metadata the conductor keeps);
the smallest sum wins, the first of equals. A queued request counts as the prefill of the
tokens this router predicted it would compute when it routed it (its prompt less the prefix
cached then), capped by what is left of its prompt, one request at a time. Decode work
sharing the replica is not predicted.
"""

from __future__ import annotations

from kvtier.sim.fleet.policy import FleetView, Policy, Router, Untimed
from kvtier.sim.trace import TraceRequest


class TtftPredict(Untimed):
    def __init__(self, replicas: int, view: FleetView, block_size: int) -> None:
        self.replicas = replicas
        self.view = view
        self.block_size = block_size
        self._new: dict[int, int] = {}  # rid -> tokens predicted to prefill, while in flight

    def predict(self, req: TraceRequest) -> tuple[list[float], list[int]]:
        """Predicted TTFT on each replica, and the tokens it would prefill there."""
        view, new = self.view, self._new
        queues = view.pending_prefill()
        times, fresh = [], []
        for r, blocks in enumerate(view.device_prefixes(req)):
            cached = min(req.prefix_tokens(blocks, self.block_size), req.input_len - 1)
            wait = sum(view.prefill_s(min(left, new.get(rid, left)), 0) for rid, left in queues[r])
            times.append(wait + view.prefill_s(req.input_len - cached, cached))
            fresh.append(req.input_len - cached)
        return times, fresh

    def route(self, req: TraceRequest, now: float) -> int:
        times, fresh = self.predict(req)
        choice = times.index(min(times))
        self._new[req.rid] = fresh[choice]
        return choice

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        self._new.pop(req.rid, None)


def policy(block_size: int) -> Policy:
    def build(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
        return TtftPredict(n, view, block_size)

    return Policy({}, build, "Mooncake (FAST'25) conductor, Algorithm 1, without hot-block copies")
