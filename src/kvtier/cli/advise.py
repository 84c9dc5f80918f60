"""`kvtier advise`: the ways to more KV capacity for a deployment, priced, with the engine flags."""

from __future__ import annotations

import argparse

from kvtier.cli.flags import ADVISE, add_flags, refuse
from kvtier.cli.parser import add_subcommand
from kvtier.cli.plan import deployment_from_args, warn_ignored
from kvtier.errors import KvtierError

EPILOG = """\
examples:
  kvtier advise --gpu "RTX PRO 6000" --gpus 8 --host-ram-gb 396 -- python -m \\
      sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --mem-fraction-static 0.88
  kvtier advise --engine sglang --model kimi-k2.5 --gpu "RTX PRO 6000" --tp 8 \\
      --mem-fraction-static 0.88 --target-requests 64 --context 32k
  kvtier advise --engine vllm --model llama-3.1-8b --gpu h100 --max-model-len 8192 --json

on your traffic (--workload): every option above, the running-request cap, the prefill chunk, an
L3 store and a second replica run through `kvtier simulate`, ranked by --objective, the baseline
first; then pairs of the top three options of different kinds (at most 3 pairs):
  kvtier simulate --generate agent --seed 1 --requests 400 -o agent.jsonl
  kvtier advise --gpu "RTX PRO 6000" --host-ram-gb 396 --workload agent.jsonl --jobs 2 -- \
      python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 \
      --mem-fraction-static 0.88 --speculative-algorithm EAGLE3
  kvtier advise --engine sglang --model llama-3.1-8b --gpu h100 --workload server.log \
      --mean-output-tokens 256 --objective throughput --ttft-p90-max 2 --html advise.html

from a startup log (the deployment as `kvtier explain LOG` reads it; the baseline and the options
that keep the pool run on the log's KV token count, --device-tokens; fraction and KV dtype on the
ledger's pool from its measured figures; the log does not name the card, so give --gpu):
  kvtier simulate --generate chat --requests 200 --seed 1 -o chat.jsonl
  kvtier advise examples/logs/sglang-kimi-k25-eagle3.log --workload chat.jsonl \
      --gpu "RTX PRO 6000" --host-ram-gb 396
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "advise",
        usage="%(prog)s [STARTUP_LOG] [options] [-- LAUNCH COMMAND ...]",
        help="options for more KV capacity, and which flag reaches a target",
        description="Each option with its predicted KV tokens, concurrency, cost or risk, and "
        "the exact engine flags. GPU figures in GiB (2^30), host RAM in decimal GB.",
        epilog=EPILOG,
    )
    p.add_argument(
        "log",
        nargs="?",
        metavar="STARTUP_LOG",
        help="an SGLang or vLLM startup log: the deployment as `kvtier explain LOG` reads it "
        "(with --workload)",
    )
    add_flags(p, ADVISE)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.ledger.advise import HostSetup, all_options
    from kvtier.ledger.plan import build_ledger, resolve
    from kvtier.ledger.target import solve
    from kvtier.report.ledger_view import print_advice

    refuse(args, ADVISE)
    from kvtier.cli import advise_workload

    advise_workload.check(args)
    if args.workload:
        return advise_workload.run(args)
    if args.log:
        raise KvtierError(
            f"advise {args.log}: a startup log is advised on traffic: add --workload SOURCE "
            f"(`kvtier explain {args.log}` prices the options without one)"
        )
    deployment = deployment_from_args(args, ADVISE)
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
