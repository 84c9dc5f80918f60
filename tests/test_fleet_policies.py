"""The routing policies, each against what its router's source does."""

from __future__ import annotations

import math

import pytest

from kvtier.errors import KvtierError
from kvtier.routers import NAMES
from kvtier.sim.fleet.approx_tree import ApproxTree
from kvtier.sim.fleet.cache_aware import OPTIONS, CacheAware, f32
from kvtier.sim.fleet.load import LeastLoad, PowerOfTwo
from kvtier.sim.fleet.policy import Scrape
from kvtier.sim.fleet.registry import make_router, policies
from kvtier.sim.fleet.rotation import RoundRobin, Uniform
from kvtier.sim.fleet.session import SessionAffinity
from kvtier.sim.trace import TraceRequest

DEFAULTS = {k: o.default for k, o in OPTIONS.items()}


class FakeView:
    """Replicas as a router reads them, set by hand."""

    def __init__(self, loads: list[int], queues: list[int] | None = None) -> None:
        self.loads = loads
        self.waiting = queues or [0] * len(loads)
        self.usage = [0.0] * len(loads)
        self.resident: dict[int, int] = {}

    def token_loads(self) -> list[int]:
        return self.loads

    def scraped(self, replica: int, now: float, live: bool = False) -> Scrape:
        return Scrape(self.waiting[replica], self.usage[replica])

    def device_prefixes(self, req: TraceRequest) -> list[int]:
        return [self.resident.get(r, 0) for r in range(len(self.loads))]

    def held_prefixes(self, req: TraceRequest) -> dict[int, int]:
        return {r: n for r, n in sorted(self.resident.items()) if n}

    def pending_prefill(self) -> list[list[tuple[int, int]]]:
        return [[(-1 - r, n)] if n else [] for r, n in enumerate(self.waiting)]

    def publish_kv_events(self, listener: object = None) -> set[int]:
        return set()  # `resident` is what the events have said

    def prefill_s(self, new_tokens: int, prefix_tokens: int) -> float:
        return new_tokens / 1000  # one second per thousand tokens, whatever the prefix

    @property
    def device_blocks(self) -> int:
        return 4


def req(rid: int, blocks: tuple[int, ...], tokens: int | None = None) -> TraceRequest:
    n = tokens if tokens is not None else 512 * len(blocks)
    return TraceRequest(rid, float(rid), n, 16, blocks)


def test_names_are_the_cli_names() -> None:
    from kvtier.cli.flags.simulate import ROUTERS

    assert NAMES == ROUTERS == tuple(policies(512))


