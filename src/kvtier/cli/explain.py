"""`kvtier explain LOG`: read an SGLang or vLLM startup log, recompute its KV pool, explain it.

Deployment flags are those of `kvtier plan`; they fill in what the log leaves out, and a value the
log states wins (a contradiction is reported as a warning).
"""

from __future__ import annotations

import argparse

from kvtier.cli.parser import add_subcommand
from kvtier.cli.plan import add_deployment_arguments, field_values
from kvtier.cli.values import HOST_GB
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

# kvtier flag dest -> setting name the log reader uses; two of a group must agree.
_SETTINGS = dict(
    (
        ("engine", "engine"),
        ("model", "model"),
        ("tp", "tp"),
        ("pp", "pp"),
        ("dp", "dp"),
        ("mem_fraction_static", "mem_fraction"),
        ("gpu_memory_utilization", "mem_fraction"),
        ("kv_cache_dtype", "kv_cache_dtype"),
        ("page_size", "page_size"),
        ("block_size", "page_size"),
        ("max_total_tokens", "max_total_tokens"),
        ("context_length", "context_length"),
        ("max_model_len", "context_length"),
        ("max_running_requests", "max_running_requests"),
        ("chunked_prefill_size", "chunked_prefill_size"),
        ("cuda_graph_max_bs", "cuda_graph_max_bs"),
        ("speculative_algorithm", "speculative_algorithm"),
        ("draft_model", "draft_model"),
        ("speculative_num_draft_tokens", "speculative_num_draft_tokens"),
        ("gpus", "gpus"),
        ("gpu", "gpu"),
        ("sglang_version", "engine_version"),
        ("vllm_version", "engine_version"),
        ("host_ram_gb", "host_ram_gb"),
        ("disable_radix_cache", "disable_radix_cache"),
        ("enable_prefix_caching", "enable_prefix_caching"),
        ("mamba_full_memory_ratio", "mamba_full_memory_ratio"),
        ("max_mamba_cache_size", "max_mamba_cache_size"),
        ("mamba_ssm_dtype", "mamba_ssm_dtype"),
    )
)

# Deployment flags explain takes from the log alone, or does not use: refused, not ignored.
_UNUSED = (
    "hicache_ratio",
    "hicache_size",
    "kv_cache_memory_bytes",
    "free_before_load_gib",
    "free_after_load_gib",
    "weights_gib",
    "activation_gib",
    "non_torch_gib",
    "context",
    "pcie_gbps",
)


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
    p.add_argument(
        "--host-ram-gb",
        type=HOST_GB,
        help="host RAM available per node, decimal GB (HiCache check)",
    )
    p.add_argument(
        "--nvidia-smi",
        metavar="FILE",
        help="nvidia-smi's table or --query-gpu=index,memory.used,memory.total CSV, taken while "
        "serving: its 'used' reconciled item by item with the log's ledger",
    )
    add_deployment_arguments(p, launch=False)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvtier.ledger.explain import explain_log
    from kvtier.report.explain_view import print_explanation

    if args.launch:
        raise KvtierError(
            "explain reads the launch settings from the log; drop the command after `--` "
            f"({' '.join(args.launch)[:60]!r})"
        )
    unused = [dest for dest in _UNUSED if getattr(args, dest) is not None]
    if unused:
        raise KvtierError(
            f"explain does not use --{unused[0].replace('_', '-')}: the log states the "
            "deployment (kvtier plan and advise take it)"
        )
    if args.gpu is not None:
        from kvtier.spec.gpu import resolve_gpu

        resolve_gpu(args.gpu)  # an unknown name fails here, not later in the options note
    flags = field_values(args, _SETTINGS)
    if args.model is not None:
        check_model_path(args.model)
    from kvtier.engines.deployment import Measured

    measured = Measured(
        draft_weights_gib=args.draft_weights_gib,
        cuda_graph_gib=args.cuda_graph_gib,
        free_end_gib=args.free_end_gib,
        gpu_mem_gib=args.gpu_mem_gib,
    )
    card = None
    if args.nvidia_smi is not None:
        from kvtier.observe.nvidia_smi import parse_nvidia_smi

        gpus = parse_nvidia_smi(read_text(args.nvidia_smi, "nvidia-smi"), args.nvidia_smi)
    explanation = explain_log(read_text(args.log, "log"), flags, measured)
    if args.nvidia_smi is not None:
        from kvtier.observe.nvidia_smi import reconcile_card

        card = reconcile_card(gpus, explanation)
    print_explanation(explanation, as_json=args.json, quiet=args.quiet, card=card)
    return 0
