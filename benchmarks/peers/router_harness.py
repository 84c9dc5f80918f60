"""sglang-router (the real one) in front of stub workers, and kvtier's model beside it.

The router is sglang-router 0.3.2 from benchmarks/peers/.venv-router (.ci/router-venv.sh). Each
stub worker is a small HTTP server that answers as an SGLang worker does where the router asks
(/health, /server_info, /model_info, /get_load) and holds each /generate until the script
releases it, recording which requests reached it and when. A script is a list of steps: send
request i (and wait until a worker has it, so the router has routed it and counted it in
flight), or finish request j (release it, wait for its response, then until the router's own
in-flight gauge, smg_worker_requests_active, shows the drop). The same steps run through
kvtier's `sglang-cache-aware` model, which at each send predicts the worker, then is told where
the request really went, so both see the same in-flight counts and the same tree.

Text: one character per token, each trace block's text starting with a character of its own,
so the router's character tree splits exactly where kvtier's block tree does.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kvtier.sim.fleet.cache_aware import OPTIONS, CacheAware
from kvtier.sim.trace import TraceRequest

ROOT = Path(__file__).resolve().parents[2]
ROUTER_PYTHON = ROOT / "benchmarks" / "peers" / ".venv-router" / "bin" / "python"
MODEL = "stub-model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StubWorker:
    """One SGLang-like worker on 127.0.0.1; `arrivals` lists (rid, time) as requests come."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.arrivals: list[tuple[int, float]] = []
        self.release: dict[int, threading.Event] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, body: object, status: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path in ("/health", "/health_generate", "/liveness", "/readiness"):
                    self._json({})
                elif path in ("/server_info", "/get_server_info"):
                    self._json({"model_path": MODEL, "dp_size": 1, "tp_size": 1})
                elif path in ("/model_info", "/get_model_info"):
                    self._json({"model_path": MODEL, "is_generation": True})
                elif path == "/get_load":
                    self._json([{"dp_rank": 0, "num_reqs": 0, "num_tokens": 0}])
                elif path == "/v1/models":
                    self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self._json({"error": path}, 404)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                rid = int(body["rid"])
                with worker.lock:
                    event = worker.release.setdefault(rid, threading.Event())
                    worker.arrivals.append((rid, time.monotonic()))
                event.wait(60)
                self._json({"text": "", "meta_info": {"id": str(rid), "completion_tokens": 1}})

        return Handler

    def has(self, rid: int) -> bool:
        with self.lock:
            return any(r == rid for r, _ in self.arrivals)

    def finish(self, rid: int) -> None:
        with self.lock:
            self.release.setdefault(rid, threading.Event()).set()

    def close(self) -> None:
        with self.lock:
            for event in self.release.values():
                event.set()
        self.server.shutdown()


def block_text(req: TraceRequest, block_size: int, names: dict[int, str]) -> str:
    """One character per token; each block's first character names the block."""
    parts = []
    for i, block in enumerate(req.blocks):
        head = names.setdefault(block, chr(0x4E00 + len(names)))
        parts.append(head + "x" * (req.block_tokens(i, block_size) - 1))
    return "".join(parts)


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


