"""`kvtier simulate`: replay a workload trace against a deployment with the tiered KV cache."""

from __future__ import annotations

import argparse
import os
from typing import Any

from kvtier.cli import router_options
from kvtier.cli.flags import SIMULATE, add_flags, refuse
from kvtier.cli.parser import add_subcommand
from kvtier.cli.plan import deployment_from_args, warn_ignored
from kvtier.cli.progress import Progress
from kvtier.errors import KvtierError
from kvtier.files import MAX_TRACE_BYTES, check_output, open_input
from kvtier.report.json_text import emit

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
in any earlier request (chronological), over all prompt tokens. --lru-tokens N[,N...]: a
single-tier LRU prefix cache of N tokens, counted in whole blocks. Neither has a clock; given
together, or with several sizes, they are replayed side by side in one pass over the trace.

A progress bar with the time left shows on stderr while the trace loads and while runs replay,
except under --json or --quiet, or when stderr is not a terminal.

Granularity: the cache's page key is one trace block; a block takes ceil(512/page_size) engine
pages of capacity, partial last blocks included.
"""

EPILOG = """\
examples:
  kvtier simulate --generate chat --seed 1 --requests 2000 -o chat.jsonl
  kvtier simulate chat.jsonl --unbounded --lru-tokens 150000,600000,2400000 --json
  kvtier simulate chat.jsonl --gpu "RTX PRO 6000" --sweep hicache-ratio=0,2,4,8 -- \\
      python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8
  kvtier simulate --from-log examples/logs/sglang-serving-queue.log --engine sglang \\
      --model llama-3.1-8b --gpu h100 --mean-output-tokens 256 --sweep hicache-ratio=0,2

timing constants (override with the flags below): prefill at 0.4 of dense bf16 peak, decode at
0.8 of HBM bandwidth, host->device loads at min(--pcie-gbps, --host-gbps / GPUs loading), overlapped
layer by layer with prefill compute; the L3 store reads at 5.0 GB/s per node. An A100's prefill
runs at 0.75 of its peak (published rows set it). See docs/simulate.md.
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
    add_flags(p, SIMULATE)
    p.set_defaults(run=run)


def _check(args: argparse.Namespace) -> None:
    refuse(args, SIMULATE)
    fitted = [f for f in ("mean_prompt_tokens", "mean_output_tokens") if getattr(args, f)]
    if fitted and not args.from_log:
        raise KvtierError(f"--{fitted[0].replace('_', '-')} applies to --from-log LOG")
    if not 0.0 <= args.warmup_fraction < 1.0:
        raise KvtierError(f"--warmup-fraction must be in [0, 1), got {args.warmup_fraction}")
    if not 1e-6 <= args.time_scale <= 1e6:
        raise KvtierError(f"--time-scale must be in [1e-06, 1e+06], got {args.time_scale}")
    if (args.unbounded or args.lru_tokens is not None) and args.sweep:
        raise KvtierError("--sweep applies to timed runs, not to --unbounded / --lru-tokens")


def run(args: argparse.Namespace) -> int:
    _check(args)
    if router_options.asked(args):
        return router_options.show(args)
    with Progress(not (args.quiet or args.json)) as progress:
        return _run(args, progress)


def _run(args: argparse.Namespace, progress: Progress) -> int:
    from kvtier.cli import simulate_bench, simulate_fleet, simulate_hicache
    from kvtier.sim.trace import Trace, read_trace, scale_time, write_trace
    from kvtier.sim.workload import generate

    simulate_hicache.check(args)
    simulate_fleet.check(args)
    simulate_bench.check(args)
    if args.from_log:
        return _timed(args, None, progress)
    trace_path = args.trace
    if args.generate and trace_path:
        raise KvtierError("give a trace file or --generate KIND, not both")
    if args.output and not args.generate:
        raise KvtierError("-o writes a generated trace: give --generate KIND")
    if args.generate:
        if args.output:
            check_output(args.output, [args.model])
        if args.generate == simulate_bench.RANDOM:
            return _timed(args, simulate_bench.bench(args), progress)
        if args.generate == simulate_hicache.MULTITURN:
            trace = simulate_hicache.generate(args)
        elif args.generate == simulate_fleet.SHARED_PREFIX:
            trace = simulate_fleet.generate(args)
        else:
            requests = generate(args.generate, args.requests or 1000, args.seed, args.rate)
            trace = Trace(requests, source=f"generated {args.generate} seed {args.seed}")
        if args.output:
            n = write_trace(trace.requests, args.output, trace.block_size)
            print(f"wrote {n} requests ({args.generate}, seed {args.seed}) to {args.output}")
            return 0
    elif trace_path:
        with open_input(trace_path, "trace", MAX_TRACE_BYTES) as stream:
            size = os.fstat(stream.fileno()).st_size
            trace = read_trace(
                stream,
                trace_path,
                args.block_tokens,
                progress.bar("loading trace", size),
            )
    else:
        raise KvtierError("give a trace file, or --generate KIND")
    if args.unbounded or args.lru_tokens is not None:
        return _reference(args, trace, progress)
    if args.time_scale != 1.0:
        trace = scale_time(trace, args.time_scale)
    return _timed(args, trace, progress)


