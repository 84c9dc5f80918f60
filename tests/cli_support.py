"""Running kvtier as a user does, for the command-line tests: `main()` in this process."""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main


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
