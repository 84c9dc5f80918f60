"""The typed result of each command `kvtier report` draws, by the KIND of `--from KIND=FILE`."""

from __future__ import annotations

from typing import Any

from kvtier.report.explain_payload import ExplainPayload
from kvtier.report.observe_payload import ObservePayload
from kvtier.report.plan_payload import AdvisePayload, PlanPayload
from kvtier.sim.advise import WorkloadAdvice
from kvtier.sim.payload import SimulatePayload

Payload = (
    PlanPayload | AdvisePayload | ExplainPayload | ObservePayload | SimulatePayload | WorkloadAdvice
)
LedgerPayload = PlanPayload | AdvisePayload | ExplainPayload

PAYLOAD_TYPES: dict[str, Any] = {
    "plan": PlanPayload,
    "advise": AdvisePayload,
    "explain": ExplainPayload,
    "observe": ObservePayload,
    "simulate": SimulatePayload,
    "advise-workload": WorkloadAdvice,
}
