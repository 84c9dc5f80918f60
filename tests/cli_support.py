"""Running kvtier as a user does, for the command-line tests: `main()` in this process."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`kvtier ARGV` in this process: its exit code (a usage error's SystemExit included), what it
    printed to stdout and to stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def with_flags(argv: list[str], *words: str) -> list[str]:
    """`argv` with `words` (flags, each followed by its one value) added before any launch
    command; a flag `argv` already gives takes the new value in its place, as kvtier refuses a
    flag given twice with two values."""
    out = list(argv)
    for name, value in zip(words[::2], words[1::2], strict=True):
        cut = out.index("--") if "--" in out else len(out)
        if name in out[:cut]:
            out[out.index(name) + 1] = value
        else:
            out[cut:cut] = [name, value]
    return out


def cli_json(argv: list[str]) -> Any:
    """What `kvtier ARGV` prints as JSON (run as `run_cli`); the command must succeed."""
    code, out, err = run_cli(argv)
    assert code == 0, err
    return json.loads(out)


def chat_trace(path: Path, requests: int, seed: int) -> str:
    """A chat trace `kvtier simulate --generate chat` writes to `path`: its path."""
    argv = ["--generate", "chat", "--requests", str(requests), "--seed", str(seed)]
    code, _, err = run_cli(["simulate", *argv, "-o", str(path)])
    assert code == 0, err
    return str(path)


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    """The JSON object `kvtier ARGV` prints; the command must succeed."""
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line `kvtier ARGV` prints to stderr on a user error (exit code 2, no traceback).

    A usage error leaves argparse through SystemExit; every other error returns from main().
    """
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("kvtier: error: "), err
    return err


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    """What `kvtier plan ARGV --json` answers for a deployment the engine would refuse to start:
    exit 1, nothing on stderr, and the refusal object (`starts: false`)."""
    code = main(argv if "--json" in argv else [*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert not err.strip(), err
    answer = json.loads(out)
    assert answer["starts"] is False
    return answer
