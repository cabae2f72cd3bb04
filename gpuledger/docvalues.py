"""Figures in the prose docs that the code defines, kept in step by generation.

A page marks a value as ``<!-- value: NAME -->...<!-- /value -->``; ``render`` puts the code's
current value between the marks. ``python -m gpuledger.docvalues`` rewrites the pages in place
(``--check`` only says which are stale, exit 1); tests/product/test_docs.py fails when a page is stale or
names a value this table does not have.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from exporter.config import HistorySettings
from exporter.history import schema

_MARK = re.compile(r"<!-- value: ([a-z_]+) -->(.*?)<!-- /value -->", re.S)


def _history_tables() -> str:
    """Each table of the current schema with its columns, as a Markdown list."""
    with tempfile.TemporaryDirectory() as d:
        db = schema.connect(Path(d) / "h.db")
        try:
            query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            tables = [r[0] for r in db.execute(query)]
            lines = []
            for t in tables:
                cols = ", ".join(r[1] for r in db.execute(f"PRAGMA table_info({t})"))
                lines.append(f"- `{t}({cols})`")
        finally:
            db.close()
    return "\n" + "\n".join(lines) + "\n"


def _history_versions() -> str:
    """The committed files of old versions that must migrate intact."""
    return ", ".join(f"`tests/data/history-v{v}.sqlite`" for v in range(1, schema.SCHEMA_VERSION + 1))


VALUES: dict[str, Callable[[], str]] = {
    "history_user_version": lambda: str(schema.SCHEMA_VERSION),
    "history_tables": _history_tables,
    "history_version_files": _history_versions,
    "history_retention_days": lambda: str(HistorySettings.model_fields["retention_days"].default),
}


def render(text: str) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in VALUES:
            raise KeyError(f"unknown doc value {name!r} (known: {', '.join(VALUES)})")
        return f"<!-- value: {name} -->{VALUES[name]()}<!-- /value -->"

    return _MARK.sub(value, text)


def marked(text: str) -> list[str]:
    return [m.group(1) for m in _MARK.finditer(text)]


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[1]
    stale = []
    for page in pages(root):
        text = page.read_text()
        new = render(text)
        if new != text:
            stale.append(page)
            if "--check" not in args:
                page.write_text(new)
    for page in stale:
        print(f"{'stale' if '--check' in args else 'updated'}: {page.relative_to(root)}")
    return 1 if stale and "--check" in args else 0


if __name__ == "__main__":
    sys.exit(main())
