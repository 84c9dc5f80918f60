"""SGLang's own hybrid linear-attention sizing as the oracle for engines/sglang/mamba.py.

For each released version below, the wheel's configs/mamba_utils.py (state shape and bytes per
request slot) and its slot rule (`handle_max_mamba_cache` of model_runner.py or
model_runner_kv_cache_mixin.py, `KVCacheConfigurator._handle_max_mamba_cache`) run in a bare
interpreter with every other import stubbed (tests/oracle/sglang_mamba.py) over a grid of state
shapes, TP and DP sizes, budgets and flags, with the SSM dtype chosen by the wheel's own
mamba2_state_dtype from --mamba-ssm-dtype and the config; from v0.5.9 short-conv (LFM2) cases too,
shaped as Lfm2Config.mamba2_cache_params shapes them (Granite-4.0-H's Mamba2 passes the same
arguments as the Gated DeltaNet cases); kvtier must give the same state bytes,
slot count and budget left for the KV pool, and refuse where the engine refuses; from v0.5.16
(`KVCacheConfigurator.resolve_max_num_reqs`) the running-request limit too: zero differences.

Wheels are shared with tests/test_oracle_sglang.py in .oracle-sglang/ (gitignored). Opt-in on a
user's machine (`make oracle` sets KVTIER_ORACLE=1); under CI it always runs.
"""

from __future__ import annotations

import os
import random
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import in_ci
from kvtier.engines.sglang import mamba, pool
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.description import LinearAttention, StateKind
from kvtier.units import GiB
from sglang_wheels import CACHE, differ, run_oracle, sglang_wheel

RUNNER = Path(__file__).parent / "oracle" / "sglang_mamba.py"
# each slot rule and every change inside one: v0.5.4 - v0.5.6 in model_runner.py, v0.5.7 - v0.5.15
# in the KV-cache mixin, v0.5.16 the configurator, v0.5.17+ the padding slot
V0_5_9 = Version.release_of(0, 5, 9)
V0_5_14 = Version.release_of(0, 5, 14)
V0_5_16 = Version.release_of(0, 5, 16)
VERSIONS = ("0.5.4", "0.5.5", "0.5.7", "0.5.9", "0.5.13", "0.5.15", "0.5.16", "0.5.17", "0.5.23")
CASES_PER_VERSION = 120
SHORT_CONV_CASES = 30  # from v0.5.9, the first release with Lfm2ForCausalLM
HANDLERS = (
    "sglang/srt/mem_cache/kv_cache_configurator.py",
    "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
    "sglang/srt/model_executor/model_runner.py",
)

pytestmark = pytest.mark.skipif(
    not (in_ci() or os.environ.get("KVTIER_ORACLE")),
    reason="opt-in: `make oracle` (downloads SGLang wheels); always run under CI",
)


def _sources(version: str) -> tuple[Path, ...]:
    """The wheel's mamba_utils.py, the file holding its slot rule and (v0.5.17+) the
    allocation_sizing.py it takes the extra_buffer slot count from, extracted once."""
    target = CACHE / version / "mamba"
    utils, handler = target / "mamba_utils.py", target / "handler.py"
    sizing, done = target / "allocation_sizing.py", target / ".extracted"
    if done.exists():
        return (utils, handler, sizing) if sizing.exists() else (utils, handler)
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        names = set(wheel.namelist())
        utils.write_bytes(wheel.read("sglang/srt/configs/mamba_utils.py"))
        if "sglang/srt/mem_cache/allocation_sizing.py" in names:
            sizing.write_bytes(wheel.read("sglang/srt/mem_cache/allocation_sizing.py"))
        for name in HANDLERS:
            text = wheel.read(name).decode() if name in names else ""
            if "def handle_max_mamba_cache" in text or "def _handle_max_mamba_cache" in text:
                handler.write_text(text)
                break
        else:
            raise AssertionError(f"sglang {version}: no handle_max_mamba_cache")
    done.touch()
    return (utils, handler, sizing) if sizing.exists() else (utils, handler)


