"""SGLang's multi-turn HiCache benchmark as a trace (sglang benchmark/hicache/bench_multiturn.py).

The benchmark runs `clients` conversations of `rounds` turns each. A client's first turn is a
request of `request_tokens` tokens; every later turn sends the whole history, all earlier requests
and answers, followed by a new request of `request_tokens`; every turn asks for exactly
`output_tokens` (`--request-length`, `--output-length`; its sampler's default range ratio 1.0
gives exactly those lengths). A sender pops one ready turn at a time, sleeping a Poisson gap of
rate `rate` between sends (`--request-rate`, `random.expovariate`), from a ready queue that pops a
random entry (`--ready-queue-policy random`, its default) or the oldest (`fifo`). At the start
every client's first turn is ready, in client order. With `--enable-round-barrier` a client's next
turn joins the queue only once the whole round has been answered; without it, once its own
answer is back.

A trace has no server, so answers are taken to come back before the client is picked again: a
client's next turn is ready as soon as its previous turn is sent (with the barrier: as soon as the
round's last turn is sent). Timestamps are send times. Each turn records its `round` (0 first,
as the benchmark numbers its per-round metrics). Block ids chain as in `kvtier.sim.workload`: a
turn keeps the ids of the previous prompt's full blocks; the block where the previous answer
begins, and everything after it, is new.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.errors import KvtierError
from kvtier.sim.ordered_pool import OrderedPool
from kvtier.sim.trace import (
    MAX_HASH_IDS,
    MAX_LENGTH,
    MAX_ROUND,
    MOONCAKE_BLOCK_TOKENS,
    TraceRequest,
)
from kvtier.sim.workload import Context, IdSource, advance, prompt_ids

if TYPE_CHECKING:
    import random

READY_QUEUE_POLICIES = ("random", "fifo")  # bench_multiturn.py ReadyQueue.pop
# bench_multiturn.py's argparse defaults: --num-clients, --num-rounds, --request-length,
# --output-length (and --ready-queue-policy random, --max-parallel 128)
BENCHMARK_DEFAULTS = {"clients": 256, "rounds": 5, "request_tokens": 512, "output_tokens": 64}
MAX_TURNS = 10_000_000  # clients x rounds
MAX_PROMPT_BLOCKS = 1 << 18  # hash ids of one line; the trace reader takes 262,144 of 20 digits


@dataclass(frozen=True, slots=True)
class MultiturnSpec:
    """The benchmark's settings, under its own names where it has them."""

    clients: int  # --num-clients
    rounds: int  # --num-rounds
    request_tokens: int  # --request-length
    output_tokens: int  # --output-length
    rate: float  # --request-rate, turns sent per second
    round_barrier: bool = False  # --enable-round-barrier
    ready_queue: str = "random"  # --ready-queue-policy
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def check(self) -> None:
        limits = (
            ("--clients", self.clients, 1),
            ("--rounds", self.rounds, 1),
            ("--request-tokens", self.request_tokens, 1),
            ("--output-tokens", self.output_tokens, 1),
            ("--block-tokens", self.block_tokens, 1),
        )
        for flag, value, low in limits:
            if value < low:
                raise KvtierError(f"{flag} must be at least {low}, got {value}")
        if self.rounds > MAX_ROUND + 1:
            raise KvtierError(f"--rounds must be at most {MAX_ROUND + 1:,}, got {self.rounds}")
        if self.clients * self.rounds > MAX_TURNS:
            raise KvtierError(
                f"--clients x --rounds must be at most {MAX_TURNS:,}, "
                f"got {self.clients * self.rounds:,}"
            )
        if self.last_prompt_tokens > MAX_LENGTH:
            raise KvtierError(
                f"the last round's prompt would hold {self.last_prompt_tokens:,} tokens "
                f"(rounds x request + (rounds - 1) x output); at most {MAX_LENGTH:,}"
            )
        last_blocks = -(-self.last_prompt_tokens // self.block_tokens)
        if last_blocks > MAX_PROMPT_BLOCKS:
            raise KvtierError(
                f"the last round's prompt would take {last_blocks:,} hash ids, more than the "
                f"{MAX_PROMPT_BLOCKS:,} a trace line holds: use a larger --block-tokens"
            )
        if self.hash_ids > MAX_HASH_IDS:
            raise KvtierError(
                f"the trace would hold more than {MAX_HASH_IDS:,} hash ids (clients x the blocks "
                "of every round's prompt): use fewer clients or rounds, or a larger --block-tokens"
            )
        if not self.rate > 0:
            raise KvtierError(f"--rate must be positive, got {self.rate}")
        if self.ready_queue not in READY_QUEUE_POLICIES:
            raise KvtierError(
                f"--ready-queue must be one of {', '.join(READY_QUEUE_POLICIES)}, "
                f"got {self.ready_queue!r}"
            )

    @property
    def last_prompt_tokens(self) -> int:
        return self.rounds * self.request_tokens + (self.rounds - 1) * self.output_tokens

    @property
    def hash_ids(self) -> int:
        """Hash ids the trace holds: every client's prompt of every round, in blocks."""
        per_client = 0
        for r in range(self.rounds):
            prompt = (r + 1) * self.request_tokens + r * self.output_tokens
            per_client += -(-prompt // self.block_tokens)
            if per_client * self.clients > MAX_HASH_IDS:
                break  # enough to refuse; stops a loop over a million rounds early
        return per_client * self.clients


def conversations(spec: MultiturnSpec) -> list[list[TraceRequest]]:
    """Every client's turns, first round first (rid and arrival time still to be given)."""
    spec.check()
    ids = IdSource()
    out: list[list[TraceRequest]] = []
    for _ in range(spec.clients):
        ctx = Context([])
        turns = []
        for turn in range(spec.rounds):
            prompt_len = ctx.length + spec.request_tokens
            blocks = prompt_ids(ctx, prompt_len, ids, spec.block_tokens)
            turns.append(TraceRequest(-1, 0.0, prompt_len, spec.output_tokens, blocks, turn))
            advance(ctx, blocks, prompt_len, spec.output_tokens, spec.block_tokens)
        out.append(turns)
    return out


class ReadyQueue:
    """The benchmark's ready queue (`ReadyQueue`) and round barrier, over client numbers."""

    def __init__(self, spec: MultiturnSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        # every client's first turn, in client order; popped at random indices, so kept in an
        # OrderedPool (a list's pop(i) would make ten million turns quadratic)
        self.ready: OrderedPool[int] = OrderedPool(range(spec.clients))
        self.held: OrderedPool[int] = OrderedPool()  # next-round turns the barrier holds back
        self.sent = [0] * spec.clients

    def pop(self) -> int | None:
        """The client whose next turn goes out now, or None when no turn is ready."""
        if not self.ready:
            return None
        pick = self.rng.randrange(len(self.ready)) if self.spec.ready_queue == "random" else 0
        client = self.ready.pop(pick)
        self.sent[client] += 1
        return client

    def answered(self, client: int, in_flight: int, more: bool = True) -> None:
        """`client`'s turn came back (`more`: its conversation goes on) with `in_flight` turns
        still out; with the barrier, the next round is released once the round is done."""
        if more and self.sent[client] < self.spec.rounds:
            (self.held if self.spec.round_barrier else self.ready).append(client)
        if not self.ready and not in_flight:
            self.ready, self.held = self.held, OrderedPool()


def multiturn(spec: MultiturnSpec, seed: int) -> tuple[TraceRequest, ...]:
    """Every turn of every client in send order, the same for the same seed; each answer is
    taken to be back before the next send."""
    turns = conversations(spec)
    import random  # only generating needs it

    rng = random.Random(seed)
    queue = ReadyQueue(spec, rng)
    out: list[TraceRequest] = []
    t = 0.0
    while (client := queue.pop()) is not None:
        turn = turns[client][queue.sent[client] - 1]
        out.append(dataclasses.replace(turn, rid=len(out), arrival_s=round(t, 3)))
        queue.answered(client, in_flight=0)
        t += rng.expovariate(spec.rate)
    return tuple(out)
