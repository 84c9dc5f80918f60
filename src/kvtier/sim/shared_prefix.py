"""inference-perf's `shared_prefix` workload as a trace.

inference-perf 0.7.0 (`datagen/synthetic/shared_prefix_datagen.py`): `num_groups` groups, each
with one system prompt of `system_prompt_len` tokens; each group has `num_prompts_per_group`
prompts, the system prompt followed by a question of `question_len` tokens of its own, asking
for `output_len` tokens. The G x P prompts are shuffled once with the seed and sent in that
order, again and again (request i is prompt i mod G x P), at Poisson times of `rate` a second.
The shuffle here is Python's seeded `random.shuffle`, not numpy's permutation: the same kind of
order, not the same one.

Block ids: the system prompt's whole blocks are the group's; the block where the question
starts, and the question's, are the prompt's own. A prompt sent again has the same ids (the
same text), so a later round hits its whole prompt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.sim.trace import TraceRequest

MAX_PROMPTS = 1 << 22


@dataclass(frozen=True, slots=True)
class SharedPrefixSpec:
    groups: int
    prompts_per_group: int
    system_tokens: int
    question_tokens: int
    output_tokens: int
    rate: float
    requests: int
    block_tokens: int = 512

    def check(self) -> None:
        if self.groups * self.prompts_per_group > MAX_PROMPTS:
            raise KvtierError(
                f"--groups x --prompts-per-group must be at most {MAX_PROMPTS:,}, got "
                f"{self.groups * self.prompts_per_group:,}"
            )


def _prompts(spec: SharedPrefixSpec) -> list[tuple[int, tuple[int, ...]]]:
    """(prompt tokens, block ids) of every prompt, group by group."""
    b = spec.block_tokens
    length = spec.system_tokens + spec.question_tokens
    shared = spec.system_tokens // b
    blocks = -(-length // b)
    next_id = 0
    out = []
    for _ in range(spec.groups):
        system = tuple(range(next_id, next_id + shared))
        next_id += shared
        for _ in range(spec.prompts_per_group):
            own = tuple(range(next_id, next_id + blocks - shared))
            next_id += blocks - shared
            out.append((length, system + own))
    return out


def shared_prefix(spec: SharedPrefixSpec, seed: int) -> tuple[TraceRequest, ...]:
    spec.check()
    rng = random.Random(seed)
    prompts = _prompts(spec)
    rng.shuffle(prompts)
    t = 0.0
    requests = []
    for rid in range(spec.requests):
        t += rng.expovariate(spec.rate)
        length, blocks = prompts[rid % len(prompts)]
        requests.append(TraceRequest(rid, round(t, 3), length, spec.output_tokens, blocks))
    return tuple(requests)
