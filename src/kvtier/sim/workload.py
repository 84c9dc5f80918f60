"""Seeded synthetic workloads, written in the Mooncake trace format.

Ids follow Mooncake's meaning: a hash id names a whole prefix ending at a 512-token block, so two
prompts share a block id only when they share every token up to the end of that block. A session
carries its context (prompt plus answer) into the next turn: the full blocks it already had keep
their ids, everything after them (the old partial block included) gets fresh ids.

Kinds:
  chat           multi-turn conversations; each turn appends the last answer and a new message
  system-prompt  single-turn requests over a few long shared system prompts
  agent          tool-calling loops: many quick steps, each appending a tool result
  doc-qa         questions over a small set of long documents (popular documents asked more)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.errors import KvtierError
from kvtier.sim.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest

if TYPE_CHECKING:
    import random

BLOCK = MOONCAKE_BLOCK_TOKENS


@dataclass(slots=True)
class Context:
    """A token stream whose full blocks carry known ids."""

    full_ids: list[int]
    length: int = 0


class IdSource:
    def __init__(self) -> None:
        self.next_id = 0

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids


def prompt_ids(ctx: Context, prompt_len: int, ids: IdSource, block: int = BLOCK) -> tuple[int, ...]:
    """Hash ids of a prompt that starts with `ctx` and is `prompt_len` tokens long."""
    kept = ctx.full_ids[: min(ctx.length, prompt_len) // block]
    return tuple(kept + ids.fresh(math.ceil(prompt_len / block) - len(kept)))


def advance(
    ctx: Context, blocks: tuple[int, ...], prompt_len: int, output_len: int, block: int = BLOCK
) -> None:
    """The next turn's context: this prompt followed by its answer."""
    ctx.full_ids = list(blocks[: prompt_len // block])
    ctx.length = prompt_len + output_len


def _lognormal(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, rng.lognormvariate(math.log(median), sigma))))


# (arrival_s, session, prompt_len, output_len, blocks) before ids are sorted into rids
_Row = tuple[float, int, int, int, tuple[int, ...]]


def _sessions(
    rng: random.Random,
    n: int,
    rate: float,
    ids: IdSource,
    turns: Callable[[], int],
    first_len: Callable[[], int],
    step_len: Callable[[], int],
    output_len: Callable[[], int],
    gap_s: Callable[[], float],
    prefix: tuple[int, ...] = (),
) -> list[_Row]:
    """Sessions arriving as a Poisson process, each a chain of growing prompts."""
    rows: list[_Row] = []
    start = 0.0
    session = 0
    while len(rows) < n:
        start += rng.expovariate(rate)
        ctx = Context(list(prefix), len(prefix) * BLOCK)
        t = start
        for turn in range(turns()):
            if len(rows) >= n:
                break
            prompt_len = ctx.length + (step_len() if turn else first_len())
            out = output_len()
            blocks = prompt_ids(ctx, prompt_len, ids)
            rows.append((round(t, 3), session, prompt_len, out, blocks))
            advance(ctx, blocks, prompt_len, out)
            t += gap_s()
        session += 1
    return rows


def chat(rng: random.Random, n: int, rate: float) -> list[_Row]:
    ids = IdSource()
    return _sessions(
        rng,
        n,
        rate,
        ids,
        turns=lambda: 1 + int(rng.expovariate(1 / 4)),
        first_len=lambda: _lognormal(rng, 1500, 0.8, 32, 16000),
        step_len=lambda: _lognormal(rng, 300, 0.9, 8, 8000),
        output_len=lambda: _lognormal(rng, 300, 0.7, 8, 4000),
        gap_s=lambda: 5 + rng.expovariate(1 / 40),
    )


def agent(rng: random.Random, n: int, rate: float) -> list[_Row]:
    ids = IdSource()
    tools = tuple(ids.fresh(4))  # a tool-definition preamble every agent shares
    return _sessions(
        rng,
        n,
        rate,
        ids,
        turns=lambda: rng.randint(8, 40),
        first_len=lambda: _lognormal(rng, 1000, 0.6, 16, 8000),
        step_len=lambda: _lognormal(rng, 600, 1.0, 16, 16000),
        output_len=lambda: _lognormal(rng, 120, 0.6, 4, 2000),
        gap_s=lambda: 1 + rng.expovariate(1 / 3),
        prefix=tools,
    )


# a length drawn as _lognormal's (median, sigma, lo, hi)
_Lognormal = tuple[float, float, int, int]


@dataclass(frozen=True, slots=True)
class _SharedPrefixes:
    """Single-turn requests arriving as a Poisson process, each one of `count(n)` prefixes of
    `blocks` (lo, hi) blocks (the k-th picked with weight 1/k, Zipf-like) and a fresh tail."""

    count: Callable[[int], int]
    blocks: tuple[int, int]
    tail_len: _Lognormal
    output_len: _Lognormal

    def rows(self, rng: random.Random, n: int, rate: float) -> list[_Row]:
        ids = IdSource()
        prefixes = [tuple(ids.fresh(rng.randint(*self.blocks))) for _ in range(self.count(n))]
        weights = [1 / (k + 1) for k in range(len(prefixes))]
        rows: list[_Row] = []
        t = 0.0
        for i in range(n):
            t += rng.expovariate(rate)
            prefix = rng.choices(prefixes, weights)[0]
            prompt_len = len(prefix) * BLOCK + _lognormal(rng, *self.tail_len)
            blocks = prompt_ids(Context(list(prefix), len(prefix) * BLOCK), prompt_len, ids)
            rows.append((round(t, 3), i, prompt_len, _lognormal(rng, *self.output_len), blocks))
        return rows


SYSTEM_PROMPT = _SharedPrefixes(lambda n: 8, (2, 8), (200, 0.8, 8, 4000), (200, 0.7, 8, 2000))
DOC_QA = _SharedPrefixes(
    lambda n: max(4, n // 50), (16, 64), (80, 0.6, 4, 1000), (250, 0.6, 8, 2000)
)


GENERATORS: dict[str, Callable[[random.Random, int, float], list[_Row]]] = {  # kind -> rows
    "chat": chat,
    "system-prompt": SYSTEM_PROMPT.rows,
    "agent": agent,
    "doc-qa": DOC_QA.rows,
}


def generate(kind: str, requests: int, seed: int, rate: float = 1.0) -> tuple[TraceRequest, ...]:
    """`requests` requests of workload `kind`, the same for the same seed; `rate` sessions/s."""
    if kind not in GENERATORS:
        raise KvtierError(f"unknown workload {kind!r}; choose one of {', '.join(GENERATORS)}")
    if requests < 1:
        raise KvtierError("--requests must be at least 1")
    if not rate > 0:
        raise KvtierError("--rate must be positive")
    import random  # only generating needs it; `kvtier --help` lists the kinds without it

    rows = GENERATORS[kind](random.Random(seed), requests, rate)
    rows.sort(key=lambda row: (row[0], row[1]))
    return tuple(
        TraceRequest(rid, t, prompt_len, out, blocks)
        for rid, (t, _, prompt_len, out, blocks) in enumerate(rows)
    )
