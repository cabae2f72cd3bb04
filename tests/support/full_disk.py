"""The full-disk scenario of tests/exporter/test_history_full_disk.py, run as a child in a mount
namespace of its own (``unshare -m``): a real tmpfs of 512 KiB holds an intact history, the rest
of it is filled with a file, and the exporter's history writer opens the history there. Prints
what it saw as one JSON object.

    unshare -m --propagation private python -m tests.support.full_disk MOUNTPOINT
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from exporter import history
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, MinuteRow

T0 = 1_800_000_000
DEVS = [DeviceInfo(i, f"GPU-{i}", "NVIDIA H200", f"0000:{i:02x}:00.0") for i in range(2)]


def rows(first: int, minutes: int) -> list[MinuteRow]:
    return [
        MinuteRow(first + 60 * m, d, dict.fromkeys(ROLLUP_FIELDS, 30.0) | {"sampled_seconds": 60.0})
        for m in range(minutes)
        for d in DEVS
    ]


def fill(path: Path) -> None:
    """Write zeros until the file system says it is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def main(mount: Path) -> dict[str, object]:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)
    path = mount / "history.db"
    db = history.connect(path)
    with history.transaction(db):
        history.insert_minutes(db, rows(T0, 60), "node")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()  # the last connection: -wal and -shm are removed, and must be made again to open it
    filler = mount / "filler"
    fill(filler)

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logging.getLogger("exporter.history").addHandler(Keep())
    logging.getLogger("exporter.history").setLevel(logging.INFO)
    w = history.HistoryWriter(path, hostname="node")
    up_when_full = w.stats().up
    files_when_full = sorted(p.name for p in mount.iterdir())
    w.submit(rows(T0 + 3600, 1))
    w._drain()
    w._write()  # kept for later: nothing to write into
    filler.unlink()  # space returns
    w._check()  # the periodic check opens it again
    w.submit([])
    w._drain()
    w._write()
    up_after = w.stats().up
    w.stop()
    db = history.connect(path, readonly=True)
    count = db.execute("SELECT count(*) FROM gpu_minutes").fetchone()[0]
    db.close()
    return {
        "up_when_full": up_when_full,
        "files_when_full": files_when_full,
        "up_after": up_after,
        "rows": count,
        "log": seen,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
