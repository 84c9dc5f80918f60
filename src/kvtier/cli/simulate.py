"""`kvtier simulate`: replay a workload trace against a deployment with the tiered KV cache."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvtier.cli.parser import add_subcommand
from kvtier.cli.plan import add_deployment_arguments, deployment_from_args, warn_ignored
from kvtier.errors import KvtierError

# Names and defaults the help text states; kvtier.sim is imported only when a simulation runs
# (tests check these against kvtier.sim.workload.GENERATORS, sim.sweep.SWEEPABLE, sim.timing).
WORKLOADS = ("chat", "system-prompt", "agent", "doc-qa")
SWEEPS = ("hicache-ratio", "mem-fraction-static", "kv-cache-dtype", "pcie-gbps")

DESCRIPTION = """\
Replay a Mooncake-format trace (JSONL: timestamp ms, input_length, output_length, hash_ids over
512-token blocks) through kvtier's own tiered radix cache in accounting mode, with SGLang's
scheduling (FCFS admission, chunked prefill, continuous batching, HiCache load-back) and a
roofline timing model. Reports token hit rate per tier, TTFT, throughput, concurrency, evictions
and PCIe load.

Token hit rate: prefix tokens found in a cache tier when the request was scheduled, over all
prompt tokens (of the requests after --warmup-fraction). Blocks count at their real size: the
last block of a prompt holds input_length - 512 x (n - 1) tokens.

--unbounded gives the trace's ceiling: for each request, the longest prefix of its hash_ids seen
in any earlier request (chronological), over all prompt tokens. --lru-tokens N: a single-tier LRU
prefix cache of N tokens, counted in whole blocks. Neither has a clock.

Granularity: the cache's page key is one trace block; a block takes ceil(512/page_size) engine
pages of capacity, partial last blocks included.
"""

EPILOG = """\
examples:
  kvtier simulate --generate chat --seed 1 --requests 2000 -o chat.jsonl
  kvtier simulate chat.jsonl --unbounded --json
  kvtier simulate chat.jsonl --engine sglang --model kimi-k2.5 --gpu "RTX PRO 6000" --tp 8 \\
      --mem-fraction-static 0.88 --device-tokens 159277 --hicache-ratio 4
  kvtier simulate chat.jsonl --gpu "RTX PRO 6000" --sweep hicache-ratio=0,2,4,8 -- \\
      python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8

timing constants (override with the flags below): prefill at 0.4 of dense bf16 peak, decode at
0.8 of HBM bandwidth, host->device loads at min(--pcie-gbps, --host-gbps / GPUs loading), overlapped
layer by layer with prefill compute; the L3 store reads at 5.0 GB/s per node. See docs/simulate.md.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "simulate",
        usage="%(prog)s [TRACE] [options] [-- LAUNCH COMMAND ...]",
        help="replay a workload trace against a deployment and its tiered KV cache",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    p.add_argument("trace", nargs="?", help="Mooncake JSONL trace")
    w = p.add_argument_group("synthetic workloads (written in the Mooncake format)")
    w.add_argument(
        "--generate",
        choices=WORKLOADS,
        metavar="KIND",
        help=f"generate a workload: {', '.join(WORKLOADS)}",
    )
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--requests", type=int, default=1000)
    w.add_argument("--rate", type=float, default=1.0, help="sessions (or requests) per second")
    w.add_argument("-o", "--output", help="write the generated trace here and stop")
    s = p.add_argument_group("simulation")
    s.add_argument("--device-tokens", type=int, help="device KV tokens (default: the ledger's)")
    s.add_argument(
        "--hicache-write-policy",
        default="write_through",
        choices=("write_through", "write_through_selective", "write_back"),
    )
    s.add_argument(
        "--store-tokens",
        type=int,
        default=0,
        help="L3 store (disk) capacity in tokens behind the host tier (default: none)",
    )
    s.add_argument("--unbounded", action="store_true", help="reference: a cache that never evicts")
    s.add_argument("--lru-tokens", type=int, help="reference: single-tier LRU of N tokens")
    s.add_argument(
        "--warmup-fraction",
        type=float,
        default=0.0,
        help="measure hit rates and latency only after the first F of the requests",
    )
    s.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="multiply arrival times by F (2: the same trace at half the load)",
    )
    s.add_argument(
        "--sweep", metavar="NAME=V1,V2", help=f"one run per value; NAME one of {', '.join(SWEEPS)}"
    )
    t = p.add_argument_group("timing model (defaults: see the end of this help)")
    t.add_argument(
        "--compute-efficiency", type=float, help="share of dense bf16 peak prefill reaches"
    )
    t.add_argument("--hbm-efficiency", type=float, help="share of HBM bandwidth decode reaches")
    t.add_argument(
        "--bf16-tflops", type=float, help="dense bf16 TFLOP/s per GPU (default: catalog)"
    )
    t.add_argument("--hbm-gbps", type=float, help="HBM GB/s per GPU (default: catalog)")
    t.add_argument(
        "--host-gbps",
        type=float,
        help="host-side GB/s of the node shared by GPUs loading at once "
        "(default: --pcie-gbps x GPUs per node / 2)",
    )
    t.add_argument("--store-gbps", type=float, help="L3 store read GB/s of the node")
    t.add_argument("--gpus-per-node", type=int, dest="gpus", help="same as --gpus")
    add_deployment_arguments(p, launch=True)
    p.set_defaults(run=run)


