"""Binaries and packages a test needs: skipped when missing outside CI, failed in CI."""

from __future__ import annotations

import os
import shutil

import pytest


def promtool_env() -> dict[str, str]:
    """The environment for promtool's batch commands (backfills, rule unit tests): short-lived, so
    Go's collector waits until a GiB is in use instead of running at every doubling. A week's 5-minute
    rollups: 25 s of CPU instead of 46 s; the rollups' rule unit tests 25 s instead of 41 s
    (docs/performance.md, "The suite's time")."""
    return os.environ | {"GOGC": "off", "GOMEMLIMIT": "1GiB"}


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
