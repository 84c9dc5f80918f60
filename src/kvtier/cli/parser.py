"""The argument parser every subcommand uses: options and positionals in any order, the engine's
launch command only after `--`, and a usage error as one line.

    kvtier explain LOG --json            kvtier explain --json LOG
    kvtier simulate TRACE --json -- python -m sglang.launch_server --tp 8
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn


class SubcommandParser(argparse.ArgumentParser):
    """Parses the words before the first `--`; the words after it land in `args.launch`."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        words = list(sys.argv[1:] if args is None else args)
        cut = words.index("--") if "--" in words else len(words)
        parsed, extras = super().parse_known_args(words[:cut], namespace)
        if extras:
            hint = "" if extras[0].startswith("-") else "; a launch command goes after `--`"
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        parsed.launch = words[cut + 1 :]
        return parsed, []

    def error(self, message: str) -> NoReturn:
        # one line, like every other kvtier error; the usage is one --help away
        self.exit(2, f"kvtier: error: {message} (see `{self.prog} --help`)\n")


def add_subcommand(
    subparsers: argparse._SubParsersAction, name: str, **kwargs: Any
) -> SubcommandParser:
    """A `SubcommandParser` for `name`; its epilog (examples) is printed as written, a one-line
    description is wrapped."""
    description = kwargs.get("description")
    if description and "\n" not in description:
        kwargs["description"] = textwrap.fill(description, 90)
    # add_parser takes no parser class of its own: it builds from this attribute
    default_class = subparsers._parser_class
    subparsers._parser_class = SubcommandParser
    try:
        parser: SubcommandParser = subparsers.add_parser(
            name, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
        )
    finally:
        subparsers._parser_class = default_class
    return parser
