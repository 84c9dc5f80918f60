"""`kvtier report --observe`: a serving log or /metrics becomes a diagnosis and four time series."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.errors import KvtierError
from kvtier.payload import from_json
from kvtier.report.html import render_html
from kvtier.report.html_observe import observe_section
from kvtier.report.observe_payload import ObservePayload
from report_cases import EMPTY_OBSERVATION, observation

ROOT = Path(__file__).resolve().parents[1]
METRICS = ROOT / "tests" / "fixtures" / "observe" / "metrics-sglang-2025-07-pd.prom"
TITLES = ["KV cache usage", "Requests running and queued", "Throughput", "Prefix cache hit rate"]


def test_saved_metrics_report(tmp_path: Path) -> None:
    out = tmp_path / "metrics.html"
    assert main(["report", "--observe", str(METRICS), "-o", str(out)]) == 0
    assert "KV cache usage" in _charts(out.read_text())


def serving_log(path: Path, samples: int = 300) -> Path:
    """An SGLang serving log that fills its pool: usage climbs 0.30 -> 0.99, queue from 0.85."""
    lines = []
    for i in range(samples):
        stamp = f"[2026-02-28 13:{i // 60:02d}:{i % 60:02d} TP0]"
        usage = min(0.99, 0.3 + i / samples)
        queued, running = max(0, int((usage - 0.85) * 200)), 20 + i // 10
        if i % 5 == 0:
            lines.append(
                f"{stamp} Prefill batch. #new-seq: 2, #new-token: 4096, #cached-token: "
                f"{1000 + 10 * i}, token usage: {usage:.2f}, #running-req: {running}, "
                f"#queue-req: {queued}"
            )
        else:
            lines.append(
                f"{stamp} Decode batch. #running-req: {running}, #token: {int(usage * 159277)}, "
                f"token usage: {usage:.2f}, gen throughput (token/s): {800 + i % 7 * 20:.2f}, "
                f"#queue-req: {queued}"
            )
    path.write_text("\n".join(lines) + "\n")
    return path


def _charts(html: str) -> list[str]:
    return re.findall(r'<svg class="chart"[^>]*><title>([^<]*)</title>', html)


def test_a_filling_pool_draws_every_series(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log = serving_log(tmp_path / "serving.log")
    out = tmp_path / "serving.html"
    assert main(["report", "--observe", str(log), "-o", str(out)]) == 0
    assert "observe" in capsys.readouterr().out
    html = out.read_text()
    assert _charts(html) == TITLES
    assert "Serving: kv-bound" in html and "full (90%)" in html
    # 300 samples merged into 150 points: x is the first sample of each, ticked sparsely
    assert html.count("KV usage: ") == 150 and ">250</text>" in html
    assert "KV usage: 99% at 299" in html  # the last point: samples 299-300 at 0.99


def test_a_saved_observation_draws_what_it_holds(tmp_path: Path) -> None:
    saved = tmp_path / "observe.json"
    payload = {**EMPTY_OBSERVATION, "source": "m", "samples": 1,
               "timeline": [{"kv_usage": 0.5, "running": 3, "samples": 1}]}  # fmt: skip
    saved.write_text(json.dumps(payload))
    out = tmp_path / "m.html"
    assert main(["report", "--from", f"observe={saved}", "-o", str(out)]) == 0
    html = out.read_text()
    assert _charts(html) == TITLES[:2]
    assert "Throughput: the source gave no figures." in html


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"timeline": [{"kv_usage": 1.5}]}, "`timeline[0].kv_usage` must be a number in [0, 1]"),
        ({"diagnosis": ""}, "`diagnosis` must be a name"),
        ({"timeline": None}, "no `timeline`"),
    ],
)
def test_a_bad_saved_observation_is_refused_by_name(change: dict, says: str) -> None:
    with pytest.raises(KvtierError, match=re.escape(says)):
        from_json(ObservePayload, {**EMPTY_OBSERVATION, "diagnosis": "kv-bound", **change})


def test_an_empty_timeline_still_reports_the_diagnosis() -> None:
    section = observe_section(observation())
    html = render_html([section], title="t")
    assert _charts(html) == [] and html.count("the source gave no figures") == 4
