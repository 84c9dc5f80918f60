"""`kvtier observe` on hostile sources: values no engine prints, compressed and special files,
unbounded lines, followed files that are truncated or rotated, and /metrics servers that answer
badly. Each is one line and exit 2, or the right answer; never a traceback or a wrong exit 0."""

from __future__ import annotations

import gzip
import io
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.errors import KvtierError
from kvtier.observe.logread import MAX_LINE, read_stream
from kvtier.observe.metrics import fetch, parse_scrape
from kvtier.observe.observer import Observer

GOOD = (
    "[2026-03-01 10:00:0{s} TP0] Decode batch. #running-req: 5, #token: 100, token usage: 0.50, "
    "gen throughput (token/s): 100.00, #queue-req: 0\n"
)
# one field each that no SGLang release prints: a share above 1, scientific notation, a count
# with more digits than a machine holds, and (vLLM) a percentage above 100
BAD = {
    "usage above 1": GOOD.format(s=1).replace("0.50", "1.50"),
    "scientific notation": GOOD.format(s=1).replace("100.00, #queue", "1e308, #queue"),
    "a field too long to be real": GOOD.format(s=1).replace("req: 5", "req: " + "9" * 39),
    "vllm percent above 100": (
        "INFO 03-01 10:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 250.0%, Prefix cache hit rate: 10.0%\n"
    ),
}  # fmt: skip


