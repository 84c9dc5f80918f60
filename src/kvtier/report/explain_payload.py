"""What `kvtier explain --json` prints, as frozen dataclasses (`kvtier.payload`).

Stable keys: engine, model, observed, predicted, the log's ledger (each row tagged with its part
of the card), the options priced at the log's count. GPU figures are GiB (2**30) per GPU to 4
decimals; host RAM decimal GB. A new key is one field, placed where it goes, and one argument in
`explain_payload`, or in the `of` of the part that reads it from what it describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvtier.engines.detect import LineSpan
from kvtier.engines.explain import Unlogged
from kvtier.payload import OMITTED, Count
from kvtier.report.card_view import CardPayload, card_payload
from kvtier.report.plan_payload import LedgerRow, OptionPayload, option_payload

if TYPE_CHECKING:
    from kvtier.engines.detect import ParsedLog
    from kvtier.engines.explain import LogLedger, Reconciliation
    from kvtier.engines.ledger import LedgerItem
    from kvtier.ledger.explain import Explanation
    from kvtier.logs.facts import Fact
    from kvtier.observe.nvidia_smi import CardReconciliation

EXPLAIN_UNITS = "GiB (2**30 bytes) per GPU; host RAM in decimal GB"
Scalar = str | bool | int | float | None  # a value as the log printed it


@dataclass(frozen=True, slots=True)
class LogSource:
    """Where a figure was read: a 1-based log line and its text, or how it was obtained."""

    line: Count | None
    text: str
    rank: str | None

    @classmethod
    def of(cls, fact: Fact[Any]) -> LogSource:
        return cls(fact.line, fact.text.strip(), fact.rank)


@dataclass(frozen=True, slots=True)
class ModelRef:
    id: str
    source: LogSource
    geometry: str  # where the model's layer shapes came from

    @classmethod
    def of(cls, e: Explanation) -> ModelRef:
        rec = e.reconciliation
        geometry = "catalog or config.json" if e.inputs.model_known else "from the log"
        return cls(rec.model.model_id, LogSource.of(rec.model_source), geometry)


@dataclass(frozen=True, slots=True)
class Observed:
    kv_tokens: Count | None  # None: a failed start printed no count
    source: LogSource | None

    @classmethod
    def of(cls, fact: Fact[int] | None) -> Observed:
        return cls(None, None) if fact is None else cls(fact.value, LogSource.of(fact))


@dataclass(frozen=True, slots=True)
class Failure:
    reason: str
    source: LogSource

    @classmethod
    def of(cls, fact: Fact[str] | None) -> Failure | None:
        """The engine's refusal line, or None for a start that did not fail."""
        return None if fact is None else cls(fact.value, LogSource.of(fact))


@dataclass(frozen=True, slots=True)
class Predicted:
    kv_tokens: Count
    range: tuple[Count, Count]
    formula: str

    @classmethod
    def of(cls, rec: Reconciliation) -> Predicted:
        return cls(rec.predicted, (rec.predicted_low, rec.predicted_high), rec.formula)


@dataclass(frozen=True, slots=True)
class LogInput:
    name: str
    value: Scalar
    source: LogSource
    estimated: bool


@dataclass(frozen=True, slots=True)
class StartupPayload:
    """Which of a log's server starts was explained (1-based) and every start's lines; present
    only when the log holds several."""

    explained: int
    starts: tuple[LineSpan, ...]

    @classmethod
    def of(cls, parsed: ParsedLog) -> StartupPayload | None:
        """None for a log of one start."""
        if len(parsed.starts) < 2:
            return None
        return cls(parsed.index + 1, parsed.starts)


@dataclass(frozen=True, slots=True)
class ExplainPayload:
    engine: str
    model: ModelRef
    units: str
    observed: Observed
    failed: Failure | None
    predicted: Predicted
    difference: int
    relative_difference: float
    verdict: str
    verdict_text: str
    kv_bytes_per_token: Count
    kv_cache_dtype: str
    page_size: int
    inputs: tuple[LogInput, ...]
    ledger: tuple[LedgerRow, ...]
    reserve_gib: float | None
    free_end_gib: float | None
    not_in_log: tuple[Unlogged, ...]
    answer: str
    options: tuple[OptionPayload, ...]
    options_priced_at_kv_tokens: Count | None
    max_running_requests: Count | None
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    nvidia_smi: CardPayload | None = field(default=None, metadata=OMITTED)
    startup: StartupPayload | None = field(default=None, metadata=OMITTED)


def log_rows(ledger: LogLedger) -> list[tuple[str, LedgerItem]]:
    """Ledger rows in order, each tagged: "card" (up to the KV pool), "reserve", "from reserve",
    "free"."""
    rows = [("card", i) for i in ledger.items]
    if ledger.reserve is not None:
        rows.append(("reserve", ledger.reserve))
    rows += [("from reserve", i) for i in ledger.reserve_uses]
    if ledger.free_end is not None:
        rows.append(("free", ledger.free_end))
    return rows


def explain_payload(e: Explanation, card: CardReconciliation | None = None) -> ExplainPayload:
    rec, ledger = e.reconciliation, e.ledger
    base = e.options.base if e.options is not None else None
    return ExplainPayload(
        engine=e.engine,
        model=ModelRef.of(e),
        units=EXPLAIN_UNITS,
        observed=Observed.of(rec.observed),
        failed=Failure.of(rec.failure),
        predicted=Predicted.of(rec),
        difference=rec.difference,
        relative_difference=round(rec.relative_difference, 6),
        verdict=rec.status,
        verdict_text=rec.verdict,
        kv_bytes_per_token=rec.kv_bytes_per_token,
        kv_cache_dtype=rec.kv_dtype.name,
        page_size=rec.page_size,
        inputs=tuple(
            LogInput(name, fact.value, LogSource.of(fact), name in rec.estimated)  # type: ignore[arg-type]
            for name, fact in rec.inputs
        ),
        ledger=tuple(
            LedgerRow(i.item, round(i.gib, 4), i.source, i.exact, part)
            for part, i in log_rows(ledger)
        ),
        reserve_gib=round(ledger.reserve.gib, 4) if ledger.reserve else None,
        free_end_gib=round(ledger.free_end.gib, 4) if ledger.free_end else None,
        not_in_log=ledger.unlogged,
        answer=ledger.answer,
        options=tuple(option_payload(o) for o in e.options.options) if e.options else (),
        options_priced_at_kv_tokens=base.kv_tokens if base else None,
        max_running_requests=base.max_running_requests if base else None,
        notes=(*rec.notes, *([e.options.note] if e.options and e.options.note else [])),
        warnings=rec.warnings,
        nvidia_smi=card_payload(card) if card is not None else None,
        startup=StartupPayload.of(e.inputs.parsed),
    )