def _grid(version: str) -> list[dict[str, Any]]:
    rng = random.Random(f"sglang-mamba-oracle-{version}")
    cases = []
    while len(cases) < CASES_PER_VERSION:
        tp = rng.choice((1, 2, 4, 8))
        value_heads = rng.choice((8, 32, 48, 64))
        if value_heads % tp:
            continue
        n = rng.randint(4, 64)
        linear = sorted(rng.sample(range(n), rng.randint(1, n - 1)))
        dp = rng.choice((1, 1, 2)) if tp > 1 else 1
        # budgets too small for one slot: refused from v0.5.13, earlier releases go on with none
        release = Version.parse(version, "SGLang")
        refusing = release >= V0_5_9 and rng.random() < 0.1
        budget = (0.01, 0.3) if refusing else (2.0, 120.0)
        cases.append(
            {
                "tp": tp,
                "key_heads": rng.choice((2, 4, 16)),
                "value_heads": value_heads,
                "key_dim": rng.choice((64, 128)),
                "value_dim": rng.choice((64, 128)),
                "conv_kernel": rng.choice((2, 4)),
                "layers": linear,
                "ssm_flag": rng.choice((None, None, "float32", "bfloat16")),
                # the extra_buffer strategy (overlap schedule on): auto's choice from v0.5.14
                "extra_buffer": release >= V0_5_14 and rng.random() < 0.5,
                "config_ssm": rng.choice((None, "float32", "bfloat16")),
                "dp": dp,
                "max_mamba_cache_size": rng.choice((None, None, None, 64, 300)),
                "max_running_requests": rng.choice((None, None, 48, 256)),
                "ratio": rng.choice((0.9, 0.9, 0.5, 2.0)),
                "disable_radix_cache": rng.random() < 0.25,
                "rest_gib": round(rng.uniform(*budget), 4),
                "cell": rng.choice((2, 4, 16)) * 512 * rng.choice((1, 2)),
                "context_len": rng.choice((4096, 32768, 262144)),
            }
        )
    return cases


def _short_conv_grid(version: str) -> list[dict[str, Any]]:
    """LFM2-shaped cases: conv channels over tp, kernel 3, no SSM state."""
    if Version.parse(version, "SGLang") < V0_5_9:
        return []
    rng = random.Random(f"sglang-short-conv-oracle-{version}")
    cases = _grid(version)[:SHORT_CONV_CASES]
    for case in cases:
        channels = rng.choice((1024, 1536, 2048, 2560))
        case.update(kind="short_conv", key_heads=1, key_dim=0, value_heads=channels, value_dim=1,
                    conv_kernel=3)  # fmt: skip
    return cases


def _kvtier(version: str, c: dict[str, Any]) -> dict[str, Any]:
    kind = StateKind.SHORT_CONV if c.get("kind") == "short_conv" else StateKind.GATED_DELTA_NET
    state = LinearAttention(
        tuple(c["layers"]),
        c["key_heads"],
        c["value_heads"],
        c["key_dim"],
        c["value_dim"],
        c["conv_kernel"],
        c["config_ssm"],
        kind,
    )
    release = Version.parse(version, "SGLang")
    rule = mamba.slot_rule(release)
    ssm = mamba.ssm_dtype(release, c["ssm_flag"], state)
    per_slot = mamba.state_bytes(state, c["tp"], ssm)
    try:
        split = mamba.split_budget(
            rule,
            c["rest_gib"],
            per_slot,
            c["ratio"],
            c["max_mamba_cache_size"],
            c["max_running_requests"],
            c["disable_radix_cache"],
            c["dp"],
            mamba.checks_slots(release),
        )
    except KvtierError as exc:
        return {"error": str(exc).split(".")[0]}
    out = {"state_bytes": per_slot, "slots": split.slots, "rest_gib": split.rest_gib}
    tokens = int(split.rest_gib * GiB) // c["cell"]
    if tokens > 0 and release >= V0_5_16:
        # the running-request limit over the pool the split leaves (resolve_max_num_reqs)
        flag = c["max_running_requests"]
        extra = c["extra_buffer"] and not c["disable_radix_cache"]
        try:
            cap = mamba.slot_request_cap(
                rule, split.slots, c["disable_radix_cache"], extra, checked=True
            )
            limits = pool.request_limits(tokens, c["context_len"], flag, c["dp"], cap)
            out["max_running"] = limits.running
        except KvtierError as exc:
            out["max_running"] = str(exc).split(".")[0]
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_mamba_sizing_matches_the_engine(version: str) -> None:
    python = shutil.which("python3")
    assert python is not None
    sources = _sources(version)
    cases = _grid(version) + _short_conv_grid(version)
    engine = run_oracle(python, RUNNER, [str(s) for s in sources], cases)
    differences = [
        {"case": case, "engine": theirs, "kvtier": ours}
        for case, theirs in zip(cases, engine, strict=True)
        if (ours := _kvtier(version, case)) != theirs
    ]
    refused = sum("error" in e for e in engine)
    print(f"SGLang {version}: {len(cases)} configurations, {refused} refused")
    assert len(cases) >= 100
    assert not differences, differ(differences, len(cases))
