"""`kvtier explain LOG`: read an SGLang or vLLM startup log, recompute its KV pool, explain it.

Deployment flags are those of `kvtier plan`; they fill in what the log leaves out, and a value the
log states wins (a contradiction is reported as a warning).
"""

from __future__ import annotations

import argparse

from kvtier.cli.flags import EXPLAIN, add_flags, refuse, refuse_for_engine, settings
from kvtier.cli.parser import add_subcommand
from kvtier.errors import KvtierError
from kvtier.files import check_model_path, read_text

EPILOG = """\
examples:
  kvtier explain examples/logs/sglang-kimi-k25-eagle3.log --host-ram-gb 396
  kvtier explain examples/logs/vllm-llama31-8b-h100.log --json
  kvtier explain - < examples/logs/vllm-llama31-8b-h100.log
  kvtier explain examples/logs/sglang-kimi-k25-eagle3.log --quiet \
      --nvidia-smi tests/fixtures/observe/nvidia-smi/kimi-k25-serving.txt
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "explain",
        usage="%(prog)s LOG [options]",
        help="recompute and explain the KV pool of an SGLang or vLLM startup log",
        description="Reads a startup log (raw, docker or journalctl; several ranks or starts), "
        "recomputes the KV token count from the log's own figures, shows where each GPU's "
        "memory went (GiB = 2^30 bytes) and the options for more KV capacity.",
        epilog=EPILOG,
    )
    p.add_argument("log", help="startup log file ('-' for standard input)")
    add_flags(p, EXPLAIN)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.engines.detect import detect_log, log_engine
    from kvtier.ledger.explain import explain_log
    from kvtier.report.explain_view import print_explanation

    if args.launch:
        raise KvtierError(
            "explain reads the launch settings from the log; drop the command after `--` "
            f"({' '.join(args.launch)[:60]!r})"
        )
    refuse(args, EXPLAIN)
    if args.gpu is not None:
        from kvtier.model.gpu import resolve_gpu

        resolve_gpu(args.gpu)  # an unknown name fails here, not later in the options note
    flags = settings(args, EXPLAIN)
    if args.model is not None:
        check_model_path(args.model)
    from kvtier.engines.deployment import FreeMemory, Measured

    measured = Measured(
        free=FreeMemory(end_gib=args.free_end_gib),
        draft_weights_gib=args.draft_weights_gib,
        cuda_graph_gib=args.cuda_graph_gib,
        gpu_mem_gib=args.gpu_mem_gib,
    )
    card = None
    if args.nvidia_smi is not None:
        from kvtier.observe.nvidia_smi import parse_nvidia_smi

        gpus = parse_nvidia_smi(read_text(args.nvidia_smi, "nvidia-smi"), args.nvidia_smi)
    log = detect_log(read_text(args.log, "log"))
    engine = log_engine(log, args.engine)
    if engine is not None:  # before the log is read under the other engine's flags
        refuse_for_engine(args, EXPLAIN, engine)
    explanation = explain_log(log, flags, measured, startup=args.startup)
    if args.nvidia_smi is not None:
        from kvtier.observe.nvidia_smi import reconcile_card

        card = reconcile_card(gpus, explanation)
    print_explanation(explanation, as_json=args.json, quiet=args.quiet, card=card)
    return 0
