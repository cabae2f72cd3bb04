"""The weekly report: its data model and renderers (JSON, CSV, Markdown, self-contained HTML).

The names below are loaded on first use: importing a part of the report (``groupings``, say, as
the settings do) does not import every renderer (jinja2, pydantic's adapters) with it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analytics.report.csvio import to_csv
    from analytics.report.html import landing_page, to_html
    from analytics.report.jsonio import from_json, to_json
    from analytics.report.markdown import to_markdown
    from analytics.report.model import SCHEMA, Report
    from analytics.report.output import FORMATS, write

_HOME = {
    "FORMATS": "output",
    "SCHEMA": "model",
    "Report": "model",
    "from_json": "jsonio",
    "landing_page": "html",
    "to_csv": "csvio",
    "to_html": "html",
    "to_json": "jsonio",
    "to_markdown": "markdown",
    "write": "output",
}
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


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
