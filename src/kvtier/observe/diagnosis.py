"""Whether KV space is what holds a server back, from what its samples showed.

kv-bound       requests waited while the pool was at least KV_FULL full, or the engine
               preempted (vLLM) / retracted (SGLang) running requests, or swapped them out
compute-bound  requests waited while the pool had room
not-saturated  no request waited
unknown        no sample said how full the pool was when requests waited, or no samples
"""

from __future__ import annotations

from dataclasses import dataclass

KV_FULL = 0.90

KV_BOUND = "kv-bound"
COMPUTE_BOUND = "compute-bound"
NOT_SATURATED = "not-saturated"
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Evidence:
    """A log line (or scrape) that shows a condition."""

    line: int | None
    text: str


@dataclass(frozen=True, slots=True)
class Counts:
    """How many samples showed each condition."""

    samples: int
    queue_seen: int  # samples that stated the queue
    waiting_full: int  # queued > 0 with kv usage >= KV_FULL
    waiting_room: int  # queued > 0 with kv usage < KV_FULL
    waiting_unknown: int  # queued > 0, pool use never stated
    swapped: int  # samples with requests swapped out (vLLM V0)
    preemptions: int


@dataclass(frozen=True, slots=True)
class Diagnosis:
    verdict: str
    reason: str
    next_steps: tuple[str, ...]


def _samples(n: int) -> str:
    return f"{n:,} sample" + ("" if n == 1 else "s")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def diagnose(c: Counts) -> Diagnosis:
    if c.samples == 0 and c.preemptions == 0:
        return Diagnosis(UNKNOWN, "no periodic serving lines or metrics were found", ())
    if c.preemptions or c.waiting_full or c.swapped:
        parts = []
        if c.waiting_full:
            parts.append(
                f"requests waited while the KV pool was at least {_pct(KV_FULL)} full "
                f"in {c.waiting_full:,} of {_samples(c.samples)}"
            )
        if c.preemptions:
            parts.append(f"{c.preemptions:,} running requests were preempted or retracted")
        if c.swapped:
            parts.append(f"requests were swapped out in {_samples(c.swapped)}")
        return Diagnosis(
            KV_BOUND,
            "; ".join(parts),
            (
                "more KV space is the lever: `kvtier advise` lists the options (FP8 KV cache, "
                "a higher memory fraction, a host-RAM tier) with the tokens each gives",
                "`kvtier simulate` replays a trace against a larger pool or a host tier to "
                "show the hit rate and TTFT gained",
            ),
        )
    if c.waiting_room:
        return Diagnosis(
            COMPUTE_BOUND,
            f"requests waited while the KV pool had room (below {_pct(KV_FULL)}) in "
            f"{c.waiting_room:,} of {_samples(c.samples)}",
            (
                "more KV space would not shorten the queue: the limit is compute (prefill chunk "
                "size, max running requests, or GPUs)",
                "a higher prefix hit rate saves prefill compute: `kvtier simulate` shows what "
                "a host-RAM tier would add to it",
            ),
        )
    if c.waiting_unknown:
        return Diagnosis(
            UNKNOWN,
            f"requests waited in {_samples(c.waiting_unknown)}, but no line said how full "
            "the KV pool was",
            ("read the server's /metrics (`kvtier observe URL`) for its KV usage",),
        )
    if not c.queue_seen:
        return Diagnosis(
            UNKNOWN,
            f"none of {_samples(c.samples)} said how many requests waited",
            ("read the server's periodic log lines or a fuller /metrics scrape",),
        )
    return Diagnosis(
        NOT_SATURATED,
        f"no request waited in {_samples(c.queue_seen)}",
        (
            "the server has headroom; `kvtier plan` shows how much KV it could give up "
            "(a lower memory fraction) or how many more requests it holds",
        ),
    )
