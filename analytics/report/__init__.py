"""The weekly report: its data model and renderers (JSON, CSV, Markdown, self-contained HTML)."""

from analytics.report.csvio import to_csv
from analytics.report.html import landing_page, to_html
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import to_markdown
from analytics.report.model import SCHEMA, Report
from analytics.report.output import FORMATS, write

__all__ = [
    "FORMATS",
    "SCHEMA",
    "Report",
    "from_json",
    "landing_page",
    "to_csv",
    "to_html",
    "to_json",
    "to_markdown",
    "write",
]
