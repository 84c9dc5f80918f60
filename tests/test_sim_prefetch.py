"""HiCache's L3 prefetch reader: one prefetch at a time, in issue order; each policy's stop time."""

from __future__ import annotations

import math

import pytest

from kvtier.sim.servers.prefetch import Prefetch, PrefetchPolicy, PrefetchQueue, PrefetchRules

S = 0.001  # seconds a token: 1,000 tokens a second


def op(start: int, blocks: int, t: float, reserved: int = 0) -> Prefetch:
    return Prefetch(start, blocks, 100, blocks * 100, reserved or blocks * 100, t)


def queue(policy: PrefetchPolicy, capacity: int = 10**9, **kw: float) -> PrefetchQueue:
    return PrefetchQueue(PrefetchRules(policy, **kw), S, capacity)  # type: ignore[arg-type]


def test_prefetches_are_read_one_after_another() -> None:
    q = queue(PrefetchPolicy.WAIT_COMPLETE)
    assert q.issue(1, op(0, 5, 0.0)) and q.issue(2, op(2, 3, 0.1))
    assert q.complete_at(1) == pytest.approx(0.5)
    assert q.complete_at(2) == pytest.approx(0.8)  # starts when the first is done
    assert q.ready_at(2) == pytest.approx(0.8)
    assert q.stop(1, 0.5) == (0, 5)
    assert q.stop(2, 0.8) == (2, 3)
    assert (q.completed, q.partial) == (2, 0)


def test_stopping_early_keeps_whole_blocks_and_frees_the_reader() -> None:
    q = queue(PrefetchPolicy.BEST_EFFORT)
    q.issue(1, op(0, 5, 0.0))
    q.issue(2, op(0, 3, 0.0))
    assert q.ready_at(1) == 0.0  # best_effort may stop at once
    assert q.stop(1, 0.25) == (0, 2)  # 250 tokens read: two whole 100-token blocks
    assert q.complete_at(2) == pytest.approx(0.55)  # the reader moved on at 0.25
    assert q.stop(2, 0.25) == (0, 0)
    assert (q.completed, q.partial) == (0, 2)


def test_timeout_stops_after_base_plus_per_ki_token() -> None:
    q = queue(PrefetchPolicy.TIMEOUT, timeout_base_s=0.1, timeout_per_ki_token_s=0.512)
    q.issue(1, op(0, 4, 1.0))  # 400 tokens: 0.4 s to read, timeout 0.1 + 0.512 x 400 / 1024
    assert q.ready_at(1) == pytest.approx(1.3)
    q2 = queue(PrefetchPolicy.TIMEOUT, timeout_base_s=1.0, timeout_per_ki_token_s=0.0)
    q2.issue(1, op(0, 4, 1.0))
    assert q2.ready_at(1) == pytest.approx(1.4)  # done before the timeout
    assert q2.next_ready([1]) == q2.ready_at(1) and q2.next_ready([]) == math.inf


def test_small_prefetches_and_a_full_reservation_are_refused() -> None:
    q = queue(PrefetchPolicy.WAIT_COMPLETE, capacity=300, threshold_tokens=200)
    assert not q.issue(1, op(0, 1, 0.0))  # 100 tokens, under the threshold
    assert q.issue(2, op(0, 2, 0.0, reserved=300))
    assert not q.issue(3, op(0, 5, 0.0))  # 300 tokens already reserved
    assert q.issued == 1


def test_timeout_is_capped_where_the_version_caps_it() -> None:
    rules = PrefetchRules(PrefetchPolicy.TIMEOUT, 256, 2.0, 0.1, 30.0)
    assert rules.timeout_s(10_240) == pytest.approx(3.0)
    assert rules.timeout_s(1_000_000) == 30.0
