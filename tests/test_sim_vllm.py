"""The simulated vLLM V1 server on hand-sized scenarios: block counts and hits derived by hand."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_shared
from kvtier.cache.storage import Tier
from kvtier.engines.deployment import Engine
from kvtier.sim.run import replay, simulate
from kvtier.sim.servers.vllm import VllmServer
from kvtier.sim.servers.vllm_blocks import BlockPool, Chain, prompt_chain
from kvtier.sim.setup import SimConfig
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import Trace, TraceRequest

COST = ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192)
TM = TimingModel(COST, Hardware(989.0, 3350.0, 25.0, 100.0, 8), 1)


def config(
    blocks: int, block: int = 16, seqs: int = 256, batched: int = 8192, caching: bool = True
) -> SimConfig:
    """A vLLM pool of `blocks` engine blocks plus the null block, over 512-token trace blocks."""
    return SimConfig(
        (blocks + 1) * block,
        0,
        block,
        512,
        "",
        seqs,
        batched,
        TM,
        (),
        engine=Engine.VLLM,
        prefix_caching=caching,
    )


def req(rid: int, t: float, n: int, out: int, blocks: tuple[int, ...]) -> TraceRequest:
    return TraceRequest(rid, t, n, out, blocks)


def test_units_name_engine_blocks_by_their_trace_block() -> None:
    # 1500 tokens: 512 + 512 + 476; 16-token blocks: 32 + 32 + 29 full ones (476 // 16)
    chain = prompt_chain((7, 8, 9), 1500, 512, 16)
    assert chain.pairs() == [(7, 32), (8, 32), (9, 29)]
    assert [chain.within(b) for b in (31, 32, 92, 93)] == [0, 1, 2, 3]
    assert prompt_chain((7, 8), 1024, 512, 16).pairs() == [(7, 32), (8, 32)]
    # 128-token engine blocks over 64-token trace blocks: each named by its second trace block
    assert prompt_chain((1, 2, 3, 4, 5), 300, 64, 128).pairs() == [(2, 1), (4, 1)]


def test_a_repeated_prompt_hits_all_but_its_last_token_in_whole_blocks() -> None:
    a = req(0, 0.0, 1500, 4, (1, 2, 3))
    b = req(1, 100.0, 1500, 4, (1, 2, 3))
    result = simulate(Trace((a, b)), config(1000))
    # (1500 - 1) // 16 = 93 blocks may hit; all 93 are cached: 1,488 tokens
    assert result.hit_tokens_by_tier["device"] == 1488
    assert result.params["preemptions"] == 0


def test_prefix_caching_off_hits_nothing() -> None:
    a = req(0, 0.0, 1500, 4, (1, 2, 3))
    b = req(1, 100.0, 1500, 4, (1, 2, 3))
    assert simulate(Trace((a, b)), config(1000, caching=False)).hit_rate == 0


def test_the_free_queue_evicts_the_least_recently_used_unit() -> None:
    pool = BlockPool(64)
    one, two = Chain((1,), 32, 32), Chain((2,), 32, 32)
    pool.take(32)
    assert pool.cache(1, 32)
    pool.release([1], 32)  # unit 1 free, cached
    pool.take(32)
    assert pool.cache(2, 32)
    pool.release([2], 32)  # unit 2 free, cached, more recent
    assert pool.match(one, 99) == ([1], 32, 32)  # held by nobody: idle
    pool.take(1)  # no plain block is left: the least recently freed unit goes, whole
    assert pool.match(one, 99)[0] == [] and pool.match(two, 99)[0] == [2]
    assert pool.evicted == 32 and pool.free == 31 + 32


def test_a_running_unit_is_pinned() -> None:
    pool = BlockPool(40)
    pool.take(32)
    assert pool.cache(1, 32)
    with pytest.raises(ValueError):
        pool.take(9)  # 8 free: the held unit cannot be evicted
    pool.release([1], 32)
    pool.take(9)
    assert pool.match(Chain((1,), 32, 32), 99) == ([], 0, 0)


def test_blocks_running_out_preempt_the_last_request_and_it_recomputes() -> None:
    # 40 blocks of 16 tokens: two 256-token prompts (16 blocks each) decode 200 tokens each;
    # together they need 2 x 29 blocks, so the later one is preempted and runs after
    a = req(0, 0.0, 256, 200, (1,))
    b = req(1, 0.0, 256, 200, (2,))
    result = simulate(Trace((a, b)), config(40))
    assert result.finished == 2
    assert result.params["preemptions"] >= 1
    # a preempted request's lookup is not a first lookup: the hit counters stay at zero
    assert result.hit_tokens_by_tier["device"] == 0


def test_priority_preempts_the_latest_arrival_and_requeues_by_arrival() -> None:
    # three requests outgrow 40 blocks; FCFS preempts the last running one, priority (one
    # priority for all) the latest arrival: the same one here, so both finish all three
    rows = tuple(req(i, 0.0, 256, 200, (i + 1,)) for i in range(3))
    for policy in ("fcfs", "priority"):
        cfg = dataclasses.replace(config(40), scheduling_policy=policy)
        result = simulate(Trace(rows), cfg)
        assert result.finished == 3 and result.params["preemptions"] >= 1, policy


def test_the_token_budget_chunks_a_long_prompt() -> None:
    r = req(0, 0.0, 5000, 1, tuple(range(10)))
    result = simulate(Trace((r,)), config(1000, batched=2048))
    assert result.ttft_s is not None
    # 2,048, 2,048 and 904 tokens, each chunk after the ones before it
    chunks = sum(TM.prefill_s(min(2048, 5000 - done), done) for done in (0, 2048, 4096))
    assert result.ttft_s.p50 == pytest.approx(chunks, rel=1e-12)


def test_a_long_prefill_threshold_cuts_chunks_only_with_company() -> None:
    alone = req(0, 0.0, 5000, 1, tuple(range(10)))
    cfg = dataclasses.replace(config(1000, batched=2048), long_prefill_threshold=1000)
    result = simulate(Trace((alone,)), cfg)
    chunks = TM.prefill_s(2048, 0) + TM.prefill_s(2048, 2048) + TM.prefill_s(904, 4096)
    assert result.ttft_s is not None
    assert result.ttft_s.p50 == pytest.approx(chunks, rel=1e-12)  # nobody to starve: no cap
    pair = (alone, req(1, 0.0, 5000, 1, tuple(range(20, 30))))
    first = simulate(Trace(pair), cfg)
    # both run in 1,000-token chunks: the first needs 5 steps, not 3
    assert first.ttft_s is not None and first.ttft_s.p50 > 2 * chunks


def _kvtier(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtier", *args], capture_output=True, text=True, timeout=300
    )


def test_light_load_matches_the_lru_reference() -> None:
    trace = str(require_shared("traces/mooncake-conversation.jsonl"))
    timed = _kvtier(
        "simulate", trace, "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100",
        "--time-scale", "20", "--device-tokens", "5120000", "--json",
    )  # fmt: skip
    assert timed.returncode == 0, timed.stderr
    lru = _kvtier("simulate", trace, "--lru-tokens", "5120000", "--json")
    assert lru.returncode == 0, lru.stderr
    got, want = json.loads(timed.stdout)["hit_rate"], json.loads(lru.stdout)["hit_rate"]
    assert got == pytest.approx(want, abs=0.005)


LMCACHE = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"'
LAUNCH = ("--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct")
ENGINE = ("--engine", "vllm", "--model", "llama-3.1-8b")


# 1,000 blocks of Llama-3.1-8B at TP1: 2 MiB a block (32 layers x 16 tokens x 8 heads x 256 x 2 B)
BLOCK_BYTES = 32 * 16 * 8 * 256 * 2


def native(**extra: int) -> str:
    """An OffloadingConnector config of 1,000 CPU blocks (v0.14.0 on: their bytes) and `extra`."""
    settings = {"cpu_bytes_to_use": 1000 * BLOCK_BYTES, **extra}
    return json.dumps(
        {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": settings,
        }
    )


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm") / "t.jsonl"
    gen = _kvtier(
        "simulate", "--generate", "chat", "--seed", "1", "--requests", "200", "-o", str(out)
    )
    assert gen.returncode == 0, gen.stderr
    return out


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ((*ENGINE, "--hicache-ratio", "2"), "--hicache-ratio"),
        ((*ENGINE, "--store-tokens", "1000"), "--store-tokens"),
        ((*LAUNCH, "--kv-transfer-config", "{not json"), "--kv-transfer-config"),
        ((*LAUNCH, "--kv-transfer-config", '{"kv_connector": "NixlConnector"}'), "NixlConnector"),
        (
            (*LAUNCH, "--kv-transfer-config",
             LMCACHE + ', "kv_connector_extra_config": {"lmcache.max_local_cpu_size": "lots"}}'),
            "max_local_cpu_size",
        ),
        ((*LAUNCH, "--kv-offloading-backend", "ramdisk"), "--kv-offloading-backend"),
        ((*LAUNCH, "--kv-transfer-config", native(block_size=250)), "multiple of the GPU block"),
        ((*LAUNCH, "--kv-transfer-config", native(block_size=256, blocks_per_chunk=2)),
         "not both"),
        ((*LAUNCH, "--kv-transfer-config", native(blocks_per_chunk=0)), "blocks_per_chunk"),
    ],
)  # fmt: skip
def test_bad_vllm_input_exits_2_naming_it(chat: Path, flags: tuple[str, ...], named: str) -> None:
    result = _kvtier("simulate", str(chat), "--gpu", "h100", "--device-tokens", "60000", *flags)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr


def test_lmcache_disk_is_the_store_tier_behind_its_cpu(chat: Path) -> None:
    config = LMCACHE + (
        ', "kv_connector_extra_config": {"lmcache.max_local_cpu_size": 0.01, '
        '"lmcache.local_disk": "file:///cache", "lmcache.max_local_disk_size": 50}}'
    )
    common = ("simulate", str(chat), "--gpu", "h100", "--device-tokens", "8000", "--json")
    alone = json.loads(_kvtier(*common, *LAUNCH).stdout)
    tiered = _kvtier(*common, *LAUNCH, "--kv-transfer-config", config)
    assert tiered.returncode == 0, tiered.stderr
    result = json.loads(tiered.stdout)
    assert result["hit_tokens_by_tier"]["store"] > 0
    assert result["hit_rate"] > alone["hit_rate"]
    assert "LMCache local disk 50 GiB" in result["params"]["sources"]["store tier"]


def test_an_lmcache_key_kvtier_does_not_read_is_named_in_a_note(chat: Path) -> None:
    """LMCache skips a key its config lacks with a warning (0.3.15, _apply_extra_config): the
    misspelt size leaves the 5 GiB default, and the note names the key."""
    config = LMCACHE + ', "kv_connector_extra_config": {"lmcache.max_local_cpu_sizee": 50}}'
    common = ("simulate", str(chat), "--gpu", "h100", "--device-tokens", "8000", "--json")
    result = _kvtier(*common, *LAUNCH, "--kv-transfer-config", config)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert "5 GiB per rank (LMCache's default)" in out["params"]["sources"]["host tier"]
    assert [n for n in out["notes"] if "lmcache.max_local_cpu_sizee" in n] == [
        "kv_connector_extra_config lmcache.max_local_cpu_sizee not modelled (ignored): kvtier "
        "reads lmcache.chunk_size, lmcache.local_cpu, lmcache.max_local_cpu_size, "
        "lmcache.local_disk, lmcache.max_local_disk_size, lmcache.remote_url; LMCache skips a "
        "key its config lacks with a warning"
    ]


@pytest.mark.parametrize(
    ("version", "extra", "hit_tokens", "host_tokens"),
    [
        ("0.11.0", {"num_cpu_blocks": 1000}, 4992, "16,000"),
        ("0.13.0", {"num_cpu_blocks": 1000, "block_size": 256}, 4864, "256,000"),
        ("0.21.0", {}, 4992, "16,000"),
        ("0.21.0", {"block_size": 256}, 4864, "15,872"),  # 1,000 blocks' bytes: 62 of 256
        ("0.32.0", {"cpu_bytes_to_use": 5000 * BLOCK_BYTES, "blocks_per_chunk": 5}, 4960, "80,000"),
    ],
)
def test_the_offloading_connector_hits_and_counts_its_own_blocks(
    tmp_path: Path, version: str, extra: dict[str, int], hit_tokens: int, host_tokens: str
) -> None:
    """vLLM OffloadingSpec: offloaded blocks of kv_connector_extra_config block_size tokens (the
    GPU block by default; blocks_per_chunk GPU blocks from v0.26.0), num_cpu_blocks of them to
    v0.13.x, cpu_bytes_to_use // their bytes from v0.14.0; get_num_new_matched_tokens hits
    whole offloaded blocks. One 5,000-token prompt sent twice, device caching off."""
    ids = list(range(313))
    trace = tmp_path / "twice.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 5000, "output_length": 1,
                        "hash_ids": ids, "block_tokens": 16}) + "\n"
            for t in (0, 1_000_000)
        )
    )  # fmt: skip
    run = _kvtier(
        "simulate", str(trace), "--gpu", "h100", "--warmup-fraction", "0.5", "--json",
        "--vllm-version", version,
        *LAUNCH, "--no-enable-prefix-caching", "--kv-transfer-config", native(**extra),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["hit_tokens_by_tier"] == {"device": 0, "host": hit_tokens, "store": 0}
    assert f"{host_tokens} tokens" in result["params"]["sources"]["host tier"]


LMCACHE_BACKEND = (
    *LAUNCH, "--tensor-parallel-size", "2", "--kv-offloading-backend", "lmcache",
    "--kv-offloading-size", "1",
)  # fmt: skip


def test_lmcache_backend_through_v0_22_is_the_size_over_the_ranks(chat: Path) -> None:
    """vLLM v0.12.0 - v0.22.x: LMCacheConnectorV1 with 1 GiB / 2 ranks = 0.5 GiB a rank, 8,192
    tokens of Llama-3.1-8B's 65,536 B at TP2; the config's own lmcache.* keys are replaced."""
    config = LMCACHE + ', "kv_connector_extra_config": {"lmcache.chunk_size": 512}}'
    result = _kvtier(
        "simulate", str(chat), "--gpu", "h100", "--device-tokens", "8000", "--json",
        "--vllm-version", "0.22.1", *LMCACHE_BACKEND, "--kv-transfer-config", config,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["params"]["host_tokens"] == (1 << 29) // 65_536 == 8192
    sources = out["params"]["sources"]
    assert "1 GiB / 2 ranks, vLLM 0.22.1" in sources["host tier"]
    assert sources["connector granularity"] == "LMCache chunks of 256 tokens"
    assert any("lmcache.chunk_size not read" in note for note in out["notes"])


def test_lmcache_backend_from_v0_23_is_refused_naming_the_mp_connector(chat: Path) -> None:
    """vLLM v0.23.0: LMCacheMPConnector, --kv-offloading-size not read, nothing sizes it."""
    result = _kvtier(
        "simulate", str(chat), "--gpu", "h100", "--device-tokens", "8000",
        "--vllm-version", "0.23.0", *LMCACHE_BACKEND,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "LMCacheMPConnector" in lines[0], result.stderr
    assert "ignores --kv-offloading-size 1" in lines[0]


def test_lmcache_config_with_the_backend_but_no_size_is_the_configs(chat: Path) -> None:
    """Without --kv-offloading-size vLLM leaves --kv-transfer-config as given, on any release."""
    config = LMCACHE + ', "kv_connector_extra_config": {"lmcache.max_local_cpu_size": 0.25}}'
    result = _kvtier(
        "simulate", str(chat), "--gpu", "h100", "--device-tokens", "8000", "--json",
        "--vllm-version", "0.23.0", *LAUNCH, "--kv-offloading-backend", "lmcache",
        "--kv-transfer-config", config,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["params"]["host_tokens"] == (1 << 28) // 131_072


def _records(trace: Trace, cfg: SimConfig) -> list[tuple[int, str, str, str]]:
    """Each request's admission, first token and finish, to the nanosecond (a decode run of
    several steps sums its time in another order than its steps one at a time)."""
    return [
        (
            r.rid,
            repr(round(r.admit_s, 9)),
            repr(round(r.first_token_s, 9)),
            repr(round(r.finish_s, 9)),
        )
        for r in replay(trace, cfg).records
    ]


def _unmemoized(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's Scheduler.schedule() (v0.32.0): the waiting head is tried at every step, one
    step at a time while anything waits."""
    run = VllmServer._decode_run
    monkeypatch.setattr(VllmServer, "_unchanged", lambda self, r, budget: False)
    monkeypatch.setattr(
        VllmServer, "_decode_run", lambda self, *a: 1 if self.waiting else run(self, *a)
    )


