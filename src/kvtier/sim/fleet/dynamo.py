"""dynamo-kv: NVIDIA Dynamo's KV router.

ai-dynamo `lib/llm/src/kv_router` (the scheduler's worker selection): for each worker,

    logit = overlap_score_weight x potential prefill blocks + potential decode blocks

where the prefill blocks are the tokens the worker would have to prefill if the request went
there (those of its requests not yet through prefill, plus this prompt less the blocks the
worker already holds, from the KV events its indexer reads) over the block size, and the decode
blocks are the blocks its active requests hold (shared prefix blocks once), this request's
included. The lowest logit wins: at temperature 0 the smallest (ties at random, --seed);
above it, softmax sampling over the logits divided by the largest, exp(-logit / temperature).
Defaults: overlap_score_weight 1.0, router_temperature 0.0. Blocks here are trace blocks.

The blocks a worker holds are what its KV events have said: Dynamo's KvEventPublisher relays
the engine's ZMQ KV events (vLLM's BlockStored / BlockRemoved batches) to the router, whose
KvIndexer applies each worker's in order to its RadixTree (`RadixTree::apply_event`, Stored /
Removed per block; ai-dynamo `lib/llm/src/kv_router/indexer.rs` and `publisher.rs`, read in the
source of workspace 1.2.0). The events are kv_events.py's (`step-events`, `event-delay-ms`): a
vLLM worker's leave once a step, so a prompt arriving during the step that prefills its prefix
finds no worker holding it; an SGLang worker's at its scheduler's reports (after each prefill
batch, every 40th decode batch, when idle).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from kvtier.sim.fleet.kv_events import EventReader, event_options
from kvtier.sim.fleet.policy import FleetView, Number, Policy, Router, RouterOption, Untimed
from kvtier.sim.trace import TraceRequest


class DynamoKv(EventReader, Untimed):
    def __init__(
        self, replicas: int, opts: dict[str, float], seed: int, view: FleetView, block: int
    ) -> None:
        super().__init__(replicas, view, opts)
        self.block = block
        self.weight = opts["overlap-score-weight"]
        self.temperature = opts["router-temperature"]
        self._rng = random.Random(seed)
        self._new: dict[int, int] = {}  # rid -> tokens it was routed to prefill
        self._active: list[dict[int, int]] = [{} for _ in range(replicas)]  # block -> holders

    def _held(self, req: TraceRequest, now: float) -> Sequence[int]:
        if self._events is not None:
            return self._events.prefixes(req.blocks, now)
        return self.view.device_prefixes(req)

    def logits(self, req: TraceRequest, now: float) -> tuple[list[float], list[int]]:
        view, new = self.view, self._new
        queues = view.pending_prefill()
        out, fresh = [], []
        for r, cached_blocks in enumerate(self._held(req, now)):
            cached = min(req.prefix_tokens(cached_blocks, self.block), req.input_len)
            queued = sum(min(left, new.get(rid, left)) for rid, left in queues[r])
            prefill_blocks = (queued + req.input_len - cached) / self.block
            active = self._active[r]
            decode_blocks = len(active) + sum(1 for b in req.blocks if b not in active)
            out.append(self.weight * prefill_blocks + decode_blocks)
            fresh.append(req.input_len - cached)
        return out, fresh

    def _sample(self, logits: list[float]) -> int:
        if self.temperature <= 0:
            best = min(logits)
            return self._rng.choice([r for r, v in enumerate(logits) if v == best])
        top = max(logits) or 1.0
        scaled = [v / top for v in logits]
        low = min(scaled)
        weights = [math.exp(-(v - low) / self.temperature) for v in scaled]
        return self._rng.choices(range(len(logits)), weights)[0]

    def route(self, req: TraceRequest, now: float) -> int:
        logits, fresh = self.logits(req, now)
        choice = self._sample(logits)
        self._new[req.rid] = fresh[choice]
        active = self._active[choice]
        for b in req.blocks:
            active[b] = active.get(b, 0) + 1
        return choice

    def finished(self, replica: int, req: TraceRequest, now: float) -> None:
        self._new.pop(req.rid, None)
        active = self._active[replica]
        for b in req.blocks:
            n = active.get(b, 0) - 1
            if n > 0:
                active[b] = n
            else:
                active.pop(b, None)


def policy(block_size: int) -> Policy:
    def build(n: int, opts: dict[str, float], seed: int, view: FleetView) -> Router:
        return DynamoKv(n, opts, seed, view, block_size)

    return Policy(
        {
            "overlap-score-weight": RouterOption(Number(0.0, 1e6), 1.0, "weight of prefill blocks"),
            "router-temperature": RouterOption(
                Number(0.0, 1e6), 0.0, "softmax temperature (0: argmin)"
            ),
        }
        | event_options(),
        build,
        "ai-dynamo lib/llm/src/kv_router (worker selection: overlap_score_weight, "
        "router_temperature; indexer.rs RadixTree::apply_event over the workers' KV events)",
    )
