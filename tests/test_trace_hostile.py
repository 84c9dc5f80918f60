"""`kvtier trace` on request logs no server wrote as they are: each is refused in one line naming
its line (exit 2), or read right; never a traceback or a trace that is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import error_line
from kvtier.cli import main

ROOT = Path(__file__).resolve().parents[1]
LEVEL3 = ROOT / "tests" / "fixtures" / "requests" / "sglang-0.5.9-level3.log"  # 4 requests


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = LEVEL3.read_text()
    assert old in text
    path = tmp_path / "requests.log"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "input_ids=[11, ",
            "input_ids=[1" + "1" * 5000 + ", ",
            "line 2: not an SGLang request line as SGLang prints it (a number of 5,001 characters",
        ),
        (
            "text='w11",
            "text='\\N{NO SUCH NAME} w11",
            "line 2: not an SGLang request line as SGLang prints it (the string at column",
        ),
        (
            "received_time=1764590400.25",
            "received_time=1e300",
            "line 4: obj.received_time=1e+300 is no date (Unix seconds)",
        ),
        (
            "received_time=1764590400.25",
            "received_time=nan",
            "line 4: obj.received_time=nan is no date (Unix seconds)",
        ),
    ],
    ids=["integer past the digit limit", "escape repr never writes", "time 1e300", "time nan"],
)
def test_a_value_no_engine_logs_is_refused_naming_its_line(
    old: str, new: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = error_line(capsys, ["trace", str(_edited(tmp_path, old, new)), "--json"])
    assert message in line


def test_repeated_request_ids_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    joined = tmp_path / "joined.log"
    joined.write_text(LEVEL3.read_text() * 2)
    line = error_line(capsys, ["trace", str(joined), "--json"])
    assert "request id 'rid0' was logged before, at line 4" in line
    assert "a log joined with itself" in line


def test_a_byte_order_mark_is_read_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "marked.jsonl"
    assert main(["trace", str(LEVEL3), "-o", str(plain), "--block-tokens", "4", "--json"]) == 0
    with_bom = tmp_path / "bom.log"
    with_bom.write_bytes(b"\xef\xbb\xbf" + LEVEL3.read_bytes())
    assert main(["trace", str(with_bom), "-o", str(marked), "--block-tokens", "4", "--json"]) == 0
    capsys.readouterr()
    assert marked.read_bytes() == plain.read_bytes() and plain.read_text().count("\n") == 4
    # a trace saved with a byte-order mark replays as the same trace
    trace_bom = tmp_path / "trace-bom.jsonl"
    trace_bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    results = []
    for path in (plain, trace_bom):
        assert main(["simulate", str(path), "--unbounded", "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[0] == results[1]


def _dump(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "dump.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_two_clocks_in_one_openai_dump_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[dict[str, object]] = [
        {"timestamp": 0, "prompt": [1, 2, 3], "max_tokens": 2},
        {"created": 1764590400, "prompt": [1, 2, 4], "max_tokens": 2},
    ]
    line = error_line(capsys, ["trace", str(_dump(tmp_path, rows)), "--json"])
    assert "line 2: its time is `created` where line 1's is `timestamp`: two clocks" in line


def test_requests_of_one_user_are_not_repeated_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[dict[str, object]] = [
        {"timestamp": t, "prompt": [1, 2, 3, t], "max_tokens": 2, "user": "alice"} for t in range(3)
    ]
    assert main(["trace", str(_dump(tmp_path, rows)), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 3
    rows[2]["custom_id"] = rows[1]["custom_id"] = "req-1"  # a batch file's ids are unique
    line = error_line(capsys, ["trace", str(_dump(tmp_path, rows)), "--json"])
    assert "request id 'req-1' was logged before, at line 2" in line
