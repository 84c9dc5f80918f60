"""kvtier's SGLang scheduler model against SGLang's own scheduler classes, step by step.

SGLang's side runs in the SGLang virtualenv (benchmarks/peers/.venv-sglang, .ci/sglang-venv.sh) as
tests/sglang_scheduler_worker.py: SGLang 0.5.23's PrefillAdder, RadixCache, TokenToKVPoolAllocator,
ReqToTokenPool and ScheduleBatch on the CPU, the model forward replaced by made-up tokens. kvtier's
side is `SGLangServer` over `TieredCachePort` with the same pool, running-request cap and chunk.
240 requests in 8 groups sharing 4-12 block prefixes, each with 1-5 blocks of its own and 8-63
output tokens, all waiting at the start, with a 4,096-token pool: the pool evicts and the queue
waits. Both sides cache a finished request's output below its prompt; a case on a 2,048-token
pool with outputs up to 199 tokens checks the evictions that follow. The outputs are fixed
lengths (`ignore_eos`, as a trace replay sends them), so SGLang counts a running request's whole
remaining output, as kvtier reserves it. Two more cases run
decode out of KV with outputs past the clip at which admission stops reserving them, and check
each retraction (`ScheduleBatch.retract_decode`): request and decode step.

Without the virtualenv the test skips on a user's machine and fails under CI.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
from pathlib import Path
from typing import Any

from conftest import missing
from kvtier.cache.storage import Tier
from kvtier.sim.metrics import RequestRecord
from kvtier.sim.servers import sglang, sglang_budget, sglang_decode, sglang_prefill
from kvtier.sim.servers.hicache import TieredCachePort
from kvtier.sim.servers.sglang import EngineConfig, SGLangServer
from kvtier.sim.servers.sglang_budget import CLIP_MAX_NEW_TOKENS
from kvtier.sim.timing import Hardware, ModelCost, TimingModel
from kvtier.sim.trace import TraceRequest
from sglang_venv_support import sglang_python

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "sglang_scheduler_worker.py"
BLOCK = 16  # trace tokens per block; SGLang's page is one token
POOL_TOKENS = 4096
REQUESTS = 240
TM = TimingModel(
    ModelCost(8_000_000_000, 16e9, 131_072, 32, 8192), Hardware(989.0, 3350.0, 25.0, 100.0, 8), 1
)


def _trace(
    seed: int = 1, groups: int = 8, requests: int = REQUESTS, outputs: tuple[int, int] = (8, 64)
) -> list[TraceRequest]:
    """`requests` in `groups` groups sharing 4-12 block prefixes, each with 1-5 blocks of its own
    and `outputs` tokens to generate (a range)."""
    rng = random.Random(seed)
    shared = [
        tuple(rng.randrange(1 << 30) for _ in range(rng.choice((4, 8, 12)))) for _ in range(groups)
    ]
    next_id = 1 << 31
    out = []
    for rid in range(requests):
        own = rng.randrange(1, 6)
        blocks = shared[rng.randrange(groups)] + tuple(range(next_id, next_id + own))
        next_id += own
        out.append(TraceRequest(rid, 0.0, len(blocks) * BLOCK, rng.randrange(*outputs), blocks))
    return out


def _long_trace(seed: int, requests: int, outputs: tuple[int, int]) -> list[TraceRequest]:
    """Prompts of 1-8 blocks of their own (nothing shared: see the retraction test); four
    requests in five generate `outputs` tokens (a range), the rest 8-199."""
    rng = random.Random(seed)
    next_id = 1 << 31
    out = []
    for rid in range(requests):
        own = rng.randrange(1, 9)
        blocks = tuple(range(next_id, next_id + own))
        next_id += own
        long = rng.random() < 0.8
        output = rng.randrange(*outputs) if long else rng.randrange(8, 200)
        out.append(TraceRequest(rid, 0.0, own * BLOCK, output, blocks))
    return out


def _case(
    trace: list[TraceRequest], pool: int = POOL_TOKENS, clip: int = CLIP_MAX_NEW_TOKENS
) -> dict[str, Any]:
    return {
        "pool_tokens": pool,
        "clip_max_new_tokens": clip,
        "max_running_requests": 32,
        "chunked_prefill_size": 512,
        "max_prefill_tokens": 16384,
        "ignore_eos": True,
        "requests": [
            {
                "rid": r.rid,
                "tokens": [b * BLOCK + k for b in r.blocks for k in range(BLOCK)],
                "output_len": r.output_len,
            }
            for r in trace
        ],
    }


def _sglang(case: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION"] = str(case["clip_max_new_tokens"])
    done = subprocess.run(
        [str(sglang_python()), str(WORKER)],
        input=json.dumps(case),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    if done.returncode != 0 and "ModuleNotFoundError" in done.stderr:
        missing(f"the SGLang virtualenv cannot run the worker: {done.stderr.splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _kvtier(trace: list[TraceRequest], pool: int = POOL_TOKENS) -> dict[str, Any]:
    port = TieredCachePort(pool // BLOCK)
    server = SGLangServer(port, TM, EngineConfig(BLOCK, 32, 512))
    tree, evicted = port.cache.tree, [0]
    remove = tree.remove

    def counted(node: Any) -> None:  # prompt pages evicted, as the worker counts them
        evicted[0] += sum(1 for key in node.keys if isinstance(key, int))
        remove(node)

    tree.remove = counted  # type: ignore[method-assign]
    records = []
    for r in trace:
        rec = RequestRecord(r.rid, 0.0, r.input_len, r.output_len)
        records.append(rec)
        server.arrive(r, rec, 0.0)
    now, batches = 0.0, []
    while (duration := server.start_step(now, math.inf)) is not None:
        if not server._pending_decode:
            batches.append([str(live.req.rid) for live in server._pending])
        now += duration
        server.finish_step(now)
    assert all(rec.finished for rec in records)
    return {
        "cached_tokens": {str(rec.rid): rec.hit_tokens[Tier.DEVICE] for rec in records},
        "prefill_batches": batches,
        "evicted_prompt_tokens": evicted[0] * BLOCK,
        "retracted": [[step, str(rid)] for step, rid in server.retractions],
        "preemptions": server.counters().preemptions,
    }


def test_sglang_scheduler_model_against_sglang_classes() -> None:
    trace = _trace()
    engine = _sglang(_case(trace))
    model = _kvtier(trace)
    hits_engine = sum(engine["cached_tokens"].values())
    hits_model = sum(model["cached_tokens"].values())
    same = [k for k, v in engine["cached_tokens"].items() if model["cached_tokens"][k] == v]
    batches = [s["reqs"] for s in engine["steps"] if s["kind"] == "prefill"]
    print(
        f"evicted prompt tokens: SGLang {engine['evicted_prompt_tokens']:,}, kvtier "
        f"{model['evicted_prompt_tokens']:,}; "
        f"prefix-hit tokens: SGLang {hits_engine:,}, kvtier {hits_model:,} "
        f"({hits_model / hits_engine - 1:+.2%}); equal for {len(same)} of {REQUESTS} requests; "
        f"prefill batches: SGLang {len(batches)}, kvtier {len(model['prefill_batches'])}; "
        f"retractions: SGLang {len(engine['retracted'])}, kvtier {len(model['retracted'])}; "
        "evicted prompt tokens: "
        f"SGLang {engine['evicted_prompt_tokens']:,}, kvtier {model['evicted_prompt_tokens']:,}"
    )
    assert len(engine["cached_tokens"]) == REQUESTS
    # every request hits the same prefix, in the same prefill batches
    assert model["cached_tokens"] == engine["cached_tokens"]
    assert model["prefill_batches"] == batches
    # fixed lengths under the clip are reserved whole: neither side retracts
    assert engine["retracted"] == model["retracted"] == []
    assert model["preemptions"] == 0
    # the pool evicts on both sides, by about as much: both cache a finished request's output
    # as a leaf below its prompt, kvtier's in whole 16-token blocks where SGLang's page is a
    # token (10,304 prompt tokens evicted by SGLang, 10,432 by kvtier; 9,744 when kvtier freed
    # the output)
    evicted = engine["evicted_prompt_tokens"]
    assert evicted > 0 and abs(model["evicted_prompt_tokens"] - evicted) <= 0.02 * evicted


def test_sglang_cached_outputs_on_a_small_pool() -> None:
    """Shared prefixes on a 2,048-token pool: 80 requests in 4 groups sharing 4-12 block
    prefixes, outputs of 8-199 tokens. SGLang's `release_kv_cache(checkpoint=True)` (0.5.23)
    inserts each finished request's prompt and output but its last token into the tree, so the
    outputs fill the pool and evict prompts; kvtier does the same, and both evict the same
    3,536 prompt tokens, hit the same prefixes and form the same prefill batches. (Freeing
    the output instead, kvtier evicted 2,976 and admitted some requests with other hits.)"""
    trace = _trace(seed=2, groups=4, requests=80, outputs=(8, 200))
    engine = _sglang(_case(trace, 2048))
    model = _kvtier(trace, 2048)
    assert engine["evicted_prompt_tokens"] == 3536
    assert model["evicted_prompt_tokens"] == engine["evicted_prompt_tokens"]
    assert model["cached_tokens"] == engine["cached_tokens"]
    assert model["prefill_batches"] == [
        s["reqs"] for s in engine["steps"] if s["kind"] == "prefill"
    ]


def _clip(monkeypatch: Any, tokens: int) -> None:
    """SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION at `tokens` in each model module that reads it."""
    for module in (sglang_budget, sglang, sglang_prefill, sglang_decode):
        monkeypatch.setattr(module, "CLIP_MAX_NEW_TOKENS", tokens)


def test_sglang_retractions_against_sglang_classes(monkeypatch: Any) -> None:
    """Decode runs out of KV: outputs past the clip at which admission stops reserving them
    (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 256 on both sides, so that the run takes seconds; the
    rule is the same at the default 4,096), 60 requests on a 2,048-token pool. SGLang's
    `retract_decode` and kvtier retract the same requests, in the same order, before the same
    decode steps; the retracted requests come back through the queue, prefill their prompt and
    output again, and every prefill batch matches.

    The prompts share nothing, so the comparison reads the retractions alone."""
    clip = 256
    _clip(monkeypatch, clip)
    trace = _long_trace(seed=7, requests=60, outputs=(300, 900))
    engine = _sglang(_case(trace, 2048, clip))
    model = _kvtier(trace, 2048)
    batches = [s["reqs"] for s in engine["steps"] if s["kind"] == "prefill"]
    print(
        f"retractions (decode step, request): SGLang {engine['retracted']}, kvtier "
        f"{model['retracted']}; new-token ratio after each: {engine['new_token_ratios']}; "
        f"prefill batches: SGLang {len(batches)}, kvtier {len(model['prefill_batches'])}"
    )
    assert len(engine["retracted"]) >= 10
    assert model["retracted"] == engine["retracted"]
    assert model["preemptions"] == len(engine["retracted"])
    assert model["prefill_batches"] == batches
    assert model["cached_tokens"] == engine["cached_tokens"]
    # retract_decode resets the ratio from the batch it keeps; fixed lengths never read it
    # (ignore_eos counts a running request's remaining output whole), so kvtier keeps none
    assert len(engine["new_token_ratios"]) == len({s for s, _ in engine["retracted"]})


def test_sglang_retractions_past_the_default_clip() -> None:
    """The same at SGLang's default clip of 4,096 tokens: 6 requests, five of 4,100-4,899
    output tokens, on an 8,704-token pool that admission lets two of them share. Both sides
    retract request 0 before decode step 4,312 and request 4 before 13,381, with the same
    prefill batches."""
    trace = _long_trace(seed=1, requests=6, outputs=(4100, 4900))
    engine = _sglang(_case(trace, 8704))
    model = _kvtier(trace, 8704)
    batches = [s["reqs"] for s in engine["steps"] if s["kind"] == "prefill"]
    assert engine["retracted"] == [[4312, "0"], [13381, "4"]]
    assert model["retracted"] == engine["retracted"]
    assert model["prefill_batches"] == batches
    assert model["cached_tokens"] == engine["cached_tokens"]


def test_sglang_retracts_until_the_step_fits(monkeypatch: Any) -> None:
    """`retract_decode` retracts again while the step still does not fit: 30 requests of one
    16-token block and 100 output tokens at a clip of 4, one prefill batch on a 720-token pool.
    The 240 tokens left give 30 a step 8 steps; before the 9th, request 29 frees 24 tokens (its
    8 outputs, its prompt made evictable), short of the 29 the rest need, so request 28 goes too
    (equal outputs and prompts: the later in the batch first). Both sides retract the same 44
    times, in the same order, at the same steps."""
    _clip(monkeypatch, 4)
    trace = [TraceRequest(i, 0.0, BLOCK, 100, (1000 + i,)) for i in range(30)]
    engine = _sglang(_case(trace, 720, 4))
    model = _kvtier(trace, 720)
    assert engine["retracted"][:3] == [[8, "29"], [8, "28"], [9, "27"]]
    assert model["retracted"] == engine["retracted"]
    assert model["prefill_batches"] == [
        s["reqs"] for s in engine["steps"] if s["kind"] == "prefill"
    ]
