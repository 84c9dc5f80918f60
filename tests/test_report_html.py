"""HTML report: built from --json payloads, self-contained, small, numbers traceable to the data."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.errors import KvtierError
from kvtier.payload import from_json
from kvtier.report.charts import Segment, Series, line_chart, nice_ticks, pow2_ticks, stacked_bar
from kvtier.report.explain_payload import ExplainPayload, LogSource
from kvtier.report.html import render_html, write_html
from kvtier.report.html_memory import memory_section
from kvtier.report.html_parts import LINE_EXCERPT, excerpt, source_text
from kvtier.report.html_sections import sections_for
from kvtier.sim.payload import SimulatePayload
from report_cases import explanation_of_rows, fixture, payload, plan_of_rows


@pytest.fixture
def founding(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "report.html"
    write_html(
        path,
        {
            "explain": payload("explain", "explain-seed.json"),
            "simulate": payload("simulate", "simulate-sweep.json"),
        },
        title="founding",
    )
    return path, path.read_text()


def test_report_is_one_small_self_contained_file(founding: tuple[Path, str]) -> None:
    path, html = founding
    assert path.stat().st_size < 1_000_000
    assert "<script" not in html
    # Only in-page anchors; the one URL is the SVG namespace, which browsers never fetch.
    assert re.findall(r'(?:src|href)="([^"]*)"', html) == [
        f"#{key}"
        for key in (
            "explain-summary",
            "explain-memory",
            "explain-capacity",
            "explain-inputs",
            "simulate",
        )
    ]
    assert set(re.findall(r"https?://[^\"' ]+", html)) == {"http://www.w3.org/2000/svg"}
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "@media print" in html


def test_founding_numbers_reach_the_page(founding: tuple[Path, str]) -> None:
    _, html = founding
    assert "159,277" in html and "159,294 (+17)" in html
    # At 32k context: the log's 159,277 tokens -> 4 requests; fraction 0.90's 188,033 -> 5;
    # FP8's 318,589 -> 9; host ratio 4 caches 159,294 + 637,177 tokens -> 24 contexts.
    concurrency = html[html.index('<table class="concurrency">') :].split("</table>")[0]
    headers = re.findall(r"<th>([^<]*)</th>", concurrency)
    row = re.search(r"<tr><td>32k</td>(.*?)</tr>", concurrency)
    assert row is not None
    at_32k = dict(zip(headers[1:], re.findall(r"<td>([^<]*)</td>", row.group(1)), strict=True))
    assert at_32k["now"] == "4"
    assert at_32k["--mem-fraction-static 0.90"] == "5"
    assert at_32k["KV cache fp8_e4m3 = KV cache fp8_e5m2"] == "9"
    assert at_32k["HiCache ratio 4: contexts cached in GPU + host"] == "24"
    assert "Same requests as now at every length: HiCache ratio 2, HiCache ratio 4" in html
    assert html.count('class="chart"') == 6  # two memory bars, capacity, three simulation


def bar_widths(svg: str) -> list[float]:
    return [float(w) for w in re.findall(r'class="mark" x="[^"]+" y="[^"]+" width="([^"]+)"', svg)]


def test_log_ledger_bar_spans_the_base_and_brackets_the_reserve() -> None:
    memory = next(
        s
        for s in sections_for("explain", payload("explain", "explain-seed.json"))
        if s.key == "explain-memory"
    )
    # The base (94.04 free before load) is the whole bar, the reserve a bracket, not pieces:
    # weights, KV pool, allocated with the pool, draft KV, free add up to 94.04.
    widths = bar_widths(memory.body.split("</svg>")[0])
    pieces = [72.33, 10.42, 0.11, 0.60, 10.58]
    assert widths == pytest.approx([g * 740 / 94.04 for g in pieces], abs=0.01)
    assert "free before load (the fraction&#x27;s base) = 94.04 GiB" in memory.body
    assert "reserve: (1 - 0.88) x free before load: 11.28 GiB" in memory.body
    assert "free, unused by the engine: 10.58 GiB" in memory.body
    assert "draft weights (no &#x27;Load weight end&#x27; line" in memory.body


def test_plan_ledger_bar_is_the_card_and_the_reserve_follows_the_pool() -> None:
    ledger = [
        {"item": "weights", "gib": 60.0},
        {"item": "KV cache pool", "gib": 10.0},
        {"item": "CUDA graphs", "gib": 1.0},
        {"item": "free at end of startup", "gib": 9.0},
    ]
    memory = memory_section("plan", plan_of_rows(ledger, engine="sglang", mem_fraction=0.8))
    assert bar_widths(memory.body.split("</svg>")[0]) == pytest.approx([555, 92.5, 9.25, 83.25])
    assert "reserve 10.00 GiB = (1 - 0.8) x free before load" in memory.body
    assert "free, unused by the engine: 9.00 GiB" in memory.body
    assert "Memory of one GPU: 80.00 GiB" in memory.body


def test_missing_key_is_refused_by_name() -> None:
    saved = fixture("explain-seed.json")
    del saved["ledger"]
    with pytest.raises(KvtierError, match=r"^no `ledger`$"):
        from_json(ExplainPayload, saved)
    broken = fixture("simulate-sweep.json")
    del broken["sweep"]["runs"][2]["hit_rate_by_tier"]
    with pytest.raises(KvtierError, match=re.escape("no `sweep.runs[2].hit_rate_by_tier`")):
        from_json(SimulatePayload, broken)
    with pytest.raises(KvtierError, match="no HTML view for 'trace'"):
        sections_for("trace", payload("explain", "explain-seed.json"))
    with pytest.raises(KvtierError, match="nothing to report"):
        render_html([], title="empty")


def test_text_from_payloads_is_escaped() -> None:
    saved = fixture("explain-seed.json")
    saved["ledger"][0]["item"] = "<script>alert(1)</script>"
    html = render_html(sections_for("explain", from_json(ExplainPayload, saved)), title="x & y")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<title>x &amp; y</title>" in html


def test_single_simulation_run_draws_one_column() -> None:
    run = fixture("simulate-sweep.json")["sweep"]["runs"][3]
    (section,) = sections_for("simulate", from_json(SimulatePayload, run))
    assert section.body.count('class="chart"') == 1
    assert f"{run['hit_rate']:.1%}" in section.body  # the run's hit rate, in the table


def test_untimed_sweep_draws_hit_rates_only() -> None:
    sweep = fixture("simulate-sweep.json")
    for run in sweep["sweep"]["runs"]:
        run["params"] = {sweep["sweep"]["param"]: run.pop("value")}
        run["ttft_s"] = None
    (section,) = sections_for("simulate", from_json(SimulatePayload, sweep))
    assert section.body.count('class="chart"') == 1
    assert section.body.count("<td>untimed</td>") == 3 * 5
    assert re.findall(r"<tr><td>([^<]*)</td>", section.body) == ["0", "1", "2", "4", "8"]


def test_unwritable_path_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(KvtierError, match="cannot write"):
        write_html(
            tmp_path / "missing" / "r.html", {"explain": payload("explain", "explain-seed.json")}
        )


@given(st.lists(st.floats(min_value=0.01, max_value=1e4), min_size=1, max_size=12))
def test_stacked_bar_fills_its_width_exactly(values: list[float]) -> None:
    segments = [Segment(f"s{i}", v, "#000") for i, v in enumerate(values)]
    svg = stacked_bar(segments, title="t", unit="GiB", width=500)
    widths = [
        float(w) for w in re.findall(r'class="mark" x="[^"]+" y="[^"]+" width="([^"]+)"', svg)
    ]
    assert sum(widths) == pytest.approx(480, abs=0.01 * len(values))


@given(st.floats(min_value=-1e6, max_value=1e6), st.floats(min_value=1e-3, max_value=1e6))
def test_nice_ticks_cover_the_range(low: float, span: float) -> None:
    high = low + span
    ticks = nice_ticks(low, high)
    slack = 1e-9 * max(abs(low), abs(high), 1.0)  # float rounding of k * step
    assert ticks[0] <= low + slack and ticks[-1] >= high - slack
    assert 2 <= len(ticks) <= 12


@given(st.floats(min_value=1, max_value=1e7), st.floats(min_value=1, max_value=1e7))
def test_pow2_ticks_cover_the_range(a: float, b: float) -> None:
    low, high = min(a, b), max(a, b)
    ticks = pow2_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high
    assert all(t == 2 ** round(math.log2(t)) for t in ticks)
    assert len(ticks) <= 9


def test_log_axis_leaves_off_points_below_one() -> None:
    series = [Series("now", ((4096, 38.0), (131072, 1.0), (262144, 0.0)), "#000")]
    svg = line_chart(series, title="t", x_label="x", y_label="y", y_log2=True, x_log2=True)
    assert svg.count('class="mark"') == 2


def test_long_log_line_is_cut_around_the_value_it_states() -> None:
    line = (
        "[t] server_args=ServerArgs(" + "x=1, " * 40 + "mem_fraction_static=0.88, " + "y=2, " * 40
    )
    cut = excerpt(line, 0.88)
    assert "mem_fraction_static=0.88" in cut
    assert cut.startswith("...") and cut.endswith("...") and len(cut) == LINE_EXCERPT + 6
    assert excerpt("short line", 0.88) == "short line"
    assert (
        source_text(LogSource(4, "KV Cache is allocated.", None))
        == "line 4: KV Cache is allocated."
    )


def test_negative_item_is_listed_not_drawn_and_a_tiny_pool_draws_no_curve() -> None:
    rows = [
        {"item": "weights", "gib": 20.0},
        {"item": "KV cache pool", "gib": 0.5},
        {"item": "unattributed", "gib": -0.04},
    ]
    plan = plan_of_rows(rows, engine="vllm", kv_tokens=3000, kv_bytes_per_token=1024)
    memory, capacity = sections_for("plan", plan)[1:3]
    assert bar_widths(memory.body) == pytest.approx([740 * 20 / 20.5, 740 * 0.5 / 20.5], abs=0.01)
    assert "Negative, so not drawn: unattributed -0.04 GiB." in memory.body
    assert 'class="chart"' not in capacity.body
    assert "Not one 4k context fits in the KV pool." in capacity.body
    with pytest.raises(KvtierError, match="no memory to draw"):
        sections_for("plan", plan_of_rows([{"item": "weights", "gib": 0.0}], engine="vllm"))


VLLM_ROWS = [
    {"item": "device total", "gib": 79.19, "part": "card"},
    {"item": "outside the budget", "gib": 3.96, "part": "card"},
    {"item": "weights", "gib": 14.99, "part": "card"},
    {"item": "activation peak", "gib": 1.89, "part": "card"},
    {"item": "non-torch increase", "gib": 0.25, "part": "card"},
    {"item": "KV cache budget", "gib": 58.11, "part": "card"},
    {"item": "KV cache blocks allocated", "gib": 58.1074, "part": "card"},
]


def test_overlapping_log_rows_are_listed_not_drawn() -> None:
    section = memory_section("explain", explanation_of_rows(VLLM_ROWS, engine="vllm"))
    assert 'class="chart"' not in section.body
    assert "These rows overlap" in section.body
    assert section.body.count("<tr><td>") == len(VLLM_ROWS)


def test_total_and_note_tags_make_a_bar_of_the_pieces() -> None:
    rows = copy.deepcopy(VLLM_ROWS)
    rows[0]["part"], rows[-1]["part"] = "total", "note"
    section = memory_section("explain", explanation_of_rows(rows, engine="vllm"))
    widths = bar_widths(section.body.split("</svg>")[0])
    assert widths == pytest.approx([740 * g / 79.20 for g in (3.96, 14.99, 1.89, 0.25, 58.11)],
                                   abs=0.01)  # fmt: skip
    assert "Memory of one GPU: device total = 79.19 GiB" in section.body
