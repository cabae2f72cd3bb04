"""``gpuledger demo``: one story (the live exporter is a host of the generated fleet), the same
fleet for a seed at any hour, and a temporary folder that goes when the demo does."""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analytics.config import FullSettings
from analytics.pipeline import make_report
from analytics.report import Report, from_json
from analytics.sources.embedded import EmbeddedSource
from analytics.synthetic import Fleet, write_history
from domain.week import Window, iso_week
from exporter.readers.replay import ReplayReader
from gpuledger import cli, demo
from tests.support.conservation import assert_conserves
from tests.support.http import free_port, http_get
from tests.support.metrics import parse_metrics
from tests.support.paths import REPO
from tests.support.wait import wait_until

THIS = iso_week("2026-W48")  # the fake "now"s fall in it; its last full week is 2026-W47
DAY = 86400.0
# Monday 00:31 (jobs of last week still running), Tuesday 10:00, Saturday 22:17
NOWS = (THIS.start + 31 * 60, THIS.start + 1 * DAY + 10 * 3600, THIS.start + 5 * DAY + 22 * 3600 + 17 * 60)


def _week_report(fleet: Fleet, last: Window, now: float, folder: Path) -> Report:
    folder.mkdir()
    write_history(fleet, folder / "h.db")
    s = FullSettings(analytics={"source": "embedded", "history": folder / "h.db"})
    source = EmbeddedSource(folder / "h.db")
    return make_report(source, last, s, now=now)


def _figures(r: Report) -> dict[str, object]:
    d = dataclasses.asdict(r)
    return {k: v for k, v in d.items() if "generated" not in k}


def test_a_seed_gives_last_week_the_same_figures_at_any_hour(tmp_path: Path) -> None:
    reports = []
    for k, now in enumerate(NOWS):
        fleet, last = demo.fleet_at(now, "UTC", 2, 2, seed=7)
        assert last.label == "2026-W47"
        if k == 0:  # a job of last week still runs: written with its end, so last week is whole
            assert any(j.end > now and j.start is not None and j.start < THIS.start for j in fleet.jobs)
        reports.append(_week_report(fleet, last, now, tmp_path / str(k)))
    a = reports[0]
    assert a.fleet.utilization is not None and a.fleet.total_cost > 0 and a.rows and a.queue
    for b in reports[1:]:
        assert _figures(a) == _figures(b)  # exactly: every row, queue, failure and benchmark figure


def test_the_current_week_is_the_same_fleet_cut_at_now() -> None:
    """A partial week shows the minutes before now and the jobs that ended before now; a later now
    only adds to it."""
    (early, _), (late, _) = (demo.fleet_at(now, "UTC", 2, 2, seed=7) for now in NOWS[1:])
    assert early.window.end == NOWS[1] and late.window.end == NOWS[2]
    assert [u for _, u in early.devices] == [u for _, u in late.devices]
    for uuid, rows in early.minutes.items():
        assert len(rows) == (NOWS[1] - early.window.start) // 60
        assert rows == late.minutes[uuid][: len(rows)]
    in_early = {j.job_id: j for j in early.jobs}
    assert all(j.end < NOWS[1] or j.submit < THIS.start for j in early.jobs)
    assert in_early == {j.job_id: j for j in late.jobs if j.job_id in in_early}
    assert {j.job_id for j in late.jobs if j.end < NOWS[1]} <= set(in_early)
    assert all(b.finished < NOWS[1] for b in early.bench) and len(early.bench) < len(late.bench)


