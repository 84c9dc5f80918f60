"""The options menu for a logged start: advise over the ledger the log's own figures give."""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.errors import KvtierError
from kvtier.ledger.advise import DEFAULT_MARGIN_GIB, HostSetup, Option, all_options


@dataclass(frozen=True, slots=True)
class LogOptions:
    """The menu, the ledger it was priced against, and why it is empty when it is."""

    options: tuple[Option, ...]
    base: Ledger
    note: str | None


def log_options(plan: PlanInputs, base: Ledger, host_ram_gb: float | None) -> LogOptions:
    """advise's options for the logged deployment, priced from `base` (the reconciled ledger)."""
    try:
        options = all_options(plan, base, DEFAULT_MARGIN_GIB, HostSetup(host_ram_gb))
    except KvtierError as exc:
        return LogOptions((), base, f"options not priced: {exc}")
    return LogOptions(tuple(options), base, None)