def _reference(args: argparse.Namespace, trace: Any, progress: Progress) -> int:
    from kvtier.report.sim_view import quiet_lines, run_table, sweep_quiet_lines, sweep_table
    from kvtier.sim import reference
    from kvtier.sim.payload import SimulatePayload
    from kvtier.sim.sweep import Sweep, sweep_result

    capacities: list[int | None] = [reference.UNBOUNDED] if args.unbounded else []
    capacities += args.lru_tokens or []
    results = reference.replay(
        trace,
        capacities,
        args.warmup_fraction,
        progress.bar(
            f"replaying {len(capacities)} reference cache(s)",
            len(trace.requests) * len(capacities),
        ),
    )
    progress.done()
    if len(results) == 1:
        if args.unbounded:
            title = "unbounded cache: the trace's hit-rate ceiling (no clock)"
        else:
            title = f"single-tier LRU of {capacities[0]:,} tokens (whole blocks, no clock)"
        if args.json:
            emit(SimulatePayload(run=results[0]))
        elif args.quiet:
            print("\n".join(quiet_lines(results[0])))
        else:
            _print(run_table(results[0], title))
        return 0
    sweep = Sweep("lru-tokens", tuple("unbounded" if c is None else str(c) for c in capacities))
    if args.json:
        emit(SimulatePayload(sweep=sweep_result(sweep, results)))
    elif args.quiet:
        print("\n".join(sweep_quiet_lines(sweep.param, sweep.values, results)))
    else:
        _print(sweep_table(sweep.param, sweep.values, results))
    return 0


def _timed(args: argparse.Namespace, trace: Any, progress: Progress) -> int:
    from kvtier.cli import simulate_fleet, simulate_hicache

    deployment = simulate_hicache.with_policies(args, deployment_from_args(args, SIMULATE))
    warn_ignored(deployment)
    flags = _timing_flags(args)
    if args.from_log:
        from kvtier.cli import simulate_from_log

        progress.done()
        return simulate_from_log.run(args, flags, deployment)
    if simulate_fleet.active(args):
        return simulate_fleet.run(args, trace, deployment, flags, progress)
    runs = _Runs(args, trace, progress)
    if args.sweep:
        lines = _sweep(args, deployment, flags, runs, progress)
    else:
        lines = _single(args, deployment, flags, runs, progress)
    if lines is None:  # printed as --json or --quiet
        return 0
    for line in [*filter(None, lines), *runs.notes]:
        print(f"note: {line}")
    for name, source in runs.sources:
        print(f"source: {name}: {source}")
    return 0


def _timing_flags(args: argparse.Namespace) -> Any:
    from kvtier.sim.timing import TimingFlags

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
    from kvtier.cli import simulate_bench

    return TimingFlags(
        gpus_per_node=args.gpus,
        **{name: value for name, value in given.items() if value is not None},
        **simulate_bench.timing_flags(args),
    )


class _Runs:
    """One simulation per call, keeping the first run's notes and sources for the report."""

    def __init__(self, args: argparse.Namespace, trace: Any, progress: Progress) -> None:
        self.args, self.trace, self.progress = args, trace, progress
        self.notes: list[str] = []
        self.sources: list[tuple[str, str]] = []

    def __call__(self, d: Any, t: Any, params: dict[str, object]) -> Any:
        from kvtier.cli import simulate_hicache
        from kvtier.sim.run import simulate
        from kvtier.sim.setup import build_config

        args, trace = self.args, self.trace
        config = build_config(
            d,
            trace.block_size,
            args.device_tokens,
            t,
            args.store_tokens,
            simulate_hicache.prefetch_flags(args),
        )
        if not self.notes:
            self.notes.extend(config.notes())
            self.sources.extend(config.sources)
        label = "simulating"
        if "sweep_param" in params:
            label += f" {params['sweep_param']}={params['sweep_value']}"
        bar = self.progress.bar(label, simulate_hicache.request_count(trace))
        return simulate(trace, config, args.warmup_fraction, bar, params)


def _sweep(
    args: argparse.Namespace, deployment: Any, flags: Any, runs: _Runs, progress: Progress
) -> list[str | None] | None:
    """Run and print a --sweep; the notes' lines, None when printed as --json or --quiet."""
    from kvtier.report.sim_view import rejected_line, sweep_quiet_lines, sweep_table
    from kvtier.sim.payload import SimulatePayload
    from kvtier.sim.sweep import CHANGES_DEVICE_TOKENS, parse_sweep, run_sweep, sweep_result

    sweep = parse_sweep(args.sweep)
    if sweep.param in CHANGES_DEVICE_TOKENS and args.device_tokens is not None:
        raise KvtierError(
            f"--sweep {sweep.param} changes the device pool; "
            "drop --device-tokens so the ledger sizes it"
        )
    results = run_sweep(sweep, deployment, flags, runs)
    progress.done()
    if args.json:
        payload = SimulatePayload(sweep=sweep_result(sweep, results), notes=tuple(runs.notes))
        emit(payload)
        return None
    if args.quiet:
        print("\n".join(sweep_quiet_lines(sweep.param, sweep.values, results)))
        return None
    _print(sweep_table(sweep.param, sweep.values, results))
    return [rejected_line(r) for r in results]


def _single(
    args: argparse.Namespace, deployment: Any, flags: Any, runs: _Runs, progress: Progress
) -> list[str | None] | None:
    """Run and print one simulation; the notes' lines, None when printed as --json or --quiet."""
    from kvtier.cli import simulate_bench
    from kvtier.report.sim_view import quiet_lines, rejected_line, run_table
    from kvtier.sim.payload import SimulatePayload

    extra = simulate_bench.params(runs.trace)
    result = runs(deployment, flags, {"time_scale": args.time_scale, **extra})
    progress.done()
    if args.json:
        emit(SimulatePayload(run=result, notes=tuple(runs.notes)))
        return None
    if args.quiet:
        print("\n".join(quiet_lines(result)))
        return None
    _print(run_table(result, f"{deployment.model} on {deployment.tp} x {deployment.gpu}"))
    return [rejected_line(result), *simulate_bench.gain_lines(result)]


def _print(table: Any) -> None:
    from kvtier.report.ledger_view import terminal

    terminal().print(table)
