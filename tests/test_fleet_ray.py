"""`kvtier simulate --sweep ... --ray ADDRESS`: a fleet sweep's points as tasks on a local Ray
head this test starts (ray from the `ray` extra, .ci/ray.sh), the same JSON as in order."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_support import error_line
from conftest import missing
from kvtier.cli import main

SMALL = ["--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> object:
    try:
        import ray  # noqa: F401
    except ImportError:
        missing("the ray package (pip install 'kvtier[ray]'; .ci/ray.sh)")
    port = _free_port()
    tmp = tmp_path_factory.mktemp("ray")
    ray_bin = str(Path(sys.executable).with_name("ray"))
    argv = [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=2"]
    argv += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log = (tmp / "head.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, (tmp / "head.log").read_text()[-2000:]
            time.sleep(0.5)
        yield address
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the head and the processes it started, only
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet-ray") / "sp.jsonl"
    gen = ["simulate", "--generate", "shared-prefix", "--groups", "6", "--prompts-per-group", "3"]
    gen += ["--system-tokens", "2000", "--question-tokens", "300", "--output-tokens", "32"]
    assert main([*gen, "--rate", "4", "--requests", "90", "--seed", "3", "-o", str(path)]) == 0
    return path


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_a_four_point_sweep_on_ray_equals_one_in_order(
    head: str, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(trace), *SMALL, "--device-tokens", "12000", "--replicas", "2"]
    argv += ["--sweep", "router=random,least-load,sglang-cache-aware,llm-d-precise", "--json"]
    in_order = _out(capsys, argv)
    assert _out(capsys, [*argv, "--ray", head]) == in_order


def test_ray_refusals_are_one_line(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", str(trace), *SMALL, "--replicas", "2"]
    sweep = ["--sweep", "router=random,least-load"]
    assert "--ray runs a fleet sweep's points" in error_line(capsys, [*base, "--ray", "x:1"])
    both = [*base, *sweep, "--ray", "x:1", "--jobs", "2"]
    assert "not both" in error_line(capsys, both)
