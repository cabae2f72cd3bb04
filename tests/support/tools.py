"""Binaries and packages a test needs: skipped when missing outside CI, failed in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest


def promtool(args: list[str], **run: Any) -> subprocess.CompletedProcess[Any]:
    """Run one of promtool's batch commands (backfills, rule unit tests; ``run`` goes to
    subprocess.run). They are short-lived, so Go's collector waits until a GiB is in use instead of
    running at every doubling: a week's 5-minute rollups take 25 s of CPU instead of 46 s, the
    rollups' rule unit tests 25 s instead of 41 s (docs/performance.md, "promtool's collector")."""
    env = os.environ | {"GOGC": "off", "GOMEMLIMIT": "1GiB"}
    return subprocess.run([require_binary("promtool"), *args], env=env, **run)


def require_binary(name: str) -> str:
    """Path of a binary the test needs. Outside CI a missing one skips with the reason; in CI
    (where .ci/run installs it) a missing one fails."""
    path = shutil.which(name)
    if path:
        return path
    reason = f"{name} not installed (Debian package; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def require_torch() -> None:
    """Skip (fail in CI, where .ci/run installs it) when torch is missing. Never imports it."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        reason = "torch not installed (pip install torch==2.13.0; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
