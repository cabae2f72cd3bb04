"""The report files the analytics daemon serves under /reports/, read without trusting the folder.

Only names the report writer produces (:func:`analytics.report.output.write`) are served:
``gpuledger-<label>.{html,json,md}``, ``gpuledger-<label>-csv/<table>.csv`` with ``<table>`` one
of the CSV tables a report has, and ``gpuledger-<label>-focus/<grouping>.csv`` (the FOCUS export:
a file of the report's own rows or of a grouping FOCUS writes, analytics.report.groupings).
Each path part is opened relative to the folder above it with
``O_NOFOLLOW``, so neither a symlinked file nor a symlinked subfolder is followed, and only after
``lstat`` says it is a regular file (a FIFO or a device is never opened). Anything else is refused
with a short reason, never an exception.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from analytics.report.csvio import TABLES
from analytics.report.groupings import is_focus_stem

TYPES = {
    "html": "text/html; charset=utf-8",
    "json": "application/json",
    "md": "text/markdown; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
}
_LABEL = r"(?!.*\.\.)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,79}"  # what output._safe makes of a label, bounded
_FILE = re.compile(rf"gpuledger-{_LABEL}\.(html|json|md)")
_FOLDER = re.compile(rf"gpuledger-{_LABEL}-csv")
_CSV = re.compile(rf"({'|'.join(TABLES)})\.(csv)")
_FOCUS_FOLDER = re.compile(rf"gpuledger-{_LABEL}-focus")  # analytics.report.focus: <grouping>.csv
_FOCUS_CSV = re.compile(r"([A-Za-z0-9_-]{1,86})\.(csv)")  # <stem>.csv, a stem of analytics.report.groupings
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_SHOWN = 60  # characters of a refused path shown in the log


def content_type(rel: str) -> str | None:
    """The content type of ``rel`` (a path under /reports/) if it is a name the daemon serves."""
    parts = rel.split("/")
    if len(parts) == 1 and (m := _FILE.fullmatch(parts[0])):
        return TYPES[m[1]]
    if len(parts) == 2 and _FOLDER.fullmatch(parts[0]) and (m := _CSV.fullmatch(parts[1])):
        return TYPES[m[2]]
    if len(parts) == 2 and _FOCUS_FOLDER.fullmatch(parts[0]) and (m := _FOCUS_CSV.fullmatch(parts[1])):
        return TYPES[m[2]] if is_focus_stem(m[1]) else None
    return None


def report_part(rel: str) -> tuple[str, str] | None:
    """A served name as (the report's file stem ``gpuledger-<label>``, what of it): ``html``,
    ``json``, ``md``, ``csv/<table>.csv`` or ``focus/<stem>.csv``; None for a name not served."""
    if content_type(rel) is None:
        return None
    parts = rel.split("/")
    if len(parts) == 1:
        stem, _, ext = parts[0].rpartition(".")
        return stem, ext
    folder, name = parts
    stem, _, kind = folder.rpartition("-")
    return stem, f"{kind}/{name}"


def read_private(folder: Path, name: str) -> bytes | None:
    """The bytes of the daemon's own file ``name`` (a dot file, never served) in ``folder``, read
    as :func:`read` reads a report (no symlink, a regular file only); None when it cannot be."""
    fds: list[int] = []
    try:
        fds.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        fds.append(_open(name, fds[-1], folder=False))
        with open(fds[-1], "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def shown(rel: str) -> str:
    """``rel`` as it may appear in a log line: escaped (ASCII, no control characters) and short."""
    return ascii(rel[:_SHOWN]) + (f"... ({len(rel)} characters)" if len(rel) > _SHOWN else "")


def _open(name: str, dir_fd: int, folder: bool) -> int:
    """An fd of the regular file (or the folder) ``name`` in ``dir_fd``, never through a symlink and
    never opening anything else (a FIFO would block, a device could act); OSError otherwise."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "a symlink")
    is_it = stat.S_ISDIR if folder else stat.S_ISREG
    if not is_it(st.st_mode):
        raise OSError(errno.EINVAL, "not a folder" if folder else "not a regular file")
    fd = os.open(name, _DIR_FLAGS if folder else _FILE_FLAGS, dir_fd=dir_fd)  # O_NOFOLLOW, O_NONBLOCK
    if not is_it(os.fstat(fd).st_mode):  # swapped for something else since the stat (a new report is fine)
        os.close(fd)
        raise OSError(errno.EINVAL, "not a folder" if folder else "not a regular file")
    return fd


def read(folder: Path, rel: str) -> tuple[bytes, str] | str:
    """The bytes and content type of report file ``rel`` in ``folder``, or why it is refused."""
    ctype = content_type(rel)
    if ctype is None:
        return "not a report file name"
    *subs, name = rel.split("/")
    fds: list[int] = []
    try:
        fds.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))  # the configured folder
        for sub in subs:
            fds.append(_open(sub, fds[-1], folder=True))
        fds.append(_open(name, fds[-1], folder=False))
        with open(fds[-1], "rb", closefd=False) as f:
            return f.read(), ctype
    except OSError as e:
        return "a symlink" if e.errno == errno.ELOOP else (e.strerror or type(e).__name__).lower()
    finally:
        for fd in fds:
            os.close(fd)


def listing(folder: Path) -> list[str]:
    """The top-level report files of ``folder`` that :func:`read` serves (for the landing page)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return sorted(e.name for e in entries if content_type(e.name) and e.is_file(follow_symlinks=False))
