"""KV-token predictions against real startup logs: kvtier plan, ridgepoint and kvfit.

For every case of the shared dev-logs.json (vLLM and SGLang startups with their logged KV token
count) each tool predicts the KV pool in tokens, offline: ridgepoint from its built-in model
registry, kvfit from a config.json written out of kvtier's catalog (kvfit_offline.py). Errors
are (predicted - logged) / logged. "log figures" feeds each tool what it accepts of the case's
measured numbers (card memory, weights, activation, ...); "spec only" gives none.

    .venv/bin/python benchmarks/peers/bench_planners.py
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from common import KVTIER, PEERS, SHARED, TOOLS_VENV, machine, markdown_table, need

from kvtier.model.catalog import catalog_entry, resolve_model
from kvtier.model.gpu import resolve_gpu
from kvtier.model.weights import weight_bytes

CASES = SHARED / "cases" / "dev-logs.json"
# model_type of each public config.json (kvtier's catalog keeps only the fields it reads)
MODEL_TYPE = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "DeepseekV2ForCausalLM": "deepseek_v2",
}


class Case(NamedTuple):
    """How each tool is told about one logged deployment. `version` is the engine version the
    log shows or, where it shows none, the era its date and defaults point to."""

    id: str
    gpu: str  # kvtier GPU catalog name
    version: str
    fraction: float | None  # None: the engine's default (not printed in the log)
    context: int | None
    ridgepoint: tuple[str, str, str] | None  # (registry id, GPU id, weight dtype)
    ridgepoint_note: str
    kvfit_hardware: str | None  # kvfit's id; None: not in kvfit's list, card size from kvtier


CASE_ARGS = [
    Case("V11", "RTX 3090", "0.6.6", 0.90, 8192, ("qwen2.5-7b", "rtx3090-24gb", "fp16"), "", None),
    Case(
        "L05",
        "H100 80GB",
        "0.19.0",
        0.95,
        8192,
        ("llama-3-8b", "h100-80gb", "fp16"),
        "as llama-3-8b (same shapes)",
        "h100-80",
    ),
    Case(
        "L11",
        "H100 80GB",
        "0.19.0",
        0.95,
        8192,
        ("llama-3-70b", "h100-80gb", "fp8"),
        "as llama-3-70b --dtype fp8",
        "h100-80",
    ),
    Case("L16", "H100 80GB", "0.19.0", 0.95, 8192, None, "Qwen3-8B not in its registry", "h100-80"),
    Case(
        "L19",
        "H100 80GB",
        "0.19.0",
        0.95,
        8192,
        ("deepseek-v2-lite", "h100-80gb", "fp16"),
        "",
        "h100-80",
    ),
    Case(
        "S04",
        "RTX 3090",
        "0.4.2",
        0.88,
        None,
        ("qwen2.5-7b", "rtx3090-24gb", "fp16"),
        "as qwen2.5-7b (same shapes)",
        None,
    ),
    Case("S08", "RTX 4090", "0.5.6", 0.80, None, None, "Qwen3-14B not in its registry", None),
    Case("S09", "RTX 5080", "0.4.10", None, None, None, "Qwen3-0.6B, RTX 5080 not in it", None),
]


def logged_tokens(case: dict[str, Any]) -> int:
    obs = case["observed"]
    return int(obs.get("kv_cache_tokens") or obs["kv_cache_tokens_derived"])


def logged_card_gib(case: dict[str, Any]) -> float:
    """vLLM's logged device total, e.g. '(log: total_memory=79.19GiB)'."""
    return float(case["gpu"].split("=")[1].split("GiB")[0])


def logged_weights_gib(case: dict[str, Any]) -> float:
    obs = case["observed"]
    for name in (
        "weights_memory_gib",
        "weights_gib",
        "weight_mem_usage_gb",
        "weight_mem_derived_gb",
    ):
        if name in obs:
            return float(obs[name])
    raise KeyError(f"{case['id']}: no logged weights")