def _progress_bar(enabled: bool) -> Any:
    """A rich progress bar on stderr, or None when quiet or not a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress

    return Progress(console=Console(stderr=True), transient=True)


def _check(args: argparse.Namespace) -> None:
    if not 0.0 <= args.warmup_fraction < 1.0:
        raise KvtierError(f"--warmup-fraction must be in [0, 1), got {args.warmup_fraction}")
    if args.unbounded and args.lru_tokens is not None:
        raise KvtierError("--unbounded and --lru-tokens are two different references; pick one")
    if (args.unbounded or args.lru_tokens is not None) and args.sweep:
        raise KvtierError("--sweep applies to timed runs, not to --unbounded / --lru-tokens")
    for name in ("compute_efficiency", "hbm_efficiency"):
        value = getattr(args, name)
        if value is not None and not 0.0 < value <= 1.0:
            raise KvtierError(f"--{name.replace('_', '-')} must be in (0, 1]")
    if args.store_tokens < 0:
        raise KvtierError(f"--store-tokens must not be negative, got {args.store_tokens}")
    for name in (
        "pcie_gbps",
        "host_gbps",
        "bf16_tflops",
        "hbm_gbps",
        "gpus",
        "device_tokens",
        "store_gbps",
    ):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            raise KvtierError(f"--{name.replace('_', '-')} must be positive, got {value}")


def run(args: argparse.Namespace) -> int:
    from kvtier.sim.trace import Trace, load_trace, scale_time, write_trace
    from kvtier.sim.workload import generate

    _check(args)
    trace_path = args.trace
    if args.generate and trace_path:
        raise KvtierError("give a trace file or --generate KIND, not both")
    if args.generate:
        requests = generate(args.generate, args.requests, args.seed, args.rate)
        if args.output:
            n = write_trace(requests, args.output)
            print(f"wrote {n} requests ({args.generate}, seed {args.seed}) to {args.output}")
            return 0
        trace = Trace(requests, source=f"generated {args.generate} seed {args.seed}")
    elif trace_path:
        trace = load_trace(trace_path)
    else:
        raise KvtierError("give a trace file, or --generate KIND")
    if args.unbounded or args.lru_tokens is not None:
        return _reference(args, trace)
    if args.time_scale != 1.0:
        trace = scale_time(trace, args.time_scale)
    return _timed(args, trace)


def _reference(args: argparse.Namespace, trace: Any) -> int:
    from kvtier.report.sim_view import quiet_lines, run_table
    from kvtier.sim import reference

    if args.unbounded:
        result = reference.unbounded(trace, args.warmup_fraction)
        title = "unbounded cache: the trace's hit-rate ceiling (no clock)"
    else:
        result = reference.lru(trace, args.lru_tokens, args.warmup_fraction)
        title = f"single-tier LRU of {args.lru_tokens:,} tokens (whole blocks, no clock)"
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    elif args.quiet:
        print("\n".join(quiet_lines(result)))
    else:
        _print(run_table(result, title))
    return 0


def _timed(args: argparse.Namespace, trace: Any) -> int:
    from kvtier.report.sim_view import (
        quiet_lines,
        rejected_line,
        run_table,
        sweep_quiet_lines,
        sweep_table,
    )
    from kvtier.sim.run import simulate
    from kvtier.sim.setup import build_config
    from kvtier.sim.sweep import CHANGES_DEVICE_TOKENS, parse_sweep, run_sweep, sweep_json
    from kvtier.sim.timing import TimingFlags

    deployment = deployment_from_args(args)
    warn_ignored(deployment)
    given = {
        name: getattr(args, name)
        for name in (
            "compute_efficiency",
            "hbm_efficiency",
            "bf16_tflops",
            "hbm_gbps",
            "pcie_gbps",
            "host_gbps",
            "store_gbps",
        )
    }
    flags = TimingFlags(
        gpus_per_node=args.gpus,
        **{name: value for name, value in given.items() if value is not None},
    )
    notes: list[str] = []
    sources: list[tuple[str, str]] = []

    def run_one(d: Any, t: TimingFlags, params: dict[str, object]) -> Any:
        config = build_config(
            d, trace.block_size, args.device_tokens, args.hicache_write_policy, t, args.store_tokens
        )
        if not notes:
            notes.extend(config.notes())
            sources.extend(config.sources)
        bar = _progress_bar(not (args.quiet or args.json))
        if bar is None:
            return simulate(trace, config, args.warmup_fraction, params=params)
        with bar:
            task = bar.add_task("simulating", total=len(trace.requests))
            return simulate(
                trace, config, args.warmup_fraction, lambda n: bar.update(task, completed=n), params
            )

    if args.sweep:
        sweep = parse_sweep(args.sweep)
        if sweep.param in CHANGES_DEVICE_TOKENS and args.device_tokens is not None:
            raise KvtierError(
                f"--sweep {sweep.param} changes the device pool; "
                "drop --device-tokens so the ledger sizes it"
            )
        results = run_sweep(sweep, deployment, flags, run_one)
        if args.json:
            print(json.dumps({"sweep": sweep_json(sweep, results), "notes": notes}, indent=2))
            return 0
        if args.quiet:
            print("\n".join(sweep_quiet_lines(sweep.param, sweep.values, results)))
            return 0
        _print(sweep_table(sweep.param, sweep.values, results))
        lines = [rejected_line(r) for r in results]
    else:
        result = run_one(deployment, flags, {"time_scale": args.time_scale})
        if args.json:
            print(json.dumps({**result.to_json(), "notes": notes}, indent=2))
            return 0
        if args.quiet:
            print("\n".join(quiet_lines(result)))
            return 0
        _print(run_table(result, f"{deployment.model} on {deployment.tp} x {deployment.gpu}"))
        lines = [rejected_line(result)]
    for line in [*filter(None, lines), *notes]:
        print(f"note: {line}")
    for name, source in sources:
        print(f"source: {name}: {source}")
    return 0


def _print(table: Any) -> None:
    from kvtier.report.ledger_view import terminal

    terminal().print(table)