@dataclass
class Router:
    """The real router process and what it needs to be driven."""

    process: subprocess.Popen[bytes]
    url: str
    metrics_url: str
    order: list[str]  # worker URLs in the router's own iteration order
    log: Path

    def in_flight(self) -> dict[str, int]:
        text = get(self.metrics_url).decode()
        out: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("smg_worker_requests_active{"):
                worker = line.split('worker="', 1)[1].split('"', 1)[0]
                out[worker] = int(float(line.rsplit(" ", 1)[1]))
        return out

    def agrees(self, expect: dict[str, int]) -> bool:
        """The router's gauge shows `expect` in flight per worker (no line: none yet)."""
        seen = self.in_flight()
        return all(seen.get(url, 0) == n for url, n in expect.items())

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_router(urls: Sequence[str], options: dict[str, str], log: Path) -> Router:
    port, metrics = free_port(), free_port()
    argv = [str(ROUTER_PYTHON), "-m", "sglang_router.launch_router", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--policy", "cache_aware", "--worker-urls", *urls]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics)]
    argv += ["--disable-retries", "--disable-circuit-breaker", "--log-level", "warn"]
    for key, value in options.items():
        argv += [f"--{key}", value]
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    router = Router(
        process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics", [], log
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the router exited: {log.read_text()[-2000:]}")
        try:
            listed = json.loads(get(router.url + "/workers"))["workers"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
            continue
        healthy = [w["url"] for w in listed if w.get("is_healthy", True)]
        if len(healthy) == len(urls):
            router.order = healthy
            return router
        time.sleep(0.2)
    router.close()
    raise RuntimeError(f"the router did not list its workers in 60 s: {log.read_text()[-2000:]}")


def script(n: int, seed: int, hold: int) -> list[tuple[str, int]]:
    """Send 0..n-1 in order; each request finishes after 0..hold later sends (seeded)."""
    rng = random.Random(seed)
    due: dict[int, list[int]] = {}
    steps: list[tuple[str, int]] = []
    for i in range(n):
        steps.append(("send", i))
        due.setdefault(i + rng.randint(0, hold), []).append(i)
        steps += [("finish", j) for j in due.pop(i, [])]
    steps += [("finish", j) for k in sorted(due) for j in due[k]]
    return steps


@dataclass
class SideBySide:
    real: list[int] = field(default_factory=list)  # worker index (router order) per request
    model: list[int] = field(default_factory=list)  # kvtier's prediction
    branch: list[str] = field(default_factory=list)  # the model's branch
    loads: list[list[int]] = field(default_factory=list)  # in flight before each send

    @property
    def agreement(self) -> float:
        same = sum(a == b for a, b in zip(self.real, self.model, strict=True))
        return same / len(self.real)


def _wait(what: str, ok: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


def run_side_by_side(
    requests: Sequence[TraceRequest],
    block_size: int,
    steps: Sequence[tuple[str, int]],
    workers: Sequence[StubWorker],
    router: Router,
    options: dict[str, str],
) -> SideBySide:
    opts = {k: o.default for k, o in OPTIONS.items()}
    opts.update({k: float(v) for k, v in options.items()})
    opts["chars-per-token"] = 1.0
    opts["eviction-interval-secs"] = 0  # the router's first eviction is 60 s away
    model = CacheAware(len(workers), opts, block_size)
    index = {url: i for i, url in enumerate(router.order)}
    by_url = {w.url: w for w in workers}
    names: dict[int, str] = {}
    out = SideBySide()
    threads: dict[int, threading.Thread] = {}
    where: dict[int, int] = {}
    for kind, rid in steps:
        req = requests[rid]
        if kind == "send":
            out.loads.append(list(model.load))
            guess, branch = model.decide(req)
            body = json.dumps(
                {
                    "text": block_text(req, block_size, names),
                    "rid": str(rid),
                    "sampling_params": {"max_new_tokens": 1},
                }
            ).encode()
            http = urllib.request.Request(
                router.url + "/generate", body, {"Content-Type": "application/json"}
            )
            t = threading.Thread(target=lambda h=http: get_post(h), daemon=True)
            t.start()
            threads[rid] = t
            _wait(f"request {rid} at a worker", lambda r=rid: any(w.has(r) for w in workers))
            real = next(index[w.url] for w in workers if w.has(rid))
            where[rid] = real
            model.commit(req, real, branch)
            out.real.append(real)
            out.model.append(guess)
            out.branch.append(branch)
        else:
            url = router.order[where[rid]]
            by_url[url].finish(rid)
            threads.pop(rid).join(30)
            model.finished(where[rid], req, 0.0)
            expect = {router.order[i]: n for i, n in enumerate(model.load)}
            _wait("the router's in-flight gauge", lambda e=expect: router.agrees(e))
    return out


def get_post(request: urllib.request.Request) -> None:
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def _multiturn(requests: int, seed: int) -> tuple[TraceRequest, ...]:
    from kvtier.sim.multiturn import MultiturnSpec, multiturn

    clients = max(2, requests // 5)
    spec = MultiturnSpec(clients, 5, 24, 8, 1.0, False, "random", 16)
    return multiturn(spec, seed)[:requests]


def _shared_prefix(requests: int, seed: int) -> tuple[TraceRequest, ...]:
    from kvtier.sim.shared_prefix import SharedPrefixSpec, shared_prefix

    return shared_prefix(SharedPrefixSpec(16, 4, 64, 24, 1, 1.0, requests, 16), seed)


# name -> (workload, router options, most later sends a request stays in flight for)
CASES: dict[str, tuple[object, dict[str, str], int]] = {
    "shared-prefix, defaults": (_shared_prefix, {}, 12),
    "shared-prefix, tight": (
        _shared_prefix,
        {"cache-threshold": "0.5", "balance-abs-threshold": "2", "balance-rel-threshold": "1.2"},
        10,
    ),
    "multiturn, balanced": (
        _multiturn,
        {"cache-threshold": "0.3", "balance-abs-threshold": "4", "balance-rel-threshold": "1.5"},
        16,
    ),
}
BLOCK = 16  # tokens (characters) per trace block in these workloads


def compare(name: str, requests: int, workers: int, seed: int, log: Path) -> SideBySide:
    """Run case `name` through the real router and kvtier's model, side by side."""
    make, options, hold = CASES[name]
    reqs = make(requests, seed)  # type: ignore[operator]
    stubs = [StubWorker() for _ in range(workers)]
    router = start_router([w.url for w in stubs], options, log)
    try:
        return run_side_by_side(reqs, BLOCK, script(len(reqs), seed, hold), stubs, router, options)
    finally:
        router.close()
        for w in stubs:
            w.close()