def measured_flags(case: dict[str, Any]) -> list[str]:
    """kvtier plan's measured-figure flags from the log's numbers."""
    obs = case["observed"]
    if case["engine"] == "vllm":
        pairs = [
            ("--gpu-mem-gib", logged_card_gib(case)),
            ("--weights-gib", logged_weights_gib(case)),
            (
                "--activation-gib",
                obs.get("torch_activation_peak_gib", obs.get("activation_peak_gib")),
            ),
            (
                "--non-torch-gib",
                obs.get("non_torch_forward_increase_gib", obs.get("non_torch_gib")),
            ),
            ("--cuda-graph-gib", obs.get("cuda_graph_estimated_gib")),
        ]
    elif "avail_mem_before_load_gb" in obs:  # the weights are the difference of the two
        pairs = [
            ("--free-before-load-gib", obs["avail_mem_before_load_gb"]),
            ("--free-after-load-gib", obs["avail_mem_after_load_gb"]),
        ]
    else:
        pairs = [
            ("--free-after-load-gib", obs["avail_mem_after_load_gb"]),
            ("--weights-gib", logged_weights_gib(case)),
        ]
    return [str(x) for k, v in pairs if v is not None for x in (k, v)]


def kvtier_plan(case: dict[str, Any], args: Case, measured: bool) -> int:
    engine = case["engine"]
    cmd = [
        str(KVTIER),
        "plan",
        "--engine",
        engine,
        "--model",
        case["model"].split(" ")[0],
        "--gpu",
        args.gpu,
        "--tp",
        str(case["tp"]),
        f"--{engine}-version",
        args.version,
        "--json",
    ]
    if args.fraction is not None:
        flag = "--gpu-memory-utilization" if engine == "vllm" else "--mem-fraction-static"
        cmd += [flag, str(args.fraction)]
    if args.context:
        cmd += ["--max-model-len", str(args.context)]
    if measured:
        cmd += measured_flags(case)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{case['id']}: {' '.join(cmd)}\n{out.stderr}")
    return int(json.loads(out.stdout)["kv_tokens"])


