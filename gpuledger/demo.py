"""``gpuledger demo``: the whole product on a machine with no GPU and nothing else installed.

1. Generates a fleet (default 2 hosts x 8 H200) from the shapes in the bundled real H200 capture:
   the two weeks before this one and this week so far, with diurnal load, GPUs held idle, a
   Wednesday queue spike, failed and requeued jobs and nightly benchmarks (``analytics.synthetic``).
2. Writes it as an embedded history and reports last week from it (HTML, JSON, CSV, Markdown).
3. Serves it live: an exporter replaying the capture on :10044 and the analytics daemon on :10045
   (rolling 7-day gauges, prices, the reports under /reports/), until Ctrl-C or ``--duration``.

Prices are the example ones unless a config file gives ``[cost]``; the report says so.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from analytics import synthetic
from analytics.cli import STARTUP_ERRORS, full_settings, start_error
from analytics.week_data import Window, last_full_week
from daemonkit.argcheck import distinct_listen, writable_dir
from daemonkit.settings import ConfigError
from daemonkit.signals import wait_for_signal

WEEK = 7 * 86400


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", metavar="DIR", help="where the history and reports go (default: a new temporary folder)")
    p.add_argument("--hosts", type=int, default=2, help="hosts in the generated fleet (default 2)")
    p.add_argument("--gpus-per-host", type=int, default=8, help="GPUs per host (default 8)")
    p.add_argument("--seed", type=int, default=7, help="random seed of the fleet (default 7)")
    p.add_argument("--listen", default=":10044", metavar="HOST:PORT", help="the live exporter (default :10044)")
    p.add_argument("--analytics-listen", default=":10045", metavar="HOST:PORT", help="the analytics (default :10045)")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="serve this long, then exit (default: until ^C)")
    p.add_argument("--no-serve", action="store_true", help="write the report and exit")
    p.add_argument("--config", metavar="FILE", help="a config file, for [cost] above all")


def _step(msg: str, t0: float) -> None:
    print(f"[{time.monotonic() - t0:5.1f} s] {msg}", flush=True)


def run(args: argparse.Namespace) -> int:
    from analytics.daemon import Analytics
    from daemonkit.logs import setup_logging
    from exporter.app import Exporter

    if not (1 <= args.hosts <= 64 and 1 <= args.gpus_per_host <= 16):
        print("gpuledger demo: --hosts must be 1..64 and --gpus-per-host 1..16", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        folder = writable_dir(Path(args.dir), "--dir") if args.dir else Path(tempfile.mkdtemp(prefix="gpuledger-demo-"))
        distinct_listen(args.listen, "--listen", args.analytics_listen, "--analytics-listen")
    except ConfigError as e:
        print(f"gpuledger demo: {e}", file=sys.stderr)
        return 2
    history = folder / "history.db"
    extra = {
        "analytics": {
            "source": "embedded",
            "history": str(history),
            "reports_dir": str(folder / "reports"),
            "listen": args.analytics_listen,
        },
        "exporter": {"reader": "replay"},
        "replay": {"gpus": args.gpus_per_host},
        "history": {"enabled": False},  # the live replay is not mixed into the generated fleet
        "web": {"listen": args.listen},
        "bench": {"enabled": False},
        "slurm": {"enabled": False},
    }
    try:
        s = full_settings(args.config, extra)
    except STARTUP_ERRORS as e:
        return start_error("demo", e)
    setup_logging("warning")
    now = time.time() // 60 * 60
    last = last_full_week(now, s.analytics.timezone)
    window = Window(last.start - WEEK, now, "demo", s.analytics.timezone)
    fleet = synthetic.generate(window, args.hosts, args.gpus_per_host, seed=args.seed)
    history.unlink(missing_ok=True)
    synthetic.write_history(fleet, history)
    _step(
        f"generated {len(fleet.devices)} GPUs x {window.hours / 24:.1f} days, {len(fleet.jobs)} jobs -> {history}", t0
    )
    try:
        a = Analytics(s)
    except STARTUP_ERRORS as e:
        return start_error("demo", e, s.analytics.listen)
    files = a.weekly(last)
    r = a.reports().get("week")
    if r is None:
        print("gpuledger demo: the report could not be built (see the log)", file=sys.stderr)
        return 1
    f = r.fleet
    _step(
        f"report {r.week}: utilisation {100 * (f.utilization or 0):.1f} %, total {f.total_cost:,.0f} {r.currency}, "
        f"{f.cost_per_useful_gpu_hour or 0:,.2f} {r.currency} per useful GPU-hour, idle {f.idle_cost:,.0f} "
        f"{r.currency}",
        t0,
    )
    for path in files:
        if path.suffix in (".html", ".md", ".json"):
            print(f"          {path}")
    if args.no_serve:
        a.server.server_close()
        return 0
    try:
        exporter = Exporter(s)
    except STARTUP_ERRORS as e:
        a.server.server_close()
        return start_error("demo", e, s.web.listen)
    exporter.start()
    a.start(catch_up=False)
    _step(
        f"live: exporter {exporter.url}/metrics (replaying the H200 capture), analytics {a.url}/metrics, "
        f"report {a.url}/reports/gpuledger-{r.week}.html",
        t0,
    )
    wait_for_signal(args.duration)
    a.stop()
    exporter.stop()
    return 0
