"""The simulated SGLang server on hand-sized scenarios: every time below is derived by hand."""

from __future__ import annotations

import math

import pytest

from kvtier.cache.storage import Tier
from kvtier.engines.sglang.prefetch import ERA_0_5_3
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.run import simulate
from kvtier.sim.servers import sglang, sglang_budget, sglang_decode, sglang_prefill
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.prefetch import PrefetchPolicy, PrefetchQueue, PrefetchRules
from kvtier.sim.servers.sglang import EngineConfig, SGLangServer
from kvtier.sim.servers.store import AccountingStore
from kvtier.sim.setup import SimConfig
from kvtier.sim.simulation import Simulation
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import Trace, TraceRequest

COST = ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192)
HW = Hardware(989.0, 3350.0, 25.0, 100.0, 8)
TM = TimingModel(COST, HW, 1)


def config(
    device_blocks: int, host_blocks: int = 0, chunk: int = 8192, max_running: int = 64
) -> SimConfig:
    return SimConfig(
        device_blocks * 512, host_blocks * 512, 1, 512, "write_through", max_running, chunk, TM, ()
    )


def req(
    rid: int, t: float, input_len: int, output_len: int, blocks: tuple[int, ...]
) -> TraceRequest:
    return TraceRequest(rid, t, input_len, output_len, blocks)


def test_one_request_alone() -> None:
    r = req(0, 0.0, 1500, 10, (1, 2, 3))
    result = simulate(Trace((r,)), config(100))
    prefill = TM.prefill_s(1500, 0)
    decode = TM.decode_steps_s(9, 1501, 1)  # the first token came from prefill
    assert result.ttft_s is not None
    assert result.ttft_s.p50 == pytest.approx(prefill, rel=1e-12)
    assert result.duration_s == pytest.approx(prefill + decode, rel=1e-12)
    assert result.throughput_tok_s == pytest.approx(10 / (prefill + decode), rel=1e-12)
    assert result.hit_rate == 0


def test_a_repeated_prompt_recomputes_only_its_last_token() -> None:
    a = req(0, 0.0, 1500, 2, (1, 2, 3))
    b = req(1, 100.0, 1500, 2, (1, 2, 3))
    result = simulate(Trace((a, b)), config(100))
    # b: all three blocks, 512 + 512 + 476, less the last token (Req._compute_max_prefix_len)
    assert result.hit_tokens_by_tier["device"] == 1499
    assert result.hit_rate == 1499 / 3000
    assert result.ttft_s is not None
    # p50 of two TTFTs is their mean
    expected = (TM.prefill_s(1500, 0) + TM.prefill_s(1, 1499)) / 2
    assert result.ttft_s.p50 == pytest.approx(expected, rel=1e-12)


def test_host_hits_load_back_overlapped_with_compute() -> None:
    # device of 4 blocks: a (3 blocks + 1 output block) then c (4 blocks) push a to the host
    a = req(0, 0.0, 1500, 10, (1, 2, 3))
    c = req(1, 100.0, 2000, 10, (7, 8, 9, 10))
    b = req(2, 200.0, 1600, 10, (1, 2, 3, 4))
    result = simulate(Trace((a, c, b)), config(5, host_blocks=20))
    assert result.hit_tokens_by_tier == {"device": 0, "host": 1536, "store": 0}
    loaded = TM.overlapped_s(TM.prefill_s(64, 1536), TM.load_s(1536))
    assert result.pcie_busy_fraction == pytest.approx(TM.load_s(1536) / result.duration_s)
    without = simulate(Trace((a, c, b)), config(5))
    assert without.hit_rate == 0
    assert result.duration_s < without.duration_s
    assert loaded < TM.prefill_s(1600, 0)


def test_chunked_prefill_splits_a_long_prompt() -> None:
    r = req(0, 0.0, 5000, 1, tuple(range(10)))
    result = simulate(Trace((r,)), config(100, chunk=2048))
    chunks = TM.prefill_s(2048, 0) + TM.prefill_s(2048, 2048) + TM.prefill_s(904, 4096)
    assert result.ttft_s is not None
    assert result.ttft_s.p50 == pytest.approx(chunks, rel=1e-12)
    assert result.duration_s == pytest.approx(chunks, rel=1e-12)  # one output token: done


def test_requests_that_can_never_fit_are_rejected_and_reported() -> None:
    small = req(0, 0.0, 1000, 10, (1, 2))
    huge = req(1, 0.0, 4000, 2000, tuple(range(10, 18)))  # 12 blocks with its output
    result = simulate(Trace((small, huge)), config(8))
    assert (result.finished, result.rejected, result.rejected_ids) == (1, 1, (1,))


