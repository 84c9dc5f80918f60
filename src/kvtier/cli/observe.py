"""`kvtier observe SOURCE`: read a running server's serving log or /metrics and say whether KV
space is what holds it back."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from kvtier.cli.parser import add_subcommand
from kvtier.cli.values import SECONDS, count
from kvtier.errors import KvtierError

if TYPE_CHECKING:
    from kvtier.observe.nvidia_smi import CardReconciliation, GpuMemory
    from kvtier.observe.observer import Observer

EPILOG = """\
examples:
  kvtier observe server.log --nvidia-smi smi.txt
  kvtier observe server.log --follow --idle-exit 60 --json
  kvtier observe http://localhost:30000/metrics --samples 12 --interval 5
  docker logs sglang 2>&1 | kvtier observe -

verdicts: kv-bound (requests wait while the KV pool is >= 90% full, or running requests are
preempted / retracted), compute-bound (requests wait while the pool has room), not-saturated
(nothing waits). See docs/observe.md.
"""

_HEAD = 4096
_METRICS_MAX = 64 << 20


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        subparsers,
        "observe",
        usage="%(prog)s SOURCE [options]",
        help="read a serving log or /metrics and say whether KV space holds the server back",
        description="Reads an SGLang or vLLM serving log (a file, '-' for standard input, or a "
        "growing file with --follow), a /metrics URL (polled) or a saved /metrics text, and "
        "prints a timeline of KV usage, running and queued requests, throughput and prefix hit "
        "rate, with a diagnosis and the lines that show it.",
        epilog=EPILOG,
    )
    p.add_argument(
        "source", help="log file, '-' (stdin), http(s)://HOST:PORT/metrics, or saved metrics"
    )
    p.add_argument("--follow", action="store_true", help="keep reading a growing log file")
    p.add_argument(
        "--idle-exit",
        type=SECONDS,
        metavar="S",
        help="with --follow: stop after S seconds with nothing new (default: run until Ctrl-C)",
    )
    p.add_argument(
        "--samples", type=count(1, 1_000_000), help="scrapes of a /metrics URL (default 3)"
    )
    p.add_argument("--interval", type=SECONDS, help="seconds between scrapes (default 5)")
    p.add_argument(
        "--nvidia-smi",
        metavar="FILE",
        help="nvidia-smi's table or --query-gpu=index,memory.used,memory.total CSV: its 'used' "
        "reconciled with the startup lines of the same log (as `kvtier explain` reads them)",
    )
    p.add_argument(
        "--points", type=count(1, 1_000_000), default=120, help="timeline points kept (default 120)"
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--quiet", action="store_true", help="key figures as `key value` lines")
    p.set_defaults(run=run)


def _check(args: argparse.Namespace, is_url: bool) -> None:
    if args.launch:
        raise KvtierError(f"observe takes no launch command ({' '.join(args.launch)[:60]!r})")
    if args.points < 1:
        raise KvtierError(f"--points must be at least 1, not {args.points}")
    if args.samples is not None and args.samples < 1:
        raise KvtierError(f"--samples must be at least 1, not {args.samples}")
    if args.interval is not None and not args.interval >= 0:
        raise KvtierError(f"--interval must be zero or more seconds, not {args.interval}")
    if args.idle_exit is not None and not args.idle_exit >= 0:
        raise KvtierError(f"--idle-exit must be zero or more seconds, not {args.idle_exit}")
    if is_url and args.follow:
        raise KvtierError(f"{args.source}: a URL is polled with --samples, not followed")
    if not is_url and (args.samples is not None or args.interval is not None):
        raise KvtierError(f"{args.source}: --samples and --interval are for a /metrics URL")
    if args.idle_exit is not None and not args.follow:
        raise KvtierError("--idle-exit goes with --follow")


def run(args: argparse.Namespace) -> int:
    from kvtier.observe.observer import Observer
    from kvtier.report.observe_view import print_observation

    source: str = args.source
    is_url = source.startswith(("http://", "https://"))
    _check(args, is_url)
    gpus = None
    if args.nvidia_smi is not None:
        from kvtier.files import read_text
        from kvtier.observe.nvidia_smi import parse_nvidia_smi

        gpus = parse_nvidia_smi(read_text(args.nvidia_smi, "nvidia-smi"), args.nvidia_smi)
    observer = Observer(source, args.points)
    if is_url:
        from kvtier.observe.metrics import observe_scrapes, poll

        observe_scrapes(poll(source, args.samples or 3, args.interval or 5.0), observer)
    elif source == "-":
        _read_log(sys.stdin.buffer, observer, args)
    else:
        _read_file(Path(source), observer, args)
    result = observer.result()
    if result.samples == 0 and result.preemptions == 0:
        if result.skipped:
            first = result.skipped_lines[0].line if result.skipped_lines else None
            where = "" if first is None else f" (the first: line {first})"
            raise KvtierError(
                f"{source}: no serving line could be read: {result.skipped} line(s) of a known "
                f"format carried values no engine prints or could not be parsed{where}"
            )
        raise KvtierError(
            f"{source}: no serving lines found (SGLang `Decode batch` / `Prefill batch`, "
            "vLLM `Avg prompt throughput`) and no engine metrics"
        )
    card = None if gpus is None else _card(gpus, source, is_url)
    print_observation(result, as_json=args.json, quiet=args.quiet, card=card)
    return 0


def _card(gpus: tuple[GpuMemory, ...], source: str, is_url: bool) -> CardReconciliation:
    """nvidia-smi against the ledger of the startup lines in the same log, when it has them."""
    from kvtier.observe.nvidia_smi import reconcile_card, unreconciled

    if is_url or source == "-":
        return unreconciled(gpus, f"{source} is not a file with startup lines to reconcile with")
    from kvtier.files import read_text
    from kvtier.ledger.explain import explain_log

    try:
        explanation = explain_log(read_text(source, "log"), {})
    except KvtierError as exc:
        return unreconciled(gpus, f"no startup ledger from {source}: {exc}")
    return reconcile_card(gpus, explanation)


def _read_file(path: Path, observer: Observer, args: argparse.Namespace) -> None:
    from kvtier.files import MAX_TRACE_BYTES, open_input, refuse_compressed
    from kvtier.observe.metrics import is_metrics_text, observe_scrapes, parse_scrape

    # a log is read as a stream, bounded like a trace; --follow reads past the bound as it grows
    with open_input(str(path), "serving log", MAX_TRACE_BYTES) as stream:
        try:
            head = stream.read(_HEAD)
        except OSError as exc:
            raise KvtierError(f"cannot read {path}: {exc.strerror or exc}") from None
        refuse_compressed(head, str(path))
        text = head.decode("utf-8", errors="replace")
        if not args.follow and is_metrics_text(text):
            rest = stream.read(_METRICS_MAX)
            text = (head + rest).decode("utf-8", errors="replace")
            scrape = parse_scrape(text, str(path), path.stat().st_mtime, "saved")
            observe_scrapes([scrape], observer)
            return
        stream.seek(0)
        _read_log(stream, observer, args, str(path))


def _read_log(
    stream: BinaryIO, observer: Observer, args: argparse.Namespace, path: str | None = None
) -> None:
    from kvtier.observe.logread import read_stream

    try:
        read_stream(stream, observer, follow=args.follow, idle_exit=args.idle_exit, path=path)
    except KeyboardInterrupt:
        if not args.follow:
            raise
    except OSError as exc:
        raise KvtierError(f"cannot read {args.source}: {exc.strerror or exc}") from None
