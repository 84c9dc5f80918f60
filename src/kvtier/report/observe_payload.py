"""What `kvtier observe --json` prints, as frozen dataclasses (`kvtier.payload`).

Usage and hit rates are 0-1 fractions to 4 decimals, throughput to 1; a figure the source did
not give is null. A new key is one field, placed where it goes, and one argument in
`observe_payload`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvtier.observe.diagnosis import KV_FULL, Evidence
from kvtier.observe.timeline import Point
from kvtier.payload import OMITTED, Count, Name, Share
from kvtier.report.card_view import CardPayload, card_payload

if TYPE_CHECKING:
    from kvtier.observe.nvidia_smi import CardReconciliation
    from kvtier.observe.observer import Observation


@dataclass(frozen=True, slots=True)
class PeakPayload:
    kv_usage: Share
    queued: Count | None
    running: Count | None
    time: str | None
    line: Count | None


@dataclass(frozen=True, slots=True)
class ObservePayload:
    source: str
    engine: str | None
    samples: Count
    kv_usage_max: Share | None
    queue_max: Count | None
    hit_rate: Share | None
    hit_rate_source: str | None
    external_hit_rate: Share | None
    preemptions: Count
    pool_tokens: Count | None
    peak: PeakPayload | None
    diagnosis: Name
    reason: str
    kv_full_threshold: Share
    next_steps: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    skipped_lines: Count
    timeline: tuple[Point, ...]
    nvidia_smi: CardPayload | None = field(default=None, metadata=OMITTED)


def rounded(x: float | None, digits: int = 4) -> float | None:
    """`x` to `digits` decimals; None stays None."""
    return None if x is None else round(x, digits)


def _point(p: Point) -> Point:
    return replace(
        p,
        kv_usage=rounded(p.kv_usage),
        prompt_tps=rounded(p.prompt_tps, 1),
        gen_tps=rounded(p.gen_tps, 1),
        hit_rate=rounded(p.hit_rate),
    )


def observe_payload(o: Observation, card: CardReconciliation | None = None) -> ObservePayload:
    d, peak = o.diagnosis, o.peak
    return ObservePayload(
        source=o.source,
        engine=o.engine,
        samples=o.samples,
        kv_usage_max=rounded(o.kv_usage_max),
        queue_max=o.queue_max,
        hit_rate=rounded(o.hit_rate),
        hit_rate_source=o.hit_rate_source,
        external_hit_rate=rounded(o.external_hit_rate),
        preemptions=o.preemptions,
        pool_tokens=o.pool_tokens,
        peak=None
        if peak is None
        else PeakPayload(round(peak.kv_usage, 4), peak.queued, peak.running, peak.time, peak.line),
        diagnosis=d.verdict,
        reason=d.reason,
        kv_full_threshold=KV_FULL,
        next_steps=d.next_steps,
        evidence=o.evidence,
        skipped_lines=o.skipped,
        timeline=tuple(_point(p) for p in o.timeline),
        nvidia_smi=card_payload(card) if card is not None else None,
    )
