"""Bad input to every subcommand: one line `kvtier: error: ...`, exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_support import error_line, with_flags
from kvtier.cli import main

ROOT = Path(__file__).resolve().parents[1]
LOG = "{log}"
KIMI = ["--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad")
    (root / "empty").write_bytes(b"")
    (root / "binary").write_bytes(bytes(range(256)) * 8)
    (root / "dir").mkdir()
    trace = root / "trace.jsonl"
    assert main(["simulate", "--generate", "chat", "--requests", "20", "-o", str(trace)]) == 0
    return {
        "missing": str(root / "missing.log"),
        "dir": str(root / "dir"),
        "empty": str(root / "empty"),
        "binary": str(root / "binary"),
        "trace": str(trace),
        "html": str(root / "r.html"),
        "log": str(ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"),
    }


FILES = ("missing", "dir", "empty", "binary")
CASES = [
    # unreadable or meaningless files
    *[(["explain", f"{{{f}}}"], "") for f in FILES],
    *[(["simulate", f"{{{f}}}", "--unbounded"], "") for f in FILES],
    *[(["report", f"{{{f}}}", "-o", "{html}"], "") for f in FILES],
    *[(["report", "-o", "{html}", "--from", f"plan={{{f}}}"], "report: ") for f in FILES],
    *[
        ([cmd, *with_flags(KIMI, "--model", f"{{{f}}}")], "")
        for cmd in ("plan", "advise")
        for f in FILES
    ],
    # tensor parallel sizes: not a count, or not dividing Kimi-K2.5's 64 attention heads
    *[
        ([cmd, *with_flags(KIMI, "--tp", tp)], "--tp")
        for cmd in ("plan", "advise")
        for tp in ("0", "-1")
    ],
    *[(["simulate", "{trace}", *with_flags(KIMI, "--tp", tp)], "--tp") for tp in ("0", "-1")],
    *[(["explain", LOG, "--tp", tp], "--tp") for tp in ("0", "-1")],
    *[
        ([cmd, *with_flags(KIMI, "--tp", "3")], "does not divide the 64 attention heads")
        for cmd in ("plan", "advise")
    ],
    (
        ["simulate", "{trace}", *with_flags(KIMI, "--tp", "3")],
        "does not divide the 64 attention heads",
    ),
    (
        ["plan", *with_flags(KIMI, "--tp", "x")],
        "argument --tp: must be a whole number from 1 to 4,096, got 'x'",
    ),
    # unknown GPU
    *[
        ([cmd, *with_flags(KIMI, "--gpu", "H900")], "unknown GPU 'H900'")
        for cmd in ("plan", "advise")
    ],
    (["explain", LOG, "--gpu", "H900"], "unknown GPU 'H900'"),
    (["simulate", "{trace}", *with_flags(KIMI, "--gpu", "H900")], "unknown GPU 'H900'"),
    # sweep specs
    (["simulate", "{trace}", *KIMI, "--sweep", "colour=1,2"], "expected NAME=v1,v2"),
    (["simulate", "{trace}", *KIMI, "--sweep", "hicache-ratio="], "no values given"),
    (["simulate", "{trace}", *KIMI, "--sweep", "hicache-ratio=a"], "'a' is not a number"),
    (["simulate", "{trace}", *KIMI, "--sweep", "hicache-ratio=-1"], "negative"),
    (["simulate", "{trace}", *KIMI, "--sweep", "mem-fraction-static=1.5"], "(0, 1]"),
    (["simulate", "{trace}", *KIMI, "--sweep", "kv-cache-dtype=int3"], "'int3'"),
    (
        ["report", LOG, "-o", "{html}", "--simulate", "{trace}", *KIMI, "--sweep", "x"],
        "--sweep 'x'",
    ),
    # host tier sizes and memory fractions
    *[
        (
            [cmd, *KIMI, "--hicache-ratio", "-2"],
            "argument --hicache-ratio: must be a number in [0, 10000]",
        )
        for cmd in ("plan", "advise")
    ],
    (["simulate", "{trace}", *KIMI, "--hicache-ratio", "-2"], "--hicache-ratio"),
    (["explain", LOG, "--hicache-ratio", "-2"], "argument --hicache-ratio"),
    (
        ["plan", *KIMI, "--hicache-size", "-1"],
        "argument --hicache-size: must be a number in [0, 1e+07]",
    ),
    *[([cmd, *KIMI, "--mem-fraction-static", "1.5"], "1.5") for cmd in ("plan", "advise")],
    (["simulate", "{trace}", *KIMI, "--mem-fraction-static", "1.5"], "1.5"),
    (["explain", LOG, "--mem-fraction-static", "1.5"], "1.5"),
    # a launch command where none belongs
    (["explain", LOG, "--", "python", "-m", "sglang.launch_server"], "reads the launch settings"),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_bad_input_is_one_line(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    err = error_line(capsys, [word.format_map(files) for word in argv])
    assert message in err