def test_round_robin_cycles_and_random_is_seeded() -> None:
    rr = RoundRobin(3)
    assert [rr.route(req(i, (i,)), 0.0) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    a, b = Uniform(8, seed=5), Uniform(8, seed=5)
    picks = [a.route(req(i, (i,)), 0.0) for i in range(400)]
    assert picks == [b.route(req(i, (i,)), 0.0) for i in range(400)]
    assert set(picks) == set(range(8))
    assert picks != [Uniform(8, seed=6).route(req(i, (i,)), 0.0) for i in range(400)]


def test_least_load_subtracts_the_oldest_pending_load() -> None:
    # least_load.rs: pending loads leave in FIFO order, whichever request completed
    ll = LeastLoad(2)
    assert ll.route(req(0, (0,), 1000), 0.0) == 0
    assert ll.route(req(1, (1,), 100), 0.0) == 1
    assert ll.route(req(2, (2,), 50), 0.0) == 1  # 150 on replica 1 after this
    ll.finished(1, req(2, (2,), 50), 1.0)  # removes 100, the oldest on replica 1, not 50
    assert ll.load == [1000, 50]


def test_power_of_two_compares_the_last_poll_only() -> None:
    loads = [0, 0]
    p2 = PowerOfTwo(2, 5.0, seed=1, view=FakeView(loads))
    p2.tick(0.0)
    assert p2.next_tick(0.0) == 5.0
    loads[:] = [10_000, 0]  # not seen until the next poll
    first = [p2.route(req(i, (i,)), 1.0) for i in range(50)]
    p2.tick(5.0)
    after = [p2.route(req(i, (i,)), 6.0) for i in range(50)]
    assert set(first) == {0, 1}  # ties go to the first draw, itself uniform
    assert after == [1] * 50


def test_session_affinity_keeps_a_key_on_one_replica_and_spreads_keys() -> None:
    s = SessionAffinity(8)
    for key in range(50):
        assert len({s.route(req(i, (key, 1000 + i)), 0.0) for i in range(5)}) == 1
    spread = [s.route(req(k, (k,)), 0.0) for k in range(4000)]
    counts = [spread.count(r) for r in range(8)]
    assert min(counts) > 250  # 500 each on average; 150 virtual nodes keep it near even


def test_tree_names_the_creator_of_the_node_the_match_ends_in() -> None:
    t = ApproxTree()
    t.insert((1, 2, 3), (10, 10, 10), tenant=0)
    t.insert((1, 2, 4), (10, 10, 10), tenant=1)  # splits (1,2,3) at 2: (1,2) keeps tenant 0
    m = t.match((1, 2, 5), (10, 10, 10))
    assert m == (0, 20, 30)
    assert t.match((1, 2, 4, 9), (10, 10, 10, 10)) == (1, 30, 40)
    assert t.char_count == {0: 30, 1: 10 + 20}


def test_tree_eviction_trims_each_tenant_oldest_leaf_first() -> None:
    t = ApproxTree()
    t.insert((1, 2), (100, 100), tenant=0)
    t.insert((1, 3), (100, 100), tenant=0)  # newer leaf
    t.insert((7,), (50,), tenant=1)
    t.evict(max_size=250)
    assert t.char_count == {0: 200, 1: 50}
    assert t.match((1, 2), (100, 100)).matched_chars == 100  # leaf (2) went, (3) stayed
    assert t.match((1, 3), (100, 100)).matched_chars == 200


def test_cache_aware_follows_the_tree_while_balanced() -> None:
    ca = CacheAware(2, DEFAULTS, 512)
    a, b = (1, 2, 3, 4), (9, 10, 11, 12)
    assert ca.route(req(0, a), 0.0) == 0  # nothing matches: the least loaded, first of equals
    assert ca.route(req(1, b), 0.0) == 1  # nothing matches: replica 1 has the fewer in flight
    assert ca.route(req(2, (1, 2, 3, 99)), 0.0) == 0  # 3/4 > 0.3 of its text is replica 0's
    assert ca.route(req(3, (1, 98, 97, 96)), 0.0) == 1  # 1/4 <= 0.3: least loaded (2 vs 1)
    assert ca.decisions == {"imbalanced": 0, "cache_hit": 1, "min_load": 3}


def test_cache_aware_balances_only_when_both_thresholds_hold() -> None:
    opts = dict(DEFAULTS, **{"balance-abs-threshold": 2, "balance-rel-threshold": 1.5})
    ca = CacheAware(2, opts, 512)
    prefix = (5, 6, 7)
    picks = [ca.route(req(i, (*prefix, 100 + i)), 0.0) for i in range(6)]
    # 0 first; then the prefix keeps it on 0 until 3 - 0 > 2 and 3 > 0 x 1.5: then 1
    assert picks == [0, 0, 0, 1, 0, 1]
    assert ca.load == [4, 2]


def test_f32_comparisons_are_the_routers() -> None:
    assert f32(0.3) != 0.3 and f32(0.3) == pytest.approx(0.3, rel=1e-7)
    ca = CacheAware(2, dict(DEFAULTS, **{"cache-threshold": 0.25}), 512)
    ca.route(req(0, (1, 2, 3, 4)), 0.0)
    ca.route(req(1, (50,)), 0.0)
    assert ca.route(req(2, (1, 2, 3, 4, 5)), 0.0) == 0  # in flight: 2 and 1
    # exactly 1/4 matched: 0.25 > 0.25 is false in f32 as in f64: the least loaded wins
    assert ca.route(req(3, (1, 7, 8, 9)), 0.0) == 1


@pytest.mark.parametrize(
    ("name", "opts", "message"),
    [
        ("nope", [], "--router 'nope': unknown policy"),
        ("round-robin", ["cache-threshold=0.5"], "not an option of --router round-robin"),
        ("sglang-cache-aware", ["cache-threshold=nan"], "--router-opt cache-threshold"),
        ("sglang-cache-aware", ["cache-threshold=-1"], "--router-opt cache-threshold"),
        ("sglang-cache-aware", ["balance-abs-threshold=-3"], "--router-opt balance-abs"),
        ("sglang-cache-aware", ["balance-rel-threshold=inf"], "--router-opt balance-rel"),
        ("sglang-cache-aware", ["max-tree-size"], "expected KEY=VALUE"),
        ("power-of-two", ["load-check-interval-secs=0"], "load-check-interval-secs"),
    ],
)
def test_bad_policy_or_option_is_refused_by_name(name: str, opts: list[str], message: str) -> None:
    with pytest.raises(KvtierError, match=message.replace("(", r"\(")):
        make_router(name, 2, opts, 0, FakeView([0, 0]), 512)


def test_options_parse_with_defaults() -> None:
    view = FakeView([0, 0, 0])
    router, opts = make_router("sglang-cache-aware", 3, ["cache-threshold=0.5"], 0, view, 512)
    assert opts["cache-threshold"] == 0.5 and opts["balance-abs-threshold"] == 64
    assert router.next_tick(0.0) == 60 and math.isinf(
        make_router("random", 3, [], 0, view, 512)[0].next_tick(0.0)
    )


def llmd(name: str, view: FakeView, opts: list[str] | None = None) -> object:
    return make_router(name, len(view.loads), opts or [], 0, view, 512)[0]


def test_llmd_approximate_learns_from_its_own_picks_within_its_lru() -> None:
    view = FakeView([0, 0, 0])
    r = llmd("llm-d-approximate", view)
    r.tick(0.0)  # type: ignore[attr-defined]
    first = r.route(req(0, (1, 2, 3, 4)), 0.0)  # type: ignore[attr-defined]
    # prefix 3 x 1.0 beats anything the queue (2) or usage (2) scorers can tell apart
    assert all(r.route(req(i, (1, 2, 3, 50 + i)), 0.0) == first for i in range(1, 6))  # type: ignore[attr-defined]


def test_llmd_index_counts_blocks_until_no_server_holds_one_and_forgets_lru_first() -> None:
    from kvtier.sim.fleet.llmd import PrefixIndex

    index = PrefixIndex(3, capacity=4)
    index.add((1, 2, 3), 0)
    index.add((1, 2), 1)
    index.add((7, 8), 2)
    assert index.scores((1, 2, 3, 9), 3) == [0.75, 0.5, 0.0]
    index.add((4, 5), 0)  # server 0 holds 1, 2, 3, 4, 5 > 4: block 1, its oldest, goes
    # block 1 is server 1's alone now, yet server 0 still counts blocks 2 and 3: the walk stops
    # only at a block no server holds, not at a server's own first miss (matchLongestPrefix)
    assert index.scores((1, 2, 3), 3) == [2 / 3, 2 / 3, 0.0]


def test_llmd_queue_scorer_is_stale_between_scrapes() -> None:
    view = FakeView([0, 0], queues=[0, 5])
    r = llmd("llm-d-precise", view)
    r.tick(0.0)  # type: ignore[attr-defined]
    view.waiting = [5, 0]  # not seen until the next scrape, 50 ms on
    r.watch(0.01, 0)  # type: ignore[attr-defined]
    r.watch(0.01, 1)  # type: ignore[attr-defined]
    assert r.route(req(0, (1,)), 0.01) == 0  # type: ignore[attr-defined]
    assert r.next_tick(0.01) == pytest.approx(0.05)  # type: ignore[attr-defined]
    r.tick(0.05)  # type: ignore[attr-defined]
    assert r.route(req(1, (1,)), 0.06) == 1  # type: ignore[attr-defined]


def test_llmd_scrape_rereads_only_the_replicas_with_an_event() -> None:
    view = FakeView([0, 0], queues=[0, 5])
    r = llmd("llm-d-precise", view)
    r.tick(0.0)  # type: ignore[attr-defined]
    view.waiting = [5, 0]
    r.watch(0.01, 1)  # type: ignore[attr-defined]
    # replica 0 had no event: its scraped 0 waiting stands beside replica 1's new 0
    r.tick(0.05)  # type: ignore[attr-defined]
    assert r._queue_scores == [1.0, 1.0]  # type: ignore[attr-defined]
    r.watch(0.06, 0)  # type: ignore[attr-defined]
    r.tick(0.1)  # type: ignore[attr-defined]
    assert r.route(req(0, (1,)), 0.1) == 1  # type: ignore[attr-defined]


ACTIVE_ONLY = ["prefix-weight=0", "queue-weight=0", "kv-usage-weight=0", "active-weight=1"]


def test_llmd_active_request_counts_its_own_picks_until_each_response_completes() -> None:
    """v0.4.0 on: a pick counts on its pod until the response completes; a pod with none scores
    1, the others (max - count) / max, so the picks spread one a pod and follow the finishes."""
    view = FakeView([0, 0, 0])
    r = llmd("llm-d-approximate", view, ACTIVE_ONLY)
    r.tick(0.0)  # type: ignore[attr-defined]
    picks = [r.route(req(i, (i + 1,)), 0.0) for i in range(3)]  # type: ignore[attr-defined]
    assert sorted(picks) == [0, 1, 2]
    assert r.active_scores == [0.0, 0.0, 0.0]  # type: ignore[attr-defined]
    r.finished(picks[1], req(1, (2,)), 1.0)  # type: ignore[attr-defined]
    assert r.active_scores[picks[1]] == 1.0  # type: ignore[attr-defined]
    assert r.route(req(3, (4,)), 1.0) == picks[1]  # type: ignore[attr-defined]
    r.route(req(4, (5,)), 1.0)  # type: ignore[attr-defined]  # all at 1, tied: one takes a second
    # two in flight on one pod, one on the others: (2 - 1) / 2 for those
    assert sorted(r.active_scores) == [0.0, 0.5, 0.5]  # type: ignore[attr-defined]


def test_llmd_active_request_released_at_the_headers_orders_nothing() -> None:
    """v0.3.x: PostResponse, run on the response headers, lowers the count before the next
    pick: every pod scores 1, and the picks are the max-score picker's ties, at random."""
    view = FakeView([0, 0, 0])
    r = llmd("llm-d-approximate", view, [*ACTIVE_ONLY, "active-until-finish=0"])
    r.tick(0.0)  # type: ignore[attr-defined]
    picks = [r.route(req(i, (i + 1,)), 0.0) for i in range(30)]  # type: ignore[attr-defined]
    assert r.active_scores == [1.0, 1.0, 1.0]  # type: ignore[attr-defined]
    assert max(picks.count(p) for p in range(3)) > 10  # counted, 10 each would be the spread


def test_llmd_active_request_at_weight_0_leaves_the_scores_as_they_were() -> None:
    """The default weight 0 adds 0.0 to each total: the picks are bit for bit those without."""
    view = FakeView([0, 0, 0], queues=[3, 1, 2])
    view.usage = [0.5, 0.25, 0.125]
    plain = llmd("llm-d-approximate", view)
    counted = llmd("llm-d-approximate", view, ["active-until-finish=1"])
    for r in (plain, counted):
        r.tick(0.0)  # type: ignore[attr-defined]
    assert plain._base == counted._base  # type: ignore[attr-defined]
    trace = [req(i, (i % 4 + 1, 9)) for i in range(12)]
    assert [plain.route(q, 0.0) for q in trace] == [counted.route(q, 0.0) for q in trace]  # type: ignore[attr-defined]


def test_llmd_precise_reads_the_device_and_normalises() -> None:
    view = FakeView([0, 0, 0])
    view.resident = {0: 2, 2: 4}
    r = llmd("llm-d-precise", view)
    r.tick(0.0)  # type: ignore[attr-defined]
    # prefix: replica 2 holds 4 (1.0), replica 0 holds 2 (0.0 after min-max), 1 none (0.0)
    assert r.route(req(0, (1, 2, 3, 4, 5)), 0.0) == 2  # type: ignore[attr-defined]


def test_ttft_predict_weighs_queued_prefill_against_the_cached_prefix() -> None:
    view = FakeView([0, 0, 0], queues=[0, 3000, 0])
    view.resident = {1: 4}  # replica 1 holds the whole 2,048-token prompt but has 3,000 queued
    r = llmd("ttft-predict", view)
    prompt = req(0, (1, 2, 3, 4))
    # replica 0: 0 + 2.048 s; replica 1: 3.0 + 0.001 s (the last token is recomputed); 2: as 0
    times, _ = r.predict(prompt)  # type: ignore[attr-defined]
    assert times == pytest.approx([2.048, 3.001, 2.048])
    assert r.route(prompt, 0.0) == 0  # type: ignore[attr-defined]
    view.waiting = [0, 1000, 0]
    assert r.route(prompt, 0.0) == 1  # type: ignore[attr-defined]


def test_dynamo_kv_weighs_prefill_blocks_against_active_blocks() -> None:
    view = FakeView([0, 0])
    view.resident = {1: 3}  # replica 1 holds 3 of the prompt's 4 blocks
    r = llmd("dynamo-kv", view)
    prompt = req(0, (1, 2, 3, 4))
    logits, fresh = r.logits(prompt, 0.0)  # type: ignore[attr-defined]
    # replica 0: 4 prefill blocks + 4 decode blocks; replica 1: 1 + 4
    assert logits == [8.0, 5.0] and fresh == [2048, 512]
    assert r.route(prompt, 0.0) == 1  # type: ignore[attr-defined]
    # replica 1 now holds the request's 4 blocks as active decode blocks, shared ones once
    assert r.logits(req(1, (1, 2, 3, 9)), 0.0)[0] == [8.0, 1.0 + 5.0]  # type: ignore[attr-defined]
    r.finished(1, prompt, 1.0)  # type: ignore[attr-defined]
    assert r.logits(req(1, (1, 2, 3, 9)), 0.0)[0] == [8.0, 5.0]  # type: ignore[attr-defined]
