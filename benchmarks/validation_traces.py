"""Writes the traces docs/validation.md replays (Mooncake JSONL, 512-token blocks), seeded.

`llmd-*`: one replica's share of llm-d's tiered-prefix-cache benchmark (inference-perf's
`shared_prefix` data: G groups of P prompts, each prompt a group's system prompt followed by
its own question; the G x P prompts are shuffled once and sent in that order, again and again;
Poisson arrivals, one stage after another). The fleet's router keeps a group on the replica
that holds its prefix, so one replica sees 1/R of the groups at 1/R of the rate. A file ends
with the stage it is named after; the stages before it warm the cache as they did in the run.
`llmd-qwen3-fleet-*`: the whole fleet's requests (every group at the fleet's rate), for
`kvtier simulate --replicas 8` and a router.

`reuse-L-xN`: rounds of N requests of L tokens, each round arriving at once, 1,000 s apart:
A (N distinct prompts), four rounds F of other distinct prompts (4 x N x L tokens: they evict A
from a device pool, and from a host tier, smaller than that), A' (A again, its first share of
every prompt the same, whole blocks, the rest new: the measured round, the last sixth).

`repeat-L`: one prompt of L tokens sent twice, 1,000 s apart, one output token each, in
16-token blocks (vLLM's): the second is the measured request, the single-request TTFT of a
prompt computed again or loaded back from a host tier.

    .venv/bin/python benchmarks/validation_traces.py docs/validation
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from kvtier.sim.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest, write_trace

BLOCK = MOONCAKE_BLOCK_TOKENS
ROUND_GAP_S = 1000.0


@dataclass(frozen=True)
class SharedPrefix:
    groups: int  # the fleet's groups
    prompts_per_group: int
    system_tokens: int
    question_tokens: int
    output_tokens: int
    replicas: int
    stages: tuple[float, ...]  # fleet requests per second, one stage each
    reported: tuple[float, ...]  # the stages the source's table reports
    stage_s: float = 60.0
    seed: int = 1


# llm-d-benchmark workload/profiles/inference-perf/guide_tiered-prefix-cache_1.yaml.in
LLMD_QWEN3 = SharedPrefix(
    250,
    5,
    16000,
    256,
    256,
    replicas=8,
    stages=(5, 10, 15, 20, 25, 30, 35, 40),
    reported=(5, 10, 20, 40),
)


def shared_prefix_replica(spec: SharedPrefix, last_stage: int) -> list[TraceRequest]:
    """One replica's requests through stage `last_stage` (0-based)."""
    rng = random.Random(spec.seed)
    order = [(g, p) for g in range(spec.groups) for p in range(spec.prompts_per_group)]
    rng.shuffle(order)
    mine = [(g, p) for g, p in order if g % spec.replicas == 0]
    length = spec.system_tokens + spec.question_tokens
    shared = spec.system_tokens // BLOCK  # whole blocks of the system prompt alone
    own = math.ceil(length / BLOCK) - shared
    ids: dict[tuple[int, int], tuple[int, ...]] = {}
    for g, p in mine:
        prefix = tuple(range(g * 10_000, g * 10_000 + shared))
        start = 10_000_000 + (g * spec.prompts_per_group + p) * own
        ids[(g, p)] = prefix + tuple(range(start, start + own))
    out: list[TraceRequest] = []
    t = 0.0
    for stage, fleet_rate in enumerate(spec.stages[: last_stage + 1]):
        end = (stage + 1) * spec.stage_s
        rate = fleet_rate / spec.replicas
        while True:
            t += rng.expovariate(rate)
            if t >= end:
                t = end
                break
            key = mine[len(out) % len(mine)]
            out.append(TraceRequest(len(out), round(t, 3), length, spec.output_tokens, ids[key]))
    return out


def stage_starts(spec: SharedPrefix, last_stage: int) -> int:
    """Requests before stage `last_stage` in its file: the warm-up to leave out."""
    return sum(
        1
        for r in shared_prefix_replica(spec, last_stage)
        if r.arrival_s < last_stage * spec.stage_s
    )


def reuse_trace(
    length: int, clients: int, output: int, share: float, fillers: int
) -> list[TraceRequest]:
    blocks = math.ceil(length / BLOCK)
    kept = min(blocks - 1, int(share * length) // BLOCK)
    next_id = 0

    def fresh(n: int) -> tuple[int, ...]:
        nonlocal next_id
        next_id += n
        return tuple(range(next_id - n, next_id))

    first = [fresh(blocks) for _ in range(clients)]
    rounds = [first] + [[fresh(blocks) for _ in range(clients)] for _ in range(fillers)]
    rounds.append([ids[:kept] + fresh(blocks - kept) for ids in first])
    out = []
    for r, prompts in enumerate(rounds):
        for ids in prompts:
            out.append(TraceRequest(len(out), r * ROUND_GAP_S, length, output, ids))
    return out


REPEAT_BLOCK = 16  # vLLM's block_size on CUDA


def repeat_trace(length: int) -> list[TraceRequest]:
    ids = tuple(range(math.ceil(length / REPEAT_BLOCK)))
    return [TraceRequest(r, r * ROUND_GAP_S, length, 1, ids) for r in range(2)]


def main(folder: str) -> None:
    root = Path(folder)
    for rate in LLMD_QWEN3.reported:
        k = LLMD_QWEN3.stages.index(rate)
        path = root / f"llmd-qwen3-{rate:g}qps.jsonl"
        n = write_trace(shared_prefix_replica(LLMD_QWEN3, k), path)
        print(
            f"{path.name}: {n} requests, the last stage from request {stage_starts(LLMD_QWEN3, k)}"
        )
    fleet = dataclasses.replace(LLMD_QWEN3, replicas=1)  # one "replica" holding every group
    for rate in (5, 20):
        k = LLMD_QWEN3.stages.index(rate)
        path = root / f"llmd-qwen3-fleet-{rate:g}qps.jsonl"
        n = write_trace(shared_prefix_replica(fleet, k), path)
        print(f"{path.name}: {n} requests, the last stage from request {stage_starts(fleet, k)}")
    for name, args in {
        "reuse-131072-x1": (131072, 1, 512, 0.9, 4),
        "reuse-8192-x16": (8192, 16, 512, 0.9, 4),
    }.items():
        n = write_trace(reuse_trace(*args), root / f"{name}.jsonl")
        print(f"{name}.jsonl: {n} requests")
    for length in (10_000, 50_000, 100_000):
        path = root / f"repeat-{length}.jsonl"
        n = write_trace(repeat_trace(length), path, REPEAT_BLOCK)
        print(f"{path.name}: {n} requests")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/validation")
