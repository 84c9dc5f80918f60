"""Llama 4's chunked local attention on vLLM with the hybrid KV cache manager on (v0.14.0 on by
default): 12 full + 36 chunked-local layers grouped as sliding-window ones are, a chunked group
holding cdiv(min(chunk + in-flight tokens, max_model_len), block) blocks a request
(ChunkedLocalAttentionSpec). Golden numbers by hand; checked against vLLM v0.32.0's own
get_kv_cache_configs and get_kv_cache_capacity where its CPU build is installed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kvtier.engines.vllm.pool import ContextTooLong
from kvtier.errors import KvtierError
from kvtier.ledger.plan import plan
from kvtier.units import GiB
from test_vllm_hma import SCOUT
from vllm_cpu_support import vllm_json

# SCOUT: Llama-4-Scout at TP8, 65,536, a 30 GiB budget. 8 KV heads of 128 over 8 ranks, bf16,
# block 16: a layer's page 16 x 2 x 1 x 128 x 2 B = 8,192 B; four groups of 12 layers, a block
# 12 x 8,192 = 98,304 B.
BLOCKS = 30 * GiB // (12 * 8_192)  # 327,680


def _concurrency(version: str, context: int = 65_536, **changes: object) -> tuple[float, int]:
    d = dataclasses.replace(SCOUT, engine_version=version, context_length=context, **changes)  # type: ignore[arg-type]
    ledger = plan(d)
    assert ledger.figures.num_blocks == BLOCKS == 327_680
    (requests,) = [c.requests for c in ledger.concurrency if c.context == context]
    return requests, ledger.kv_tokens


def test_scout_per_release() -> None:
    # v0.14.0 - v0.25.x: a chunked group holds cdiv(min(8,192 + 8,192, 65,536), 16) = 1,024
    # blocks, a request 4,096 + 3 x 1,024 = 7,168; v0.20.0 logs blocks // 4 groups x 16
    assert _concurrency("0.14.0") == (BLOCKS / 7_168, 1_310_720)
    assert _concurrency("0.20.0") == (BLOCKS / 7_168, 1_310_720)
    # from v0.21.0: int(327,680 / 7,168 x 65,536)
    assert _concurrency("0.21.0") == (BLOCKS / 7_168, 2_995_931)
    # v0.26.0 on: max_in_flight_tokens 2 x 8,192 under async scheduling: 3 x 1,536 + 4,096
    assert _concurrency("0.32.0") == (BLOCKS / 8_704, 2_467_237)
    # without async scheduling one batch again
    assert _concurrency("0.32.0", async_scheduling=False)[0] == BLOCKS / 7_168


def test_a_context_shorter_than_the_chunk_keeps_every_token() -> None:
    # 8,192: min(chunk + batched, 8,192) = 8,192, 512 blocks in each of the four groups
    assert _concurrency("0.21.0", 8_192) == (BLOCKS / 2_048, 1_310_720)


def test_maverick_at_its_full_context() -> None:
    # the same page at TP8; 131,072 on v0.32.0: 8,192 + 3 x 1,536 = 12,800 blocks a request
    d = dataclasses.replace(
        SCOUT,
        model="meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        context_length=131_072,
        engine_version="0.32.0",
    )
    ledger = plan(d)
    assert ledger.figures.num_blocks == BLOCKS
    assert ledger.kv_tokens == int(BLOCKS / 12_800 * 131_072) == 3_355_443
    assert any("3 chunked-local groups of 12 layers" in n for n in ledger.notes)


def test_under_pp_it_is_refused() -> None:
    with pytest.raises(KvtierError, match="hybrid models under PP are not modelled"):
        plan(dataclasses.replace(SCOUT, engine_version="0.21.0", tp=4, pp=2))


# vLLM v0.32.0's own grouping (get_kv_cache_configs) and logged capacity (get_kv_cache_capacity:
# tokens, concurrency) over Scout's layers (every 4th full attention), with the VllmConfig fields
# they read; --kv-cache-memory-bytes gives both the same budget.
_VLLM = r"""
import json, sys
from types import SimpleNamespace as N
import torch, vllm
from vllm.v1.core import kv_cache_utils as u
from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, FullAttentionSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
out = []
for case in json.loads(sys.argv[1]):
    kw = dict(block_size=16, num_kv_heads=1, head_size=128, dtype=torch.bfloat16)
    specs = {f"l{i}": FullAttentionSpec(**kw) if i % 4 == 3
             else ChunkedLocalAttentionSpec(attention_chunk_size=8192, **kw) for i in range(48)}
    config = N(
        model_config=N(max_model_len=case["len"], original_max_model_len=case["len"]),
        scheduler_config=N(max_num_batched_tokens=8192, disable_hybrid_kv_cache_manager=False),
        parallel_config=N(decode_context_parallel_size=1, prefill_context_parallel_size=1,
                          tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1),
        cache_config=N(num_gpu_blocks_override=None, prefix_cache_retention_interval=None,
                       get_resolved_kv_cache_layout=lambda: KVCacheLayout.LBHNC),
        attention_config=N(hisparse_config=None), speculative_config=None,
        max_in_flight_tokens=case["in_flight"], num_prefill_lookahead_tokens=0)
    try:
        (kv,) = u.get_kv_cache_configs(config, [specs], [case["budget"]])
    except ValueError as e:
        out.append({"error": str(e)}); continue
    out.append({"groups": sorted([type(g.kv_cache_spec).__name__, len(g.layer_names)]
                                 for g in kv.kv_cache_groups),
                "blocks": kv.num_blocks,
                "capacity": u.get_kv_cache_capacity(config, kv)})
