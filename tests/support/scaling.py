"""Running ``gpuledger scaling`` as a user does, for the tests of tests/product/test_scaling*.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

EXAMPLE = str(REPO / "examples" / "scaling_train.py")
PRICE = 2.0  # per GPU-hour, in the test's config


def config(tmp_path: Path) -> Path:
    path = tmp_path / "gpuledger.toml"
    path.write_text(f'[cost]\ncurrency = "EUR"\n[cost.default]\nkind = "cloud"\nprice_per_gpu_hour = {PRICE}\n')
    return path


def run_scaling(tmp_path: Path, flags: list[str], script_args: list[str], timeout: float = 300) -> tuple[Any, Any]:
    """Run the command as a user does; (completed process, the --json document or None)."""
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    cmd = [sys.executable, "-m", "gpuledger", "scaling", "--config", str(config(tmp_path)), "--json", str(out)]
    r = subprocess.run(
        [*cmd, *flags, "--", EXAMPLE, *script_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout,
    )
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r, json.loads(out.read_text()) if out.exists() else None


def rows_of(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {row["n"]: row for row in doc["rows"]}
