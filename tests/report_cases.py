"""Inputs the report tests share: saved --json payloads and the founding log with a short sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import require_shared
from kvtier.payload import from_json
from kvtier.report.explain_payload import ExplainPayload
from kvtier.report.observe_payload import ObservePayload
from kvtier.report.payloads import PAYLOAD_TYPES, Payload
from kvtier.report.plan_payload import PlanPayload

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "report"
FOUNDING_LOG = ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"
# A short sweep keeps the tests fast; the README's command runs 2,000 requests.
SMALL_SWEEP = ["--generate", "chat", "--seed", "1", "--requests", "60", "--rate", "0.1",
               "--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8",
               "--mem-fraction-static", "0.88", "--device-tokens", "159277",
               "--sweep", "hicache-ratio=0,2,4"]  # fmt: skip


def fixture(name: str) -> dict[str, Any]:
    """A saved payload from tests/fixtures/report/."""
    return json.loads((FIXTURES / name).read_text())


def payload(kind: str, name: str) -> Any:
    """A saved payload from tests/fixtures/report/, read as `report --from KIND=FILE` reads it."""
    read: Payload = from_json(PAYLOAD_TYPES[kind], fixture(name))
    return read


def plan_of_rows(ledger: list[dict[str, Any]], **fields: Any) -> PlanPayload:
    """A plan payload holding `ledger` rows (exact, no source unless given); the other fields a
    small SGLang plan's unless given."""
    data = {
        "engine": "sglang", "model": "m", "gpu": "g", "gpus": 1, "tp": 1, "pp": 1,
        "starts": True, "era": "e", "units": "GiB", "kv_tokens": 1000, "kv_tokens_range": None,
        "kv_bytes_per_token": 1024, "page_size": 1, "context_length": 262144,
        "mem_fraction": 0.8, "max_running_requests": None, "concurrency": [], "host_pool": None,
        "inputs": [], "notes": [],
        "ledger": [{"source": "", "exact": True, **row} for row in ledger],
    }  # fmt: skip
    return from_json(PlanPayload, {**data, **fields})


def explanation_of_rows(ledger: list[dict[str, Any]], **fields: Any) -> ExplainPayload:
    """The founding explanation with `ledger` rows in place of its own, no answer, nothing
    unlogged."""
    data = fixture("explain-seed.json")
    rows = [{"source": "", "exact": True, **row} for row in ledger]
    return from_json(
        ExplainPayload, {**data, "ledger": rows, "answer": "", "not_in_log": [], **fields}
    )


# A saved observation with nothing in it: every key `kvtier observe --json` prints.
EMPTY_OBSERVATION = {
    "source": "s", "engine": None, "samples": 0, "kv_usage_max": None, "queue_max": None,
    "hit_rate": None, "hit_rate_source": None, "external_hit_rate": None, "preemptions": 0,
    "pool_tokens": None, "peak": None, "diagnosis": "not-saturated", "reason": "",
    "kv_full_threshold": 0.9, "next_steps": [], "evidence": [], "skipped_lines": 0,
    "timeline": [],
}  # fmt: skip


def observation(**fields: Any) -> ObservePayload:
    """An observation with nothing in it but what is given."""
    return from_json(ObservePayload, {**EMPTY_OBSERVATION, **fields})


def founding_log() -> Path:
    """The founding scenario's startup log: the bundled example, else the shared case."""
    if FOUNDING_LOG.is_file():
        return FOUNDING_LOG
    return require_shared("cases/seed-sglang.log")
