"""A log holding several server starts: the last is explained by default, `--startup K` picks
one, and the output names every start's lines. The public excerpts are one user's two vLLM 0.6
runs on an RTX 3090 (vllm-project/vllm#10517), pasted back to back without their argument lines:
29,000 tokens of context refused (23,648 tokens held), then 20,000 started (31,232)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import error_line
from kvtier.cli import main
from kvtier.engines.detect import LineSpan, parse_log
from kvtier.ledger.explain import explain_log

PUBLIC = Path(__file__).parent / "fixtures" / "logs" / "public"
FAILED = (PUBLIC / "vllm-0.6-v0-llama-3.1-8b-3090-29k-failed.log").read_text(encoding="utf-8")
STARTED = (PUBLIC / "vllm-0.6-v0-llama-3.1-8b-3090-20k.log").read_text(encoding="utf-8")
FLAGS = {"engine_version": "0.6.4"}


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "two-starts.log"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_failed_start_then_a_good_one_explains_the_good_one() -> None:
    parsed = parse_log(FAILED + STARTED)
    assert parsed.starts == (LineSpan(1, 5), LineSpan(6, 9))
    assert parsed.index == 1
    assert "start 2 (lines 6-9) is explained, the last" in parsed.notes[-1]
    e = explain_log(FAILED + STARTED, FLAGS)
    assert e.reconciliation.observed is not None
    assert e.reconciliation.observed.value == 31_232
    assert e.reconciliation.failure is None


def test_startup_picks_the_failed_one() -> None:
    e = explain_log(FAILED + STARTED, FLAGS, startup=1)
    assert e.reconciliation.observed is not None and e.reconciliation.observed.value == 23_648
    assert e.reconciliation.failure is not None
    # the count it recomputes is the failed start's own, within 0.1%
    assert abs(e.reconciliation.predicted - 23_648) / 23_648 < 0.001


def test_each_start_alone_reads_as_before() -> None:
    for text, count in ((FAILED, 23_648), (STARTED, 31_232)):
        parsed = parse_log(text)
        assert len(parsed.starts) == 1
        observed = explain_log(text, FLAGS).reconciliation.observed
        assert observed is not None and observed.value == count


def test_json_names_every_start_and_the_one_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _write(tmp_path, FAILED + STARTED)
    assert main(["explain", log, "--vllm-version", "0.6.4", "--startup", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["startup"] == {
        "explained": 1,
        "starts": [{"first_line": 1, "last_line": 5}, {"first_line": 6, "last_line": 9}],
    }
    assert out["observed"]["source"]["line"] == 3
    # one start: no startup key
    assert main(["explain", _write(tmp_path, STARTED), "--vllm-version", "0.6.4", "--json"]) == 0
    assert "startup" not in json.loads(capsys.readouterr().out)


def test_a_start_the_log_does_not_hold_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = error_line(capsys, ["explain", _write(tmp_path, FAILED + STARTED), "--startup", "3"])
    assert "--startup 3" in line and "2 server starts" in line and "6-9" in line
    error_line(capsys, ["explain", _write(tmp_path, STARTED), "--startup", "0"])


def test_the_committed_two_start_log_is_these_excerpts() -> None:
    text = (PUBLIC.parent / "vllm-0.6-two-starts-3090.log").read_text(encoding="utf-8")
    assert text.split("\n", 1)[1] == FAILED + STARTED
    assert parse_log(text).starts == (LineSpan(1, 6), LineSpan(7, 10))


def test_a_restart_with_its_arguments_is_cut_there() -> None:
    """Restarts in one journal: each start prints its arguments; the second's count is read."""
    args = "INFO 11-20 10:00:00 api_server.py:586] args: Namespace(model='{}', max_model_len={})\n"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    text = args.format(model, 29000) + FAILED + args.format(model, 20000) + STARTED
    parsed = parse_log(text)
    assert parsed.starts == (LineSpan(1, 6), LineSpan(7, 11))
    observed = explain_log(text, FLAGS).reconciliation.observed
    assert observed is not None and observed.value == 31_232