def ridgepoint(case: dict[str, Any], args: Case) -> int | None:
    if args.ridgepoint is None:
        return None
    model, gpu, dtype = args.ridgepoint
    ctx = args.context or 8192
    cmd = [
        str(need(TOOLS_VENV / "bin" / "ridgepoint", "tools venv")),
        "fit",
        model,
        "--gpu",
        f"{gpu}:{case['tp']}",
        "--engine",
        case["engine"],
        "--dtype",
        dtype,
        "--kv-cache-dtype",
        "bf16",
        "--ctx",
        str(ctx),
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{case['id']}: {' '.join(cmd)}\n{out.stderr}")
    fit = json.loads(out.stdout)
    per_token = fit["capacity"]["bytes_per_seq"] / ctx
    return math.floor(fit["memory"]["kv_pool_bytes"]["best"] / per_token)


def kvfit(case: dict[str, Any], args: Case, flags: list[str] | None, tmp: Path) -> int | None:
    """kvfit's KV tokens; `flags` are its measured-figure flags (None: the spec only).
    An empty list (a figure kvfit cannot be given for this case) gives None."""
    if flags == []:
        return None
    model = case["model"].split(" ")[0]
    entry = catalog_entry(model)
    if entry is None:
        raise SystemExit(f"{model}: not in kvtier's catalog")
    config = dict(entry.config)
    config["model_type"] = MODEL_TYPE[config["architectures"][0]]
    spec = resolve_model(entry.model_id)
    answers = tmp / f"{case['id']}.json"
    answers.write_text(
        json.dumps({"config": config, "weight_bytes": weight_bytes(spec, 1).param_bytes})
    )
    ctx = args.context or 8192
    tp = case["tp"]
    cmd = [
        str(need(TOOLS_VENV / "bin" / "python", "tools venv")),
        str(PEERS / "kvfit_offline.py"),
        str(answers),
        "--",
        entry.model_id,
        "--hardware",
        args.kvfit_hardware or "h100-80",
        "--gpus",
        str(tp),
        "--tp",
        str(tp),
        "--context",
        str(ctx),
        "--kv-dtype",
        "bf16",
        "--json",
    ]
    if args.fraction is not None:  # else kvfit's own default
        cmd += ["--utilization", str(args.fraction)]
    if flags:
        cmd += flags
    elif args.kvfit_hardware is None:
        cmd += ["--device-memory-gib", str(resolve_gpu(args.gpu).memory_mib / 1024)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{case['id']}: {' '.join(cmd)}\n{out.stderr}")
    layout = json.loads(out.stdout)["concurrency"]["recommended"]["layout"]
    available = (
        layout["budget_per_rank_gib"]
        - layout["weights_per_rank_gib"]
        - layout["fixed_cache_per_rank_gib"]
        - layout["runtime_reserve_per_rank_gib"]
    )
    return math.floor(available / (layout["kv_per_sequence_per_rank_gib"] / ctx))


def kvfit_measured(case: dict[str, Any], args: Case) -> list[str]:
    """What kvfit takes from a log as a user would give it: the card's memory (vLLM prints its
    total; SGLang prints none, so the catalog's) and the weights (whole model: kvfit shards
    them by TP). Its runtime reserve stays 0: the engine's reserve is what is being predicted."""
    if case["engine"] == "vllm":
        total = logged_card_gib(case)
    else:
        total = resolve_gpu(args.gpu).memory_mib / 1024
    weights = logged_weights_gib(case) * case["tp"]
    return ["--device-memory-gib", str(total), "--weight-gib", str(weights)]


def kvfit_reserve(case: dict[str, Any]) -> list[str]:
    """vLLM only: the profiled activation peak + non-torch memory as kvfit's runtime reserve,
    figures only the engine's own profiling run knows. SGLang logs no such figure: []."""
    obs = case["observed"]
    if case["engine"] != "vllm":
        return []
    reserve = obs.get("torch_activation_peak_gib", obs.get("activation_peak_gib")) + obs.get(
        "non_torch_forward_increase_gib", obs.get("non_torch_gib")
    )
    return ["--runtime-reserve-gib", f"{reserve:.4f}"]


def error(predicted: int | None, logged: int) -> float | None:
    return None if predicted is None else 100 * (predicted - logged) / logged


def percent(err: float | None) -> str:
    return "n/a" if err is None else f"{err:+.2f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    cases = {c["id"]: c for c in json.loads(need(CASES, "dev-logs.json").read_text())}
    print(f"machine: {machine()}")
    rows: list[list[object]] = []
    errors: list[list[float]] = [[] for _ in range(6)]
    with tempfile.TemporaryDirectory() as tmp:
        for args in CASE_ARGS:
            case = cases[args.id]
            logged = logged_tokens(case)
            exact = kvtier_plan(case, args, measured=True)
            spec = kvtier_plan(case, args, measured=False)
            rp = ridgepoint(case, args)
            kf_measured = kvfit(case, args, kvfit_measured(case, args), Path(tmp))
            reserve = kvfit_reserve(case)
            kf_reserve = kvfit(
                case, args, reserve and kvfit_measured(case, args) + reserve, Path(tmp)
            )
            kf_spec = kvfit(case, args, None, Path(tmp))
            errs = [error(p, logged) for p in (exact, spec, kf_measured, kf_reserve, kf_spec, rp)]
            for column, err in zip(errors, errs, strict=True):
                if err is not None:
                    column.append(abs(err))
            rows.append(
                [
                    args.id,
                    case["engine"],
                    case["model"].split(" ")[0].split("/")[-1],
                    f"{logged:,}",
                    *map(percent, errs),
                    args.ridgepoint_note or "-",
                ]
            )
    rows.append(
        [
            "mean abs error",
            "-",
            "-",
            "-",
            *(f"{sum(c) / len(c):.2f}% ({len(c)})" for c in errors),
            "-",
        ]
    )
    print()
    print(
        markdown_table(
            [
                "case",
                "engine",
                "model",
                "logged KV tokens",
                "kvtier, log figures",
                "kvtier, spec only",
                "kvfit, log figures",
                "kvfit, + profiled reserve",
                "kvfit, spec only",
                "ridgepoint",
                "ridgepoint model",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
