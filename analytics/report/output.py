"""Write a report to files: ``gpuledger-<week>.json``, ``.md``, ``.html`` and a folder
``gpuledger-<week>-csv/``; each file written atomically (a temporary name, then a rename)."""

from __future__ import annotations

import gc
import os
import re
import secrets
import threading
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


BESIDE_ROWS = 20_000  # rows from which the CSV folder is written in a child process (write)


def write(report: Report, formats: list[str], out_dir: Path) -> list[Path]:
    """Render ``report`` in each of ``formats`` (json, csv, md, html) into ``out_dir`` (created);
    returns the files written, in the order asked. An unknown format is a ValueError, before any write.

    A large report (``BESIDE_ROWS`` rows or more) in a process with one thread (``gpuledger
    report``) has its CSV folder written by a forked child on the other core while this process
    writes the other files: the two biggest renderings (1.7 s and 1.1 s at 10,000 GPUs) at once.
    The child only saves time: where it fails, this process writes the folder itself, and raises
    what that raises; where it cannot fork, everything is written here, one file after another."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format {', '.join(map(repr, unknown))}; choose from {', '.join(FORMATS)}")
    # the renderers are imported on the first write, not with FORMATS (which the settings check)
    from analytics.report.csvio import FILES
    from analytics.report.html import to_html
    from analytics.report.jsonio import json_pieces
    from analytics.report.markdown import to_markdown

    single: dict[str, Callable[[Report], str | Iterable[str]]] = {
        "json": json_pieces,  # written as it is made (a 10,000-GPU week's file is 73 MB)
        "md": to_markdown,
        "html": to_html,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    stem, written = f"gpuledger-{_safe(report.week)}", []
    order = list(dict.fromkeys(formats))
    folder = out_dir / f"{stem}-csv"
    if "csv" in order:
        folder.mkdir(exist_ok=True)
    child = _beside(lambda: _write_csv(report, folder)) if "csv" in order and _parallel(report, order) else None
    try:
        for fmt in order:
            if fmt == "csv":
                if child is None:
                    _write_csv(report, folder)
                written += [folder / name for name in FILES]
            else:
                path = out_dir / f"{stem}.{fmt}"
                write_atomic(path, single[fmt](report))
                written.append(path)
    finally:
        done = child is not None and _joined(child)
    if child is not None and not done:  # written again here: the same files, or this process's error
        _write_csv(report, folder)
    return written


def _write_csv(report: Report, folder: Path) -> None:
    from analytics.report.csvio import csv_pieces

    for name, pieces in csv_pieces(report):
        write_atomic(folder / name, pieces)


def _parallel(report: Report, order: list[str]) -> bool:
    """Whether to write the CSV folder in a child: a large report, another format beside it, and
    one thread here (a fork copies only the calling thread: a lock another thread held would
    never be released in the child)."""
    return len(order) > 1 and len(report.rows) >= BESIDE_ROWS and _single_threaded()


def _single_threaded() -> bool:
    return hasattr(os, "fork") and threading.active_count() == 1


def _beside(work: Callable[[], None]) -> int | None:
    """A forked child that does ``work`` and exits (0 when it is done, 1 on any error, with no
    message: the caller does the work again and reports); its pid, or None where fork fails."""
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    code = 1
    try:
        gc.disable()  # short-lived: a collection would only copy the parent's pages it visits
        work()
        code = 0
    finally:
        os._exit(code)  # no exit handlers run, no buffer of the parent written twice


def _joined(pid: int) -> bool:
    """Whether the child ``pid`` did its work; waits for it (not known where it was reaped
    elsewhere, SIGCHLD ignored: then the work is done again)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return False
    return os.waitstatus_to_exitcode(status) == 0
