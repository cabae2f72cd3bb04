"""``gpuledger up --no-history``: refused on the embedded source (the analytics would read
nothing), served with the analytics on a real Prometheus that scrapes the exporter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuledger import cli, up
from tests.support.http import free_port, http_get
from tests.support.metrics import parse_metrics
from tests.support.paths import REPO
from tests.support.processes import run_cli
from tests.support.prometheus import PrometheusServer
from tests.support.wait import wait_until


def test_help_gives_a_one_line_description_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["up", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    after_usage = text.split("\n\n")[1]
    assert after_usage == up.DESCRIPTION and "\n" not in after_usage and after_usage.endswith(".")
    assert "Example:\n  gpuledger up " in text and "--no-history" in text


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--no-history"], {}, "--no-history: "),
        ([], {"GPULEDGER_HISTORY__ENABLED": "false"}, "history.enabled = false: "),
    ],
    ids=["flag", "config"],
)
def test_no_history_on_the_embedded_source_exits_2_naming_the_conflict(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    h = tmp_path / "h.db"
    r = run_cli("up", "--reader", "replay", "--history", str(h), "--listen", "127.0.0.1:0", *args, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, r.stderr
    assert line.startswith(f"gpuledger up: {named}") and 'analytics.source = "prometheus"' in line, line
    assert not h.exists()


@pytest.mark.integration
def test_no_history_with_the_prometheus_source_serves_both_halves(tmp_path: Path) -> None:
    e, a = free_port(), free_port()
    analytics_url = f"http://127.0.0.1:{a}"
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{e}"], scrape_interval="1s")
    h = tmp_path / "h.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env |= {"GPULEDGER_ANALYTICS__SOURCE": "prometheus", "GPULEDGER_PROMETHEUS__URL": prom.url}
    listen = ["--listen", f"127.0.0.1:{e}", "--analytics-listen", f"127.0.0.1:{a}"]
    reports = ["--reports-dir", str(tmp_path / "reports")]
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuledger",
            "up",
            "--reader",
            "replay",
            "--no-history",
            "--history",
            str(h),
            *listen,
            *reports,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        assert wait_until(
            lambda: p.poll() is not None or http_get(f"http://127.0.0.1:{a}/healthz", timeout=1)[0] == 200, 60
        )
        assert p.poll() is None
        exporter = parse_metrics(http_get(f"http://127.0.0.1:{e}/metrics")[2].decode())
        # the loop closes: Prometheus scrapes up's exporter, the analytics query that Prometheus
        assert wait_until(lambda: bool(prom.query("gpuledger_gpu_info")), 30)
        analytics = parse_metrics(http_get(f"{analytics_url}/metrics")[2].decode())
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        prom.stop()
    assert p.returncode == 0, out
    assert "gpuledger_gpu_info" in exporter
    runs = analytics.get("gpuledger_analytics_runs_total", {})
    assert sum(n for labels, n in runs.items() if ("task", "refresh") in labels) >= 1, runs  # it ran
    assert not any(n for labels, n in runs.items() if ("result", "error") in labels), runs
    assert "from Prometheus, history off" in out, out
    assert not h.exists()  # --no-history: nothing written