def test_an_eviction_that_shortens_the_waiting_heads_hit_admits_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 277 blocks: the third request preempts the second; the second's freed units wait idle
    # at the free queue's front, the first's decode steps evict them, its hit shrinks, and its
    # next 400-token chunk fits: vLLM readmits it at that step (and preempts it again at the
    # next), 95 preemptions in all, where a retry skipped until the first finishes made 2
    rows = (
        req(0, 0.05, 2674, 297, (200, 201, 202, 203, 204, 205)),
        req(1, 0.1, 2219, 284, (100, 101, 102, 103, 104)),
        req(2, 0.31, 2200, 291, (200, 201, 202, 203, 204)),
    )
    cfg = dataclasses.replace(config(277, batched=512), long_prefill_threshold=400)
    memo = _records(Trace(rows), cfg)
    assert simulate(Trace(rows), cfg).params["preemptions"] == 95
    _unmemoized(monkeypatch)
    assert _records(Trace(rows), cfg) == memo
    assert simulate(Trace(rows), cfg).params["preemptions"] == 95


def _random_case(seed: int) -> tuple[Trace, SimConfig]:
    rng = random.Random(seed)
    rows, t = [], 0.0
    for i in range(rng.randint(3, 8)):
        t += rng.choice([0.0, 0.0, 0.01, 0.05, 0.2])
        n, base = rng.randint(1, 6), rng.choice([0, 100, 200])
        length = (n - 1) * 512 + rng.randint(1, 512)
        rows.append(req(i, t, length, rng.randint(1, 300), tuple(range(base, base + n))))
    cfg = config(rng.randint(100, 400), batched=rng.choice([512, 1024, 2048]))
    cfg = dataclasses.replace(
        cfg,
        scheduling_policy=rng.choice(["fcfs", "priority"]),
        long_prefill_threshold=rng.choice([0, 256, 400]),
        prefix_caching=rng.random() < 0.8,
        host_tokens=rng.choice([0, 0, 2048, 8192]),
    )
    return Trace(tuple(rows)), cfg


def test_the_skipped_retries_change_nothing_an_unmemoized_scheduler_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cases = [_random_case(seed) for seed in range(150)]
    memo = [_records(trace, cfg) for trace, cfg in cases]
    _unmemoized(monkeypatch)
    assert [_records(trace, cfg) for trace, cfg in cases] == memo


def test_a_first_token_in_a_decode_run_comes_at_its_first_step() -> None:
    # the second prompt is cached but for its last token, so it joins the first's decode
    # steps: its first token ends the run's first step, not the run's last (the second's 100 steps)
    a = req(0, 0.0, 1025, 400, (1, 2, 3))
    b = req(1, 0.5, 1025, 100, (1, 2, 3))
    first, second = replay(Trace((a, b)), config(1000)).records
    assert second.hit_tokens[Tier.DEVICE] == 1024
    assert second.first_token_s - second.admit_s < (first.finish_s - second.admit_s) / 50
