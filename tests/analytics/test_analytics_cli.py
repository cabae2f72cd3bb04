"""``gpuledger report``, ``up`` and ``demo`` as real processes: files written, exit codes, and
bad configuration named by its field."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analytics.config import FullSettings
from analytics.daycache import DayCached
from analytics.pipeline import make_source
from analytics.report import from_json
from analytics.synthetic import Fleet
from domain.week import iso_week
from tests.support.fleet import WEEK, prometheus
from tests.support.http import free_port, http_get
from tests.support.metrics import one, parse_metrics
from tests.support.paths import REPO
from tests.support.processes import run_cli
from tests.support.wait import wait_until

# starts real components (see [tool.pytest.ini_options] markers): not in scripts/test --fast
pytestmark = pytest.mark.integration


def test_report_from_the_embedded_history_writes_every_format(hist: Path, fleet: Fleet, tmp_path: Path) -> None:
    r = run_cli("report", "--source", "embedded", "--history", str(hist), "--week", WEEK, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert f"{WEEK} (embedded): 4 GPUs" in r.stdout and "INCOMPLETE" not in r.stderr
    report = from_json((tmp_path / f"gpuledger-{WEEK}.json").read_text())
    busy = sum(t["busy"] for t in fleet.truth.gpu.values()) / 3600
    assert report.complete and report.fleet.busy_gpu_hours == pytest.approx(busy, rel=1e-9)
    assert report.example_prices and "example prices" in (tmp_path / f"gpuledger-{WEEK}.md").read_text()
    html = (tmp_path / f"gpuledger-{WEEK}.html").read_text()
    assert "<svg" in html and "<script" not in html
    assert (tmp_path / f"gpuledger-{WEEK}-csv" / "costs.csv").read_text().startswith("group,key,gpus")


def test_report_from_a_real_prometheus_matches_the_embedded_one(hist: Path, fleet: Fleet, tmp_path: Path) -> None:
    """Also: a report into a folder whose .days the daemon filled takes the week's days from their
    files (the same figures, none read again or rewritten); --no-day-cache reads the store."""
    (tmp_path / "prom").mkdir()
    server = prometheus(fleet, tmp_path / "prom")

    def report(out: str, *flags: str) -> str:
        r = run_cli(
            *("report", "--week", WEEK, "--source", "prometheus", "--prometheus-url", server.url),
            *("--format", "json,md", "--out", str(tmp_path / out), "--log-level", "info", *flags),
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        return r.stderr

    try:
        assert "days from" not in report("p")
        names = sorted(p.name for p in (tmp_path / "p").iterdir())
        assert names == [f"gpuledger-{WEEK}.json", f"gpuledger-{WEEK}.md"]  # a report keeps no day itself
        cold = (tmp_path / "p" / f"gpuledger-{WEEK}.json").read_text()
        # what the daemon does after a refresh, with the settings this command line makes
        settings = FullSettings(
            analytics={"source": "prometheus", "reports_dir": str(tmp_path / "p")}, prometheus={"url": server.url}
        )
        source = make_source(settings)
        assert isinstance(source, DayCached) and source.keep_days(iso_week(WEEK)) == 7
        source.close()
        kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "p" / ".days").glob("*.json")}
        assert f"{WEEK}: 7 of 7 days from {tmp_path / 'p' / '.days'}" in report("p")
        assert {p: p.stat().st_mtime_ns for p in (tmp_path / "p" / ".days").glob("*.json")} == kept
        shutil.copytree(tmp_path / "p" / ".days", tmp_path / "uncached" / ".days")
        assert "days from" not in report("uncached", "--no-day-cache")
    finally:
        server.stop()

    def figures(text: str) -> dict[tuple[str, str], tuple[float, float]]:
        x = from_json(text)
        rows = {(r.group, r.key): (r.total_cost, r.busy_gpu_hours) for r in x.rows}
        return rows | {("fleet", ""): (x.fleet.total_cost, x.fleet.busy_gpu_hours)}

    for out in ("p", "uncached"):
        got, expected = figures((tmp_path / out / f"gpuledger-{WEEK}.json").read_text()), figures(cold)
        assert got.keys() == expected.keys()
        for key, value in got.items():
            assert value == pytest.approx(expected[key], rel=1e-9), (out, key)
    e = run_cli(
        "report",
        "--week",
        WEEK,
        "--source",
        "embedded",
        "--history",
        str(hist),
        "--format",
        "json",
        "--out",
        str(tmp_path / "e"),
    )
    assert e.returncode == 0, e.stderr
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        ".days",
        f"gpuledger-{WEEK}.json",
        f"gpuledger-{WEEK}.md",
    ]
    a = from_json((tmp_path / "p" / f"gpuledger-{WEEK}.json").read_text())
    b = from_json((tmp_path / "e" / f"gpuledger-{WEEK}.json").read_text())
    assert a.source == "prometheus" and a.complete
    for field in ("total_cost", "energy_kwh", "busy_gpu_hours", "cost_per_useful_gpu_hour", "idle_cost"):
        assert getattr(a.fleet, field) == pytest.approx(getattr(b.fleet, field), rel=1e-9), field


@pytest.mark.parametrize(
    ("config", "env", "args", "named"),
    [
        ("[cost]\npue = 0.5\n", {}, [], "cost.pue"),
        ("[cost]\ncurrency = ''\n", {}, [], "cost.currency"),
        ('[[cost.rules]]\nkind = "cloud"\n', {}, [], "cost.rules.0: a cloud rule needs price_per_gpu_hour"),
        ("[[cost.rules]]\npurchase_price = 100\nresidual_value = 200\n", {}, [], "cost.rules.0: residual_value"),
        ("[[cost.rules]]\npurchase_price = -5\n", {}, [], "cost.rules.0.purchase_price"),
        ("[[cost.tariff]]\nstart_hour = 20\nend_hour = 6\nprice_per_kwh = 0.1\n", {}, [], "cost.tariff.0"),
        ("[cost.default]\ndepreciation_years = 0\n", {}, [], "cost.default.depreciation_years"),
        ("", {"GPULEDGER_COST__ENERGY_PRICE_PER_KWH": "-1"}, [], "cost.energy_price_per_kwh"),
        ("", {"GPULEDGER_COST__USEFUL": "vibes"}, [], "cost.useful"),
        ("", {}, ["--timezone", "Mars/Olympus"], "analytics.timezone"),
        ("", {}, ["--format", "html,pdf"], "analytics.formats"),
        ("", {}, ["--prometheus-url", "ftp://x"], "prometheus.url"),
        ("", {}, ["--week", "2026-W99"], "--week"),
        ("[analytics]\ncron = '5 0 * * 9'\n", {}, [], "analytics.cron"),
    ],
)
def test_invalid_configuration_exits_2_naming_the_field(
    tmp_path: Path, config: str, env: dict[str, str], args: list[str], named: str
) -> None:
    extra = []
    if config:
        (tmp_path / "c.toml").write_text(config)
        extra = ["--config", str(tmp_path / "c.toml")]
    r = run_cli("report", "--source", "embedded", "--history", "/nonexistent.db", *extra, *args, env=env)
    assert r.returncode == 2, r.stderr
    assert named in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("gpuledger-*"))


def test_unreachable_sources_exit_1(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = run_cli(
        "report",
        "--source",
        "prometheus",
        "--prometheus-url",
        url,
        "--out",
        str(tmp_path),
        env={"GPULEDGER_PROMETHEUS__RETRIES": "1"},
    )
    assert r.returncode == 1 and "source unavailable" in r.stderr and "no answer after 2 attempts" in r.stderr
    r = run_cli("report", "--source", "embedded", "--history", str(tmp_path / "none.db"), "--out", str(tmp_path))
    assert r.returncode == 1 and "none.db" in r.stderr
    assert not list(tmp_path.glob("gpuledger-*"))


def test_a_week_without_data_exits_1_and_writes_nothing(hist: Path, tmp_path: Path) -> None:
    # only what happened: a window with no data is an error, and the reports already there stay
    existing = {
        f"gpuledger-{w}.{ext}": f"earlier {w} {ext}".encode()
        for w in ("2026-W48", "2027-W10")
        for ext in ("json", "md")
    }
    for name, body in existing.items():
        (tmp_path / name).write_bytes(body)
    for week in ("2026-W48", "2027-W10"):  # before the history, and in the future
        args = ("report", "--source", "embedded", "--history", str(hist), "--week", week)
        for extra in ((), ("--fail-incomplete",)):
            r = run_cli(*args, *extra, "--out", str(tmp_path))
            assert r.returncode == 1, r.stderr
            assert r.stderr.strip() == f"gpuledger report: no data in {week} from the embedded history {hist}"
            assert "wrote" not in r.stdout
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == existing


def _start(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    return subprocess.Popen(
        [sys.executable, "-m", "gpuledger", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )


def _stop(p: subprocess.Popen[str]) -> tuple[int, str]:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return p.returncode, out


def test_up_serves_the_exporter_and_the_analytics_in_one_process(tmp_path: Path) -> None:
    e, a = free_port(), free_port()
    p = _start(
        "up",
        "--reader",
        "replay",
        "--history",
        str(tmp_path / "h.db"),
        "--listen",
        f"127.0.0.1:{e}",
        "--analytics-listen",
        f"127.0.0.1:{a}",
        "--reports-dir",
        str(tmp_path / "reports"),
    )
    try:
        assert wait_until(lambda: http_get(f"http://127.0.0.1:{a}/healthz", timeout=1)[0] == 200, 30)
        exporter = parse_metrics(http_get(f"http://127.0.0.1:{e}/metrics")[2].decode())
        analytics = parse_metrics(http_get(f"http://127.0.0.1:{a}/metrics")[2].decode())
    finally:
        code, out = _stop(p)
    assert code == 0, out
    assert one(exporter, "gpuledger_exporter_info", reader="replay", version=exporter_version()) == 1
    # a fresh history holds no finished minute yet: the first refresh found no data, which is not
    # an error (no alert fires), and no report of zeros is served
    assert one(analytics, "gpuledger_analytics_runs_total", task="refresh", result="no_data") >= 1
    runs = analytics.get("gpuledger_analytics_runs_total", {})
    assert not any(n for labels, n in runs.items() if ("result", "error") in labels), runs
    rolling = analytics.get("gpuledger_report_complete", {})
    assert not any(("window", "rolling_7d") in labels for labels in rolling), rolling
    assert (tmp_path / "h.db").exists() and f"history {tmp_path / 'h.db'}" in out


def exporter_version() -> str:
    from exporter import __version__

    return __version__


def test_demo_reports_and_serves_a_generated_fleet(tmp_path: Path) -> None:
    e, a = free_port(), free_port()
    p = _start(
        "demo",
        "--dir",
        str(tmp_path),
        "--listen",
        f"127.0.0.1:{e}",
        "--analytics-listen",
        f"127.0.0.1:{a}",
        "--duration",
        "60",
    )
    try:
        assert wait_until(lambda: http_get(f"http://127.0.0.1:{a}/healthz", timeout=1)[0] == 200, 60)
        analytics = parse_metrics(http_get(f"http://127.0.0.1:{a}/metrics")[2].decode())
        exporter = parse_metrics(http_get(f"http://127.0.0.1:{e}/metrics")[2].decode())
        landing = http_get(f"http://127.0.0.1:{a}/")[2].decode()
    finally:
        code, out = _stop(p)
    assert code == 0, out
    reports = list((tmp_path / "reports").glob("gpuledger-*.json"))
    assert len(reports) == 1
    r = from_json(reports[0].read_text())
    # two hosts of 8 GPUs, and the MIG node (gpuledger.demo.MIG_HOSTS): one H200 split into instances
    assert r.complete and r.fleet.gpus == 17 and len(r.group("host")) == 3
    assert sorted(row.busy_measure for row in r.group("gpu")) == ["mig_sm_active"] + ["utilization"] * 16
    assert any(q.partition == "gpu" for q in r.queue) and sum(f.failed for f in r.failures) > 0
    assert r.benchmarks and r.multi_gpu and r.deltas and r.fleet.allocated_idle_gpu_hours
    assert one(analytics, "gpuledger_report_complete", window="week") == 1
    assert one(analytics, "gpuledger_report_complete", window="rolling_7d") == 1
    assert one(
        analytics, "gpuledger_report_cost", window="week", group="fleet", key="fleet", kind="total"
    ) == pytest.approx(r.fleet.total_cost)
    assert len([k for k in exporter["gpuledger_gpu_info"]]) == 8
    assert f"gpuledger-{r.week}.html" in landing
