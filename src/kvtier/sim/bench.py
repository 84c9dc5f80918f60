"""Serving benchmarks' random workloads, run closed loop against the simulated server.

`sglang.bench_serving --dataset-name random` (v0.5.0 - v0.5.9 read): `np.random.seed(seed)` then
every input length, then every output length, with the legacy global generator:
`np.random.randint(max(int(L x r), 1), L + 1, size=N)`, so lengths fall in [L x r, L]
(`--random-range-ratio`, default 0.0); outputs up to v0.5.6 from `int(O x r)` (0 at r = 0),
from v0.5.7 (`compute_random_lens`) from `max(int(O x r), 1)`. The reported input length is
the draw less the tokenizer's special tokens (`num_special_tokens_to_add`), which the server
adds back. A finite `--request-rate` spaces requests by `np.random.exponential(1 / rate)` from
the same generator, after the length draws.

`vllm bench serve --dataset-name random` (v0.11 - v0.32 read, `benchmarks/datasets/utils.py`
`get_sampling_params`): `np.random.default_rng(seed)`, input lengths
`integers(floor(L' x (1 - r)), ceil(L' x (1 + r)) + 1)` over L' = L - special tokens, then output
lengths over [max(floor(O x (1 - r)), 1), max(ceil(O x (1 + r)), 1)], r in [0, 1).

Both benchmarks send at most `--max-concurrency` requests at once (an asyncio semaphore taken in
send order); a request's clock (TTFT) starts when it holds the semaphore. The prompts share no
prefix (each block a new id).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kvtier.errors import KvtierError
from kvtier.sim.trace import MAX_HASH_IDS, MOONCAKE_BLOCK_TOKENS, TraceRequest

Client = Literal["sglang", "vllm"]
CLIENTS: tuple[Client, ...] = ("sglang", "vllm")


@dataclass(frozen=True, slots=True)
class RandomBench:
    """One benchmark run's settings, as the tool's flags give them."""

    client: Client
    input_tokens: int  # --random-input-len
    output_tokens: int  # --random-output-len
    range_ratio: float  # --random-range-ratio
    requests: int  # --num-prompts
    seed: int
    max_concurrency: int | None = None  # None: no cap
    request_rate: float = math.inf  # requests/s; inf sends them all at once
    special_tokens: int = 0  # the tokenizer's num_special_tokens_to_add()
    block_size: int = MOONCAKE_BLOCK_TOKENS
    zero_outputs: bool = False  # sglang up to v0.5.6: output lengths drawn from 0

    def check(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise KvtierError(f"--max-concurrency must be at least 1, got {self.max_concurrency}")
        low = 0.0
        high = 1.0 if self.client == "sglang" else 1.0 - 1e-12
        if not low <= self.range_ratio <= high:
            limit = "[0, 1]" if self.client == "sglang" else "[0, 1)"
            raise KvtierError(
                f"--range-ratio must be in {limit} for {self.client}'s benchmark, "
                f"got {self.range_ratio}"
            )
        if self.special_tokens >= self.input_tokens:
            raise KvtierError(
                f"--special-tokens {self.special_tokens} leaves no prompt of "
                f"--input-tokens {self.input_tokens}"
            )
        # the longest prompt a draw can give (vllm: L(1 + R)), in unique blocks, every request
        longest = math.floor(self.input_tokens * (1 + (self.client == "vllm") * self.range_ratio))
        blocks = math.ceil((longest + self.special_tokens) / self.block_size) * self.requests
        if blocks > MAX_HASH_IDS:
            raise KvtierError(
                f"--requests {self.requests:,} x --input-tokens {self.input_tokens:,} can be "
                f"{blocks:,} blocks of {self.block_size} tokens, more than the {MAX_HASH_IDS:,} "
                "a generated trace holds"
            )

    def lengths(self) -> tuple[list[int], list[int]]:
        """(input lengths as the benchmark reports them, output lengths), request by request."""
        self.check()
        n, r = self.requests, self.range_ratio
        if self.client == "sglang":
            ins, outs = self._legacy_draws(np.random.RandomState(self.seed))
            return [max(0, i - self.special_tokens) for i in ins], outs
        rng = np.random.default_rng(self.seed)
        real = max(0, self.input_tokens - self.special_tokens)
        drawn = rng.integers(math.floor(real * (1 - r)), math.ceil(real * (1 + r)) + 1, size=n)
        o_low = max(math.floor(self.output_tokens * (1 - r)), 1)
        o_high = max(math.ceil(self.output_tokens * (1 + r)), 1)
        answers = rng.integers(o_low, o_high + 1, size=n)
        return [int(i) for i in drawn], [int(o) for o in answers]

    def _legacy_draws(self, legacy: np.random.RandomState) -> tuple[list[int], list[int]]:
        """sglang's `compute_random_lens` for inputs, then outputs, on the global generator."""
        n, r = self.requests, self.range_ratio
        ins = legacy.randint(max(int(self.input_tokens * r), 1), self.input_tokens + 1, n)
        low = int(self.output_tokens * r)
        outs = legacy.randint(low if self.zero_outputs else max(low, 1), self.output_tokens + 1, n)
        return [int(i) for i in ins], [int(o) for o in outs]

    def send_times(self) -> list[float]:
        """When the benchmark's generator yields each request (before the semaphore); vLLM's
        finite rates are drawn as sglang's are (not its own generator)."""
        if math.isinf(self.request_rate):
            return [0.0] * self.requests
        legacy = np.random.RandomState(self.seed)
        self._legacy_draws(legacy)  # the length draws come first
        gaps = legacy.exponential(1.0 / self.request_rate, self.requests - 1)
        return [0.0, *np.cumsum(gaps).tolist()]

    def requests_list(self) -> list[TraceRequest]:
        """The requests the server sees: the prompt with its special tokens, unique blocks."""
        ins, outs = self.lengths()
        out: list[TraceRequest] = []
        next_block = 0
        for rid, (i, o, t) in enumerate(zip(ins, outs, self.send_times(), strict=True)):
            prompt = max(1, i + (self.special_tokens if self.client == "sglang" else 0))
            blocks = math.ceil(prompt / self.block_size)
            ids = tuple(range(next_block, next_block + blocks))
            next_block += blocks
            out.append(TraceRequest(rid, t, prompt, max(o, 1), ids))
        return out

    def summary(self) -> dict[str, object]:
        """The settings and the totals the tool prints (`#Input tokens`, `#Output tokens`)."""
        ins, outs = self.lengths()
        return {
            "client": self.client,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "range_ratio": self.range_ratio,
            "requests": self.requests,
            "seed": self.seed,
            "max_concurrency": self.max_concurrency,
            "request_rate": None if math.isinf(self.request_rate) else self.request_rate,
            "special_tokens": self.special_tokens,
            "total_input_tokens": sum(ins),
            "total_output_tokens": sum(outs),
        }

    @property
    def turns(self) -> int:
        return self.requests

    def start(self) -> BenchClients:
        return BenchClients(self.requests_list(), self.max_concurrency)


class BenchClients:
    """The benchmark's sender as an arrival source: request i goes out at its generator time,
    or when a semaphore slot frees, whichever is later, in order."""

    # NOTE: a freed slot makes `next_time` finite again; the simulation then sends at `now`

    def __init__(self, requests: list[TraceRequest], max_concurrency: int | None) -> None:
        self.requests = requests
        self.cap = max_concurrency or len(requests)
        self.in_flight = 0
        self.left = len(requests)
        self._next = 0

    def next_time(self) -> float:
        """When the next request goes out; inf while every slot is taken (the simulation asks
        again when a request settles)."""
        if self._next >= len(self.requests) or self.in_flight >= self.cap:
            return math.inf
        return self.requests[self._next].arrival_s

    def take(self, now: float) -> TraceRequest | None:
        if self.next_time() > now:
            return None
        req = self.requests[self._next]
        self._next += 1
        self.in_flight += 1
        self.left -= 1
        if req.arrival_s == now:
            return req
        return TraceRequest(req.rid, now, req.input_len, req.output_len, req.blocks, req.round)

    def settled(self, rid: int, ok: bool) -> None:
        self.in_flight -= 1