def test_the_queue_waits_for_device_pages() -> None:
    # each request needs 3 blocks; 4 device blocks hold one at a time
    a = req(0, 0.0, 1000, 600, (1, 2))
    b = req(1, 0.0, 1000, 600, (3, 4))
    result = simulate(Trace((a, b)), config(4))
    first = TM.prefill_s(1000, 0) + TM.decode_steps_s(599, 1001, 1)
    assert result.queue_s is not None
    assert result.queue_s.p50 == pytest.approx(first / 2, rel=1e-9)  # b waits all of a; a none
    assert result.concurrency.max == 1


def test_decode_batches_every_running_request() -> None:
    a = req(0, 0.0, 512, 100, (1,))
    b = req(1, 0.0, 512, 100, (2,))
    result = simulate(Trace((a, b)), config(100))
    prefill = TM.prefill_s(512, 0) * 2  # one batch of two 512-token chunks
    decode = TM.decode_steps_s(99, 2 * 513, 2)
    assert result.duration_s == pytest.approx(prefill + decode, rel=1e-12)
    assert result.concurrency.max == 2


def test_requests_past_the_context_length_are_rejected() -> None:
    ok = req(0, 0.0, 1000, 10, (1, 2))
    long = req(1, 0.0, 3000, 1200, tuple(range(10, 16)))
    limited = SimConfig(
        100 * 512, 0, 1, 512, "write_through", 64, 8192, TM, (), context_length=4096
    )
    result = simulate(Trace((ok, long)), limited)
    assert result.rejected_ids == (1,)
    assert simulate(Trace((ok, long)), config(100)).rejected == 0


def _store_run(rules: PrefetchRules) -> RequestRecord:
    """Device 5, host 8 blocks: d pushes a out of the host into the store; b (t=300) then finds
    a's three blocks there and prefetches them at 5 GB/s while it waits."""
    a = req(0, 0.0, 1500, 10, (1, 2, 3))
    c = req(1, 100.0, 2000, 10, (7, 8, 9, 10))
    d = req(2, 200.0, 2000, 10, (20, 21, 22, 23))
    b = req(3, 300.0, 1600, 10, (1, 2, 3, 4))
    port = TieredCachePort(5, 8, store_pages=100)
    # capacity int(0.8 x (8 - 5) x 512) = 1228 tokens: nothing in flight, so b's prefetch starts
    queue = PrefetchQueue(rules, TM.store_read_s(1), ERA_0_5_3.capacity_tokens(8 * 512, 5 * 512))
    engine = SGLangServer(port, TM, EngineConfig(512, 64, 8192), queue)
    records = Simulation(Trace((a, c, d, b)), engine).run()
    assert port.evictions()["store"] == 0
    return records[3]


def test_wait_complete_reads_the_whole_store_hit_then_loads_it() -> None:
    rec = _store_run(PrefetchRules(PrefetchPolicy.WAIT_COMPLETE))
    assert rec.hit_tokens == {Tier.DEVICE: 0, Tier.HOST: 0, Tier.STORE: 1536}
    read = 1536 * 131_072 * 1 / 5e9  # tokens x KV bytes x TP / store bandwidth
    assert rec.admit_s - rec.arrival_s == pytest.approx(read, rel=1e-9)
    loaded = TM.overlapped_s(TM.prefill_s(64, 1536), TM.load_s(1536))
    assert rec.first_token_s - rec.admit_s == pytest.approx(loaded, rel=1e-9)


def test_best_effort_on_an_idle_server_stops_at_once_and_recomputes() -> None:
    rec = _store_run(PrefetchRules(PrefetchPolicy.BEST_EFFORT))
    assert rec.hit_tokens == {Tier.DEVICE: 0, Tier.HOST: 0, Tier.STORE: 0}
    assert rec.admit_s == rec.arrival_s
    assert rec.first_token_s - rec.arrival_s == pytest.approx(TM.prefill_s(1600, 0), rel=1e-12)


def test_timeout_keeps_the_whole_blocks_read_before_it() -> None:
    # 0.02 s reads 0.02 / (512 x 26.2 us) = 1.49 blocks: one whole block is kept
    rec = _store_run(PrefetchRules(PrefetchPolicy.TIMEOUT, 256, 0.02, 0.0))
    assert rec.hit_tokens == {Tier.DEVICE: 0, Tier.HOST: 0, Tier.STORE: 512}
    assert rec.admit_s - rec.arrival_s == pytest.approx(0.02, rel=1e-9)
    loaded = TM.overlapped_s(TM.prefill_s(1088, 512), TM.load_s(512))
    assert rec.first_token_s - rec.admit_s == pytest.approx(loaded, rel=1e-9)


def test_a_store_hit_under_the_threshold_is_not_prefetched() -> None:
    rec = _store_run(PrefetchRules(PrefetchPolicy.WAIT_COMPLETE, threshold_tokens=2000))
    assert rec.hit_tokens[Tier.STORE] == 0 and rec.admit_s == rec.arrival_s


