"""`kvtier advise`: the ways to more KV capacity for a deployment, priced, with the engine flags."""

from __future__ import annotations

import argparse

from kvtier.cli.parser import add_subcommand
from kvtier.cli.plan import add_deployment_arguments, deployment_from_args, warn_ignored
from kvtier.cli.values import GBPS, GIB, HOST_GB, TOKENS
from kvtier.errors import KvtierError

EPILOG = """\
examples:
  kvtier advise --gpu "RTX PRO 6000" --gpus 8 --host-ram-gb 396 -- python -m \\
      sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --mem-fraction-static 0.88
  kvtier advise --engine sglang --model kimi-k2.5 --gpu "RTX PRO 6000" --tp 8 \\
      --mem-fraction-static 0.88 --target-requests 64 --context 32k
  kvtier advise --engine vllm --model llama-3.1-8b --gpu h100 --max-model-len 8192 --json
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "advise",
        usage="%(prog)s [options] [-- LAUNCH COMMAND ...]",
        help="options for more KV capacity, and which flag reaches a target",
        description="Each option with its predicted KV tokens, concurrency, cost or risk, and "
        "the exact engine flags. GPU figures in GiB (2^30), host RAM in decimal GB.",
        epilog=EPILOG,
    )
    a = p.add_argument_group("advice")
    a.add_argument(
        "--margin-gib",
        type=GIB,
        default=2.0,
        help="GiB to keep free at the end of startup when raising the fraction",
    )
    a.add_argument(
        "--host-ram-gb",
        type=HOST_GB,
        help="host RAM available on the node (GB, as `free -g` available)",
    )
    a.add_argument(
        "--load-tokens",
        type=TOKENS,
        default=32768,
        help="tokens to reload from host when pricing the host tier",
    )
    a.add_argument(
        "--node-host-gbps",
        type=GBPS,
        help="host-to-GPU GB/s the node sustains in total (shared by its GPUs)",
    )
    a.add_argument(
        "--target-requests",
        type=TOKENS,
        help="requests that must run at once (with one --context length)",
    )
    add_deployment_arguments(p, launch=True)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.ledger.advise import HostSetup, all_options
    from kvtier.ledger.plan import build_ledger, resolve
    from kvtier.ledger.target import solve
    from kvtier.report.ledger_view import print_advice

    deployment = deployment_from_args(args)
    warn_ignored(deployment)
    inputs = resolve(deployment, args.context, args.pcie_gbps)
    base = build_ledger(inputs)
    host = HostSetup(args.host_ram_gb, args.load_tokens, args.node_host_gbps)
    options = all_options(inputs, base, args.margin_gib, host)
    answer = None
    if args.target_requests is not None:
        if not args.context or len(args.context) != 1:
            raise KvtierError("--target-requests needs exactly one --context length")
        answer = solve(inputs, base, args.margin_gib, args.target_requests, args.context[0])
    print_advice(base, options, answer, as_json=args.json, quiet=args.quiet)
    return 0
