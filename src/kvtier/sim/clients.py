"""SGLang's multi-turn benchmark run against the simulated server (closed loop).

`benchmark/hicache/bench_multiturn.py` sends a turn only when the client's previous turn has been
answered: its sender wakes at Poisson times of the request rate (`random.expovariate`), and each
time, unless `--max-parallel` turns are out (then it looks again 0.05 s later), pops one ready
turn, if any; the answer puts the client's next turn in the ready queue (with the round barrier,
once every turn of the round has been answered). Here the answer is the simulated request
finishing, so how fast the server answers sets when the next turns go out, as on a real server.
A turn the server rejects ends its conversation. The benchmark's pause after a barrier is not
modelled.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from kvtier.sim.multiturn import MultiturnSpec, ReadyQueue, conversations
from kvtier.sim.trace import TraceRequest

BUSY_RETRY_S = 0.05  # the sender's sleep while --max-parallel turns are out


@dataclass(frozen=True, slots=True)
class ClientLoop:
    """The benchmark's settings; every run `start`s its own clients."""

    spec: MultiturnSpec
    seed: int
    max_parallel: int  # --max-parallel

    @property
    def block_size(self) -> int:
        return self.spec.block_tokens

    @property
    def turns(self) -> int:
        return self.spec.clients * self.spec.rounds

    def start(self) -> Clients:
        return Clients(self.spec, self.seed, self.max_parallel)


class Clients:
    """The benchmark's clients as an arrival source for `kvtier.sim.simulation`."""

    def __init__(self, spec: MultiturnSpec, seed: int, max_parallel: int) -> None:
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
        self.spec = spec
        self.turns = conversations(spec)
        self.rng = random.Random(seed)
        self.queue = ReadyQueue(spec, self.rng)
        self.max_parallel = max_parallel
        self.left = spec.clients * spec.rounds  # turns neither sent nor given up
        self.in_flight = 0
        self.sent = 0
        self._client_of: dict[int, int] = {}
        self._next = 0.0

    def next_time(self) -> float:
        """When the sender next wakes; inf once every turn is out or given up."""
        return self._next if self.left else math.inf

    def take(self, now: float) -> TraceRequest | None:
        """The turn the sender sends at `now`, numbered in send order, or None."""
        if self.in_flight >= self.max_parallel:
            self._next = now + BUSY_RETRY_S
            return None
        req = None
        client = self.queue.pop()
        if client is not None:
            turn = self.turns[client][self.queue.sent[client] - 1]
            req = dataclasses.replace(turn, rid=self.sent, arrival_s=now)
            self._client_of[self.sent] = client
            self.sent += 1
            self.in_flight += 1
            self.left -= 1
        self._next = now + self.rng.expovariate(self.spec.rate)
        return req

    def settled(self, rid: int, ok: bool) -> None:
        """Turn `rid` was answered (`ok`) or rejected; a rejected turn ends its conversation."""
        client = self._client_of.pop(rid)
        self.in_flight -= 1
        if not ok:
            self.left -= self.spec.rounds - self.queue.sent[client]
        self.queue.answered(client, self.in_flight, more=ok)