def _observe(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["observe", str(path), "--json", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The error `kvtier observe PATH --json` exits 2 with, printing nothing to stdout."""
    code, out, err = _observe(path, capsys)
    assert (code, out) == (2, "")
    return err


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_value_no_engine_prints_is_not_data(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "serving.log"
    log.write_text(BAD[case])
    err = _refused(log, capsys)
    assert err.count("\n") == 1 and "no serving line could be read: 1 line(s)" in err
    assert "(the first: line 1)" in err
    # beside a readable line, the bad one is skipped and counted, and the good one is the answer
    log.write_text(GOOD.format(s=0) + BAD[case])
    code, out, _ = _observe(log, capsys)
    assert code == 0 and '"samples": 1' in out and '"skipped_lines": 1' in out
    assert '"kv_usage_max": 0.5' in out


def test_compressed_logs_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "serving.log.gz"
    log.write_bytes(gzip.compress(GOOD.format(s=1).encode()))
    assert "is gzip-compressed: decompress it first (zcat" in _refused(log, capsys)
    code = main(["explain", str(log)])
    assert code == 2 and "gzip-compressed" in capsys.readouterr().err


def test_an_unbounded_line_is_skipped_not_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "serving.log"
    with log.open("w") as out:
        out.write(GOOD.format(s=0))
        out.write("x" * (3 * MAX_LINE) + "\n")  # a prompt logged whole, say
        out.write(GOOD.format(s=2))
    code, out_text, _ = _observe(log, capsys)
    assert code == 0 and '"samples": 2' in out_text and '"skipped_lines": 1' in out_text
    # the lines after it keep their numbers: the second good line is line 3
    assert '"line": 3' in out_text or '"line": 1' in out_text


def _follow(path: Path, observer: Observer, result: list[int]) -> None:
    with path.open("rb") as stream:
        reader = read_stream(
            stream, observer, follow=True, idle_exit=1.5, poll=0.05, path=str(path)
        )
    result.append(reader.reopened)


@pytest.mark.parametrize("how", ["truncate", "rotate"])
def test_follow_survives_truncation_and_rotation(how: str, tmp_path: Path) -> None:
    log = tmp_path / "serving.log"
    log.write_text(GOOD.format(s=0) + GOOD.format(s=1))
    observer, reopened = Observer(str(log)), []  # type: ignore[var-annotated]
    follower = threading.Thread(target=_follow, args=(log, observer, reopened))
    follower.start()
    time.sleep(0.4)
    if how == "truncate":
        log.write_text(GOOD.format(s=2))  # truncated in place, then written anew
    else:
        log.rename(tmp_path / "serving.log.1")
        log.write_text(GOOD.format(s=2) + GOOD.format(s=3))
    follower.join(10)
    assert not follower.is_alive()
    assert reopened == [1]
    assert observer.samples == (3 if how == "truncate" else 4)


SCRAPE = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SCRAPE + 'vllm:num_requests_running{engine="0"} 4\n', "appears twice"),
        ("# TYPE http_requests gauge\nhttp_requests 3\n", "no vllm: or sglang: metric"),
        (
            "# TYPE vllm:num_requests_waiting gauge\n"
            + "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 1e308\n' for i in range(3)),
            "sums to inf",
        ),
    ],
    ids=["duplicated series", "no engine metric", "gauges summing to infinity"],
)
def test_scrapes_that_are_not_an_engines_are_refused(text: str, message: str) -> None:
    with pytest.raises(KvtierError, match=message):
        parse_scrape(text, "saved.prom", 0.0, "saved")


# a preemption count no engine reaches, beside a gauge that is fine
COUNTER_PAST_RANGE = (
    "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total 1e12\n"
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (os.mkfifo, "not a regular file"),
        (lambda p: p.write_text(COUNTER_PAST_RANGE), "no serving line could be read: 1 line(s)"),
    ],
    ids=["a fifo, refused without blocking", "a counter past any engine's range, skipped"],
)
def test_a_file_with_nothing_to_read_is_refused(
    make: Callable[[Path], object], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "metrics.prom"
    make(source)
    assert message in _refused(source, capsys)


class _RawServer:
    """A loopback server answering every connection with `answer` bytes (dripped when slow)."""

    def __init__(self, answer: bytes, drip: float = 0.0) -> None:
        self.answer, self.drip = answer, drip
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(10)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                try:
                    if self.drip:
                        for byte in self.answer:
                            if self.stop.wait(self.drip):
                                return
                            conn.sendall(bytes([byte]))
                    else:
                        conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def raw_server() -> Iterator[list[_RawServer]]:
    servers: list[_RawServer] = []
    yield servers
    for server in servers:
        server.close()


HTTP_ANSWERS = {
    "bad status": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
    "oversized headers": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
    "too many headers": b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 120 + b"\r\n",
    "cut chunk": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nvllm:num_requests_running 3\n"
    ),
    "redirect loop": b"HTTP/1.1 302 Found\r\nLocation: /metrics\r\nContent-Length: 0\r\n\r\n",
    "not http": b"SSH-2.0-OpenSSH_9.2\r\n",
}


@pytest.mark.parametrize("case", sorted(HTTP_ANSWERS))
def test_a_bad_http_answer_is_one_line(
    case: str, raw_server: list[_RawServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = _RawServer(HTTP_ANSWERS[case])
    raw_server.append(server)
    code = main(["observe", server.url, "--samples", "1", "--interval", "0.1"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith(f"kvtier: error: cannot read {server.url}: ") and err.count("\n") == 1


def test_a_dripping_server_meets_the_deadline(raw_server: list[_RawServer]) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n" + SCRAPE.encode()[:30]
    server = _RawServer(answer, drip=0.05)  # about 4 s for the whole answer
    raw_server.append(server)
    began = time.monotonic()
    with pytest.raises(KvtierError, match=r"no whole answer within 0\.5 s"):
        fetch(server.url, timeout=0.5)
    assert time.monotonic() - began < 2.0


def _vllm_line(stamp: str, running: int = 2) -> str:
    return (
        f"INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: 100.0 tokens/s, "
        f"Avg generation throughput: 20.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 10.0%, Prefix cache hit rate: 0.0%\n"
    )


def _samples(text: str) -> list[float]:
    from kvtier.observe.samples import read_samples

    with io.BytesIO(text.encode()) as stream:
        return [s.time_s for s in read_samples(stream, "serving.log").samples]


def test_a_month_day_clock_runs_through_new_year() -> None:
    text = "".join(_vllm_line(t) for t in ("12-31 23:59:50", "12-31 23:59:59", "01-01 00:00:09"))
    assert _samples(text) == [0.0, 9.0, 19.0]


@pytest.mark.parametrize(
    "stamps",
    [
        ("03-01 10:00:00", "03-01 10:00:10", "03-01 09:00:00"),  # lines out of order
        ("03-01 10:00:00", "03-01 10:00:10", "03-01 10:00:00", "03-01 10:00:10"),  # joined twice
    ],
    ids=["out of order", "joined with itself"],
)
def test_time_that_goes_back_is_refused(stamps: tuple[str, ...]) -> None:
    with pytest.raises(KvtierError, match="the time goes back from 03-01 10:00:10 to"):
        _samples("".join(_vllm_line(t, running=i + 1) for i, t in enumerate(stamps)))


def test_ranks_a_second_apart_are_not_time_going_back() -> None:
    text = "".join(
        _vllm_line(t, running=i + 1)
        for i, t in enumerate(("03-01 10:00:05.900", "03-01 10:00:05.100"))
    )
    assert _samples(text) == [0.0, 0.0]  # the later line keeps the clock where it was


def test_a_batch_of_a_billion_requests_is_refused_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = []
    for i in range(30):
        seqs = 1_000_000_000 if i == 5 else 4
        lines.append(
            f"[2026-03-01 10:00:{i:02d} TP0] Prefill batch. #new-seq: {seqs}, #new-token: 8192, "
            "#cached-token: 291, token usage: 0.30, #running-req: 3, #queue-req: 2\n"
        )
    log = tmp_path / "serving.log"
    log.write_text("".join(lines))
    deployment = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]
    argv = ["simulate", "--from-log", str(log), *deployment, "--mean-output-tokens", "256"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "admit 1,000,000,0" in err and "a fitted workload holds at most 1,000,000" in err


def _decode(head: str, second: int, running: int) -> str:
    return (
        f"[2026-03-01 10:00:{second:02d} {head}] Decode batch, #running-req: {running}, "
        "#token: 100, token usage: 0.50, cuda graph: True, gen throughput (token/s): 100.00, "
        "#queue-req: 3, \n"
    )


def test_ranks_that_print_copies_count_once(tmp_path: Path) -> None:
    from kvtier.observe.logread import read_stream

    # context-parallel ranks print the same line, one of them a second late; DP ranks have their
    # own schedulers; a pool line printed first by another rank does not pick the batch lines' rank
    text = "[2026-03-01 09:59:59 DP0 ATTN_CP3 TP3] KV Cache is allocated. #tokens: 1000\n"
    for second in range(3):
        text += _decode("DP0 ATTN_CP0 TP0", second, 5) + _decode("DP0 ATTN_CP1 TP1", second + 1, 5)
        text += _decode("DP1 ATTN_CP0 TP2", second, 7)
    observer = Observer("ranks.log")
    read_stream(io.BytesIO(text.encode()), observer)
    result = observer.result()
    assert result.samples == 6  # 3 lines of DP0, 3 of DP1
    assert result.pool_tokens == 1000 and result.peak is not None and result.peak.running == 5
