"""vLLM's own hybrid linear-attention sizing as the oracle for engines/vllm/mamba.py.

tests/oracle_vllm/mamba_runner.py calls, in the v0.20.0, v0.21.0 and v0.24.0 wheels, the Gated
DeltaNet, Mamba2 (Granite-4.0-H) and short-conv (LFM2) state shape and dtype calculators,
`Platform._align_hybrid_block_size` and `kv_cache_utils.get_kv_cache_configs` over generated
hybrid models (state shapes, TP, attention
heads, model / KV / SSM dtypes, block sizes, prefix caching on or off, budgets, max_model_len);
kvtier's vLLM ledger builds the same deployments from --kv-cache-memory-bytes. Block size,
groups, blocks, concurrency, the logged token count and refusals must agree exactly.

Runs under CI=true or KVTIER_ORACLE_VLLM=1 (`make oracle-vllm`), with the environment of
tests/test_oracle_vllm.py (.oracle-vllm/, gitignored) and the v0.24.0 wheel besides.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtier.engines.deployment import Hybrid
from kvtier.errors import KvtierError
from kvtier.model.description import (
    AttentionKind,
    KVGeometry,
    LayerKind,
    LinearAttention,
    StateKind,
)

HERE = Path(__file__).parent / "oracle_vllm"
sys.path.insert(0, str(HERE))
import oracle_env  # noqa: E402
import oracle_plan  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("CI") != "true" and os.environ.get("KVTIER_ORACLE_VLLM") != "1",
    reason="downloads vLLM wheels: runs under CI=true or `make oracle-vllm`",
)

# either side of the logged-count change (v0.21), and the public log's release
VERSIONS = ("0.20.0", "0.21.0", "0.24.0")
GiB = 1 << 30


def cases(count: int = 120, seed: int = 2026) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < count:
        tp = rng.choice((1, 1, 2, 4))
        key_heads, value_heads = rng.choice((2, 4, 16)), rng.choice((8, 16, 32, 48, 64))
        key_dim, value_dim = rng.choice((64, 128)), rng.choice((64, 128))
        if value_heads % tp or (2 * key_heads * key_dim + value_heads * value_dim) % tp:
            continue
        n = rng.randint(2, 64)
        interval = rng.choice((2, 3, 4, 4, 6, 8))
        linear = [(i + 1) % interval != 0 for i in range(n)]
        if all(linear):
            linear[-1] = False
        max_len = rng.choice([rng.randint(1000, 262144), 2 ** rng.randint(12, 18)])
        out.append(
            {
                "tp": tp,
                "key_heads": key_heads,
                "value_heads": value_heads,
                "key_dim": key_dim,
                "value_dim": value_dim,
                "conv_kernel": rng.choice((2, 4)),
                "heads": rng.choice((1, 2, 4, 8)),
                "head_dim": rng.choice((128, 256)),
                "model_dtype": rng.choice(("bfloat16", "bfloat16", "float16")),
                "kv_cache_dtype": rng.choice(("auto", "auto", "fp8")),
                "ssm_cache_dtype": rng.choice(("auto", "float32", "bfloat16")),
                "block": rng.choice((16, 16, 32, 64)),
                "prefix_caching": rng.random() < 0.5,
                "max_model_len": max_len,
                "available": int(rng.uniform(0.05, 60) * GiB),
                "batched": 2048,
                "disable_hybrid": False,
                "linear": linear,
            }
        )
    return out


KINDS = {
    "gdn": (StateKind.GATED_DELTA_NET, "Qwen3NextForCausalLM"),
    "mamba2": (StateKind.MAMBA2, "GraniteMoeHybridForCausalLM"),
    "short_conv": (StateKind.SHORT_CONV, "Lfm2ForCausalLM"),
}


def state_space_cases(count: int = 60, seed: int = 4) -> list[dict[str, Any]]:
    """Mamba2 and short-conv models in the shapes LinearAttention reads them: Mamba2 groups as key
    heads of d_state, heads of head_dim as values (groups widened to tp when they do not divide);
    short conv as conv_dim channels of width 1 and no key. Mamba2 runs without prefix caching:
    with it Granite-4.0-H takes mamba cache mode `all`, which kvtier refuses."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for case in cases(count, seed):
        kind = rng.choice(("mamba2", "short_conv"))
        if kind == "mamba2":
            groups, heads = rng.choice((1, 2, 8)), rng.choice((32, 48, 64, 128))
            case.update(key_heads=groups, key_dim=rng.choice((64, 128)), value_heads=heads,
                        value_dim=rng.choice((32, 64)), prefix_caching=False)  # fmt: skip
        else:
            channels = rng.choice((1024, 1536, 2048, 2560))
            case.update(key_heads=1, key_dim=0, value_heads=channels, value_dim=1, conv_kernel=3)
        out.append({**case, "kind": kind})
    return out


