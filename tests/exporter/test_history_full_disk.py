"""A full disk is not damage (issue 24): on a real 512 KiB tmpfs, filled up, the exporter's history
writer opening an intact history there (SQLite cannot make its -wal and -shm files: "disk I/O
error") says the disk may be full, keeps the file where it is, and writes again, old rows intact,
once space returns. Before this, the file was called damaged, moved aside, and a new empty history
started: 120 rows of history lost.

The scenario runs as a child in a mount namespace of its own (tests/support/full_disk.py), so no
mount is left behind whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _unshare() -> list[str]:
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("unshare (util-linux) is not installed")
    as_root = [tool, "-m", "--propagation", "private"]
    probe = subprocess.run([*as_root, "true"], capture_output=True, timeout=30)
    if probe.returncode == 0:
        return as_root
    user_ns = [tool, "-r", "-m", "--propagation", "private"]  # a user namespace: root there, not here
    if subprocess.run([*user_ns, "true"], capture_output=True, timeout=30).returncode == 0:
        return user_ns
    pytest.skip(f"no mount namespace here (unshare: {probe.stderr.decode(errors='replace').strip()})")


@pytest.mark.integration
def test_a_full_disk_keeps_the_history_and_writing_resumes(tmp_path: Path) -> None:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [*_unshare(), sys.executable, "-m", "tests.support.full_disk", str(mount)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout)
    assert seen["up_when_full"] is False
    assert not [f for f in seen["files_when_full"] if ".damaged-" in f]  # nothing moved aside
    (said,) = [line for line in seen["log"] if "history off" in line]
    assert "cannot read it now: disk I/O error (a full disk or a failing one: the history is kept" in said
    assert not any("damaged" in line or "new history" in line for line in seen["log"])
    assert seen["up_after"] is True and any("open again" in line for line in seen["log"])
    assert seen["rows"] == 2 * 60 + 2  # the hour written before, and the minute kept while the disk was full
