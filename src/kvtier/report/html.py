"""A self-contained HTML report: one file, inline styles and SVG, nothing fetched at view time.

`write_html(path, {"explain": payload, "simulate": payload})` is the one entry point the
commands need; the payloads are their typed results (`kvtier.report.payloads`). A
Content-Security-Policy that allows only inline styles and data: images makes the browser
refuse any network load the page might attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from kvtier import __version__
from kvtier.errors import KvtierError
from kvtier.report.html_parts import Section
from kvtier.report.html_sections import sections_for
from kvtier.report.payloads import Payload

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
:root { --ink: #1b1f24; --muted: #57606a; --rule: #d0d7de; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       max-width: 820px; margin: 2rem auto; padding: 0 1rem; background: #fff; }
h1 { font-size: 1.6rem; margin: 0 0 .2rem; }
h2 { font-size: 1.2rem; border-bottom: 1px solid var(--rule); padding-bottom: .2rem;
     margin-top: 2.2rem; }
.byline, figcaption, .unit-note { color: var(--muted); font-size: .85rem; }
nav ol { columns: 2; padding-left: 1.2rem; margin: .6rem 0; }
nav a { color: inherit; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; font-variant-numeric: tabular-nums; font-weight: 600; }
ul.notes { padding-left: 1.2rem; }
figure { margin: 1rem 0 1.2rem; }
h3 { font-size: 1rem; margin: 0 0 .3rem; }
.zoom-title { margin: .8rem 0 0; font-size: .9rem; }
svg.chart { width: 100%; height: auto; display: block; font-size: 12px; }
svg.chart text { fill: var(--ink); }
svg.chart .grid { stroke: #e6e8eb; }
svg.chart .axis-label { fill: var(--muted); }
svg.chart .bar-value { font-weight: 600; fill: inherit; }
table { border-collapse: collapse; width: 100%; margin: .6rem 0 1rem; font-size: .88rem; }
th, td { text-align: left; padding: .25rem .5rem; border-bottom: 1px solid var(--rule);
         vertical-align: top; }
td:nth-child(2), td:nth-child(3) { font-variant-numeric: tabular-nums; }
th { font-weight: 600; background: #f6f8fa; }
@media print {
  body { max-width: none; margin: 0; font-size: 11pt; }
  nav { display: none; }
  section, figure, table { break-inside: avoid; }
  h2 { break-after: avoid; }
  @page { size: A4; margin: 14mm; }
}
"""


def render_html(sections: Sequence[Section], *, title: str) -> str:
    """The whole page as one string, sections in the order given."""
    if not sections:
        raise KvtierError("report: nothing to report")
    toc = "".join(s.toc_entry() for s in sections)
    parts = "".join(s.html() for s in sections)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{escape(title)}</h1>"
        f'<p class="byline">kvtier {escape(__version__)}. GPU memory in GiB (2^30 bytes), '
        "as the engines print it.</p>"
        f"<nav><ol>{toc}</ol></nav></header>{parts}</body></html>\n"
    )


def write_html(
    path: str | Path, payloads: Mapping[str, Payload], *, title: str = "kvtier report"
) -> int:
    """Write one report from `{command: payload}` (plan, advise, explain, observe, simulate).

    Returns the number of bytes written.
    """
    sections = [s for kind, payload in payloads.items() for s in sections_for(kind, payload)]
    data = render_html(sections, title=title).encode()
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise KvtierError(f"report: cannot write {path}: {exc.strerror}") from exc
    return len(data)