print(json.dumps({"version": vllm.__version__, "cases": out}))
"""
CASES = [
    {"len": 65_536, "budget": 30 * GiB, "in_flight": 16_384},
    {"len": 65_536, "budget": 30 * GiB, "in_flight": 8_192},  # --no-async-scheduling
    {"len": 8_192, "budget": 7 * GiB, "in_flight": 16_384},
    {"len": 20_000, "budget": 3 * GiB, "in_flight": 16_384},
    {"len": 10_485_760, "budget": 20 * GiB, "in_flight": 16_384},  # too long: refused
    # 65,536 under async scheduling takes 4,096 + 3 x 1,536 = 8,704 blocks of 98,304 B a request:
    # a pool of exactly that many is refused from v0.29.0 (the null block is held back), one
    # block more starts
    {"len": 65_536, "budget": 8_704 * 98_304, "in_flight": 16_384},
    {"len": 65_536, "budget": 8_705 * 98_304, "in_flight": 16_384},
]


def test_against_vllms_own_kv_cache_utils(tmp_path: Path) -> None:
    got = vllm_json(_VLLM, CASES, tmp_path)
    assert got["version"].startswith("0.32.0")
    for case, engine in zip(CASES, got["cases"], strict=True):
        d = dataclasses.replace(
            SCOUT,
            engine_version="0.32.0",
            context_length=case["len"],
            kv_cache_memory_bytes=case["budget"],
            async_scheduling=case["in_flight"] == 16_384,
        )
        if "error" in engine:
            # both refuse, and name the same longest context (the null block held back)
            estimate = re.search(r"estimated maximum model length is (\d+)", engine["error"])
            assert estimate is not None, engine["error"]
            with pytest.raises(ContextTooLong) as refused:
                plan(d)
            assert refused.value.would_start is not None
            assert refused.value.would_start.value == int(estimate[1]), case
            continue
        ledger = plan(d)
        assert engine["groups"] == [["ChunkedLocalAttentionSpec", 12]] * 3 + [
            ["FullAttentionSpec", 12]
        ]
        (requests,) = [c.requests for c in ledger.concurrency if c.context == case["len"]]
        ours = [ledger.figures.num_blocks, [ledger.kv_tokens, requests]]
        assert ours == [engine["blocks"], engine["capacity"]], case


def test_the_null_block_is_held_back_from_v0_29() -> None:
    """A pool of exactly one request's 8,704 blocks starts on v0.28.0 and is refused from
    v0.29.0, whose check plans against the pool less its null block: the longest context it
    names takes 8,703 blocks (65,520: 4,095 full + 3 x 1,536 chunked; 65,536 needs 4,096 full)."""
    d = dataclasses.replace(
        SCOUT, context_length=65_536, kv_cache_memory_bytes=8_704 * 98_304, async_scheduling=True
    )
    assert plan(dataclasses.replace(d, engine_version="0.28.0")).figures.num_blocks == 8_704
    with pytest.raises(ContextTooLong, match=r"length is 65520\.") as refused:
        plan(dataclasses.replace(d, engine_version="0.29.0"))
    assert refused.value.would_start is not None
    assert refused.value.would_start.value == 65_520
