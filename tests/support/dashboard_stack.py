"""The live stack of the dashboard test (tests/deploy/test_dashboards.py): a Prometheus that holds a
backfilled synthetic day and scrapes a replay exporter and the analytics daemon; and a dashboard's
variables and panel queries evaluated against it as Grafana would."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytics import synthetic, synthetic_om
from domain.week import Window
from grafana.model import DATASOURCE_UID
from tests.support.dashboard_data import backfill_day, history_fleet, missing_states, write_extras
from tests.support.grafana_vars import RANGE_S, builtins, regex_value, seconds, substitute
from tests.support.http import free_port, http_get
from tests.support.paths import REPO
from tests.support.processes import ExporterProcess
from tests.support.prometheus import PrometheusServer
from tests.support.rollups import BUCKET, backfill_rollups
from tests.support.wait import wait_until

Json = dict[str, Any]


def panels(d: Json) -> Iterator[Json]:
    for p in d["panels"]:
        if p["type"] != "row":
            yield p


@dataclass
class Run:
    where: str
    expr: str
    instant: bool
    step: float


@dataclass
class Stack:
    prom: PrometheusServer
    end: float


def variable_values(
    prom: PrometheusServer, d: Json, fixed: dict[str, str], end: float
) -> tuple[dict[str, str], list[str]]:
    """Evaluate the dashboard's variables in order as Grafana would (All for multi-value ones that
    have it, every value as an alternation for the others, the first value of single-value ones)."""
    values = {"datasource": DATASOURCE_UID, **fixed}
    failures = []
    for v in d["templating"]["list"]:
        if v["type"] == "datasource" or v["name"] in fixed:
            continue
        if v["type"] == "custom":
            values[v["name"]] = v["current"]["value"]
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"])
        assert m, v["query"]
        selector = substitute(m.group(1), values)
        answer = prom.api(
            f"label/{m.group(2)}/values", {"match[]": selector, "start": f"{end - RANGE_S:.0f}", "end": f"{end:.0f}"}
        )
        found = sorted(answer.get("data") or [])
        if answer["status"] != "success" or not found:
            failures.append(f"{d['uid']} variable {v['name']}: {selector} -> {answer.get('error') or 'no values'}")
            found = ["none"]
        if v["multi"]:
            values[v["name"]] = regex_value(found, v.get("allValue"), v["includeAll"])
        else:
            values[v["name"]] = found[0]
    return values, failures


def dashboard_runs(d: Json, values: dict[str, str], label: str) -> Iterator[Run]:
    for p in panels(d):
        b = builtins(p)
        for t in p["targets"]:
            expr = substitute(t["expr"], {**values, **b})
            where = f"{label} / {p['title']} / {t['refId']}"
            yield Run(where, expr, t["instant"], seconds(b["__interval"]))
            if "or vector(0)" in expr:  # the fallback must not hide a query that never matches
                yield Run(
                    where + " (without 'or vector(0)')",
                    expr.replace(" or vector(0)", ""),
                    t["instant"],
                    seconds(b["__interval"]),
                )


def run(prom: PrometheusServer, r: Run, end: float) -> str | None:
    """None when the query answered with at least one series, else why not."""
    if r.instant:
        answer = prom.api("query", {"query": r.expr, "time": f"{end:.3f}"})
    else:
        params = {"query": r.expr, "start": f"{end - RANGE_S:.3f}", "end": f"{end:.3f}", "step": f"{r.step:.0f}"}
        answer = prom.api("query_range", params)
    if answer["status"] != "success":
        return f"error: {answer.get('error')}"
    if not answer["data"]["result"]:
        return "no series"
    return None


# --- the stack: a synthetic day backfilled, a replay exporter and the analytics daemon scraped -----
GPUS_LIVE = 3
LIVE = 'job="gpuledger-exporter"'
HOSTNAME_LIVE = "gpu-node-01"  # a host of the synthetic fleet, so the analytics daemon prices it


def analytics_config(tmp: Path, port: int) -> Path:
    cfg = tmp / "analytics.toml"
    cfg.write_text(f"""[analytics]
