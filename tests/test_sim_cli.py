"""`kvtier simulate` end to end: generate, reference modes, timed runs, sweeps, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run_json
from founding_support import KIMI_LAUNCH, KIMI_SIMULATE
from kvtier.cli import main


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "chat.jsonl"
    generate = ["--generate", "chat", "--seed", "3", "--requests", "300", "--rate", "0.2"]
    assert main(["simulate", *generate, "-o", str(path)]) == 0
    return path


def test_generate_writes_a_mooncake_trace(chat: Path) -> None:
    rows = [json.loads(line) for line in chat.read_text().splitlines()]
    assert len(rows) == 300
    assert set(rows[0]) == {"timestamp", "input_length", "output_length", "hash_ids"}


def test_unbounded_json(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, ["simulate", str(chat), "--unbounded", "--json"])
    assert out["requests"] == 300
    assert out["rejected"] == 0
    assert out["ttft_s"] is None and out["timed"] is False
    assert out["hit_rate"] == out["hit_rate_by_tier"]["device"] > 0


def test_lru_is_bounded_by_the_ceiling(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ceiling = run_json(capsys, ["simulate", str(chat), "--unbounded", "--json"])["hit_rate"]
    small = run_json(capsys, ["simulate", str(chat), "--lru-tokens", "20000", "--json"])["hit_rate"]
    assert 0 < small < ceiling


def test_references_replay_side_by_side_as_they_do_alone(
    chat: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(chat), "--unbounded", "--lru-tokens", "20000,80000", "--json"]
    runs = run_json(capsys, argv)["sweep"]["runs"]
    assert [r["value"] for r in runs] == ["unbounded", "20000", "80000"]
    alone = [
        run_json(capsys, ["simulate", str(chat), *flags, "--json"])
        for flags in (["--unbounded"], ["--lru-tokens", "20000"], ["--lru-tokens", "80000"])
    ]
    assert [{k: v for k, v in r.items() if k != "value"} for r in runs] == alone
    assert runs[1]["hit_rate"] < runs[2]["hit_rate"] <= runs[0]["hit_rate"]


def test_a_bad_lru_size_list_is_one_line(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", str(chat), "--lru-tokens", "100,x"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "expected N[,N...] tokens" in err


def test_a_huge_host_tier_runs_in_little_memory(chat: Path) -> None:
    """HiCache ratio 10^6 over a device pool of 10^12 tokens: tiers cost what they hold, so the
    run fits a 2 GB address space (finishing, or refusing in one line with exit 2)."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    argv = [*KIMI_SIMULATE, "--device-tokens", str(10**12), "--hicache-ratio", "1e6", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "kvtier", "simulate", str(chat), *argv],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=600,
    )
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "requests 300" in proc.stdout


def test_progress_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from kvtier.cli.progress import Progress

    with Progress(enabled=False) as progress:
        assert progress.bar("loading trace", 10) is None
    screen = io.StringIO()
    monkeypatch.setattr(screen, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys, "stderr", screen)
    with Progress(enabled=True) as progress:
        update = progress.bar("loading trace", 10)
        assert update is not None
        update(10)
    assert "loading trace" in screen.getvalue()


def test_timed_run_carries_the_json_contract(
    chat: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(chat), *KIMI_SIMULATE, "--device-tokens", "159277"]
    out = run_json(capsys, [*argv, "--hicache-ratio", "2", "--warmup-fraction", "0.5", "--json"])
    for key in ("requests", "hit_rate", "hit_rate_by_tier", "ttft_s", "throughput_tok_s"):
        assert key in out
    assert "rejected" in out
    assert set(out["ttft_s"]) == {"mean", "p50", "p90", "p99"}
    assert out["ttft_s"]["p50"] <= out["ttft_s"]["p90"] <= out["ttft_s"]["p99"]
    assert out["measured_requests"] == 150
    assert out["params"]["device_blocks"] == 311
    assert out["params"]["host_blocks"] == 622
    assert out["finished"] + out["rejected"] == 300
    assert any("whole trace blocks" in n for n in out["notes"])


