"""`kvtier explain LOG`: read an SGLang or vLLM startup log, recompute its KV pool, explain it.

    kvtier explain server.log
    kvtier explain server.log --model moonshotai/Kimi-K2.5 --host-ram-gb 396 --json

Deployment flags are those of `kvtier plan`; they fill in what the log leaves out, and a value the
log states wins (a contradiction is reported as a warning).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvtier.errors import KvtierError

# kvtier flag dest -> setting name the log reader uses; the first given of a group wins.
_SETTINGS = (
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
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from kvtier.cli.plan import add_deployment_arguments

    p = subparsers.add_parser(
        "explain",
        help="recompute and explain the KV pool of an SGLang or vLLM startup log",
        description="Reads a startup log (raw, docker or journalctl; several ranks or starts), "
        "recomputes the KV token count from the log's own figures, shows where each GPU's "
        "memory went (GiB = 2^30 bytes) and the options for more KV capacity.",
    )
    p.add_argument("log", help="startup log file ('-' for standard input)")
    p.add_argument(
        "--host-ram-gb", type=float, help="host RAM available per node, decimal GB (HiCache check)"
    )
    add_deployment_arguments(p)
    p.set_defaults(run=run)


def _options_after_log(args: argparse.Namespace) -> argparse.Namespace:
    """Options written after LOG land in plan's trailing launch-command words: parse them."""
    words = [w for w in args.launch or [] if w != "--"]
    if not words:
        return args
    from kvtier.cli.plan import add_deployment_arguments

    again = argparse.ArgumentParser(prog="kvtier explain LOG")
    again.add_argument("--host-ram-gb", type=float)
    add_deployment_arguments(again)
    parsed = again.parse_args(words)
    if parsed.launch:
        raise KvtierError(
            "explain reads the launch settings from the log; drop the command after the log "
            f"({' '.join(parsed.launch)[:60]!r})"
        )
    merged = vars(args) | {k: v for k, v in vars(parsed).items() if v not in (None, False)}
    return argparse.Namespace(**merged)


def _read(path: str) -> str:
    if path == "-":
        import sys

        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise KvtierError(f"cannot read {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from kvtier.logs.explain import explain_log
    from kvtier.report.explain_view import print_explanation

    args = _options_after_log(args)
    flags: dict[str, object] = {}
    for dest, name in _SETTINGS:
        value = getattr(args, dest, None)
        if value is not None and name not in flags:
            flags[name] = value
    from kvtier.budget.deployment import Measured

    measured = Measured(
        draft_weights_gib=args.draft_weights_gib,
        cuda_graph_gib=args.cuda_graph_gib,
        free_end_gib=args.free_end_gib,
        gpu_mem_gib=args.gpu_mem_gib,
    )
    explanation = explain_log(_read(args.log), flags, measured)
    print_explanation(explanation, as_json=args.json)
    return 0
