"""Every field of each engine's commonest serving lines given every hostile value, through
`kvtier observe --json`: the answer is asserted, not only the absence of a traceback.

The rule the expected answers follow, stated apart from the code under test: the engines print
counts as plain whole decimals, shares as plain decimals from 0 to 1 (SGLang) or percentages from
0 to 100 (vLLM), and throughputs as plain decimals. A line whose field is printed so, within
range, is read and its figure shows in the output; any other line is skipped and counted, and
the line beside it (always valid) is the whole answer."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from kvtier.cli import main

VALUES = (
    *("0", "1", "7", "00012", "0.5", "0.93", "1.00", "1.5", "100.0", "250.0", "12345.67"),
    *("1e3", "1E3", "1e308", "nan", "NaN", "inf", "-1", "-0", "+5", "1_000", "0x10", ""),
    *("1.2.3", "١٢", "9" * 16, "9" * 40, "9" * 5000, "1,000", ".5", "5.", "0.00001"),
)
PLAIN = re.compile(r"\d+(?:\.\d+)?")
# the bounds every engine's figures lie in (the same for a count, a token total or a rate)
MOST = {"count": 1e9, "tokens": 1e11, "rate": 1e9, "share": 1.0, "percent": 100.0}

SGLANG_DECODE = (
    "[2026-03-01 10:00:0{s} TP0] Decode batch, #running-req: {running}, #token: 100, "
    "token usage: {usage}, cuda graph: True, gen throughput (token/s): {gen}, "
    "#queue-req: {queued}, "
)
SGLANG_PREFILL = (
    "[2026-03-01 10:00:0{s} TP0] Prefill batch, #new-seq: {seqs}, #new-token: {new}, "
    "#cached-token: {cached}, token usage: {usage}, #running-req: {running}, "
    "#queue-req: {queued}, "
)
VLLM_STATS = (
    "INFO 03-01 10:00:0{s} [loggers.py:123] Engine 000: Avg prompt throughput: {prompt} tokens/s, "
    "Avg generation throughput: {gen} tokens/s, Running: {running} reqs, Waiting: {queued} reqs, "
    "GPU KV cache usage: {usage}%, Prefix cache hit rate: {hit}%"
)
# a field's kind, the --json figure it shows in, and its scale
COUNT, TOKENS, RATE = ("count", None, 1), ("tokens", None, 1), ("rate", None, 1)
QUEUED = ("count", "queue_max", 1)
USAGE_SHARE, USAGE_PERCENT = ("share", "kv_usage_max", 1), ("percent", "kv_usage_max", 100)
# (line, its fields' valid values, field -> its kind, figure and scale)
LINES = {
    "sglang decode": (
        SGLANG_DECODE,
        {"running": "3", "usage": "0.20", "gen": "50.00", "queued": "1"},
        {"running": COUNT, "usage": USAGE_SHARE, "gen": RATE, "queued": QUEUED},
    ),
    "sglang prefill": (
        SGLANG_PREFILL,
        {"seqs": "2", "new": "100", "cached": "50", "usage": "0.20", "running": "3", "queued": "1"},
        {"seqs": COUNT, "new": TOKENS, "cached": TOKENS, "usage": USAGE_SHARE, "running": COUNT,
         "queued": QUEUED},
    ),
    "vllm stats": (
        VLLM_STATS,
        {"prompt": "10.0", "gen": "20.0", "running": "3", "queued": "1", "usage": "20.0",
         "hit": "5.0"},
        {"prompt": RATE, "gen": RATE, "running": COUNT, "queued": QUEUED, "usage": USAGE_PERCENT,
         "hit": ("percent", None, 100)},
    ),
}  # fmt: skip


def valid(kind: str, raw: str) -> bool:
    if PLAIN.fullmatch(raw) is None or not raw.isascii() or len(raw) > 28:
        return False
    value = float(raw)
    whole = kind in ("count", "tokens")
    return value <= MOST[kind] and (not whole or value == int(value))


def _observe(path: Path) -> tuple[int, dict[str, object], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["observe", str(path), "--json"])
    return code, json.loads(out.getvalue()) if code == 0 else {}, err.getvalue()


def _figure(payload: dict[str, object], name: str) -> float | None:
    if name == "peak_running":
        peak = payload["peak"]
        assert isinstance(peak, dict)
        return peak["running"]  # type: ignore[no-any-return]
    return payload[name]  # type: ignore[return-value]


CASES = [
    (line, field, raw)
    for line, (_, _, fields) in LINES.items()
    for field in fields
    for raw in VALUES
]


@pytest.mark.parametrize("line", sorted(LINES))
def test_every_field_with_every_value(line: str, tmp_path: Path) -> None:
    template, good, fields = LINES[line]
    log = tmp_path / "serving.log"
    wrong: list[str] = []
    for field, (kind, figure, scale) in fields.items():
        for raw in VALUES:
            text = (
                template.format(s=0, **good) + "\n" + template.format(s=1, **{**good, field: raw})
            )
            log.write_text(text + "\n")
            code, payload, err = _observe(log)
            case = f"{line} {field}={raw[:20]!r}"
            if code != 0:
                wrong.append(f"{case}: exit {code} {err[-200:]!r}")
            elif valid(kind, raw):
                if payload["samples"] != 2 or payload["skipped_lines"] != 0:
                    wrong.append(f"{case}: valid, but samples {payload['samples']}")
                elif figure is not None:
                    expected = max(float(raw) / scale, float(good[field]) / scale)
                    if _figure(payload, figure) != pytest.approx(expected):
                        wrong.append(f"{case}: {figure} {_figure(payload, figure)} != {expected}")
            elif payload["samples"] != 1 or payload["skipped_lines"] != 1:
                wrong.append(
                    f"{case}: not a value the engine prints, but read ({payload['samples']})"
                )
    assert not wrong, f"{len(wrong)} of {len(fields) * len(VALUES)}:\n" + "\n".join(wrong[:20])
