"""`kvtier plan`: the per-GPU memory ledger of a deployment, from flags or a pasted launch command.

`add_deployment_arguments` and `deployment_from_args` are shared with `advise`, `explain` and
`simulate` (every command that describes a deployment the same way).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from kvtier.cli.parser import add_subcommand
from kvtier.cli.values import (
    FRACTION,
    GBPS,
    GIB,
    GPUS,
    HOST_GB,
    MAX_GIB,
    MAX_RATIO,
    MAX_TOKENS,
    TOKENS,
    count,
    number,
)
from kvtier.engines.sglang import versions as sglang_versions
from kvtier.engines.vllm import versions as vllm_versions
from kvtier.errors import KvtierError
from kvtier.files import check_model_path

if TYPE_CHECKING:
    from kvtier.engines.deployment import Deployment

_MEASURED = (
    ("free_before_load_gib", "SGLang: 'Load weight begin. avail mem' (min over ranks)"),
    ("free_after_load_gib", "SGLang: 'Load weight end. avail mem' (min over ranks)"),
    ("weights_gib", "weights per GPU: vLLM 'Model loading took', SGLang 'mem usage'"),
    ("activation_gib", "vLLM: torch peak increase during profiling"),
    ("non_torch_gib", "vLLM: non-torch increase during profiling"),
    ("cuda_graph_gib", "CUDA graphs: SGLang 'Capture cuda graph end. mem usage', vLLM estimate"),
    ("draft_weights_gib", "speculative draft weights per GPU"),
    ("free_end_gib", "SGLang: final 'available_gpu_mem'"),
    ("gpu_mem_gib", "card memory in GiB (vLLM: the total_memory it logs); overrides --gpu's"),
)
PAGE = count(1, 1 << 20)
CARD_GIB = number(1.0, MAX_GIB)
# kvtier flag dest -> Deployment field
_FIELDS = {
    "model": "model",
    "tp": "tp",
    "pp": "pp",
    "dp": "dp",
    "mem_fraction_static": "mem_fraction",
    "gpu_memory_utilization": "mem_fraction",
    "kv_cache_dtype": "kv_cache_dtype",
    "dtype": "dtype",
    "quantization": "quantization",
    "page_size": "page_size",
    "block_size": "page_size",
    "context_length": "context_length",
    "max_model_len": "context_length",
    "max_running_requests": "max_running_requests",
    "max_total_tokens": "max_total_tokens",
    "chunked_prefill_size": "chunked_prefill_size",
    "cuda_graph_max_bs": "cuda_graph_max_bs",
    "speculative_algorithm": "speculative_algorithm",
    "draft_model": "draft_model",
    "speculative_num_draft_tokens": "speculative_num_draft_tokens",
    "hicache_ratio": "hicache_ratio",
    "hicache_size": "hicache_size_gb",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "gpu": "gpu",
    "gpus": "gpus_per_node",
    "disable_radix_cache": "disable_radix_cache",
    "enable_prefix_caching": "enable_prefix_caching",
    "mamba_full_memory_ratio": "mamba_full_memory_ratio",
    "max_mamba_cache_size": "max_mamba_cache_size",
    "mamba_ssm_dtype": "mamba_ssm_dtype",
}


def _contexts(raw: str) -> tuple[int, ...]:
    values = []
    for word in (w.strip().lower() for w in raw.split(",") if w.strip()):
        scale = 1024 if word.endswith("k") else 1
        try:
            value = float(word.removesuffix("k")) * scale
        except ValueError:
            value = math.nan
        if not (1 <= value <= MAX_TOKENS and value == int(value)):
            raise argparse.ArgumentTypeError(
                f"wants whole lengths like 8192,32k from 1 to {MAX_TOKENS:,}, got {raw!r}"
            )
        values.append(int(value))
    if not values or len(values) > 64:
        raise argparse.ArgumentTypeError(f"wants 1 to 64 lengths like 8192,32k, got {raw!r}")
    return tuple(values)


def add_deployment_arguments(p: argparse.ArgumentParser, *, launch: bool) -> None:
    """Flags that describe a deployment; with `launch`, a launch command after `--` gives the rest.

    The parser must be a `SubcommandParser`, which puts the words after `--` in `args.launch`.
    """
    if launch:
        p.add_argument_group(
            "launch command",
            "after `--`: the engine's own command (python -m sglang.launch_server ... or vllm "
            "serve ...); kvtier reads the flags it models and names the ones it ignores",
        )
    g = p.add_argument_group("deployment (override the launch command)" if launch else "deployment")
    g.add_argument("--engine", choices=("sglang", "vllm"))
    g.add_argument("--model", help="catalog id, config.json path or model directory")
    g.add_argument("--gpu", help="GPU catalog name, e.g. 'H100 80GB', 'RTX PRO 6000'")
    g.add_argument("--gpus", type=GPUS, help="GPUs per node (default: tp x pp)")
    g.add_argument("--tp", type=GPUS)
    g.add_argument("--pp", type=GPUS)
    g.add_argument("--dp", type=GPUS)
    g.add_argument("--mem-fraction-static", type=FRACTION)
    g.add_argument("--gpu-memory-utilization", type=FRACTION)
    g.add_argument("--kv-cache-dtype")
    g.add_argument(
        "--dtype",
        type=str.lower,
        choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
        help="model dtype (default auto: vLLM resolves a float32 config by GPU and version)",
    )
    g.add_argument(
        "--quantization",
        help="fp8 quantizes an unquantized checkpoint's Linear and MoE weights at load; on a "
        "quantized checkpoint it must name the checkpoint's method",
    )
    g.add_argument("--page-size", type=PAGE)
    g.add_argument("--block-size", type=PAGE)
    g.add_argument("--context-length", type=TOKENS)
    g.add_argument("--max-model-len", type=TOKENS)
    g.add_argument("--max-running-requests", "--max-num-seqs", type=TOKENS)
    g.add_argument("--max-total-tokens", type=TOKENS)
    g.add_argument("--chunked-prefill-size", "--max-num-batched-tokens", type=TOKENS)
    g.add_argument("--cuda-graph-max-bs", type=TOKENS)
    g.add_argument("--speculative-algorithm", type=str.upper)
    g.add_argument("--speculative-draft-model-path", "--draft-model", dest="draft_model")
    g.add_argument("--speculative-num-draft-tokens", type=TOKENS)
    g.add_argument("--hicache-ratio", type=number(0.0, MAX_RATIO))
    g.add_argument("--hicache-size", type=HOST_GB, help="host pool per rank, decimal GB")
    g.add_argument("--kv-cache-memory-bytes", type=count(1, 1 << 50))
    h = p.add_argument_group("hybrid linear-attention models (Qwen3-Next, Qwen3.5 / 3.6)")
    h.add_argument(
        "--mamba-full-memory-ratio",
        type=number(0.0, MAX_RATIO, above=True),
        help="SGLang: recurrent-state memory / full-attention KV memory (default 0.9)",
    )
    h.add_argument("--max-mamba-cache-size", type=TOKENS, help="SGLang: state slots, fixed")
    h.add_argument(
        "--mamba-ssm-dtype",
        "--mamba-ssm-cache-dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="SSM state dtype (default: the config's mamba_ssm_dtype, else the engine's)",
    )
    h.add_argument(
        "--disable-radix-cache",
        action="store_true",
        default=None,
        help="SGLang: one state slot per running request instead of three",
    )
    h.add_argument(
        "--enable-prefix-caching",
        action="store_true",
        default=None,
        help="vLLM: two state blocks per request per linear-attention group instead of one",
    )
    g.add_argument(
        "--sglang-version",
        help=f"SGLang version whose rules apply. {sglang_versions.DEFAULT_SENTENCE}",
    )
    g.add_argument(
        "--vllm-version",
        help=f"vLLM version whose rules apply. {vllm_versions.DEFAULT_SENTENCE}",
    )
    m = p.add_argument_group("measured figures (GiB per GPU; from a real startup)")
    for dest, text in _MEASURED:
        kind = CARD_GIB if dest == "gpu_mem_gib" else GIB
        m.add_argument("--" + dest.replace("_", "-"), type=kind, help=text)
    o = p.add_argument_group("output")
    o.add_argument(
        "--context",
        type=_contexts,
        help="context lengths for concurrency, e.g. 8k,32k (default 8k,32k,128k,max)",
    )
    o.add_argument("--pcie-gbps", type=GBPS, help="host-to-GPU GB/s per card (default: catalog)")
    o.add_argument("--json", action="store_true", help="machine-readable output")
    o.add_argument("--quiet", action="store_true", help="only the key figures, as `key value`")


def deployment_from_args(args: argparse.Namespace) -> Deployment:
    """The `Deployment` the flags and the launch command describe; flags win over the command."""
    from kvtier.engines.deployment import Deployment, Engine, Measured
    from kvtier.engines.launch import parse_launch

    launch = parse_launch(args.launch) if args.launch else None
    engine = args.engine or (launch.engine.value if launch else None)
    if engine is None:
        raise KvtierError("say which engine: --engine sglang|vllm, or paste a launch command")
    if launch and args.engine and launch.engine.value != args.engine:
        raise KvtierError(f"--engine {args.engine} contradicts the {launch.engine} launch command")
    flags = field_values(args, _FIELDS)
    version = args.sglang_version if engine == "sglang" else args.vllm_version
    if version:
        flags["engine_version"] = version
    from_launch = dict(launch.values) if launch else {}
    model = flags.get("model") or from_launch.get("model")
    if model is None:
        raise KvtierError("say which model: --model ID, or paste a launch command")
    check_model_path(str(model))
    deployment = Deployment(
        engine=Engine(engine),
        model=str(model),
        measured=Measured(**{dest: getattr(args, dest) for dest, _ in _MEASURED}),
        ignored_flags=launch.ignored if launch else (),
    )
    deployment = deployment.with_values("launch command", **from_launch)
    deployment = deployment.with_values("kvtier flag", **flags)
    _check_kv_bytes(deployment)
    if deployment.hicache_ratio or deployment.hicache_size_gb:
        deployment = deployment.with_values(
            "implied by the host size", enable_hierarchical_cache=True
        )
    return deployment


def _check_kv_bytes(deployment: Deployment) -> None:
    """vLLM's `--kv-cache-memory-bytes` must fit on the card (the engine would fail to
    allocate it); refused here rather than priced as a pool larger than the GPU."""
    wanted = deployment.kv_cache_memory_bytes
    if wanted is None:
        return
    card_gib = deployment.measured.gpu_mem_gib
    if card_gib is None and deployment.gpu is not None:
        from kvtier.spec.gpu import resolve_gpu

        card_gib = resolve_gpu(deployment.gpu).memory_mib / 1024
    if card_gib is not None and wanted > card_gib * 2**30:
        raise KvtierError(
            f"--kv-cache-memory-bytes {wanted:,} is more than the card's {card_gib:g} GiB "
            f"({round(card_gib * 2**30):,} bytes)"
        )


def field_values(args: argparse.Namespace, fields: dict[str, str]) -> dict[str, object]:
    """`{field: value}` of the flags given; two flags of one field must agree (say,
    `--gpu-memory-utilization` and `--mem-fraction-static`), or both are refused."""
    values: dict[str, object] = {}
    given: dict[str, str] = {}
    for dest, name in fields.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        flag = "--" + dest.replace("_", "-")
        if name in values and values[name] != value:
            raise KvtierError(
                f"{given[name]} {values[name]} contradicts {flag} {value} (both set {name}); "
                "give one"
            )
        values.setdefault(name, value)
        given.setdefault(name, flag)
    return values


def warn_ignored(deployment: Deployment) -> None:
    if deployment.ignored_flags:
        print(
            "kvtier: warning: launch command flags not modelled (ignored): "
            + " ".join(deployment.ignored_flags),
            file=sys.stderr,
        )


EPILOG = """\
examples:
  kvtier plan --engine vllm --model llama-3.1-8b --gpu h100 --max-model-len 8192 --quantization fp8
  kvtier plan --gpu "RTX PRO 6000" --gpus 8 --free-before-load-gib 94.04 \\
      --free-after-load-gib 21.71 -- python -m sglang.launch_server \\
      --model-path moonshotai/Kimi-K2.5 --tp 8 --mem-fraction-static 0.88
  kvtier plan --gpu h100 --context 8k,32k --json -- vllm serve meta-llama/Llama-3.1-8B-Instruct
  kvtier plan --engine sglang --model qwen3.5-27b --gpu h100 --mamba-full-memory-ratio 0.5 --quiet
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "plan",
        usage="%(prog)s [options] [-- LAUNCH COMMAND ...]",
        help="per-GPU memory ledger and KV tokens of a deployment",
        description="How the engine divides each GPU: weights, KV pool, draft, reserve, free "
        "(GiB = 2^30 bytes per GPU), the KV token count and concurrency at context lengths.",
        epilog=EPILOG,
    )
    add_deployment_arguments(p, launch=True)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.ledger.plan import plan
    from kvtier.report.ledger_view import print_ledger

    deployment = deployment_from_args(args)
    warn_ignored(deployment)
    ledger = plan(deployment, args.context, args.pcie_gbps)
    print_ledger(ledger, as_json=args.json, quiet=args.quiet)
    return 0
