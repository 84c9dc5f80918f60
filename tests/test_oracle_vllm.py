"""vLLM's own KV-cache grouping and report functions as the oracle for kvtier's vLLM pool.

tests/oracle_vllm/runner.py calls kv_cache_utils.get_kv_cache_configs (grouping of layers into
KV cache groups, get_num_blocks, the memory check) and _report_kv_cache_config in the v0.20.0 and
v0.21.0 wheels, over generated layer mixes, block sizes, budgets and max_model_len; kvtier's vLLM
ledger builds the same deployments from --kv-cache-memory-bytes. Groups, blocks, concurrency,
the logged token count and refusals must agree exactly.

Runs under CI=true or KVTIER_ORACLE_VLLM=1 (`make oracle-vllm`): the first run downloads two
vLLM wheels (~250 MB each) and torch into .oracle-vllm/ (gitignored), a few minutes.
"""

from __future__ import annotations

import os
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kvtier.engines.vllm import pool as vllm
from kvtier.errors import KvtierError
from kvtier.model.description import AttentionKind, KVGeometry, LayerKind

HERE = Path(__file__).parent / "oracle_vllm"
sys.path.insert(0, str(HERE))
import oracle_env  # noqa: E402
import oracle_plan  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("CI") != "true" and os.environ.get("KVTIER_ORACLE_VLLM") != "1",
    reason="downloads vLLM wheels: runs under CI=true or `make oracle-vllm`",
)

KINDS = {"F": LayerKind.FULL, "S": LayerKind.SLIDING, "C": LayerKind.CHUNKED}
# torch dtype of the KV spec -> (model dtype, --kv-cache-dtype) kvtier is given
DTYPES = {
    "bfloat16": ("bfloat16", "auto"),
    "float16": ("float16", "auto"),
    "float32": ("float32", "auto"),
    "float8_e4m3fn": ("bfloat16", "fp8"),
}
GiB = 1 << 30


def _pattern(rng: random.Random) -> str:
    """A layer mix: uniform, n:1 interleaves (gemma-3 5:1, Llama-4 3:1, gpt-oss 1:1), near-even
    counts (the 1.5x group-size rule), random counts, sliding-only."""
    shape = rng.choice(["full", "ratio", "even", "random", "sliding", "chunked"])
    if shape == "full":
        return "F" * rng.randint(1, 126)
    if shape == "ratio":
        n, repeats = rng.choice([1, 2, 3, 5, 7]), rng.randint(1, 16)
        return ("S" * n + "F") * repeats + "S" * rng.randint(0, n)
    if shape == "even":
        full = rng.randint(2, 40)
        local = full + rng.choice([-1, 1, full // 3, full // 2])
        return "".join(rng.sample("F" * full + "S" * local, full + local))
    if shape == "random":
        full, local = rng.randint(1, 60), rng.randint(1, 60)
        return "".join(rng.sample("F" * full + "S" * local, full + local))
    if shape == "sliding":
        return "S" * rng.randint(1, 48)
    return "CCCF" * rng.randint(1, 16)


def cases(count: int = 160, seed: int = 2026) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        kinds = _pattern(rng)
        block = rng.choice([16, 16, 32, 64, 128])
        max_len = rng.choice([rng.randint(100, 131072), 2 ** rng.randint(10, 17)])
        out.append(
            {
                "kinds": kinds,
                "window": rng.choice([128, 512, 1024, 4096]) if "S" in kinds else None,
                "chunk": 8192 if "C" in kinds else None,
                "block": block,
                "heads": rng.choice([1, 2, 4, 8, 16]),
                "head_dim": rng.choice([64, 128, 256]),
                "dtype": rng.choice(list(DTYPES)),
                "available": int(rng.uniform(0.001, 60) * GiB),
                "max_model_len": max_len,
                "batched": rng.choice([2048, 8192, 16384]),
                # every other chunked case runs with --disable-hybrid-kv-cache-manager (every
                # layer full attention); the rest keep chunked-local groups (v0.14.0 on)
                "disable_hybrid": "C" in kinds and len(out) % 2 == 0,
            }
        )
    return out


class Layout(NamedTuple):
    """Groups as vLLM lists them: per type, the group size (its longest group) and the padding
    (missing layers in its shorter groups)."""

    full_groups: int
    local_groups: int
    group_size: int
    padding_layers: int


def engine_layout(groups: list[list[Any]]) -> Layout:
    size = max(n for _, n in groups)
    full = sum(kind == "FullAttentionSpec" for kind, _ in groups)
    return Layout(full, len(groups) - full, size, sum(size - n for _, n in groups))


@dataclass(frozen=True)
class Kvtier:
    layout: Layout | None
    num_blocks: int | None
    concurrency: float | None
    tokens: int | None
    error: str | None


def kvtier(case: dict[str, Any], version: str) -> Kvtier:
    kinds = tuple(KINDS[k] for k in case["kinds"])
    model_dtype, kv_dtype = DTYPES[case["dtype"]]
    kv = KVGeometry(
        AttentionKind.MHA,
        case["heads"],
        case["head_dim"],
        case["head_dim"],
        kinds,
        sliding_window=case["window"],
        attention_chunk_size=case["chunk"],
    )
    model = oracle_plan.model("LlamaForCausalLM", kv, len(kinds), (4096, 32, 32000), model_dtype)
    dtype = "float32" if model_dtype == "float32" else "auto"
    try:
        # the case turns the manager off where vLLM ran it off (half its chunked cases)
        off = case["disable_hybrid"] or None
        ledger = oracle_plan.plan(
            case,
            version,
            model,
            kv_cache_dtype=kv_dtype,
            dtype=dtype,
            disable_hybrid_kv_cache_manager=off,
        )
    except KvtierError as exc:
        return Kvtier(None, None, None, None, str(exc))
    # the hybrid manager off: every layer full attention
    full = len(kinds) if off else kv.num_full_layers
    ours = vllm.hybrid_layout(full, 0 if off else kv.num_local_layers)
    layout = Layout(ours.full_groups, ours.local_groups, ours.group_size, ours.padding_layers)
    conc = oracle_plan.concurrency(ledger, case)
    return Kvtier(layout, ledger.figures.num_blocks, conc, ledger.kv_tokens, None)


def differences(engine: dict[str, Any], ours: Kvtier) -> list[str]:
    if "error" in engine or ours.error:
        if "error" not in engine or not ours.error:
            return [f"refusal: vLLM {engine.get('error')!r}, kvtier {ours.error!r}"]
        fits = re.search(r"estimated maximum model length is (\d+)", ours.error)
        mine = int(fits[1]) if fits else None
        if mine == engine["estimated_max_len"]:
            return []
        return [f"estimated max length: vLLM {engine['estimated_max_len']}, kvtier {mine}"]
    return [
        f"{name}: vLLM {a}, kvtier {b}"
        for name, a, b in (
            ("groups", engine_layout(engine["groups"]), ours.layout),
            ("num_blocks", engine["num_blocks"], ours.num_blocks),
            ("concurrency", engine["concurrency"], ours.concurrency),
            ("tokens", engine["tokens"], ours.tokens),
        )
        if a != b
    ]


@pytest.mark.parametrize("version", oracle_env.VERSIONS)
def test_kvtier_matches_vllm_kv_cache_utils(version: str) -> None:
    run = cases()
    results, diffs = oracle_env.compare(HERE / "runner.py", version, run, kvtier, differences)
    refused = sum("error" in r for r in results)
    hybrid = sum(len(r.get("groups", [])) > 1 for r in results)
    print(f"vLLM {version}: {len(run)} configurations, {hybrid} hybrid, {refused} refused")
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:20])
