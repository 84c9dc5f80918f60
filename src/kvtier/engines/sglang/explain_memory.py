"""What an SGLang startup log's memory lines say: the free memory before and after the weights
load (min over ranks), the fraction, the card when no line states it, and the KV count.

`Load weight begin/end` print the free memory (`avail mem`) and what the weights took (`mem
usage`); `KV Cache is allocated. #tokens: N` the count, or `max_total_num_tokens=N` in the
summary. When `server_args` states no `mem_fraction_static`, the default rule reads the card,
estimated as free before load + the before-load overheads (estimate.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines import estimate
from kvtier.engines.explain import LogMemory
from kvtier.engines.settings import Settings, to_fraction, to_int
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, stated


@dataclass(frozen=True, slots=True)
class CardEstimate:
    """A card size estimated as free before load + the before-load overheads (estimate.py)."""

    gib: float
    half: float  # half the width of the overheads' stated range
    source: str


@dataclass(frozen=True, slots=True)
class SGLangMemory:
    free_before: Fact[float]  # GiB, min over ranks
    free_after: Fact[float]
    usage: Fact[float]  # GiB the target weights took: printed, or before - after
    before_inferred: bool
    fraction: Fact[float] | None  # None: not printed, the engine's default rule applies
    max_total_tokens: int | None
    card: CardEstimate | None = None  # the card, estimated from free-before-load when needed


def read_memory(
    startup: SGLangStartup, settings: Settings, parallel: int
) -> LogMemory[SGLangMemory]:
    """The free memory before and after the weights load, the fraction, the card when it must be
    estimated, and the count the log states."""
    memory = _free_memory(startup, settings, parallel)
    notes: tuple[str, ...] = ()
    estimated: tuple[tuple[str, Fact[object]], ...] = ()
    if memory is not None and memory.card is not None:
        card = memory.card
        estimated = (("card memory (GiB)", stated(round(card.gib, 2), card.source)),)
        implied = implied_fraction(startup, memory.free_before.value, memory.free_after.value)
        if implied is not None:
            notes = (
                "mem_fraction_static is not printed; the engine's default rule is applied to "
                f"the estimated card, and the fraction that reproduces the logged pool is "
                f"about {implied:.3f}",
            )
    return LogMemory(memory, logged_count(startup), notes, estimated)


def _free_memory(startup: SGLangStartup, settings: Settings, parallel: int) -> SGLangMemory | None:
    loads = [w for w in startup.weights_by_rank() if w.avail_gib is not None]
    if not loads:
        return None
    after_load = min(loads, key=lambda w: w.avail_gib or 0.0)
    assert after_load.avail_gib is not None
    free_after = after_load.fact(after_load.avail_gib)
    for load in loads:
        if load.avail_gib is not None and load.avail_gib < 0:
            raise KvtierError(
                f"line {load.line}: avail mem={load.avail_gib:.2f} GB is negative; SGLang "
                "prints the free memory, never below 0"
            )
    begin = startup.free_before_load()
    sums = [w for w in loads if w.usage_gib is not None]
    if begin is not None:
        free_before, inferred = begin, False
        usage = stated(begin.value - free_after.value, "free before - free after load")
    elif sums:
        # the engine's MIN over ranks of the free memory before load, rank by rank
        load = min(sums, key=lambda w: (w.avail_gib or 0.0) + (w.usage_gib or 0.0))
        assert load.usage_gib is not None and load.avail_gib is not None
        usage = load.fact(load.usage_gib)
        free_before = stated(
            round(load.avail_gib + load.usage_gib, 2),
            f"inferred: avail mem {load.avail_gib:.2f} + mem usage "
            f"{load.usage_gib:.2f} GiB (line {load.line})",
        )
        inferred = True
    else:
        return None
    if free_before.value <= 0:
        raise KvtierError(
            f"free memory before load is {free_before.value:.2f} GiB ({free_before.where}); "
            "the log is cut or mangled"
        )
    fraction = settings.get("mem_fraction", to_fraction)
    card = None
    if fraction is None and not isinstance(settings.flags.get("gpu"), str):
        card = _card_from_free(free_before.value, parallel)
    cap = settings.get("max_total_tokens", to_int)
    return SGLangMemory(
        free_before, free_after, usage, inferred, fraction, cap.value if cap else None, card
    )


def _card_from_free(free_before: float, parallel: int) -> CardEstimate:
    """The card the default-fraction rule reads, as free before load + what was taken before
    it: driver reserve, CUDA context and, under TP/PP, NCCL buffers (estimate.py ranges)."""
    parts = [estimate.DRIVER_RESERVED_GIB, estimate.CUDA_CONTEXT_GIB]
    if parallel > 1:
        parts.append(estimate.COMM_BUFFERS_GIB)
    low = free_before + sum(p[1] for p in parts)
    high = free_before + sum(p[2] for p in parts)
    value = free_before + sum(p[0] for p in parts)
    return CardEstimate(
        value,
        (high - low) / 2,
        f"estimated: free before load {free_before:.2f} + driver, CUDA context"
        + (", NCCL" if parallel > 1 else "")
        + f" ({low:.2f}-{high:.2f} GiB); no server_args line states mem_fraction_static",
    )


def implied_fraction(startup: SGLangStartup, before: float, after: float) -> float | None:
    """The fraction that gives the logged pool: solves rest = after - before x (1 - f), with the
    pool's bytes from its own 'KV size' figure (two decimals of GB, so about three digits)."""
    observed = logged_count(startup)
    pools = [p for p in startup.pools_by_rank() if p.total_gib is not None and p.tokens]
    if observed is None or before <= 0 or not pools:
        return None
    pool = min(pools, key=lambda p: p.tokens or 0)
    assert pool.total_gib is not None and pool.tokens
    rest = pool.total_gib * observed.value / pool.tokens
    return 1.0 - (after - rest) / before


def logged_count(startup: SGLangStartup) -> Fact[int] | None:
    counted = [p for p in startup.pools_by_rank() if p.tokens is not None]
    if counted:
        pool = min(counted, key=lambda p: p.tokens or 0)
        assert pool.tokens is not None
        return pool.fact(pool.tokens)
    if startup.summary is not None:
        return startup.summary.fact(startup.summary.max_total_num_tokens)
    return None
