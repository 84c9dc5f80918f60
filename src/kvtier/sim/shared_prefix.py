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

With load stages (`--rate-stages RATE:SECONDS,...`, inference-perf's `load.stages`), the trace
is inference-perf's run of them as of September 2025 (`loadgen/load_generator.py` `run_stage`,
`loadgen/load_timer.py`, commit 5b1da4d): stage k sends int(RATE x SECONDS) requests, request n
of a stage (counted from 0 in every stage) being prompt n mod G x P
(`SharedPrefixDataGenerator.get_request`), from one second after the stage starts. Their times
are the `load.type`'s timer (`LoadGenerator.get_timer`, `--load-type`): poisson
(`PoissonLoadTimer`, the default here) takes a second at a time, a Poisson(RATE) count of
requests spread over the second by exponential gaps scaled to sum to it; constant
(`ConstantLoadTimer`) draws the stage's int(RATE x SECONDS) exponential gaps of mean 1 / RATE
at once and scales them to sum to SECONDS, so its last request is sent at the stage's end. A
stage starts only after every
request of the one before it has finished: the load generator polls its finished count once a
second, then sleeps the stage interval (1 s, `LoadConfig.interval`); `next_stage_start` gives
that time, and the fleet loop holds each stage's arrivals until then.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from kvtier.errors import KvtierError
from kvtier.sim.trace import MAX_HASH_IDS, Trace, TraceRequest

MAX_PROMPTS = 1 << 22
HEAD_START_S = 1.0  # run_stage: start_time = time.perf_counter() + 1
POLL_S = 1.0  # run_stage: `await sleep(1)` between looks at the finished count
STAGE_INTERVAL_S = 1.0  # LoadConfig.interval, slept between stages
POISSON, CONSTANT = "poisson", "constant"  # LoadType's values
LOAD_TYPES = (POISSON, CONSTANT)


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
    stages: tuple[tuple[float, int], ...] = ()  # (rate, seconds) each; () : `rate`, `requests`
    load_type: str = POISSON  # the stages' timer: POISSON or CONSTANT

    def check(self) -> None:
        if self.groups * self.prompts_per_group > MAX_PROMPTS:
            raise KvtierError(
                f"--groups x --prompts-per-group must be at most {MAX_PROMPTS:,}, got "
                f"{self.groups * self.prompts_per_group:,}"
            )
        prompts = self.groups * self.prompts_per_group
        ids = prompts * -(-(self.system_tokens + self.question_tokens) // self.block_tokens)
        if ids > MAX_HASH_IDS:
            raise KvtierError(
                f"{prompts:,} prompts of --system-tokens + --question-tokens = "
                f"{self.system_tokens + self.question_tokens:,} hold {ids:,} block ids; a "
                f"generated trace holds at most {MAX_HASH_IDS:,}"
            )
        sizes = [int(rate * seconds) for rate, seconds in self.stages]
        if any(n < 1 for n in sizes):
            raise KvtierError(
                "--rate-stages: every stage must send a request (RATE x SECONDS >= 1)"
            )
        if sum(sizes) > MAX_PROMPTS:
            raise KvtierError(f"--rate-stages sends at most {MAX_PROMPTS:,} requests in all")


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


def next_stage_start(stage_start: float, drained: float) -> float:
    """When the next stage's timer starts (its first request a gap later), the last request of
    the stage whose timer started at `stage_start` having finished at `drained`: the first poll
    of the finished count at or after it, the stage interval, the next stage's head start."""
    queued = stage_start - HEAD_START_S  # the stage's requests are queued, then polled
    polls = max(0, math.ceil((drained - queued) / POLL_S - 1e-9))
    return queued + polls * POLL_S + STAGE_INTERVAL_S + HEAD_START_S


def _constant_times(
    rng: np.random.Generator, rate: float, seconds: int, start: float
) -> list[float]:
    """ConstantLoadTimer's times from `start`: int(rate x seconds) exponential gaps of mean
    1 / rate, scaled to sum to `seconds`."""
    gaps = rng.exponential(1 / rate, int(rate * seconds))
    return [float(t) for t in start + np.cumsum(gaps * (seconds / gaps.sum()))]


def _stage_times(rng: np.random.Generator, rate: float, count: int, start: float) -> list[float]:
    """PoissonLoadTimer's first `count` times from `start`."""
    out: list[float] = []
    second = start
    while len(out) < count:
        n = int(rng.poisson(rate))
        if n:
            gaps = rng.exponential(1 / n, n)
            out.extend((second + np.cumsum(gaps / gaps.sum())).tolist())
        second += 1.0
    return out[:count]


def ladder(spec: SharedPrefixSpec, seed: int) -> Trace:
    """The stages' requests at nominal times (each stage's timer starting a head start after the
    last send of the one before); `Trace.stages` marks where each later stage begins."""
    spec.check()
    prompts = _prompts(spec)
    random.Random(seed).shuffle(prompts)
    rng = np.random.default_rng(seed)
    requests: list[TraceRequest] = []
    gates: list[tuple[int, float]] = []
    start = 0.0
    for rate, seconds in spec.stages:
        if requests:
            start = requests[-1].arrival_s + STAGE_INTERVAL_S + HEAD_START_S
            gates.append((len(requests), start))
        if spec.load_type == CONSTANT:
            times = _constant_times(rng, rate, seconds, start)
        else:
            times = _stage_times(rng, rate, int(rate * seconds), start)
        for n, t in enumerate(times):
            length, blocks = prompts[n % len(prompts)]
            requests.append(TraceRequest(len(requests), t, length, spec.output_tokens, blocks))
    source = f"generated shared-prefix seed {seed}, {len(spec.stages)} {spec.load_type} stages"
    return Trace(tuple(requests), spec.block_tokens, source, tuple(gates))


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