def test_help_gives_a_one_line_description_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["demo", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    after_usage = text.split("\n\n")[1]
    assert after_usage == demo.DESCRIPTION and "\n" not in after_usage and after_usage.endswith(".")
    assert "Example:\n  gpuledger demo --seed 7" in text


def _demo(*args: str) -> tuple[subprocess.Popen[str], Path, int, int, str]:
    e, a = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    fleet = ["--hosts", "2", "--gpus-per-host", "2", "--seed", "7"]
    listen = ["--listen", f"127.0.0.1:{e}", "--analytics-listen", f"127.0.0.1:{a}"]
    p = subprocess.Popen(
        [sys.executable, "-m", "gpuledger", "demo", *fleet, *listen, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert p.stdout is not None
    first = p.stdout.readline()  # printed before any work
    assert first.startswith("gpuledger demo: folder "), first
    folder = Path(first.removeprefix("gpuledger demo: folder ").split(" (")[0])
    return p, folder, e, a, first


def _finish(p: subprocess.Popen[str], sig: signal.Signals) -> tuple[int, str]:
    p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return p.returncode, out


def _serving(a: int, p: subprocess.Popen[str]) -> bool:
    def up() -> bool:
        return p.poll() is not None or http_get(f"http://127.0.0.1:{a}/healthz", timeout=1)[0] == 200

    return wait_until(up, 120)


@pytest.mark.integration
def test_the_live_exporter_is_a_host_of_the_reported_fleet_and_ctrl_c_removes_the_folder() -> None:
    p, folder, e, a, first = _demo()
    try:
        assert _serving(a, p) and p.poll() is None
        assert folder.is_dir() and (folder / "history.db").is_file()
        (report,) = (folder / "reports").glob("gpuledger-*.json")
        r = from_json(report.read_text())
        info = parse_metrics(http_get(f"http://127.0.0.1:{e}/metrics")[2].decode())["gpuledger_gpu_info"]
    finally:
        code, out = _finish(p, signal.SIGINT)
    live = [dict(labels) for labels in info]
    assert len(live) == 2 and {g["hostname"] for g in live} == {"gpu-node-01"}
    assert {f"{g['hostname']}/{g['gpu']} {g['uuid']}" for g in live} < {row.key for row in r.group("gpu")}
    assert {g["hostname"] for g in live} < {row.key for row in r.group("host")}
    assert code == 0, out
    assert "temporary: removed when the demo ends" in first and f"removed {folder}" in out
    assert "gpu-node-01's 2 GPUs" in out and "/metrics" in out
    assert not folder.exists()


@pytest.mark.integration
def test_sigterm_removes_the_temporary_folder() -> None:
    p, folder, _, a, _ = _demo()
    try:
        assert _serving(a, p) and p.poll() is None and folder.is_dir()
    finally:
        code, out = _finish(p, signal.SIGTERM)
    assert code == 0, out
    assert not folder.exists()


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_while_it_generates_removes_the_folder_too(sig: signal.Signals) -> None:
    p, folder, _, _, _ = _demo()
    code, out = _finish(p, sig)  # right after the first line: generating
    assert code == 130 and "gpuledger demo: interrupted" in out, out
    assert "Traceback" not in out
    assert not folder.exists()


@pytest.mark.integration
def test_with_dir_the_folder_stays(tmp_path: Path) -> None:
    p, folder, _, a, first = _demo("--dir", str(tmp_path / "kept"))
    try:
        assert folder == tmp_path / "kept" and _serving(a, p) and p.poll() is None
    finally:
        code, out = _finish(p, signal.SIGTERM)
    assert code == 0, out
    assert first.endswith("(kept)\n") and "removed" not in out
    assert (folder / "history.db").is_file() and list((folder / "reports").glob("gpuledger-*.html"))


@pytest.mark.integration
def test_no_serve_without_dir_keeps_the_reports_and_removes_the_history() -> None:
    p, folder, _, _, first = _demo("--no-serve")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    assert "the reports are kept, the history removed" in first
    assert not (folder / "history.db").exists() and list((folder / "reports").glob("gpuledger-*.html"))
    shutil.rmtree(folder)


def test_the_replay_reader_presents_the_given_gpus() -> None:
    fleet, _ = demo.fleet_at(NOWS[1], "UTC", 1, 3, seed=7)
    devices = [d for host, d in fleet.devices if host == "gpu-node-01"]  # one host's (not the MIG node's)
    r = ReplayReader(None, gpus=8, devices=devices)
    assert r.devices() == devices and r.power_watts(2) > 0
    with pytest.raises(ValueError, match="indexed 0, 1"):
        ReplayReader(None, devices=devices[1:])


def test_the_mig_node_charges_each_slice_job_its_share(tmp_path: Path) -> None:
    """The demo's MIG node (synthetic): an H200 in 3g, 2g and 1g instances; each job on a slice holds
    the GPU the whole time it runs and is charged its instance's share; the slice in no instance and
    the instances' empty hours are unallocated; the GPU's row says its busy time is its instances'."""
    now = NOWS[1]
    fleet, last = demo.fleet_at(now, "UTC", 2, 2, seed=7)
    (uuid,) = fleet.mig
    assert [h for h, d in fleet.devices if d.uuid == uuid] == ["gpu-mig-01"]
    r = _week_report(fleet, last, now, tmp_path / "mig")
    share = {sp.key.job_id: sp.share for sp in fleet.mig[uuid]}
    assert set(share.values()) == {3 / 7, 2 / 7, 1 / 7}
    slice_rows = [x for x in r.group("job") if x.key in share]
    assert len(slice_rows) > 10
    for x in slice_rows:  # its charged hours are its held hours times its share, priced as such
        assert x.allocated_gpu_hours is not None
        assert x.sampled_gpu_hours == pytest.approx(x.allocated_gpu_hours * share[x.key]), x.key
        assert x.busy_measure == "mig_sm_active", x.key
    (gpu,) = [x for x in r.group("gpu") if x.key.endswith(uuid)]
    assert gpu.busy_measure == "mig_sm_active"
    on_gpu = sum(x.hardware_cost for x in slice_rows)
    assert on_gpu <= gpu.hardware_cost * 6 / 7 + 1e-9  # one slice of seven is in no instance
    (mig,) = [x for x in r.group("partition") if x.key == "mig"]
    assert mig.total_cost == pytest.approx(sum(x.total_cost for x in slice_rows))
    assert_conserves(r, ("user", "job", "partition"))


@pytest.mark.integration
def test_a_signal_python_swallowed_while_generating_still_stops_it_before_serving(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KeyboardInterrupt raised inside a callback (an import lock's) is printed and ignored by
    Python: CI once saw the demo serve on after a SIGINT while generating. The signal is remembered
    too, and the demo stops before serving, its folder removed."""
    steps = demo._step

    def swallowed(msg: str, t0: float) -> None:  # the handler ran, its exception went nowhere
        demo.SIGNALLED.set()
        steps(msg, t0)

    monkeypatch.setattr(demo, "_step", swallowed)
    e, a = free_port(), free_port()
    fleet = ["--hosts", "1", "--gpus-per-host", "1", "--seed", "7"]
    args = cli.build_parser().parse_args(
        ["demo", *fleet, "--listen", f"127.0.0.1:{e}", "--analytics-listen", f"127.0.0.1:{a}"]
    )
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    assert demo.run(args) == 130
    out = capsys.readouterr()
    assert "gpuledger demo: interrupted" in out.err and "live until" not in out.out
    folder = Path(out.out.splitlines()[0].removeprefix("gpuledger demo: folder ").split(" (")[0])
    assert not folder.exists()
    gc.collect()  # a server socket left open (both servers bound before the check) warns here, in this test
