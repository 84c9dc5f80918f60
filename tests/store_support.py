"""Store test helpers: a fingerprint, random pages, a hand-moved clock, throwaway redis-server
processes, and the store_worker.py child process."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvtier.cache.keys import page_hashes
from kvtier.store.base import StoreFingerprint

FP = StoreFingerprint(
    model_id="meta-llama/Llama-3.1-8B",
    geometry="mha:heads=8:k=128:v=128:layers=" + ",".join(["full"] * 32),
    kv_dtype="bfloat16",
    tp_rank=0,
    tp_size=1,
    page_size=16,
)

TESTS = Path(__file__).resolve().parent
REDIS_SERVER = shutil.which("redis-server")
# The redis mark runs conftest's require_binary("redis-server") before each such test: a skip on
# a machine without the binary, a failure under CI
needs_redis = pytest.mark.redis


class Clock:
    """A clock the test moves by hand: set `now`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def chain(n: int, seed: int = 0, page_size: int = 16) -> list[bytes]:
    """`n` chained page hashes of a token sequence determined by `seed`."""
    tokens = [(seed * 1_000_003 + i) % 128_000 for i in range(n * page_size)]
    return page_hashes(tokens, page_size)


def payloads(n: int, size: int = 4096, seed: int = 0) -> list[bytes]:
    """`n` random payloads of `size` bytes."""
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    """A free loopback port; for a cluster node also its bus port (port + 10000), which must
    exist too, so the kernel's high ephemeral ports are out."""
    if not cluster:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, 40_000)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError("no free loopback port pair for a redis cluster node")


class RedisServer:
    """A redis-server on a loopback port, without persistence, that a test can kill."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        assert REDIS_SERVER is not None, "redis-server is not installed"
        self.binary = REDIS_SERVER
        self.port = free_port(cluster="--cluster-enabled" in extra)
        self.workdir = workdir
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL: the server dies with no chance to answer or flush."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.resume()
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@contextmanager
def running_redis(workdir: Path, *extra: str) -> Iterator[RedisServer]:
    """A started `RedisServer`, stopped on exit."""
    srv = RedisServer(workdir, *extra)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def run_worker(url: str, action: str, pages: int, seed: int) -> dict[str, object]:
    """The JSON result of one `store_worker.py URL ACTION PAGES SEED` child process."""
    out = subprocess.run(
        [sys.executable, str(TESTS / "store_worker.py"), url, action, str(pages), str(seed)],
        check=True,
        capture_output=True,
        text=True,
        cwd=TESTS,
        timeout=60,
    )
    return json.loads(out.stdout)


@contextmanager
def running_cluster(workdir: Path, masters: int = 3) -> Iterator[list[RedisServer]]:
    """A Redis Cluster of `masters` nodes on loopback (no replicas), made by `redis-cli
    --cluster create` (offline: it talks only to the nodes), ready to serve every slot."""
    cli = shutil.which("redis-cli")
    assert cli is not None, "redis-cli is not installed"
    nodes: list[RedisServer] = []
    try:
        for i in range(masters):
            node_dir = workdir / f"node{i}"
            node_dir.mkdir()
            node = RedisServer(
                node_dir,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            )
            node.start()
            nodes.append(node)
        addresses = [f"127.0.0.1:{n.port}" for n in nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        for node in nodes:
            while True:
                info = subprocess.run(
                    [cli, "-p", str(node.port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                if "cluster_state:ok" in info:
                    break
                assert time.monotonic() < deadline, f"cluster not ready: {info}"
                time.sleep(0.1)
        yield nodes
    finally:
        for node in nodes:
            node.stop()