source = "embedded"
history = "{tmp / "history.db"}"
reports_dir = "{tmp / "reports"}"
listen = "127.0.0.1:{port}"

[cost]
currency = "EUR"
energy_price_per_kwh = 0.2
pue = 1.4
grid_intensity_g_per_kwh = 420
rules = [{{match_model = "H200", purchase_price = 30000, depreciation_years = 5, cloud_reference_per_gpu_hour = 3.5}}]

[budgets]
rules = [{{group = "user", key = "alice", currency = 50}}, {{group = "user", key = "bob", gpu_hours = 1000}},
         {{group = "partition", key = "gpu", gpu_hours = 500}}]
""")
    return cfg


@contextmanager
def live_stack(tmp: Path) -> Iterator[Stack]:
    """The stack, its files under ``tmp``; stopped on exit."""
    # the live stack runs on the wall clock (Prometheus and the analytics daemon read it): data
    # built at the fixed anchor is shifted to end now, every state the panels need in it
    now = time.time() // 60 * 60
    # the analytics daemon's history: from before the week before last up to now (week over week exists)
    synthetic.write_history(history_fleet(now), tmp / "history.db")
    # the backfill: the same fleet's last day, ending three minutes ago (before any live sample)
    day = backfill_day(now)
    assert not missing_states(day, now)
    om = tmp / "day.om"
    synthetic_om.write(day, om)
    text = om.read_text().removesuffix("# EOF\n")
    with om.open("w") as out:
        out.write(text)
        write_extras(day, out)
        out.write("# EOF\n")

    port = free_port()
    log = (tmp / "analytics.log").open("w")
    analytics = subprocess.Popen(
        [sys.executable, "-m", "gpuledger", "analytics", "--config", str(analytics_config(tmp, port))],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    exporter = ExporterProcess(
        "--reader",
        "replay",
        "--replay-gpus",
        str(GPUS_LIVE),
        "--replay-speed",
        "20",
        "--sample-interval",
        "0.5",
        "--hostname",
        HOSTNAME_LIVE,
        "--history",
        str(tmp / "exporter.db"),
    )
    prom: PrometheusServer | None = None
    try:
        exporter.wait_ready()
        # the rolling figures, then the budgets' month-to-date figures (the same refresh, after them)
        ready = wait_until(lambda: b"gpuledger_budget_spent{" in http_get(f"http://127.0.0.1:{port}/metrics")[2], 60)
        assert ready, (tmp / "analytics.log").read_text()
        # the day's 5-minute rollups (the 1-day and 7-day panels read them), backfilled as
        # docs/alerts.md says: promtool against a Prometheus holding the day, the blocks moved in
        pre = tmp / "rollups"
        pre.mkdir()
        first = PrometheusServer.backfilled(pre, om)
        try:
            blocks = backfill_rollups(first.url, Window(day.window.start, day.window.end - BUCKET, "day", "UTC"), pre)
        finally:
            first.stop()
        (tmp / "data").mkdir(exist_ok=True)
        for block in blocks.iterdir():
            if block.is_dir():
                shutil.move(str(block), tmp / "data" / block.name)
        prom = PrometheusServer.backfilled(
            tmp,
            om,
            jobs={"gpuledger-exporter": [f"127.0.0.1:{exporter.port}"], "gpuledger-analytics": [f"127.0.0.1:{port}"]},
        )
        server = prom

        def scraped() -> bool:
            live_ = server.query(f"min(count_over_time(gpuledger_gpu_sampled_seconds_total{{{LIVE}}}[1m]))")
            reports = server.query("count(gpuledger_report_info)")
            return bool(live_ and float(live_[0]["value"][1]) >= 6 and reports and reports[0]["value"][1] == "2")

        assert wait_until(scraped, 60, 0.5), "prometheus did not scrape the exporter and the analytics daemon"
        yield Stack(prom, time.time())
    finally:
        if prom is not None:
            prom.stop()
        exporter.stop()
        analytics.terminate()
        analytics.wait(15)
        log.close()
