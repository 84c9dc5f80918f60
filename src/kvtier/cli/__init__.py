"""`kvtier` command line: one module per subcommand, each with `add_parser` and `run`.

Subcommand modules import their heavy dependencies inside `run`, so `kvtier --help` and
`kvtier plan` start fast. torch is never imported on the plan/explain path.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys

from kvtier import __version__
from kvtier.errors import KvtierError

# name -> module under kvtier.cli; each module defines add_parser(subparsers) and run(args) -> int
COMMANDS = ("plan", "explain", "advise", "simulate", "observe", "report", "trace")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtier",
        description="Exact KV-cache accounting, a tiered KV cache and a workload simulator "
        "for SGLang and vLLM. GPU memory is in GiB (2^30 bytes), as the engines print it.",
    )
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"kvtier.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"kvtier.cli.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


@functools.cache
def shared_parser() -> argparse.ArgumentParser:
    """`build_parser()`, built once per process: a parser keeps no state between parses."""
    return build_parser()


def main(argv: list[str] | None = None) -> int:
    parser = shared_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except KvtierError as exc:
        print(f"kvtier: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kvtier: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
