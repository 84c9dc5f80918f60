"""Explain's engine half: the interface each engine implements, and the types it fills.

`kvtier explain` reads a startup log in three steps, each engine's own (`engines/<engine>/
explain.py`, reached through `EngineRules.explain`): the log's figures into `LogInputs` (settings,
the measured memory figures, the observed KV count), those inputs into a `Deployment` whose
`Measured` figures the engine's ledger builder recomputes the pool from, and the ledger the log
itself shows (`LogLedger`). What is the same for every engine stays in `ledger/explain.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from kvtier.engines.deployment import Deployment, Engine, Measured
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.ledger import Ledger, LedgerItem
from kvtier.engines.log_geometry import LogGeometry
from kvtier.engines.settings import Settings
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact
from kvtier.logs.records import Args
from kvtier.model.description import ModelSpec

if TYPE_CHECKING:
    from kvtier.engines.detect import ParsedLog

M = TypeVar("M")

Rows = list[tuple[str, Fact[object]]]


@dataclass(frozen=True, slots=True)
class LogInputs(Generic[M]):
    engine: Engine
    parsed: ParsedLog
    model: ModelSpec
    model_source: Fact[str]
    geometry: LogGeometry | None  # the log's own bytes-per-token bracket
    model_known: bool  # False: `model` is a stand-in with the log's bytes per token
    model_by_class: bool  # taken from the model class alone (the one catalog model with it)
    tp: Fact[int]
    pp: Fact[int]
    dp: Fact[int]
    enable_dp_attention: Fact[bool]
    attn_tp: Fact[int]
    kv_dtype: KVDtype
    kv_dtype_source: Fact[str]
    kv_dtype_auto: bool  # `auto`, nothing printed: what it becomes is the engine builder's rule
    page_size: Fact[int]
    observed: Fact[int] | None  # None: a failed start that printed no count
    memory: M | None  # the engine's memory figures (engines/<engine>/explain.py)
    settings: Settings
    plan_settings: tuple[tuple[str, Fact[object]], ...]  # Deployment fields the log or flags set
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    failure: Fact[str] | None = None  # the engine's refusal line
    estimated: tuple[tuple[str, Fact[object]], ...] = ()  # inputs estimated, not printed


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """Observed vs recomputed KV tokens of one logged start, with every input's provenance."""

    engine: str
    model: ModelSpec
    model_source: Fact[str]
    observed: Fact[int] | None  # None: a failed start that printed no count
    predicted: int
    predicted_low: int
    predicted_high: int
    kv_bytes_per_token: int  # one GPU (rank), all its layers
    kv_dtype: KVDtype
    page_size: int
    inputs: tuple[tuple[str, Fact[object]], ...]
    formula: str
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    ledger: Ledger | None  # the builder's ledger from the log's figures; None: it cannot run
    failure: Fact[str] | None = None  # the engine's refusal line
    unchecked: str | None = None  # why the count is observed only (nothing to recompute from)
    estimated: tuple[str, ...] = ()  # names of inputs that were estimated, not printed
    stages: bool = False  # the range spans pipeline stages the log prints no figures for

    @property
    def widened(self) -> str:
        """What the range covers besides the printed figures' rounding."""
        parts = ["the estimated inputs"] if self.estimated else []
        parts += ["the pipeline stages"] if self.stages else []
        return "".join(f" and {p}" for p in parts)

    @property
    def difference(self) -> int:
        return self.predicted - (self.observed.value if self.observed else 0)

    @property
    def relative_difference(self) -> float:
        observed = self.observed.value if self.observed else 0
        return self.difference / observed if observed else 0.0

    @property
    def matches(self) -> bool:
        observed = self.observed.value if self.observed else 0
        return self.predicted_low <= observed <= self.predicted_high

    @property
    def status(self) -> str:
        """One of: failed, observed only, predicted only, match, mismatch."""
        if self.failure is not None:
            return "failed"
        if self.unchecked is not None:
            return "observed only"
        if self.observed is None:
            return "predicted only"
        return "match" if self.matches else "mismatch"

    @property
    def verdict(self) -> str:
        if self.failure is not None:
            count = (
                "the count it states is within the recomputed range"
                if self.observed is not None and self.matches
                else "no KV pool was allocated"
                if self.observed is None
                else f"the count it states is {self.relative_difference:+.2%} off"
            )
            return f"failed start ({self.failure.where}): {self.failure.value}; {count}"
        if self.unchecked is not None:
            return f"observed only: {self.unchecked}"
        if self.observed is None:
            return "predicted only: the log prints no KV token count to compare with"
        widened = self.widened
        if self.matches:
            return f"match: within the rounding of the printed figures{widened}"
        return (
            f"mismatch: {self.relative_difference:+.2%} outside the rounding of the printed "
            f"figures{widened}"
        )


