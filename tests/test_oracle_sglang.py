"""SGLang's own default-memory code as the oracle for engines/sglang/defaults.py.

For each released version below, the wheel's server_args.py (from v0.5.14 with its CUDA-graph and
memory hooks) runs (tests/oracle/sglang_defaults.py, a bare interpreter with msgspec real and every
other import stubbed) over a grid of deployments, and kvtier must pick the
same mem_fraction_static, chunked_prefill_size and cuda_graph_max_bs: zero differences.

Wheels are downloaded once into .oracle-sglang/ (gitignored). Opt-in on a user's machine
(`make oracle` sets KVTIER_ORACLE=1); under CI it always runs, and a failed download fails the run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import in_ci, missing
from kvtier.engines.deployment import Deployment, Engine, HiCache
from kvtier.engines.sglang.defaults import default_mem_fraction
from kvtier.engines.sglang.platform import as_built
from kvtier.engines.sglang.versions import V0_4_8
from kvtier.engines.version import Version
from kvtier.model.config import model_from_config
from kvtier.model.description import AttentionKind, ModelSpec
from sglang_wheels import differ, run_oracle, sglang_wheel

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".oracle-sglang"
RUNNER = Path(__file__).parent / "oracle" / "sglang_defaults.py"
CONFIGS = Path(__file__).parent / "fixtures" / "configs"
# one or more per rule and every change inside a rule (see defaults.py); v0.4.1 - v0.4.4 are the
# releases of December 2024 - March 2025 the TP table also covers
VERSIONS = (
    "0.4.1", "0.4.2", "0.4.3", "0.4.4", "0.4.5", "0.4.6", "0.4.7", "0.4.8", "0.4.9", "0.4.10",
    "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13",
    "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22",
    "0.5.23",
)  # fmt: skip
CASES_PER_VERSION = 240
MSGSPEC = "0.23.0"
# nvidia-smi memory.total of T4-class, RTX 5080, RTX 4090, RTX 5090, L40S, H100, RTX PRO 6000,
# H200, B200 cards, and the boundaries the rules compare with
GPUS = (15_360, 16_303, 24_564, 32_607, 46_068, 81_559, 97_887, 143_771, 183_359, 81_920, 98_304)
MODELS = ("qwen3-8b", "deepseek-v3", "kimi-k2.5", "qwen2.5-vl-7b-instruct", "gemma-3-27b-it")
NAMES = ("org/model", "meta-llama/Llama-2-70b-hf")

pytestmark = pytest.mark.skipif(
    not (in_ci() or os.environ.get("KVTIER_ORACLE")),
    reason="opt-in: `make oracle` (downloads SGLang wheels); always run under CI",
)


# what the oracle loads from a wheel: server_args.py everywhere; from v0.5.14 the pure-Python
# modules the memory rule moved into, and the architecture lists of configs/model_config.py
TREE_FILES = (
    "sglang/srt/server_args.py",
    "sglang/srt/model_executor/cuda_graph_config.py",
    "sglang/srt/configs/model_config.py",
    "sglang/srt/runtime_context.py",
    "sglang/srt/environ.py",
    "sglang/srt/hardware_backend/npu/utils.py",
)
TREE_DIRS = ("sglang/srt/arg_groups/",)


def _tree(version: str) -> Path:
    """The wheel's files the oracle runs, each extracted once into .oracle-sglang/<version>/."""
    target = CACHE / version
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        names = [
            n
            for n in wheel.namelist()
            if n in TREE_FILES or (n.startswith(TREE_DIRS) and n.endswith(".py"))
        ]
        missing = [n for n in names if not (target / n).exists()]
        if missing:
            wheel.extractall(target, missing)
    return target


