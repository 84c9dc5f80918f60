"""`kvtier observe` as a user runs it: files, stdin, a growing file, a polled /metrics URL,
strict JSON, and one-line errors for every bad input."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli_support import error_line, run_json
from kvtier.cli import main
from observe_support import FIXTURES

KV_FULL_LOG = str(FIXTURES / "vllm-2026-05-v1-mtp-kv-full.log")


def _strict(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_has_the_promised_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", KV_FULL_LOG, "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["samples"] == 5
    assert out["kv_usage_max"] == 0.984
    assert out["queue_max"] == 43
    assert out["hit_rate"] == 0.0
    assert out["preemptions"] == 0
    assert out["diagnosis"] == "kv-bound"
    assert len(out["timeline"]) == 5
    first = out["timeline"][0]
    assert set(first) >= {"time", "kv_usage", "running", "queued", "prompt_tps", "gen_tps"}
    assert first["queued"] == 43 and first["gen_tps"] == 1055.3
    assert any("advise" in step for step in out["next_steps"])


def test_json_null_where_the_source_is_silent(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, ["observe", str(FIXTURES / "vllm-2025-03-v0-preempted.log"), "--json"])
    assert (out["kv_usage_max"], out["hit_rate"], out["queue_max"]) == (None, None, None)
    assert out["preemptions"] == 101 and out["diagnosis"] == "kv-bound"


def test_terminal_view_names_the_verdict_and_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", KV_FULL_LOG]) == 0
    out = capsys.readouterr().out
    assert "kv-bound" in out and "line 1" in out and "98.4%" in out and "kvtier advise" in out


def test_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", "--quiet", str(FIXTURES / "sglang-2025-02-decode-steady.log")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "diagnosis not-saturated"
    assert "kv_usage_max 0.14" in lines


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data = Path(KV_FULL_LOG).read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    out = run_json(capsys, ["observe", "-", "--json"])
    assert out["samples"] == 5


def test_startup_and_serving_lines_in_one_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-01-02 10:00:00 TP0] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB\n"
        "[2026-01-02 10:00:01 TP0] max_total_num_tokens=159277, chunked_prefill_size=8192\n"
        + (FIXTURES / "sglang-2026-05-swa-full-retract.log").read_text()
        + "[2026-01-02 10:00:09 TP0] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 2, #new_token_ratio: 0.4000 -> 0.5600\n"
    )
    out = run_json(capsys, ["observe", str(log), "--json"])
    assert out["pool_tokens"] == 159277
    assert out["preemptions"] == 2
    assert out["peak"]["queued"] == 3
    assert any("Retract requests" in e["text"] for e in out["evidence"])


def test_vllm_pool_size_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        "(EngineCore_DP0 pid=7) INFO 03-01 10:00:00 [kv_cache_utils.py:1] "
        "GPU KV cache size: 1,234,560 tokens\n" + Path(KV_FULL_LOG).read_text()
    )
    assert run_json(capsys, ["observe", str(log), "--json"])["pool_tokens"] == 1234560


def test_follow_reads_what_is_appended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "growing.log"
    lines = Path(KV_FULL_LOG).read_text().splitlines(keepends=True)
    log.write_text(lines[0])

    def append() -> None:
        for line in lines[1:]:
            time.sleep(0.15)
            with log.open("a") as f:
                f.write(line[:40])
                f.flush()
                time.sleep(0.05)
                f.write(line[40:])

    writer = threading.Thread(target=append)
    writer.start()
    try:
        out = run_json(capsys, ["observe", str(log), "--follow", "--idle-exit", "1.5", "--json"])
    finally:
        writer.join()
    assert out["samples"] == 5 and out["queue_max"] == 43


class _Metrics(BaseHTTPRequestHandler):
    scrapes = 0

    def do_GET(self) -> None:
        n = type(self).scrapes
        type(self).scrapes += 1
        body = (
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0"}} {0.5 + 0.2 * n}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0"} 8\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0"}} {2 * n}\n'
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0"}} {1000 + 1000 * n}\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} {900 + 250 * n}\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {100 * n}\n'
            "# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{engine="0"}} {7 + 3 * (n == 2)}\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_url():
    _Metrics.scrapes = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


class _Clock:
    """The polling clock with scrapes exactly `interval` apart, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.strftime = time.strftime
        self.localtime = time.localtime

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def time(self) -> float:
        return self.now


def test_polled_metrics_give_rates_from_counter_differences(
    metrics_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtier.observe import metrics

    monkeypatch.setattr(metrics, "clock", _Clock())
    out = run_json(
        capsys, ["observe", metrics_url, "--samples", "3", "--interval", "0.2", "--json"]
    )
    assert out["engine"] == "vllm" and out["samples"] == 3
    assert out["kv_usage_max"] == pytest.approx(0.9)
    assert out["queue_max"] == 4
    # hits over the window: (1400 - 900) / (3000 - 1000)
    assert out["hit_rate"] == pytest.approx(0.25)
    # the first scrape's counter is since start (7), then 3 more in the window
    assert out["preemptions"] == 10
    assert out["diagnosis"] == "kv-bound"
    gen = [p["gen_tps"] for p in out["timeline"]]
    # 100 generated tokens between scrapes 0.2 s apart
    assert gen[0] is None and gen[1] == pytest.approx(500)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "argv, names",
    [
        (["observe", "/nonexistent/server.log"], "/nonexistent/server.log"),
        (["observe", str(FIXTURES)], str(FIXTURES)),
        (["observe", str(FIXTURES / "manifest.json")], "manifest.json"),
        (["observe", KV_FULL_LOG, "--samples", "3"], "--samples"),
        (["observe", KV_FULL_LOG, "--idle-exit", "3"], "--idle-exit"),
        (["observe", KV_FULL_LOG, "--points", "0"], "--points"),
        (["observe", "http://127.0.0.1:1/metrics", "--follow"], "http://127.0.0.1:1/metrics"),
        (["observe", "http://127.0.0.1:1/metrics", "--samples", "0"], "--samples"),
        (["observe", "http://127.0.0.1:1/metrics", "--interval", "-1"], "--interval"),
        (["observe", KV_FULL_LOG, "--", "vllm", "serve"], "launch command"),
        (["observe"], "SOURCE"),
    ],
)
def test_bad_input_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: str
) -> None:
    assert names.lower() in error_line(capsys, argv).lower()


def test_unreachable_url(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/metrics"
    assert url in error_line(capsys, ["observe", url, "--samples", "1"])


def test_bad_metrics_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.prom"
    bad.write_text('# TYPE vllm:x gauge\nvllm:x{a="1" 2\n')
    assert str(bad) in error_line(capsys, ["observe", str(bad)])


def test_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 64)
    assert str(blob) in error_line(capsys, ["observe", str(blob)])


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["observe", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "kvtier observe http://localhost:30000/metrics" in out