def kvtier(case: dict[str, Any], version: str) -> dict[str, Any]:
    linear_ids = tuple(i for i, is_linear in enumerate(case["linear"]) if is_linear)
    state = LinearAttention(
        linear_ids,
        case["key_heads"],
        case["value_heads"],
        case["key_dim"],
        case["value_dim"],
        case["conv_kernel"],
        kind=KINDS[case.get("kind", "gdn")][0],
    )
    full = len(case["linear"]) - len(linear_ids)
    kv = KVGeometry(
        AttentionKind.MHA,
        case["heads"],
        case["head_dim"],
        case["head_dim"],
        (LayerKind.FULL,) * full,
        linear=state,
    )
    width = (2048, 16, 151936)
    architecture = KINDS[case.get("kind", "gdn")][1]
    model = oracle_plan.model(architecture, kv, len(case["linear"]), width, case["model_dtype"])
    try:
        ledger = oracle_plan.plan(
            case,
            version,
            model,
            tp=case["tp"],
            kv_cache_dtype=case["kv_cache_dtype"],
            hybrid=Hybrid(
                enable_prefix_caching=case["prefix_caching"],
                mamba_ssm_dtype=case["ssm_cache_dtype"],
            ),
        )
    except KvtierError as exc:
        return {"error": str(exc)}
    conc = oracle_plan.concurrency(ledger, case)
    return {
        "block_size": ledger.page_size,
        "num_blocks": ledger.figures.num_blocks,
        "concurrency": conc,
        "tokens": ledger.kv_tokens,
        "groups": [line for line in ledger.notes if line.startswith("hybrid model:")],
    }


def differences(engine: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    if "error" in engine or "error" in ours:
        if "error" not in engine or "error" not in ours:
            return [f"refusal: vLLM {engine.get('error')!r}, kvtier {ours.get('error')!r}"]
        return []
    groups = [g[0] for g in engine["groups"]]
    sizes = {g[1] for g in engine["groups"]}
    kind = KINDS[engine["kind"]][0]
    expected = (
        f"hybrid model: {groups.count('FullAttentionSpec')} full-attention + "
        f"{groups.count('MambaSpec')} {kind} groups of {max(sizes)} layers"
    )
    found = [
        f"{name}: vLLM {engine[name]}, kvtier {ours[name]}"
        for name in ("block_size", "num_blocks", "concurrency", "tokens")
        if engine[name] != ours[name]
    ]
    if not ours["groups"] or not ours["groups"][0].startswith(expected):
        found.append(f"groups: vLLM {engine['groups']}, kvtier {ours['groups']}")
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_kvtier_matches_vllm_hybrid_linear_pools(version: str) -> None:
    run = cases() + state_space_cases()
    results, diffs = oracle_env.compare(HERE / "mamba_runner.py", version, run, kvtier, differences)
    refused = sum("error" in r for r in results)
    print(f"vLLM {version}: {len(run)} hybrid configurations (3 state kinds), {refused} refused")
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:10])