def _site() -> Path:
    """msgspec, which SGLang's own argument records are built on from v0.5.20, for this
    interpreter, extracted once into .oracle-sglang/site/ (the runner sees nothing else)."""
    site = CACHE / "site"
    if (site / "msgspec").is_dir():
        return site
    wheels = CACHE / "wheels"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["-d", str(wheels), f"msgspec=={MSGSPEC}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = list(wheels.glob(f"msgspec-{MSGSPEC}-*.whl"))
    if done.returncode != 0 or not found:
        missing(f"cannot download the msgspec=={MSGSPEC} wheel: {done.stderr.strip()[-300:]}")
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extractall(site)
    return site


def _spec(name: str) -> ModelSpec:
    return model_from_config(json.loads((CONFIGS / f"{name}.json").read_text()), name)


SPECS = {name: _spec(name) for name in MODELS}


def _grid(version: str) -> list[tuple[Deployment, ModelSpec, int | None]]:
    rng = random.Random(f"sglang-oracle-{version}")
    # v0.4.6 compares the capacity with a number unguarded: it needs a GPU
    gpus: tuple[int | None, ...] = GPUS if version == "0.4.6" else (*GPUS, None)
    cases = []
    for i in range(CASES_PER_VERSION):
        tp = rng.choice((1, 2, 4, 8, 16))
        dp_attention = tp > 1 and rng.random() < 0.25
        d = Deployment(
            engine=Engine.SGLANG,
            model=rng.choice(NAMES),
            tp=tp,
            pp=rng.choice((1, 1, 2)),
            dp=tp if dp_attention else 1,
            enable_dp_attention=dp_attention,
            speculative_algorithm=rng.choice(
                (None, None, "EAGLE", "EAGLE3", "STANDALONE", "NGRAM")
            ),
            chunked_prefill_size=rng.choice((None, None, 4096, 16384, -1)),
            cuda_graph_max_bs=rng.choice((None, None, 64, 320)),
            max_total_tokens=rng.choice((None, None, 3000)),
            context_length=rng.choice((None, None, 2048)),
            hicache=HiCache(enable=rng.random() < 0.1),
            max_running_requests=rng.choice((None, None, None, None, 32)),
        )
        cases.append((d, SPECS[MODELS[i % len(MODELS)]], rng.choice(gpus)))
    return cases


def _engine_case(d: Deployment, model: ModelSpec, gpu: int | None) -> dict[str, Any]:
    return {
        "gpu_mem_mib": gpu,
        "architecture": model.architecture,
        "multimodal": model.multimodal,
        "vision_layers": model.vision_layers,
        "vision_hidden_size": model.vision_hidden_size,
        "mla": model.kv.kind is AttentionKind.MLA,
        "args": {
            "model_path": d.model,
            "tp_size": d.tp,
            "pp_size": d.pp,
            "dp_size": d.dp,
            "enable_dp_attention": d.enable_dp_attention,
            "speculative_algorithm": d.speculative_algorithm,
            "chunked_prefill_size": d.chunked_prefill_size,
            "cuda_graph_max_bs": d.cuda_graph_max_bs,
            "max_total_tokens": d.max_total_tokens,
            "context_length": d.context_length,
            "enable_hierarchical_cache": d.hicache.enable,
            "max_running_requests": d.max_running_requests,
        },
    }


# v0.4.7 queries no NPU memory and earlier releases have no --device npu (test_sglang_platform.py)
PLATFORMS = [
    (version, platform)
    for platform in ("cuda", "hip", "npu")
    for version in VERSIONS
    if platform != "npu" or Version.parse(version, "SGLang") >= V0_4_8
]


@pytest.mark.parametrize(("version", "platform"), PLATFORMS)
def test_defaults_match_the_engine(version: str, platform: str) -> None:
    """On ROCm (is_hip() True, is_cuda() False) too: kvtier applies the CUDA rules to an AMD
    card (engines/sglang/platform.py), and the engine's own code must agree; on an Ascend NPU
    (is_npu() True) the same rules after the NPU chunk and graph-batch tiers."""
    cases = _grid(version)
    if platform == "npu":  # torch.npu.mem_get_info always answers
        cases = [(replace(d, device="npu"), m, gpu) for d, m, gpu in cases if gpu is not None]
    engine_cases = [_engine_case(*case) for case in cases]
    args = [str(_tree(version)), str(_site()), platform]
    picked = run_oracle(sys.executable, RUNNER, args, engine_cases)
    differences = []
    for (d, model, gpu), engine, case in zip(cases, picked, engine_cases, strict=True):
        built = as_built(d, gpu, Version.parse(version, "SGLang"))
        ours = default_mem_fraction(version, gpu, built, model, rocm=platform != "cuda")
        mine = {
            "mem_fraction_static": ours.value,
            "chunked_prefill_size": ours.chunked_prefill_size,
            "cuda_graph_max_bs": ours.cuda_graph_max_bs,
        }
        if mine != engine:
            differences.append({"case": case, "engine": engine, "kvtier": mine})
    assert not differences, differ(differences, len(cases))