@dataclass(frozen=True, slots=True)
class LogLedger:
    """Where one GPU's memory went, as far as the log shows, and what stayed free."""

    items: tuple[LedgerItem, ...]  # taken before and by the KV pool
    reserve: LedgerItem | None  # SGLang: what the fraction holds back for later allocations
    reserve_uses: tuple[LedgerItem, ...]  # what the log shows came out of the reserve
    free_end: LedgerItem | None
    unlogged: tuple[Unlogged, ...]
    answer: str


@dataclass(frozen=True, slots=True)
class Unlogged:
    """A consumer of GPU memory the log does not size, and why (the line it lacks)."""

    item: str
    why: str


_PREFIX_SPAN = 160


def require_memory_lines(failure: Fact[str] | None, printed: bool, lines: str) -> None:
    """Refuse a log that shows neither a failed start nor any of the memory lines the engine
    prints at startup (`lines`, as quoted in the message)."""
    if failure is None and not printed:
        raise KvtierError(
            f"the log lacks the memory lines kvtier needs: one of {lines}. Paste the whole "
            "startup log, from the launch to the first request"
        )


def logged_item(name: str, fact: Fact[float]) -> LedgerItem:
    """A ledger item the log printed, citing its line."""
    return LedgerItem(name, fact.value, cite(fact), True)


def cite(fact: Fact[object]) -> str:
    """The log line a figure came from (number and message), or how it was derived."""
    return fact.text if fact.line is None else f"{fact.where}: {message(fact.text)}"


def message(text: str) -> str:
    """A log line without its timestamp / rank / file prefix (up to the first '] ')."""
    cut = text.find("] ", 0, _PREFIX_SPAN)
    return text[cut + 2 :].strip() if cut >= 0 else text.strip()


@dataclass(frozen=True, slots=True)
class LogMemory(Generic[M]):
    """What an engine reads from its log's memory lines: its own figures (None: none printed),
    the KV count the log states, and notes and estimated inputs to report."""

    memory: M | None
    observed: Fact[int] | None
    notes: tuple[str, ...] = ()
    estimated: tuple[tuple[str, Fact[object]], ...] = ()


class ExplainRules(Protocol):
    """An engine's reading of its own startup log (`startup` is the engine's parsed record)."""

    page_name: str  # what the engine calls its KV page: "page size", "block size"
    cell_rule: str  # how it sizes one token's KV on one GPU (the upstream function)

    def require_memory_lines(self, startup: Any) -> None:
        """Refuse, naming the lines to paste, a log with no KV count, memory or refusal line."""

    def printed_args(self, startup: Any) -> list[Args]:
        """The argument dumps and launch command the log prints, most authoritative first."""

    def architecture(self, startup: Any) -> Fact[str] | None:
        """The model class the log loaded, when it prints one."""

    def ranks(self, startup: Any) -> list[str]:
        """The rank tags of the memory lines, which show how many TP ranks the start had."""

    def page_size(self, startup: Any, settings: Settings) -> Fact[int]:
        """The page (block) size: as stated, else the engine's default."""

    def kv_dtype(
        self, startup: Any, model: ModelSpec | None, settings: Settings, page: int, pp: int
    ) -> tuple[Fact[str] | None, Fact[KVDtype] | None]:
        """The KV dtype the engine printed, and what an unprinted `auto` becomes when the engine
        has its own rule for this model (None: the model's dtype)."""

    def geometry(self, startup: Any, page: int, element_bytes: int, pp: int) -> LogGeometry | None:
        """The bytes-per-token bracket the log's pool figures allow, or None if it prints none."""

    def context(self, startup: Any) -> Fact[object] | None:
        """The context length the engine settled on, from its own summary line."""

    def printed_count(self, startup: Any) -> Fact[int] | None:
        """The KV token count the log prints as one figure (no block count times a size)."""

    def memory(self, startup: Any, settings: Settings, parallel: int, page: Fact[int]) -> LogMemory:
        """The log's memory figures, its KV count, and what was estimated or is worth a note."""

    def plan_settings(self, startup: Any, settings: Settings, known: set[str]) -> Rows:
        """Deployment settings the engine prints in its own form (not under a flag's name)."""

    def measured(self, inputs: LogInputs, flags: Measured) -> tuple[Measured, Rows]:
        """The log's figures as the builder's measured inputs, and the settings they imply."""

    def candidate_versions(self, deployment: Deployment) -> tuple[str, ...]:
        """Releases whose rules the pool may have been sized under, when the log states too
        little to tell (each a variant the predicted range covers)."""

    def rounding(self, inputs: LogInputs) -> dict[str, float]:
        """Half widths of estimated measured figures beyond the printed two decimals."""

    def pinned(self, inputs: LogInputs) -> str | None:
        """Why no memory budget sized the pool (a flag set the count), or None."""

    def memory_rows(self, inputs: LogInputs, ledger: Ledger) -> Rows:
        """The memory inputs of the pool formula, as the reconciliation lists them."""

    def ledger(
        self, inputs: LogInputs, rec: Reconciliation, flags: Measured, plan: Ledger | None
    ) -> LogLedger:
        """The per-GPU ledger the log itself shows, and the plain answer about unused memory."""
