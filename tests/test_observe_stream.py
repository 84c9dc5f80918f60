"""The stream reader's promises: ranks counted once, memory bounded by the timeline kept,
chunk boundaries invisible, and the diagnosis thresholds as docs/observe.md states them."""

from __future__ import annotations

import dataclasses
import io
import random

import pytest

from kvtier.observe.diagnosis import KV_FULL, Counts, diagnose
from kvtier.observe.logread import LogReader, read_stream
from kvtier.observe.observer import Observer
from kvtier.observe.timeline import Timeline
from observe_support import FIXTURES, observe_text


def _decode(t: int, rank: str, usage: float = 0.5, queued: int = 0) -> str:
    return (
        f"[2026-03-01 10:00:{t:02d} {rank}] Decode batch, #running-req: 8, #token: 100, "
        f"token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): 90.00, "
        f"#queue-req: {queued}"
    )


def test_every_rank_prints_the_same_line_and_it_counts_once() -> None:
    lines = [_decode(t, rank) for t in range(5) for rank in ("TP0", "TP1", "TP2", "TP3")]
    assert observe_text("\n".join(lines)).samples == 5


@pytest.mark.parametrize("prefix", ["TP0 EP0", "ATTN_CP4 TP4", "DP1 TP1 EP1"])
def test_rank_prefixes(prefix: str) -> None:
    other = prefix.replace("0", "7").replace("1", "7").replace("4", "7")
    o = observe_text(_decode(1, prefix) + "\n" + _decode(1, other))
    assert o.samples == 1 and o.timeline[0].time == "2026-03-01 10:00:01"


def test_ranks_that_differ_are_separate_samples() -> None:
    o = observe_text(_decode(1, "DP0 TP0", queued=0) + "\n" + _decode(1, "DP1 TP1", queued=4))
    assert o.samples == 2 and o.queue_max == 4


def test_one_rank_printing_the_same_line_twice_counts_twice() -> None:
    assert observe_text(_decode(1, "TP0") + "\n" + _decode(1, "TP0")).samples == 2


def test_chunk_boundaries_do_not_change_the_reading() -> None:
    text = "\n".join(
        (FIXTURES / name).read_text(encoding="utf-8")
        for name in ("sglang-2026-07-npu-ep-accept-len.log", "vllm-2025-07-v1-joined-lines.log")
    ).encode()
    whole = Observer("whole")
    read_stream(io.BytesIO(text), whole)
    rng = random.Random(7)
    for _ in range(20):
        cut = Observer("cut")
        reader = LogReader(cut)
        at = 0
        while at < len(text):
            step = rng.randint(1, 300)
            reader.feed(text[at : at + step])
            at += step
        reader.close()
        a, b = whole.result(), cut.result()
        assert (a.samples, a.timeline, a.evidence) == (b.samples, b.timeline, b.evidence)
        assert reader.lines == text.count(b"\n")  # the text ends with a newline


def test_timeline_is_bounded_by_its_limit_not_the_samples() -> None:
    timeline = Timeline(limit=50)
    for i in range(100_000):
        timeline.add({"kv_usage": (i % 997) / 1000, "queued": float(i % 13)}, str(i), i)
        assert len(timeline._points) < 100
    points = timeline.points()
    assert 50 <= len(points) <= 101
    assert sum(p.samples for p in points) == 100_000
    assert max(p.kv_usage or 0 for p in points) == pytest.approx(0.996)
    assert max(p.queued or 0 for p in points) == 12


def test_observer_memory_does_not_grow_with_the_log() -> None:
    lines = "\n".join(_decode(t % 60, "TP0", usage=0.95, queued=3) for t in range(600))
    o = observe_text("\n".join([lines] * 20), points=10)
    assert o.samples == 12_000
    assert len(o.timeline) <= 20 and len(o.evidence) <= 10


def _counts(**kw: int) -> Counts:
    """Ten samples, every one stating the queue, none waiting, swapped or preempted; `kw` changes
    some of those counts."""
    return dataclasses.replace(Counts(10, 10, 0, 0, 0, 0, 0), **kw)


@pytest.mark.parametrize(
    "counts, verdict",
    [
        (_counts(waiting_full=1), "kv-bound"),
        (_counts(preemptions=1), "kv-bound"),
        (_counts(swapped=2), "kv-bound"),
        (_counts(waiting_full=1, waiting_room=5), "kv-bound"),
        (_counts(waiting_room=3), "compute-bound"),
        (_counts(), "not-saturated"),
        (_counts(waiting_unknown=2), "unknown"),
        (_counts(queue_seen=0), "unknown"),
        (_counts(samples=0, queue_seen=0), "unknown"),
    ],
)
def test_verdicts(counts: Counts, verdict: str) -> None:
    assert diagnose(counts).verdict == verdict


def test_threshold_is_inclusive() -> None:
    full = observe_text(_decode(1, "TP0", usage=KV_FULL, queued=1))
    below = observe_text(_decode(1, "TP0", usage=KV_FULL - 0.01, queued=1))
    assert (full.diagnosis.verdict, below.diagnosis.verdict) == ("kv-bound", "compute-bound")


def test_waiting_before_usage_is_known_resolves_against_the_whole_log() -> None:
    o = observe_text(
        (FIXTURES / "sglang-2024-04-new-fill-batch-decode.log").read_text(encoding="utf-8")
    )
    assert o.diagnosis.verdict == "compute-bound"


def test_the_fast_patterns_read_what_the_general_reader_reads() -> None:
    from kvtier.engines.sglang import serving as sglang
    from kvtier.engines.vllm import serving as vllm

    checked = 0
    for path in sorted(FIXTURES.glob("*.log")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for grammar, title in (
                (sglang, "Decode batch"),
                (sglang, "Prefill batch"),
                (vllm, "Avg prompt"),
            ):
                at = line.find(title)
                if at < 0:
                    continue
                message = line[at:].rstrip()
                # an unknown trailing field sends the line past the fast pattern
                assert grammar.read(message) == grammar.read(message + ", later field: 1"), line
                checked += 1
    assert checked > 100
