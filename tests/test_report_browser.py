"""The HTML report in a real headless chromium: no console errors, every chart laid out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.report.html import CSP, write_html
from report_browser import MEASURE_CHARTS, Chromium
from report_cases import SMALL_SWEEP, founding_log, payload

# the browser mark runs conftest's require_binary("chromium"): a skip without it, a failure in CI
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    chromium = Chromium()
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def founding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "founding.html"
    payloads = {
        "explain": payload("explain", "explain-seed.json"),
        "simulate": payload("simulate", "simulate-sweep.json"),
    }
    write_html(path, payloads, title="founding")
    return path


def test_checker_catches_what_it_must(browser: Chromium, tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!doctype html><body><img src='http://127.0.0.1:9/x.png'>"
        "<script>console.error('boom'); missingFunction();</script>"
        "<svg class='chart'><title>empty</title></svg></body>"
    )
    report = browser.load(bad, MEASURE_CHARTS)
    kinds = sorted(p.split(":")[0] for p in report.problems)
    assert "console.error" in kinds and "exception" in kinds and "network request" in kinds
    assert report.value == [{"title": "empty", "width": 300, "height": 150, "marks": 0, "drawn": 0}]


def test_report_policy_blocks_network_and_script(browser: Chromium, tmp_path: Path) -> None:
    page = tmp_path / "csp.html"
    page.write_text(
        f'<!doctype html><head><meta http-equiv="Content-Security-Policy" content="{CSP}">'
        "</head><body><img src='http://127.0.0.1:9/x.png'><script>console.log(1)</script>"
    )
    problems = browser.load(page, "JSON.stringify(null)").problems
    assert any("violates the following Content Security Policy" in p and "img-src" in p
               for p in problems)  # fmt: skip
    assert any("Executing inline script violates" in p for p in problems)
    assert not any(p.startswith("console.") for p in problems)


def test_founding_report_renders_every_chart(browser: Chromium, founding: Path) -> None:
    report = browser.load(founding, MEASURE_CHARTS)
    assert report.problems == []
    titles = [chart["title"] for chart in report.value]
    assert titles == [
        "Memory of one GPU: free before load (the fraction's base) = 94.04 GiB",
        "After target weights",
        "Concurrent requests by context length",
        "Prefix hit rate by tier",
        "Time to first token",
        "Throughput",
    ]
    for chart in report.value:
        assert chart["width"] > 300 and chart["height"] > 100, chart
        assert chart["marks"] > 0 and chart["drawn"] > 0, chart


def test_print_layout_hides_navigation_and_keeps_charts(browser: Chromium, founding: Path) -> None:
    check = """JSON.stringify({nav: getComputedStyle(document.querySelector('nav')).display,
        charts: [...document.querySelectorAll('svg.chart')]
            .map(s => s.getBoundingClientRect().width)})"""
    report = browser.load(founding, check, media="print")
    assert report.problems == []
    assert report.value["nav"] == "none"
    assert len(report.value["charts"]) == 6 and min(report.value["charts"]) > 300


def test_one_command_report_renders(browser: Chromium, tmp_path: Path) -> None:
    out = tmp_path / "founding.html"
    assert main(["report", str(founding_log()), "-o", str(out), "--simulate", *SMALL_SWEEP]) == 0
    report = browser.load(out, MEASURE_CHARTS)
    assert report.problems == []
    assert len(report.value) == 6
    assert all(c["width"] > 300 and c["drawn"] > 0 for c in report.value), report.value


def test_serving_report_renders_every_chart(browser: Chromium, tmp_path: Path) -> None:
    from test_report_observe import TITLES, serving_log

    log = serving_log(tmp_path / "serving.log")
    out = tmp_path / "serving.html"
    assert main(["report", str(founding_log()), "--observe", str(log), "-o", str(out)]) == 0
    report = browser.load(out, MEASURE_CHARTS)
    assert report.problems == []
    titles = [chart["title"] for chart in report.value]
    assert titles[-4:] == TITLES and len(titles) == 7  # explain's three, then serving's four
    for chart in report.value:
        assert chart["width"] > 300 and chart["height"] > 100, chart
        assert chart["marks"] > 0 and chart["drawn"] == chart["marks"], chart
