"""`kvtier advise --workload --html`: one chart of every option's TTFT p90 and throughput against
the baseline, the same page from the saved --json (`kvtier report --from advise-workload=FILE`),
and the chart laid out in a real headless chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_support import run_cli
from report_browser import MEASURE_CHARTS, Chromium

ROOT = Path(__file__).resolve().parents[1]
ADVISE = [
    "advise", "--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100",
    "--workload", "tests/fixtures/advise/chat-40.jsonl",
]  # fmt: skip
TITLE = "Each option&#x27;s TTFT p90 and throughput against the baseline"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    tmp = tmp_path_factory.mktemp("advise-html")
    html = tmp / "advise.html"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        code, out, err = run_cli([*ADVISE, "--json", "--html", str(html)])
    assert code == 0, err
    assert f"wrote {html}" in err
    return html, json.loads(out)


def test_the_chart_has_a_mark_for_the_baseline_and_every_optionrun_cli(
    page: tuple[Path, dict[str, object]],
) -> None:
    html, data = page
    text = html.read_text()
    assert text.count('<svg class="chart"') == 1 and TITLE in text
    options = [*data["options"], *data["combinations"]]  # type: ignore[misc]
    run = [o for o in options if o["outcome"] is not None]
    assert text.count('class="mark"') == len(run) + 1
    assert len(re.findall(r"<tr><td>\d+</td>", text)) == sum(o["rank"] is not None for o in options)
    assert f"<strong>{data['headline']}</strong>" in text


def test_the_saved_json_draws_the_same_section(
    page: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    html, data = page
    saved = tmp_path / "advise.json"
    saved.write_text(json.dumps(data))
    again = tmp_path / "again.html"
    code, _, err = run_cli(["report", "--from", f"advise-workload={saved}", "-o", str(again)])
    assert code == 0, err
    section = re.compile(r'<section id="advise-workload">.*</section>', re.S)
    first, second = section.search(html.read_text()), section.search(again.read_text())
    assert first and second and first.group(0) == second.group(0)


@pytest.mark.browser
def test_the_chart_lays_out_in_chromium(page: tuple[Path, dict[str, object]]) -> None:
    chromium = Chromium()
    try:
        report = chromium.load(page[0], MEASURE_CHARTS)
    finally:
        chromium.close()
    assert report.problems == []
    (chart,) = report.value
    assert chart["title"] == "Each option's TTFT p90 and throughput against the baseline"
    assert chart["width"] > 300 and chart["height"] > 100
    assert chart["marks"] == chart["drawn"] > 10
