"""The FinOps Foundation's FOCUS validator (focus-validator 1.0.0, rule set "1.0"), run on files.

It pins numpy < 2 (pandera 0.17), which the project's environment is not, so it runs in its own:
GPULEDGER_FOCUS_PYTHON, or .venv/focus (python -m venv .venv/focus && .venv/focus/bin/pip install
focus-validator "multimethod<2"). It reads its currency codes from a path relative to
site-packages, so it runs there (as its own CLI does)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

VALIDATE = """
import json, os, sys
import focus_validator
os.chdir(os.path.dirname(os.path.dirname(focus_validator.__file__)))
from focus_validator.data_loaders.data_loader import DataLoader
from focus_validator.rules.spec_rules import SpecRules
from focus_validator.validator import DEFAULT_VERSION_SETS_PATH
out = {}
for path in sys.argv[1:]:
    rules = SpecRules(None, DEFAULT_VERSION_SETS_PATH, "1.0", None)
    rules.load()
    result = rules.validate(DataLoader(path).load())
    out[path] = {k: v.status.value for k, v in result.checklist.items()}
print(json.dumps(out))
"""


def validator_python() -> str:
    """The validator's interpreter; the test is skipped with the reason when there is none (failed
    under CI=true: scripts/test installs it)."""
    py = os.environ.get("GPULEDGER_FOCUS_PYTHON") or str(REPO / ".venv/focus/bin/python")
    if not Path(py).exists() or subprocess.run([py, "-c", "import focus_validator"], capture_output=True).returncode:
        why = (
            f"focus-validator not found ({py}): python -m venv .venv/focus && .venv/focus/bin/pip install "
            'focus-validator "multimethod<2" (it needs numpy < 2, so not in the project\'s venv)'
        )
        if os.environ.get("CI"):  # scripts/test installs it: in CI a missing validator is a failure
            pytest.fail(why)
        pytest.skip(why)
    return py


def validate(paths: list[Path]) -> dict[str, dict[str, str]]:
    """Each file's checks -> passed, failed, ... (str(path) -> check -> status)."""
    py = validator_python()
    run = subprocess.run([py, "-c", VALIDATE, *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    results: dict[str, dict[str, str]] = json.loads(run.stdout)
    return results
