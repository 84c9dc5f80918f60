"""What `kvtier plan --json` and `kvtier advise --json` print, as frozen dataclasses.

A plan is its ledger's figures (GiB to 4 decimals, requests to 2); advise adds the options and
the answer to a target. Keys are the field names in declared order (`kvtier.payload`): a new
key is one field, placed where it goes, and one argument where the payload is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvtier.engines.deployment import Deployment
from kvtier.engines.ledger import Concurrency, HostPool, Input, Ledger, Placement
from kvtier.errors import DoesNotStart, Setting
from kvtier.ledger.advise import Option
from kvtier.ledger.target import TargetAnswer
from kvtier.payload import INLINE, OMITTED, Count, Positive, Share, copied

PLAN_UNITS = "GiB (2**30 bytes) per GPU"


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One item of one GPU; explain tags each row with its `part` of the card."""

    item: str
    gib: float
    source: str
    exact: bool
    part: str | None = field(default=None, metadata=OMITTED)


@dataclass(frozen=True, slots=True)
class PlanPayload(Placement):
    starts: bool
    era: str
    units: str
    kv_tokens: Count
    kv_tokens_range: tuple[Count, Count] | None
    kv_bytes_per_token: Count
    page_size: int
    context_length: Positive
    mem_fraction: Share
    max_running_requests: Count | None
    ledger: tuple[LedgerRow, ...]
    concurrency: tuple[Concurrency, ...]  # requests to 2 decimals
    host_pool: HostPool | None
    inputs: tuple[Input, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RefusalPayload:
    """A deployment the engine would refuse to start: its message, the KV tokens it sized
    before refusing (null when it refused before sizing a pool) and the nearest setting that
    starts (null when no one flag does)."""

    engine: str
    model: str
    gpu: str | None
    tp: int
    pp: int
    starts: bool
    message: str
    kv_tokens: Count | None
    kv_tokens_range: tuple[Count, Count] | None
    would_start: Setting | None


@dataclass(frozen=True, slots=True)
class OptionPayload:
    """A way to more KV capacity; the figures it states (GB, seconds, checks as 1.0 / 0.0)
    follow its cost, each key present only where the option has it."""

    name: str
    flags: tuple[str, ...]
    kv_tokens: Count | None
    concurrency: dict[str, float]
    cost: str
    max_safe_fraction: float | None = field(default=None, metadata=OMITTED)
    fraction: float | None = field(default=None, metadata=OMITTED)
    free_at_end_gib: float | None = field(default=None, metadata=OMITTED)
    host_tokens: float | None = field(default=None, metadata=OMITTED)
    host_gb_per_rank: float | None = field(default=None, metadata=OMITTED)
    host_gb_per_node: float | None = field(default=None, metadata=OMITTED)
    engine_check_ok: float | None = field(default=None, metadata=OMITTED)
    node_check_ok: float | None = field(default=None, metadata=OMITTED)
    load_seconds: float | None = field(default=None, metadata=OMITTED)
    freed_gib: float | None = field(default=None, metadata=OMITTED)


@dataclass(frozen=True, slots=True)
class TargetPayload:
    requests: int
    context: int
    tokens_needed: int
    reason: str
    option: OptionPayload | None


@dataclass(frozen=True, slots=True)
class AdvisePayload:
    plan: PlanPayload = field(metadata=INLINE)
    options: tuple[OptionPayload, ...] = ()
    target: TargetPayload | None = None


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def plan_payload(ledger: Ledger) -> PlanPayload:
    """The ledger's own figures, its items and concurrency rounded."""
    return copied(
        PlanPayload,
        ledger,
        starts=True,
        units=PLAN_UNITS,
        ledger=tuple(LedgerRow(i.item, round(i.gib, 4), i.source, i.exact) for i in ledger.items),
        concurrency=tuple(
            Concurrency(c.context, round(c.requests, 2), _r(c.low), _r(c.high))
            for c in ledger.concurrency
        ),
    )


def refusal_payload(deployment: Deployment, refusal: DoesNotStart) -> RefusalPayload:
    return copied(
        RefusalPayload,
        deployment,
        engine=deployment.engine.value,
        starts=False,
        message=str(refusal),
        kv_tokens=refusal.tokens,
        kv_tokens_range=refusal.tokens_range,
        would_start=refusal.would_start,
    )


def option_payload(o: Option) -> OptionPayload:
    return OptionPayload(
        name=o.name,
        flags=o.flags,
        kv_tokens=o.kv_tokens,
        concurrency={str(c): round(r, 2) for c, r in o.concurrency},
        cost=o.cost,
        **{k: round(v, 3) for k, v in o.figures},
    )


def advise_payload(
    ledger: Ledger, options: Sequence[Option], answer: TargetAnswer | None
) -> AdvisePayload:
    target = None
    if answer is not None:
        option = option_payload(answer.option) if answer.option else None
        target = TargetPayload(
            answer.requests, answer.context, answer.tokens_needed, answer.reason, option
        )
    return AdvisePayload(plan_payload(ledger), tuple(option_payload(o) for o in options), target)
