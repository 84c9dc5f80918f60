"""The ledger: how one GPU of a deployment is divided, item by item, each with its source.

SGLang (Era B), one GPU, left to right in the order memory is taken:

    0                                                                  card (nvidia-smi)
    |-- before load --|---- weights ----|--- KV pool ---|------------ reserve ------------|
     context, NCCL,     free_before      (tokens+page)    free_before * (1 - fraction)
     driver             - free_after      x cell           + page rounding; holds draft
                                                           weights, draft KV, req_to_token,
                                                           CUDA graphs, then stays free

vLLM (V1), one GPU:

    0                                         total x utilization                total
    |-- weights --|-- activation --|-- non-torch --|-- graphs --|-- KV pool --|~|-- outside --|
                    profile_run      NCCL, backend    >= v0.21     blocks x      total x
                    torch peak       buffers          estimate     block bytes   (1 - util)

Items are per GPU in GiB (2**30 bytes), as both engines print them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.figures import EngineFigures


@dataclass(frozen=True, slots=True)
class LedgerItem:
    item: str
    gib: float
    source: str  # the formula (upstream function) or log line the figure comes from
    exact: bool  # False: estimated, see the source for the stated range


@dataclass(frozen=True, slots=True)
class Concurrency:
    """How many requests of `context` tokens the GPU KV pool holds at once."""

    context: int
    requests: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True, slots=True)
class Input:
    name: str
    value: str
    origin: str  # "launch command", "kvtier flag", "measured", "catalog", "default: <rule>"


@dataclass(frozen=True, slots=True)
class HostPool:
    """A host-RAM KV tier (SGLang HiCache), per rank and for the node."""

    tokens: int
    bytes_per_rank: int
    bytes_per_node: int
    source: str


@dataclass(frozen=True, slots=True)
class Description:
    """An engine's ledger in words: its input rows, items and notes, the GiB it leaves free at the
    end (SGLang: of the memory free before load; vLLM: outside the budget once CUDA graphs are
    captured) and the pool formula with its numbers in it."""

    inputs: tuple[Input, ...]
    items: tuple[LedgerItem, ...]
    notes: tuple[str, ...]
    free_end: float
    pool_formula: str


@dataclass(frozen=True, slots=True)
class Placement:
    """Which engine serves which model on which GPUs, split how: a ledger's first fields, and
    plan's JSON keys in that order."""

    engine: str
    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int


@dataclass(frozen=True, slots=True)
class Ledger(Placement):
    era: str
    items: tuple[LedgerItem, ...]
    kv_tokens: int
    kv_tokens_range: tuple[int, int] | None
    kv_bytes_per_token: int
    page_size: int
    context_length: int
    mem_fraction: float
    max_running_requests: int | None
    concurrency: tuple[Concurrency, ...]
    inputs: tuple[Input, ...]
    figures: EngineFigures  # what advise and the simulator re-read, per engine
    notes: tuple[str, ...] = ()
    host_pool: HostPool | None = None
    pool_formula: str = ""  # the pool formula with this ledger's numbers in it
    # why the count is a range even where every input is measured (vLLM PP: the stages the log
    # prints no figures for); also among `notes`
    range_why: str = ""
    # budget bytes one logged token stands for, where the engine's count is not budget /
    # kv_bytes_per_token (vLLM from v0.21: int(max_concurrency x max_model_len)); None: it is
    logged_token_bytes: int | None = None

    @property
    def count_cell(self) -> int:
        """The bytes the log's budget over its count should come to."""
        return self.logged_token_bytes or self.kv_bytes_per_token

    @property
    def exact(self) -> bool:
        return self.kv_tokens_range is None

    def item(self, name: str) -> LedgerItem:
        for it in self.items:
            if it.item == name:
                return it
        raise KeyError(name)


DEFAULT_CONTEXTS = (8192, 32768, 131072)


def context_lengths(requested: tuple[int, ...] | None, model_max: int) -> tuple[int, ...]:
    """The context lengths to report concurrency at: the requested ones, or 8k/32k/128k + max."""
    if requested:
        return tuple(sorted(set(requested)))
    return tuple(sorted({c for c in DEFAULT_CONTEXTS if c < model_max} | {model_max}))
