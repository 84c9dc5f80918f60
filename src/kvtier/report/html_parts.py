"""Building blocks of the HTML report: sections, tables, figures and log-line excerpts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from kvtier.report.explain_payload import LogSource


@dataclass(frozen=True, slots=True)
class Section:
    """One titled part of the report; `body` is trusted HTML built by this module."""

    key: str
    title: str
    body: str

    def toc_entry(self) -> str:
        return f'<li><a href="#{self.key}">{escape(self.title)}</a></li>'

    def html(self) -> str:
        return f'<section id="{self.key}"><h2>{escape(self.title)}</h2>{self.body}</section>'


def tokens(value: float) -> str:
    return f"{int(value):,}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """A plain table; cells are escaped here, so callers pass text, never markup."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(heading: str, svg: str, caption: str) -> str:
    return (
        f'<figure class="chart-figure"><h3>{escape(heading)}</h3>{svg}'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


LINE_EXCERPT = 150  # characters of a long log line shown; its line number leads to the rest


def excerpt(text: str, value: object) -> str:
    """A long log line cut around where it states `value` (as `=value` or `='value'`)."""
    if len(text) <= LINE_EXCERPT:
        return text
    at = max(text.find(f"={value}"), text.find(f"='{value}'"), 0)
    start = max(0, min(at - LINE_EXCERPT // 3, len(text) - LINE_EXCERPT))
    cut = text[start : start + LINE_EXCERPT]
    return ("..." if start else "") + cut + ("..." if start + LINE_EXCERPT < len(text) else "")


def source_text(source: str | LogSource | None, value: object = None) -> str:
    """A source as text: a formula string, or a log line excerpted around `value`."""
    if not isinstance(source, LogSource):
        return str(source or "")
    where = f"line {source.line}: " if source.line is not None else ""
    return where + excerpt(source.text, value)
