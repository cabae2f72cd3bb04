"""``gpuledger scaling`` when the script goes wrong (integration; apart from test_scaling.py so the
two files' torchrun runs share the CI's two workers): no way to time the steps, a rank failing at
one N, a rank hanging past --timeout."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.processes import processes_with
from tests.support.scaling import rows_of, run_scaling


@pytest.mark.integration
def test_no_steps_placeholder_and_no_step_timer_is_bad_input(tmp_path: Path) -> None:
    r, doc = run_scaling(tmp_path, ["--gpus", "1,2"], ["--steps", "5", "--startup", "0"])
    assert r.returncode == 2 and doc is None and r.stdout == ""
    assert r.stderr.splitlines()[-1].startswith("gpuledger scaling: no {steps} in the script's arguments")
    assert "N=2" not in r.stderr  # found out after the first run, not after all of them


@pytest.mark.integration
def test_a_script_failing_at_one_n_keeps_the_others(tmp_path: Path) -> None:
    r, doc = run_scaling(tmp_path, ["--gpus", "1,2"], ["--helper", "--steps", "20", "--fail-at", "2"])
    assert r.returncode == 1, r.stderr
    rows = rows_of(doc)
    assert rows[1]["status"] == "ok" and rows[1]["step_seconds"] > 0
    assert rows[2]["status"] == "failed" and "exit 3" in rows[2]["error"]
    assert "gpuledger scaling: N=2: the script failed (exit 3 of a rank), its last lines:" in r.stderr
    assert "  | scaling_train: failing on purpose at world size 2" in r.stderr
    assert "ChildFailedError" not in r.stderr  # torchrun's own report is not the script's last lines


@pytest.mark.integration
def test_a_hang_is_ended_with_every_process_of_the_run(tmp_path: Path) -> None:
    tag = f"hang-{uuid.uuid4().hex}"
    # --timeout holds for the N=1 run too, which must end "ok" on a loaded 2-core machine: room for it
    r, doc = run_scaling(
        tmp_path, ["--gpus", "1,2", "--timeout", "45"], ["--helper", "--steps", "10", "--hang-at", "2", "--tag", tag]
    )
    assert r.returncode == 1, r.stderr
    rows = rows_of(doc)
    assert rows[1]["status"] == "ok"
    assert rows[2]["status"] == "timeout"
    assert "N=2: no end within --timeout 45 s: every process of the run was ended" in r.stderr
    assert processes_with(tag) == []  # torchrun and both ranks (each in a session of its own) are gone