def test_sweep_gives_one_run_per_value(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", str(chat), *KIMI_SIMULATE, "--device-tokens", "20000"]
    out = run_json(capsys, [*argv, "--sweep", "hicache-ratio=0,2,8", "--json"])
    runs = out["sweep"]["runs"]
    assert out["sweep"]["param"] == "hicache-ratio"
    assert [r["value"] for r in runs] == ["0", "2", "8"]
    assert [r["params"]["host_blocks"] for r in runs] == [0, 78, 312]
    rates = [r["hit_rate"] for r in runs]
    assert rates == sorted(rates)


def test_launch_command_after_the_trace(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", str(chat), "--gpu", "RTX PRO 6000", "--device-tokens", "50000", "--json"]
    hicache = ["--enable-hierarchical-cache", "--hicache-ratio", "4"]
    out = run_json(capsys, [*argv, "--", *KIMI_LAUNCH, *hicache])
    assert out["params"]["host_tokens"] == 200_001


def test_options_before_or_after_the_trace(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = run_json(capsys, ["simulate", str(chat), "--unbounded", "--json"])
    before = run_json(capsys, ["simulate", "--unbounded", "--json", str(chat)])
    assert after == before and after["params"]["mode"] == "unbounded"


def test_help_states_the_simulator_names_and_defaults() -> None:
    from kvtier.cli import simulate as cli
    from kvtier.cli.flags import simulate as table
    from kvtier.cli.simulate_bench import RANDOM
    from kvtier.cli.simulate_fleet import SHARED_PREFIX
    from kvtier.cli.simulate_hicache import MULTITURN
    from kvtier.sim import bench, timing
    from kvtier.sim.fleet import run as fleet_run
    from kvtier.sim.sweep import SWEEPABLE
    from kvtier.sim.workload import GENERATORS

    assert (*GENERATORS, MULTITURN, SHARED_PREFIX, RANDOM) == table.WORKLOADS
    assert table.MAX_REPLICAS == fleet_run.MAX_REPLICAS
    assert table.CLIENTS == bench.CLIENTS
    assert tuple(SWEEPABLE) == table.SWEEPS
    assert f"prefill at {timing.COMPUTE_EFFICIENCY} of dense bf16 peak" in cli.EPILOG
    assert f"decode at\n{timing.HBM_EFFICIENCY} of HBM bandwidth" in cli.EPILOG
    assert f"reads at {timing.STORE_GBPS} GB/s" in cli.EPILOG


def test_quiet_prints_key_figures(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = run_json(capsys, ["simulate", str(chat), "--unbounded", "--json"])
    assert main(["simulate", str(chat), "--unbounded", "--quiet"]) == 0
    lines = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["requests"] == "300"
    assert float(lines["hit_rate_pct"]) == pytest.approx(100 * full["hit_rate"], abs=0.005)


def test_sweep_table_fits_80_columns(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", str(chat), *KIMI_SIMULATE, "--device-tokens", "20000"]
    assert main([*argv, "--sweep", "hicache-ratio=0,2"]) == 0
    table = capsys.readouterr().out.split("note:")[0].splitlines()
    assert max(len(line) for line in table) <= 80
    assert "ratio" in table[2] and "hit %" in table[2] and "p99 s" in table[2]


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.012345, "0.0123"), (0.5, "0.500"), (2.7256, "2.73"), (27.22, "27.2"), (1234.5, "1,234")],
)
def test_seconds_keep_three_significant_digits(value: float, text: str) -> None:
    from kvtier.report.sim_view import seconds

    assert seconds(value) == text


def test_terminal_table(chat: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(chat), *KIMI_SIMULATE, "--device-tokens", "159277"]) == 0
    text = capsys.readouterr().out
    assert "token hit rate, all tiers" in text
    assert "TTFT p50 / p90 / p99 (s)" in text
    assert "note: cache pages are whole trace blocks" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--unbounded", "--sweep", "pcie-gbps=1,2"], "--sweep applies to timed runs"),
        (["--warmup-fraction", "1.0", "--unbounded"], "--warmup-fraction"),
        (["--sweep", "color=1,2", *KIMI_SIMULATE], "expected NAME=v1,v2"),
        (
            ["--store-tokens", "100000", "--device-tokens", "50000", *KIMI_SIMULATE],
            "stages its pages in the host tier",
        ),
        (["--time-scale", "0", "--device-tokens", "50000", *KIMI_SIMULATE], "--time-scale"),
        (
            ["--sweep", "mem-fraction-static=0.8,0.9", "--device-tokens", "5", *KIMI_SIMULATE],
            "drop --device-tokens",
        ),
    ],
)
def test_user_errors_are_one_line(
    chat: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["simulate", str(chat), *argv, "--json"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("kvtier: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_trace_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}\n')
    assert main(["simulate", str(bad), "--unbounded"]) == 2
    assert "bad.jsonl:1: 1 hash_ids for input_length 600" in capsys.readouterr().err


def test_help_documents_the_ceiling_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "longest prefix of its hash_ids seen" in text
    assert "kvtier simulate --generate chat" in text
