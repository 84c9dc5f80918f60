"""Every subcommand's --help ends with 2-4 examples that work as written, from the repo root."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

import pytest

from kvtier.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def examples(epilog: str) -> list[list[str]]:
    """The example command lines of an epilog, continuation lines joined, `kvtier` dropped."""
    text = epilog.split("examples:\n", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_two_to_four_examples_of_its_own(name: str) -> None:
    epilog = _subparsers()[name].epilog or ""
    own = [argv for argv in examples(epilog) if argv[0] == name]
    assert 2 <= len(own) <= 4, epilog
    for argv in examples(epilog):
        for word in argv:
            assert not word.startswith("/"), f"{word}: examples use bundled files only"
            if word.startswith("examples/"):
                assert (ROOT / word).is_file(), word


@pytest.mark.parametrize(
    "argv",
    [
        argv
        for name in ("plan", "advise", "explain")
        for argv in examples(_subparsers()[name].epilog or "")
        if "<" not in argv
    ],
    ids=lambda argv: " ".join(argv),
)
def test_ledger_examples_run(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(argv) == 0, capsys.readouterr().err


def test_simulate_and_report_examples_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    parser = build_parser()
    for name in ("simulate", "report"):
        for argv in examples(_subparsers()[name].epilog or ""):
            args = parser.parse_args(argv)
            assert args.command == argv[0]
    assert os.getcwd() == str(ROOT)
