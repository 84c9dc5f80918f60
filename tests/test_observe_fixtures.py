"""Real serving logs and /metrics scrapes from public threads, read as the threads describe them.

tests/fixtures/observe/manifest.json names each excerpt's source and, where the thread says what
happened, the verdict that follows; the other figures are read off the excerpt itself.
"""

from __future__ import annotations

import re

import pytest

from observe_support import FIXTURES, MANIFEST, observe_fixture

# The titles of the periodic lines, counted independently of the grammars.
PERIODIC = re.compile(
    r"Decode batch|Prefill batch|new fill batch|Avg prompt throughput|^#running-req"
)


def test_manifest_names_every_fixture_and_a_public_source() -> None:
    files = {p.name for p in FIXTURES.iterdir() if p.suffix in (".log", ".prom")}
    assert files == {e["file"] for e in MANIFEST}
    assert all(e["source"].startswith("https://github.com/") for e in MANIFEST)
    logs = [e for e in MANIFEST if e["file"].endswith(".log")]
    assert len(logs) >= 20
    assert {e["engine"] for e in logs} == {"sglang", "vllm"}


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_fixture_reads_as_its_source_says(entry: dict) -> None:
    o = observe_fixture(entry["file"])
    assert o.skipped == 0, o.skipped_lines
    assert o.engine == entry["engine"]
    expected = entry["expected"]
    if entry["file"].endswith(".log"):
        text = (FIXTURES / entry["file"]).read_text(encoding="utf-8")
        periodic = sum(len(PERIODIC.findall(line)) for line in text.splitlines())
        assert o.samples == periodic
    for key, value in expected.items():
        got = o.diagnosis.verdict if key == "diagnosis" else getattr(o, key)
        if isinstance(value, float):
            assert got == pytest.approx(value, abs=5e-4), key
        else:
            assert got == value, key


def test_thread_accounts_pin_a_verdict_for_both_engines_and_each_outcome() -> None:
    pinned = [e for e in MANIFEST if "diagnosis" in e["expected"] and e["what_happened"]]
    assert {e["expected"]["diagnosis"] for e in pinned} >= {"kv-bound", "not-saturated"}
    assert {e["engine"] for e in pinned if e["expected"]["diagnosis"] == "kv-bound"} == {
        "sglang",
        "vllm",
    }


def test_token_weighted_hit_rate_beats_the_printed_one() -> None:
    # the 2024-10 lines print a per-batch "cache hit rate"; kvtier weights by tokens instead
    o = observe_fixture("sglang-2024-10-prefill-cache-hit-rate.log")
    assert o.hit_rate_source == "tokens"
    assert o.hit_rate == pytest.approx(6928 / (6928 + 2062 + 6 * 8192))


def test_vllm_hit_rate_is_the_last_printed_rolling_figure() -> None:
    o = observe_fixture("vllm-2025-07-v1-rolling-hit-rate.log")
    assert o.hit_rate_source == "printed"
    assert [p.hit_rate for p in o.timeline] == pytest.approx([0.0, 0.484, 0.646, 0.726, 0.775])


def test_peak_says_the_queue_at_that_moment() -> None:
    o = observe_fixture("vllm-2026-05-v1-mtp-kv-full.log")
    assert o.peak is not None
    assert o.peak.kv_usage == pytest.approx(0.984)
    assert (o.peak.queued, o.peak.time) == (23, "05-19 10:13:51")
    assert o.peak.line == 5


def test_joined_lines_give_one_sample_each() -> None:
    o = observe_fixture("vllm-2025-07-v1-joined-lines.log")
    assert [p.time for p in o.timeline][1:3] == ["07-28 06:41:09", "07-28 06:41:19"]
    assert [p.line for p in o.timeline][1:3] == [2, 2]


def test_evidence_lines_are_the_log_lines_that_show_the_verdict() -> None:
    o = observe_fixture("sglang-2026-05-swa-full-retract.log")
    assert [e.line for e in o.evidence] == [1, 2, 3]
    assert "full token usage: 1.00" in o.evidence[0].text
