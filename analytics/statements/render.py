"""A statement as files for the team's own mailer: one self-contained HTML page (inline CSS, no
script, no URL, the report's look), Markdown and CSV, named
``statement-<grouping>-<key>-<period>.<ext>``; and a job's figures as text."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import itertools
import re
import zoneinfo
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import jinja2

from analytics.report.csvio import neutralise
from analytics.report.html import TEMPLATES
from analytics.report.markdown import md_escape, md_table_lines
from analytics.report.output import write_atomic
from analytics.report.text import DASH, co2e, hours, kwh, money, pct
from analytics.statements.job import JobFigures, stalled_share
from analytics.statements.statement import JobLine, Statement
from daemonkit.pages import environment, visible

FORMATS = ("html", "md", "csv")
KEY_CHARS = 48  # of a key in a file name; a key changed to fit gets a hash of the original


def safe_key(key: str) -> str:
    """``key`` as a file-name part: letters, digits, ``_ . -`` only, no ``..``, no leading dot,
    at most ``KEY_CHARS`` characters; where that changed it, a hash of the original follows, so
    two keys never share a file (``a/b`` and ``a_b``)."""
    clean = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "_", key)).strip(".")[:KEY_CHARS]
    if clean == key and clean:
        return clean
    return f"{clean or '_'}-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def stem(st: Statement) -> str:
    return f"statement-{st.grouping}-{safe_key(st.key)}-{safe_key(st.window.label)}"


def _local(t: float, timezone: str) -> str:
    return dt.datetime.fromtimestamp(t, zoneinfo.ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M")


HEADERS = [
    "Job",
    "User",
    "Partition",
    "State",
    "GPUs",
    "Held",
    "Charged",
    "Busy",
    "SM-active",
    "Stalled",
    "Energy",
    "Cost",
    "Idle cost",
]
NUMERIC = [False, False, False, False, True, True, True, True, True, True, True, True, True]


def _cells(x: JobLine, currency: str) -> list[str]:
    r = x.row
    return [
        x.job,
        x.user,
        x.partition or DASH,
        x.state or DASH,
        str(r.gpus),
        hours(r.allocated_gpu_hours),
        hours(r.sampled_gpu_hours),
        pct(r.utilization),
        pct(r.sm_activity),
        pct(stalled_share(r)),
        kwh(r.energy_kwh),
        money(r.total_cost, currency),
        money(r.idle_cost, currency),
    ]


def title(st: Statement) -> str:
    return f"GPU statement: {st.grouping} {st.key}, {st.window.label}"


def summary(st: Statement) -> list[tuple[str, str]]:
    t, c = st.totals, st.currency
    return [
        ("Jobs", str(t.jobs)),
        ("Total cost", money(t.total_cost, c)),
        ("Hardware", money(t.hardware_cost, c)),
        ("Energy cost", money(t.energy_cost, c)),
        ("Idle cost", money(t.idle_cost, c)),
        ("Failed-job cost", money(t.failed_cost, c)),
        ("GPU-hours held", hours(t.held_gpu_hours)),
        ("GPU-hours charged", hours(t.charged_gpu_hours)),
        ("Busy", pct(t.busy_gpu_hours / t.charged_gpu_hours if t.charged_gpu_hours > 0 else None)),
        ("Stalled", hours(t.stalled_gpu_hours)),
        ("Energy", kwh(t.energy_kwh)),
        ("Emissions", co2e(t.co2e_kg)),
    ]


def _period(st: Statement) -> str:
    w = st.window
    return f"{_local(w.start, w.timezone)} to {_local(w.end, w.timezone)} ({w.timezone}), source {st.source}"


_HTML = """{% extends "base.html" %}
{% from "macros.html" import cards, table_end, table_row, table_start %}
{% block body %}
<header><h1>{{ page_title }}</h1><p class="meta">{{ period }}</p></header>
{% if reasons %}<p class="flag">Incomplete: {{ reasons }}</p>{% endif %}
<section id="totals"><h2>Totals</h2>{{ cards(summary) }}</section>
{% if advice %}<section id="advice"><h2>Scaling</h2><ul>{% for a in advice %}<li>{{ a }}</li>{% endfor %}</ul>
</section>{% endif %}
<section id="jobs"><h2>Jobs</h2>
{% if any_rows %}{{ table_start(headers, numeric) }}
{%- for row in rows %}{{ table_row(row, numeric) }}{% endfor %}{{ table_end() }}
{%- else %}<p class="empty">No jobs in this period.</p>{% endif %}
</section>
{% if notes %}<section id="notes"><h2>Notes</h2><ul>{% for x in notes %}<li>{{ x }}</li>{% endfor %}</ul>
</section>{% endif %}
<footer>gpuledger statement · {{ dash }} = not measured by this source · money in {{ currency }}</footer>
{% endblock %}
"""


def to_html(st: Statement) -> str:
    return "".join(html_chunks(st))


def html_chunks(st: Statement) -> Iterator[str]:
    """The page, in pieces as the template makes them: a row's cells exist only while it is
    written, so a statement of 66,000 jobs never holds its page whole. Self-contained like the
    report: the shared base (inline CSS, a CSP that forbids scripts and loads), every value
    escaped by the template."""
    return _html_template().generate(
        generator="gpuledger statement",
        page_title=title(st),
        period=_period(st),
        reasons="; ".join(st.incomplete_reasons) if not st.complete else "",
        summary=summary(st),
        advice=st.advice,
        headers=HEADERS,
        any_rows=bool(st.jobs),
        rows=(_cells(x, st.currency) for x in st.jobs),
        numeric=NUMERIC,
        notes=st.notes,
        dash=DASH,
        currency=st.currency,
    )


@cache
def _html_template() -> jinja2.Template:
    """Compiled once: a month's statements are thousands of pages of one template."""
    return environment(TEMPLATES).from_string(_HTML)


