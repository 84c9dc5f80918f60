"""The tree and transfer benchmarks run end to end on small inputs; the tree benchmark skips
without a trace."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cache_tree.py"


def _bench(name: str = "bench_cache_tree"):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, BENCH.parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _trace(path: Path) -> None:
    rng = random.Random(0)
    next_id = 100
    rows = []
    for _ in range(300):
        shared = list(range(rng.randint(0, 6)))  # a shared system prompt of 0-6 blocks
        own = list(range(next_id, next_id + rng.randint(1, 8)))
        next_id += len(own)
        rows.append(
            {
                "timestamp": 0,
                "input_length": 512 * (len(shared) + len(own)),
                "output_length": rng.randint(1, 1500),
                "hash_ids": shared + own,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_replay_on_a_small_trace_evicts_and_hits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    _trace(trace)
    bench = _bench()
    args = ["--trace", str(trace), "--device-pages", "64", "--concurrency", "4", "--repeat", "1"]
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    assert "page ops/s" in out
    config = bench.arguments().parse_args(["--device-pages", "64", "--concurrency", "4"])
    result = bench.replay(bench.load_trace(trace), config)
    assert result["device_evicted"] > 0 and result["host_evicted"] > 0
    assert result["device_hit_rate"] > 0 and result["refused"] == 0


def test_missing_trace_is_skipped_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _bench().main(["--trace", str(tmp_path / "absent.jsonl")]) == 0
    assert capsys.readouterr().out.startswith("skipped")


def test_transfer_benchmark_prints_every_placement(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(BENCH.parent))
    monkeypatch.delitem(sys.modules, "bench_transfer", raising=False)
    _bench()  # importable by name, as the transfer benchmark imports it
    spec = importlib.util.spec_from_file_location(
        "bench_transfer", BENCH.parent / "bench_transfer.py"
    )
    assert spec is not None and spec.loader is not None
    transfer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(transfer)
    transfer.main(["--pages", "6", "--batch", "2", "--repeat", "1", "--no-survey"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.endswith("%")]
    placements = [line.split()[1] for line in rows]
    assert placements == ["gather"] * 2 + ["scatter"] * 2 + ["random"] * 2
