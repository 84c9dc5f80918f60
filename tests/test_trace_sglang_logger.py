"""SGLang's own request logger writes the lines, `kvtier trace` reads them.

SGLang's `RequestLogger` (srt/utils/request_logger.py) runs in the SGLang virtualenv
(benchmarks/peers/.venv-sglang, SGLang 0.5.23, made by .ci/sglang-venv.sh) with `--log-requests`
at levels 3 and 2, in the text and the JSON format, on request objects carrying the fields of
that version's `GenerateReqInput` in their order (the class itself cannot be imported without
SGLang's GPU dependencies, so its field names are read from io_struct.py) and `out` dicts with
the keys `TokenizerManager` gives them. The four prompts are those of test_trace_logs.py: in
blocks of 4 tokens, 16 of their 44 tokens are reusable.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_support import error_line, run_json
from sglang_venv_support import sglang_python
from test_trace_logs import INPUT, PROMPTS, REUSED

# Run with the SGLang virtualenv's python: argv[1] is a JSON list of [level, format, prompts];
# each run's lines follow a `=== run N` line on stdout.
_EMIT = r"""
import ast, dataclasses, importlib.util, json, sys
from sglang.srt.utils.request_logger import RequestLogger

source = importlib.util.find_spec("sglang.srt.managers.io_struct").origin
tree = ast.parse(open(source).read())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GenerateReqInput")
names = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)]
Req = dataclasses.make_dataclass(
    "GenerateReqInput", [(n, object, dataclasses.field(default=None)) for n in names]
)
for run, (level, fmt, prompts) in enumerate(json.loads(sys.argv[1])):
    print(f"=== run {run}", flush=True)
    logger = RequestLogger(
        log_requests=True, log_requests_level=level, log_requests_format=fmt,
        log_requests_target=None,
    )
    for i, ids in enumerate(prompts):
        n = i + 1
        obj = Req(
            rid=f"r{i}",
            input_ids=ids,
            sampling_params={"max_new_tokens": n, "stop": ["'prompt_tokens': 1"]},
            received_time=1764590400.25 + 0.5 * i,
        )
        out = {
            "text": " w7" * n,
            "output_ids": [7] * n,
            "meta_info": {
                "id": f"r{i}",
                "finish_reason": {"type": "length", "length": n},
                "prompt_tokens": len(ids),
                "weight_version": "default",
                "total_retractions": 0,
                "completion_tokens": n,
                "cached_tokens": 0,
                "e2e_latency": 0.125,
            },
        }
        logger.log_received_request(obj)
        logger.log_finished_request(obj, out)
    sys.stdout.flush()
"""
LONG = [list(range(1, 2049)), list(range(1, 2050))]  # printed whole at level 2; cut there
RUNS = [(3, "text", PROMPTS), (3, "json", PROMPTS), (2, "text", LONG), (2, "json", LONG)]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], Path]:
    """Each run's lines as a log file, by (level, format)."""
    done = subprocess.run(
        [str(sglang_python()), "-c", _EMIT, json.dumps(RUNS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path_factory.mktemp("sglang-logger")
    found = {}
    for (level, fmt, _), text in zip(RUNS, done.stdout.split("=== run ")[1:], strict=True):
        log = folder / f"{fmt}-{level}.log"
        log.write_text(text.split("\n", 1)[1])
        found[level, fmt] = log
    return found


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_sglang_request_logger_lines_make_the_trace(
    fmt: str, logs: dict[tuple[int, str], Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = logs[3, fmt]
    out = tmp_path / "trace.jsonl"
    summary = run_json(capsys, ["trace", str(log), "--block-tokens", "4", "-o", str(out), "--json"])
    assert summary["format"] == "sglang"
    assert (summary["reused_tokens"], summary["input_tokens"]) == (REUSED, INPUT)
    assert summary["arrival_from"] == {"obj.received_time": 4}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0, 500, 1000, 1500]
    assert [r["output_length"] for r in rows] == [1, 2, 3, 4]  # completion_tokens
    assert (summary["lines"], summary["skipped_lines"], summary["left_out"]) == (8, 0, 0)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_sglang_level_2_cut_is_refused(
    fmt: str, logs: dict[tuple[int, str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # 2,048 ids are printed whole (line 2: the first request's Finish), 2,049 are cut (line 4)
    err = error_line(capsys, ["trace", str(logs[2, fmt])])
    assert "line 4: SGLang cut this prompt" in err
