"""`kvtier plan`: the per-GPU memory ledger of a deployment, from flags or a pasted launch command.

`deployment_from_args` is shared with `advise` and `simulate` (every command that builds a
deployment from flags); every command's flags come from one table (cli/flags).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kvtier.cli.flags import PLAN, add_flags, refuse, refuse_for_engine, settings
from kvtier.cli.flags.deployment import MEASURED, MEASURED_FIGURE
from kvtier.cli.parser import add_subcommand
from kvtier.errors import KvtierError, shown
from kvtier.files import check_model_path

if TYPE_CHECKING:
    from kvtier.engines.deployment import Deployment


def deployment_from_args(args: argparse.Namespace, command: str) -> Deployment:
    """The `Deployment` the flags of `command` and the launch command describe; flags win over
    the command."""
    from kvtier.engines.deployment import Deployment, Engine, Measured
    from kvtier.engines.launch import parse_launch

    launch = parse_launch(args.launch) if args.launch else None
    engine = args.engine or (launch.engine.value if launch else None)
    if engine is None:
        raise KvtierError("say which engine: --engine sglang|vllm, or paste a launch command")
    if launch and args.engine and launch.engine.value != args.engine:
        raise KvtierError(f"--engine {args.engine} contradicts the {launch.engine} launch command")
    refuse_for_engine(args, command, engine)
    flags = settings(args, command, skip=("engine", "engine_version"))
    version = args.sglang_version or args.vllm_version  # the other engine's is refused
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
        measured=Measured().with_values(
            **{MEASURED_FIGURE[row.dest]: getattr(args, row.dest) for row in MEASURED}
        ),
        ignored_flags=launch.ignored if launch else (),
    )
    deployment = deployment.with_values("launch command", **from_launch)
    deployment = deployment.with_values("kvtier flag", **flags)
    _check_kv_bytes(deployment)
    if deployment.hicache.ratio or deployment.hicache.size_gb:
        deployment = deployment.with_values("implied by the host size", **{"hicache.enable": True})
    return deployment


def _check_kv_bytes(deployment: Deployment) -> None:
    """vLLM's `--kv-cache-memory-bytes` must fit on the card (the engine would fail to
    allocate it); refused here rather than priced as a pool larger than the GPU."""
    wanted = deployment.kv_cache_memory_bytes
    if wanted is None:
        return
    card_gib = deployment.measured.gpu_mem_gib
    if card_gib is None and deployment.gpu is not None:
        from kvtier.model.gpu import resolve_gpu

        card_gib = resolve_gpu(deployment.gpu).memory_mib / 1024
    if card_gib is not None and wanted > card_gib * 2**30:
        raise KvtierError(
            f"--kv-cache-memory-bytes {wanted:,} is more than the card's {card_gib:g} GiB "
            f"({round(card_gib * 2**30):,} bytes)"
        )


def warn_ignored(deployment: Deployment) -> None:
    if deployment.ignored_flags:
        print(
            "kvtier: warning: launch command flags and variables not modelled (ignored): "
            + " ".join(f"{shown(word):.60}" for word in deployment.ignored_flags),
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
    add_flags(p, PLAN)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0 with the ledger; exit 1 when the engine would refuse to start the deployment
    (that is the answer, with the count it sized and the setting that starts)."""
    from kvtier.errors import DoesNotStart
    from kvtier.ledger.plan import plan
    from kvtier.report.ledger_view import print_ledger, print_refusal

    refuse(args, PLAN)
    deployment = deployment_from_args(args, PLAN)
    warn_ignored(deployment)
    try:
        ledger = plan(deployment, args.context, args.pcie_gbps)
    except DoesNotStart as refusal:
        print_refusal(deployment, refusal, as_json=args.json, quiet=args.quiet)
        return refusal.exit_code
    print_ledger(ledger, as_json=args.json, quiet=args.quiet)
    return 0
