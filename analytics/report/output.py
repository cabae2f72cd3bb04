"""Write a report to files: ``gpuledger-<week>.json``, ``.md``, ``.html`` and a folder
``gpuledger-<week>-csv/``; each file written atomically (a temporary name, then a rename)."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analytics.report.model import Report

FORMATS = ("json", "csv", "md", "html")


def _safe(week: str) -> str:
    """The week label as a file-name part: no separators, no dot files, no ``..`` (the names
    analytics.report.served serves)."""
    return re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "_", week)).strip(".") or "report"


def file_stem(week: str) -> str:
    """The stem of a window's report files: ``gpuledger-<week as a file-name part>``."""
    return f"gpuledger-{_safe(week)}"


def focus_dir(out_dir: Path, week: str) -> Path:
    """The folder of a window's FOCUS files (``gpuledger report --focus``; analytics.report.focus)."""
    return out_dir / f"gpuledger-{_safe(week)}-focus"


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` (UTF-8; a string or its pieces in order, each written as it comes) next to
    ``path`` under a temporary name, then rename it into place: a reader sees the old file or the
    new one, never half of one. Permissions follow the umask."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="", buffering=1 << 16) as f:
            if isinstance(text, str):
                f.write(text)
            else:
                f.writelines(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write(report: Report, formats: list[str], out_dir: Path) -> list[Path]:
    """Render ``report`` in each of ``formats`` (json, csv, md, html) into ``out_dir`` (created);
    returns the files written, in the order asked. An unknown format is a ValueError, before any write."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format {', '.join(map(repr, unknown))}; choose from {', '.join(FORMATS)}")
    # the renderers are imported on the first write, not with FORMATS (which the settings check)
    from analytics.report.csvio import to_csv
    from analytics.report.html import to_html
    from analytics.report.jsonio import to_json
    from analytics.report.markdown import to_markdown

    single: dict[str, Callable[[Report], str | Iterable[str]]] = {"json": to_json, "md": to_markdown, "html": to_html}
    out_dir.mkdir(parents=True, exist_ok=True)
    stem, written = f"gpuledger-{_safe(report.week)}", []
    for fmt in dict.fromkeys(formats):
        if fmt == "csv":
            folder = out_dir / f"{stem}-csv"
            folder.mkdir(exist_ok=True)
            for name, text in to_csv(report).items():
                write_atomic(folder / name, text)
                written.append(folder / name)
        else:
            path = out_dir / f"{stem}.{fmt}"
            write_atomic(path, single[fmt](report))
            written.append(path)
    return written