def test_a_host_hit_under_ten_tokens_is_recomputed() -> None:
    # 8-token blocks, device of 4: x evicts a's prompt blocks to the host (write-through)
    a = req(0, 0.0, 16, 8, (1, 2))
    # (prompt, output and a page fit strictly below the 32-token pool: PrefillAdder.add_one_req)
    x = req(1, 10.0, 24, 6, (5, 6, 7))
    b = req(2, 20.0, 16, 8, (1, 9))  # one 8-token host block: under HiCache's 10, recomputed
    c = req(2, 20.0, 24, 6, (1, 2, 3))  # two host blocks, 16 tokens: loaded back
    cfg = SimConfig(32, 64, 1, 8, "write_through", 64, 8192, TM, ())
    no_load = simulate(Trace((a, x, b), 8), cfg).hit_tokens_by_tier
    assert no_load == {"device": 0, "host": 0, "store": 0}
    loaded = simulate(Trace((a, x, c), 8), cfg).hit_tokens_by_tier
    assert loaded == {"device": 0, "host": 16, "store": 0}


def test_accounting_store_drops_its_oldest_page_when_full() -> None:
    store = AccountingStore(2)
    store.save([b"a", b"b"], [b"", b""])
    assert store.load([b"a"]) == [b""]  # a is now the most recent
    store.save([b"c"], [b""])
    assert (store.contains_prefix([b"a", b"c"]), store.contains_prefix([b"b"])) == (2, 0)
    assert store.evicted == 1 and len(store) == 2


@pytest.mark.parametrize(("policy", "store_hit"), [("write_through", 1536), ("write_back", 0)])
def test_a_prefetch_starts_only_behind_a_backed_up_device_prefix(
    policy: str, store_hit: int
) -> None:
    """Block 1 stays hot on the device (q-requests) while fillers push p's blocks 2-4 through a
    12-block host into the store. Under write_back block 1 has no host copy, so SGLang starts no
    prefetch for e and recomputes blocks 2-4; under write_through it prefetches them."""
    p = req(0, 0.0, 2000, 10, (1, 2, 3, 4))
    rows = [p]
    for k, filler in enumerate((20, 30, 40, 50)):
        rows.append(req(len(rows), 100.0 + 100 * k, 1000, 10, (1, 5 + k)))
        rows.append(req(len(rows), 150.0 + 100 * k, 2000, 10, tuple(range(filler, filler + 4))))
    rows.append(req(len(rows), 600.0, 2100, 10, (1, 2, 3, 4, 8)))
    port = TieredCachePort(6, 12, write_policy=policy, store_pages=100)
    rules = PrefetchRules(PrefetchPolicy.WAIT_COMPLETE)
    queue = PrefetchQueue(rules, TM.store_read_s(1), ERA_0_5_3.capacity_tokens(12 * 512, 6 * 512))
    engine = SGLangServer(port, TM, EngineConfig(512, 64, 8192), queue)
    e = Simulation(Trace(tuple(rows)), engine).run()[-1]
    assert e.hit_tokens == {Tier.DEVICE: 512, Tier.HOST: 0, Tier.STORE: store_hit}
    assert queue.issued == (1 if store_hit else 0)


def test_a_full_pool_retracts_the_longer_prompt_then_the_later_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hand trace of `ScheduleBatch.retract_decode` (SGLang v0.5.23) with a clip of 8 tokens:
    three requests of 100 output tokens, prompts of 32, 48 and 48 tokens, on 20 pages of 16.
    Admission reserves 8 output tokens each; decode has 320 - 128 = 192 tokens for 3 a step, so
    the 65th step does not fit. Of equal outputs the longer prompt goes first, and of the two
    equal ones the later in the batch: request 2. Its 64 output tokens are freed and its prompt
    stays in the tree unlocked (room 64 + 48 = 112 tokens); the other two decode their last 35
    steps in it, and request 2 comes back with its prompt hit and 65 tokens to prefill again.
    SGLang 0.5.23's own classes (tests/sglang_scheduler_worker.py) give the same trace."""
    for module in (sglang_budget, sglang, sglang_prefill, sglang_decode):
        monkeypatch.setattr(module, "CLIP_MAX_NEW_TOKENS", 8)
    server = SGLangServer(TieredCachePort(20), TM, EngineConfig(16, 32, 512))
    records = []
    for rid, blocks in enumerate(((1, 2), (3, 4, 5), (6, 7, 8))):
        r = req(rid, 0.0, 16 * len(blocks), 100, blocks)
        records.append(RequestRecord(rid, 0.0, r.input_len, r.output_len))
        server.arrive(r, records[-1], 0.0)
    now, prefills = 0.0, []
    while (duration := server.start_step(now, math.inf)) is not None:
        if not server._pending_decode:
            prefills.append(([live.req.rid for live in server._pending], server._steps))
        now += duration
        server.finish_step(now)
    assert server.retractions == [(64, 2)]
    assert server.counters().preemptions == 1
    # request 2 waits for a finish; its first admission's hit (none) stays on its record
    assert prefills == [([0, 1, 2], 0), ([2], 99)]
    assert all(rec.finished for rec in records)
    assert records[2].hit_tokens[Tier.DEVICE] == 0
