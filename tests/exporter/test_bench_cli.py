"""``gpuledger bench``: bad arguments exit 2; a real run prints nccl-tests-like tables and JSON;
two 'nodes' meet through torchrun's rendezvous on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.http import lasting_port
from tests.support.paths import REPO
from tests.support.tools import require_torch

# starts real components (see [tool.pytest.ini_options] markers): not in scripts/test --fast
pytestmark = pytest.mark.integration


def bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")} | {"GLOO_SOCKET_IFNAME": "lo"}
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", "bench", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["all", "--backend", "nccl"], "--backend nccl needs NVIDIA GPUs"),
        (["all", "--world-size", "0"], "--world-size must be at least 1"),
        (["all", "--nnodes", "2"], "--nnodes > 1 needs --rdzv-endpoint"),
        (["all", "--timeout", "0"], "--timeout must be positive"),
        (["everything"], "invalid choice"),
        (["all", "--world-size", "two"], "invalid int value"),
        (["allreduce", "--world-size", "1"], "the all-reduce needs 2 or more"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    res = bench(*args, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


def test_one_rank_leaves_the_all_reduce_out_and_says_why(tmp_path: Path) -> None:
    """On an H200 alone the sweep printed busbw 0.00 at every size and algbw up to 39 TB/s (a
    no-op's 14 us): one rank has no link to measure, so the round runs the rest and says so."""
    require_torch()
    out = tmp_path / "r.json"
    res = bench("all", "--quick", "--world-size", "1", "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all-reduce left out: one rank has nothing to reduce across" in res.stderr
    assert "# all-reduce" not in res.stdout and "# GEMM" in res.stdout
    data = json.loads(out.read_text())
    assert set(data["status"]) == {"train", "matmul", "memcpy"} and data["allreduce"] is None


def test_a_run_prints_tables_an_estimate_and_json(tmp_path: Path) -> None:
    require_torch()
    out = tmp_path / "r.json"
    res = bench("all", "--quick", "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "estimated" in res.stderr and "(gloo, cpu)" in res.stderr
    assert re.search(r"algbw\((MB|GB)/s\)", res.stdout), res.stdout  # the unit that fits the figures
    assert "#wrong" in res.stdout and "# Avg bus bandwidth" in res.stdout
    assert "# ranks" in res.stdout and "samples/s/rank" in res.stdout and "per GPU" not in res.stdout
    data = json.loads(out.read_text())
    assert data["status"] == dict.fromkeys(("allreduce", "train", "matmul", "memcpy"), "ok")
    assert data["plan"]["world_size"] == 2
    assert data["allreduce"]["rows"][0]["size_bytes"] == 1024 and data["allreduce"]["rows"][-1]["wrong"] == 0
    # the table shows each figure in its unit; the JSON keeps FLOP/s and bytes/s
    for row in data["matmul"]:
        unit = re.search(rf"#  dtype +n +(\S+)\n(?:.*\n)*? +{row['dtype']} +{row['n']} +(\S+)", res.stdout)
        assert unit is not None, res.stdout
        scale = {"GFLOP/s": 1e9, "TFLOP/s": 1e12}[unit[1]]
        assert float(unit[2]) == pytest.approx(row["flops_per_second"] / scale, abs=0.006)
        assert float(unit[2]) >= 0.01  # never a column of 0.00


def test_two_nodes_meet_through_torchrun_rendezvous() -> None:
    require_torch()
    endpoint = f"127.0.0.1:{lasting_port()}"
    args = [
        "allreduce",
        "--quick",
        "--backend",
        "gloo",
        "--world-size",
        "1",
        "--nnodes",
        "2",
        "--rdzv-endpoint",
        endpoint,
        "--no-progress",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")} | {"GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, "-m", "gpuledger", "bench", *args]
    nodes = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outs
    printed = [o for o, _ in outs if "busbw(" in o]
    assert len(printed) == 1  # the node running global rank 0
    assert "2 ranks" in printed[0] and "# Out of bounds values : 0 OK" in printed[0]
    assert any("the node running global rank 0 prints the results" in o for o, _ in outs)