def to_markdown(st: Statement) -> str:
    return "".join(markdown_chunks(st))


def markdown_chunks(st: Statement) -> Iterator[str]:
    """The Markdown file line by line (a newline before each line but the first)."""
    head = [f"# {md_escape(title(st))}", "", md_escape(_period(st)), ""]
    if not st.complete:
        head += [f"**Incomplete:** {md_escape('; '.join(st.incomplete_reasons))}", ""]
    head += ["## Totals", "", *md_table_lines(["Figure", "Value"], [list(kv) for kv in summary(st)], [False, True]), ""]
    if st.advice:
        head += ["## Scaling", "", *(f"- {md_escape(a)}" for a in st.advice), ""]
    head += ["## Jobs", ""]
    rows = (_cells(x, st.currency) for x in st.jobs)
    jobs = itertools.chain(md_table_lines(HEADERS, rows, NUMERIC), [""]) if st.jobs else ["No jobs in this period.", ""]
    tail = ["## Notes", "", *(f"- {md_escape(n)}" for n in st.notes), ""] if st.notes else []
    lines = itertools.chain(head, jobs, tail)
    yield next(lines)
    for line in lines:
        yield "\n" + line


CSV_COLUMNS = (
    "job",
    "user",
    "partition",
    "state",
    "gpus",
    "held_gpu_hours",
    "charged_gpu_hours",
    "busy_gpu_hours",
    "sm_active_gpu_hours",
    "stalled_gpu_hours",
    "useful_gpu_hours",
    "energy_kwh",
    "co2e_kg",
    "hardware_cost",
    "energy_cost",
    "total_cost",
    "idle_cost",
)
TOTAL = "(total)"  # the job cell of the CSV's last row: the sums


def to_csv(st: Statement) -> str:
    return "".join(csv_chunks(st))


CSV_BATCH = 1000  # rows a chunk of the CSV holds


def csv_chunks(st: Statement) -> Iterator[str]:
    """One row per job, then ``(total)``, in chunks of ``CSV_BATCH`` rows; an empty cell is not
    measured; text that a spreadsheet would run as a formula is neutralised (as the report's CSV)."""

    def cell(v: object) -> object:
        return "" if v is None else neutralise(v) if isinstance(v, str) else v

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for i, x in enumerate(st.jobs, 1):
        r = x.row
        w.writerow(
            [
                cell(v)
                for v in (
                    x.job,
                    x.user,
                    x.partition,
                    x.state,
                    r.gpus,
                    r.allocated_gpu_hours,
                    r.sampled_gpu_hours,
                    r.busy_gpu_hours,
                    r.sm_active_gpu_hours,
                    r.stalled_gpu_hours,
                    r.useful_gpu_hours,
                    r.energy_kwh,
                    r.co2e_kg,
                    r.hardware_cost,
                    r.energy_cost,
                    r.total_cost,
                    r.idle_cost,
                )
            ]
        )
        if i % CSV_BATCH == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    t = st.totals
    w.writerow(
        [
            cell(v)
            for v in (
                TOTAL,
                "",
                "",
                "",
                "",
                t.held_gpu_hours,
                t.charged_gpu_hours,
                t.busy_gpu_hours,
                t.sm_active_gpu_hours,
                t.stalled_gpu_hours,
                t.useful_gpu_hours,
                t.energy_kwh,
                t.co2e_kg,
                t.hardware_cost,
                t.energy_cost,
                t.total_cost,
                t.idle_cost,
            )
        ]
    )
    yield buf.getvalue()


_CHUNKS = {"html": html_chunks, "md": markdown_chunks, "csv": csv_chunks}


def write(st: Statement, formats: list[str], folder: Path) -> list[Path]:
    """The statement in each of ``formats`` into ``folder`` (created), each file atomically and
    streamed: written as it is made, never held whole."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown statement format {', '.join(map(repr, unknown))}; choose from {', '.join(FORMATS)}")
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in dict.fromkeys(formats):
        path = folder / f"{stem(st)}.{fmt}"
        write_atomic(path, _CHUNKS[fmt](st))
        out.append(path)
    return out


def job_text(f: JobFigures) -> str:
    """The job's figures as ``gpuledger job`` prints them (like seff)."""
    r, c = f.row, f.currency
    tz = f.window.timezone
    lines = [
        f"Job: {f.job}",
        f"User: {f.user or DASH}"
        + (f"   Account: {f.account}" if f.account else "")
        + (f"   Namespace: {f.namespace}" if f.namespace else "")
        + (f"   Partition: {f.partition}" if f.partition else ""),
        f"Ran: {_local(f.start, tz)} to {_local(f.end, tz)} ({tz})",
        f"GPUs: {f.gpus}",
        f"GPU-hours held: {hours(r.allocated_gpu_hours)}   charged: {hours(r.sampled_gpu_hours)}",
        f"Busy: {pct(r.utilization)}   SM-active: {pct(r.sm_activity)}   Stalled: {pct(f.stalled_share)}"
        f"   Idle: {pct(f.idle_share)}",
        f"Energy: {kwh(r.energy_kwh)}" + (f"   Emissions: {co2e(r.co2e_kg)}" if r.co2e_kg is not None else ""),
        f"Cost: {money(r.total_cost, c)} (hardware {money(r.hardware_cost, c)}, energy {money(r.energy_cost, c)});"
        f" idle {money(r.idle_cost, c)}",
        f"Efficiency: {f.verdict}",
    ]
    if f.advice:
        lines.append(f"Scaling: {f.advice}")
    return visible("\n".join(lines))  # a name's terminal escapes printed as text, not run by the terminal
