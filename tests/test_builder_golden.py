"""Golden numbers: KV tokens recomputed from a real log's measured figures match its count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import require_shared
from kvtier.engines.deployment import Deployment, Engine, Measured
from kvtier.engines.sglang import pool as sglang
from kvtier.ledger.plan import plan
from kvtier.units import GiB

FIXTURE = Path(__file__).parent / "fixtures" / "budget_cases.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


def deployment(case: dict) -> Deployment:
    measured = dict(case["measured"])
    if case.get("gpu_mem_mib"):
        measured["gpu_mem_gib"] = case["gpu_mem_mib"] / 1024
    return Deployment(
        engine=Engine(case["engine"]),
        model=case["model"],
        tp=case["tp"],
        engine_version=case["engine_version"],
        mem_fraction=case["mem_fraction"],
        context_length=case.get("max_model_len"),
        speculative_algorithm=case.get("speculative"),
        measured=Measured().with_values(**measured),
    )


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_recomputed_tokens_match_the_log(case: dict) -> None:
    ledger = plan(deployment(case))
    logged = case["logged"]["kv_tokens"]
    assert ledger.kv_tokens_range is None  # every input measured: an exact recomputation
    assert ledger.kv_bytes_per_token == case["bytes_per_token"]
    assert abs(ledger.kv_tokens - logged) / logged < 0.005, (ledger.kv_tokens, logged)


def test_founding_deployment_to_the_token() -> None:
    """Kimi-K2.5, 8x RTX PRO 6000, TP8, 0.88: 21.71 - 94.04 x 0.12 GiB -> 159,294 vs 159,277."""
    ledger = plan(deployment(CASES[0]))
    assert ledger.kv_tokens == 159_294
    assert abs(ledger.kv_tokens - 159_277) / 159_277 < 0.0005
    assert round(ledger.item("KV cache pool").gib, 2) == 10.43  # logged 10.42 from 159,277
    # the log's 'KV size: 10.42 GB' is memory_pool.py's (tokens + page) x cell at its count
    logged = sglang.kv_size_bytes(159_277, ledger.page_size, ledger.kv_bytes_per_token)
    assert round(logged / GiB, 2) == 10.42


def test_sglang_kv_size_line_matches_the_log() -> None:
    """S04 'K size: 2.82 GB' is (tokens + page) x half the cell."""
    s04 = next(c for c in CASES if c["id"] == "S04")
    ledger = plan(deployment(s04))
    assert round(ledger.item("KV cache pool").gib / 2, 2) == s04["logged"]["k_size_gib"]


def test_s09_default_fraction_is_the_reserve_table_rule() -> None:
    """S09 prints no fraction: the v0.4.9-v0.5.3 table gives 0.818 and reproduces the count;
    the v0.5.4+ heuristics (0.771) do not."""
    s09 = next(c for c in CASES if c["id"] == "S09")
    table = plan(deployment(s09))
    assert table.mem_fraction == 0.818
    assert abs(table.kv_tokens - 104_273) / 104_273 < 0.005
    newer = plan(deployment({**s09, "engine_version": "0.5.4"}))
    assert newer.mem_fraction == 0.771
    assert abs(newer.kv_tokens - 104_273) / 104_273 > 0.05


def test_vllm_logged_concurrency() -> None:
    """'Maximum concurrency for 8,192 tokens per request: 58.11x' (L05)."""
    l05 = next(c for c in CASES if c["id"] == "L05")
    ledger = plan(deployment(l05))
    at = {c.context: c.requests for c in ledger.concurrency}
    assert round(at[8192], 1) == round(l05["logged"]["max_concurrency"], 1)


def test_fixture_numbers_are_those_of_the_shared_cases() -> None:
    shared = {c["id"]: c for c in json.loads(require_shared("cases/dev-logs.json").read_text())}
    for case in CASES:
        if case["id"] not in shared:
            continue
        observed = shared[case["id"]]["observed"]
        logged = observed.get("kv_cache_tokens") or observed.get("kv_cache_tokens_derived")
        assert logged == case["logged"]["kv_tokens"], case["id"]
        if "weights_memory_gib" in observed:
            assert observed["weights_memory_gib"] == case["measured"]["weights_gib"]
            assert (
                observed["torch_activation_peak_gib"] == case["measured"]["profile.activation_gib"]
            )
            assert (
                observed["non_torch_forward_increase_gib"]
                == case["measured"]["profile.non_torch_gib"]
            )
        if "avail_mem_after_load_gb" in observed:
            assert observed["avail_mem_after_load_gb"] == case["measured"]["free.after_load_gib"]


def test_founding_memory_pool_end() -> None:
    """'Memory pool end. avail mem=11.18 GB': free after load minus the KV pool and the request
    table of 48 rows (speculative default) leaves 11.24 GiB, within 0.1 GiB of the log."""
    ledger = plan(deployment(CASES[0]))
    assert ledger.max_running_requests == 48
    left = 21.71 - ledger.item("KV cache pool").gib
    left -= ledger.item("request table (req_to_token)").gib
    assert abs(left - 11.18) < 0.1
