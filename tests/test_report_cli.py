"""`kvtier report`: one command, one file; user mistakes are one line and exit code 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.cli.report import command_payload
from kvtier.report.html import write_html
from kvtier.report.plan_payload import PlanPayload
from kvtier.sim.payload import SimulatePayload
from report_cases import FIXTURES, SMALL_SWEEP, founding_log

EXPLAIN = f"explain={FIXTURES / 'explain-seed.json'}"
SWEEP = f"simulate={FIXTURES / 'simulate-sweep.json'}"


def test_saved_json_becomes_one_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "-o", str(out), "--from", EXPLAIN, "--from", SWEEP]) == 0
    html = out.read_text()
    assert "<title>kvtier report: moonshotai/Kimi-K2.5</title>" in html
    assert html.count('class="chart"') == 6
    assert (
        capsys.readouterr().out == f"wrote {out} ({out.stat().st_size / 1000:.0f} kB): "
        "explain, simulate\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give a LOG, --observe SOURCE, --simulate ARGS or --from KIND=FILE"),
        (["--from", "trace=x.json"], "--from wants KIND=FILE with KIND one of"),
        (["--from", "plan=/nonexistent/p.json"], "cannot read /nonexistent/p.json"),
        (["--simulate"], "--simulate needs the arguments"),
        (["--simulate", "--generate", "nope"], "argument --generate: invalid choice: 'nope'"),
    ],
)
def test_mistakes_are_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["report", "-o", str(tmp_path / "r.html"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_saved_file_must_hold_a_json_object(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["report", "-o", str(tmp_path / "r.html"), "--from", f"plan={bad}"]) == 2
    assert "holds no JSON object" in capsys.readouterr().err
    bad.write_text("{")
    assert main(["report", "-o", str(tmp_path / "r.html"), "--from", f"plan={bad}"]) == 2
    assert "is not JSON" in capsys.readouterr().err


PLAN_ARGS = ["--engine", "sglang", "--model", "Kimi-K2.5", "--gpu", "RTX PRO 6000", "--tp", "8",
             "--mem-fraction-static", "0.88"]  # fmt: skip


def test_live_plan_json_draws(tmp_path: Path) -> None:
    payload = command_payload(["plan", *PLAN_ARGS])
    assert isinstance(payload, PlanPayload)
    out = tmp_path / "plan.html"
    write_html(out, {"plan": payload})
    html = out.read_text()
    # The pool's own figure, on the bar and in the table, and 32k requests = floor(tokens / 32768).
    pool = next(r for r in payload.ledger if r.item == "KV cache pool")
    assert f"KV cache pool: {pool.gib:.2f} GiB" in html
    row = re.search(r"<tr><td>32k</td><td>([\d,]+)</td>", html)
    assert row is not None and int(row.group(1).replace(",", "")) == payload.kv_tokens // 32768
    # SGLang's reserve is everything after the pool: bracketed and named with the fraction.
    assert "= (1 - 0.88) x free before load" in html


def test_one_command_explains_the_log_and_sweeps_the_host_ratio(tmp_path: Path) -> None:
    out = tmp_path / "founding.html"
    assert main(["report", str(founding_log()), "-o", str(out), "--simulate", *SMALL_SWEEP]) == 0
    html = out.read_text()
    assert out.stat().st_size < 1_000_000
    assert "<dd>159,277</dd>" in html and "159,294 (+17)" in html
    assert html.count('class="chart"') == 6
    assert re.findall(r"<tr><td>([^<]*)</td><td>60</td>", html) == ["0", "2", "4"]


def test_a_launch_command_after_the_simulate_arguments_is_theirs(tmp_path: Path) -> None:
    trace = tmp_path / "chat.jsonl"
    assert main(["simulate", "--generate", "chat", "--requests", "20", "-o", str(trace)]) == 0
    argv = ["simulate", str(trace), "--gpu", "RTX PRO 6000", "--device-tokens", "20000"]
    launch = ["--", "python", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5",
              "--tp", "8", "--enable-hierarchical-cache", "--hicache-ratio", "2"]  # fmt: skip
    payload = command_payload([*argv, *launch])
    assert isinstance(payload, SimulatePayload) and payload.run is not None
    assert payload.run.params["host_tokens"] == 40_001  # the launch command's ratio 2
    out = tmp_path / "r.html"
    assert main(["report", "-o", str(out), "--simulate", *argv[1:], *launch]) == 0
    assert out.stat().st_size > 0
