"""A :class:`Report` as Markdown: the same sections and cells as the HTML page (analytics.report.text)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from analytics.report.model import Report
from analytics.report.text import EXAMPLE_PRICES, facts, headline, subtitle, summary, tables, title
from daemonkit.pages import visible

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&#])")


def md_escape(text: str) -> str:
    """Backslash-escape what could break a table cell or start markup (pipes, HTML, links);
    line breaks become spaces, control characters visible text (``daemonkit.pages.visible``)."""
    return _MD_SPECIAL.sub(r"\\\1", visible(" ".join(text.splitlines())))


def md_table_lines(headers: list[str], rows: Iterable[list[str]], numeric: list[bool]) -> Iterator[str]:
    """A Markdown table line by line, each row's line made as it is asked."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(md_escape(c) for c in cells) + " |"

    yield line(headers)
    yield "|" + "|".join("--:" if right else "---" for right in numeric) + "|"
    yield from map(line, rows)


def to_markdown(report: Report) -> str:
    r, out = report, []
    out += [f"# {md_escape(title(r))}", "", md_escape(subtitle(r)), "", md_escape(facts(r)), ""]
    if not r.complete:
        out += ["> **⚠ INCOMPLETE:** parts of this week could not be read; figures below are partial.", ">"]
        out += [f"> - {md_escape(reason)}" for reason in r.incomplete_reasons] + [""]
    out += [line for x in r.window_notes() for line in (f"> **ⓘ** {md_escape(x)}", "")]
    if r.example_prices:
        out += [f"> **{md_escape(EXAMPLE_PRICES)}**", ""]
    out += ["## Headline", "", md_escape(summary(r)), ""]
    out += [*md_table_lines(["Figure", "Value"], [list(kv) for kv in headline(r)], [False, True]), ""]
    for t in tables(r):
        out += [f"## {md_escape(t.title)}", ""]
        out += [*md_table_lines(t.headers, t.rows, t.numeric()), ""] if t.rows else [md_escape(t.empty), ""]
    for heading, items in (("Approximations", r.approximations), ("Notes", r.notes)):
        if items:
            out += [f"## {heading}", "", *(f"- {md_escape(x)}" for x in items), ""]
    out += [f"_{md_escape(r.schema)}_", ""]
    return "\n".join(out)
