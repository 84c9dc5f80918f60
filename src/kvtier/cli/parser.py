"""The argument parser every subcommand uses: options and positionals in any order, the engine's
launch command only after `--`, a flag given twice with two values refused, and a usage error as
one line.

    kvtier explain LOG --json            kvtier explain --json LOG
    kvtier simulate TRACE --json -- python -m sglang.launch_server --tp 8
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from kvtier.errors import shown


class SubcommandParser(argparse.ArgumentParser):
    """Parses the words before the first `--`; the words after it land in `args.launch` (the
    engine's own argv, its repeats left to it). A kvtier flag that takes one value, given twice
    with two values (`--tp 2 --tp 4`), is refused rather than the last kept; the same value again
    is accepted; flags meant to repeat (action="append") keep their own checks."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given: dict[str, tuple[Any, str]] = {}  # dest -> first value, its words
        words = list(sys.argv[1:] if args is None else args)
        cut = words.index("--") if "--" in words else len(words)
        parsed, extras = super().parse_known_args(words[:cut], namespace)
        if extras:
            hint = "" if extras[0].startswith("-") else "; a launch command goes after `--`"
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        parsed.launch = words[cut + 1 :]
        return parsed, []

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # argparse converts each occurrence's words here, then stores the value over the last
        value = super()._get_values(action, arg_strings)
        if action.option_strings and isinstance(action, argparse._StoreAction):
            words = _shown(arg_strings)
            first, first_words = self._given.setdefault(action.dest, (value, words))
            if first != value:
                name = next((s for s in action.option_strings if s.startswith("--")), action.dest)
                raise argparse.ArgumentError(
                    None, f"{name} is given twice ({first_words}, then {words}); give one"
                )
        return value

    def error(self, message: str) -> NoReturn:
        # one line, like every other kvtier error; the usage is one --help away
        self.exit(2, f"kvtier: error: {message} (see `{self.prog} --help`)\n")


def _shown(words: list[str]) -> str:
    """A flag's words as a refusal shows them: a blank or unprintable one quoted, 60 characters
    at most; none (a flag whose value is optional, given alone) as `alone`."""
    text = " ".join(shown(w) for w in words)
    return f"{text:.60}" if words else "alone"


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
