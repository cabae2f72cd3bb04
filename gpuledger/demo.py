"""``gpuledger demo``: the whole product on a machine with no GPU and nothing else installed.

1. Generates a fleet (default 2 hosts x 8 H200) from the shapes in the bundled real H200 capture:
   the two weeks before this one and this week so far, with diurnal load, GPUs held idle, a
   Wednesday queue spike, failed and requeued jobs and nightly benchmarks (``analytics.synthetic``),
   plus one MIG node (``gpu-mig-01``: an H200 split into 3g, 2g and 1g instances, one slice in none)
   whose Slurm jobs on the slices are each charged their instance's share.
   It is generated over the three whole ISO weeks and cut at now (``fleet_at``), so a seed gives the
   same weeks at any hour of this week: last week's figures do not depend on the time of day.
2. Writes it as an embedded history and reports last week from it (HTML, JSON, CSV, Markdown).
3. Serves it live until Ctrl-C, SIGTERM or ``--duration``: the analytics daemon on :10045 over the
   generated history (rolling 7-day gauges, prices, the reports under /reports/), and on :10044 an
   exporter that is the fleet's first host, ``gpu-node-01`` with its GPUs (same UUIDs), its readings
   a replay of the capture from now on (not written to the history).

Without ``--dir`` everything goes in a new temporary folder, removed when the demo ends (normally,
on Ctrl-C or on SIGTERM); with ``--no-serve`` the reports in it are kept and only the history goes.
Prices are the example ones unless a config file gives ``[cost]``; the report says so.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from analytics import synthetic
from analytics.cli import STARTUP_ERRORS, full_settings, start_error
from analytics.synthetic import Fleet
from daemonkit.argcheck import distinct_listen, writable_dir
from daemonkit.settings import ConfigError
from domain.week import Window, iso_week, iso_week_label, last_full_week

DESCRIPTION = (
    "Run the whole product with no GPU: a generated fleet's last week reported, "
    "its analytics and one of its hosts' exporter served live."
)
EPILOG = "Example:\n  gpuledger demo --seed 7"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description, p.epilog, p.formatter_class = DESCRIPTION, EPILOG, argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--dir", metavar="DIR", help="where the history and reports go, kept (default: a temporary folder, removed)"
    )
    p.add_argument("--hosts", type=int, default=2, help="hosts in the generated fleet (default 2)")
    p.add_argument("--gpus-per-host", type=int, default=8, help="GPUs per host (default 8)")
    p.add_argument("--seed", type=int, default=7, help="random seed of the fleet (default 7)")
    p.add_argument("--listen", default=":10044", metavar="HOST:PORT", help="the live exporter (default :10044)")
    p.add_argument("--analytics-listen", default=":10045", metavar="HOST:PORT", help="the analytics (default :10045)")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="serve this long, then exit (default: until ^C)")
    p.add_argument("--no-serve", action="store_true", help="write the report and exit")
    p.add_argument("--config", metavar="FILE", help="a config file, for [cost] above all")


MIG_HOSTS = 1  # the demo's MIG nodes (synthetic: generated, like the rest of the fleet)


def fleet_at(now: float, timezone: str, hosts: int, gpus_per_host: int, seed: int) -> tuple[Fleet, Window]:
    """The demo's fleet as recorded by ``now``, and the week it reports (the last whole one).

    Generated over three whole ISO weeks (the two before ``now``'s and its own) and cut at ``now``
    (``synthetic.until``): for a seed, every week is the same at any ``now`` in the current week.
    Last week is complete; the current week holds its minutes before ``now`` and its jobs that
    ended before ``now`` (those still running or pending are not in the history yet, as on a real
    fleet), and its figures grow as ``now`` does, never changing what was there before."""
    this = iso_week(iso_week_label(now, timezone), timezone)
    last = last_full_week(now, timezone)
    first = last_full_week(last.start, timezone)
    window = Window(first.start, this.end, "demo", timezone)
    whole = synthetic.generate(window, hosts, gpus_per_host, seed=seed, mig_hosts=MIG_HOSTS)
    return synthetic.until(whole, now, this.start), last


def _step(msg: str, t0: float) -> None:
    print(f"[{time.monotonic() - t0:5.1f} s] {msg}", flush=True)


SIGNALLED = threading.Event()  # a signal came before serving, even one Python swallowed


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT and SIGTERM before serving end the demo, cleaned up. Remembered as well as raised: a
    KeyboardInterrupt raised inside a callback (an import lock's, a weakref's) is printed and
    ignored, and the demo would have gone on to serve; it stops before serving instead."""
    SIGNALLED.set()
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    if not (1 <= args.hosts <= 64 and 1 <= args.gpus_per_host <= 16):
        print("gpuledger demo: --hosts must be 1..64 and --gpus-per-host 1..16", file=sys.stderr)
        return 2
    try:
        distinct_listen(args.listen, "--listen", args.analytics_listen, "--analytics-listen")
        if args.dir:
            writable_dir(Path(args.dir), "--dir")
    except ConfigError as e:
        print(f"gpuledger demo: {e}", file=sys.stderr)
        return 2
    temporary = not args.dir
    if not temporary:
        fate = "kept"
    elif args.no_serve:
        fate = "temporary: the reports are kept, the history removed at exit"
    else:
        fate = "temporary: removed when the demo ends, on Ctrl-C too; --dir keeps it"
    folder: Path | None = None
    SIGNALLED.clear()
    previous = signal.signal(signal.SIGTERM, _interrupt), signal.signal(signal.SIGINT, _interrupt)  # before the folder
    try:
        folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gpuledger-demo-"))
        print(f"gpuledger demo: folder {folder} ({fate})", flush=True)
        return _demo(args, folder)
    except KeyboardInterrupt:
        print("gpuledger demo: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
        if folder is not None and temporary and args.no_serve:
            (folder / "history.db").unlink(missing_ok=True)
            print(f"gpuledger demo: removed {folder / 'history.db'}; the reports stay in {folder / 'reports'}")
        elif folder is not None and temporary:
            shutil.rmtree(folder, ignore_errors=True)
            print(f"gpuledger demo: removed {folder}", flush=True)


def _demo(args: argparse.Namespace, folder: Path) -> int:
    from analytics.daemon import Analytics
    from daemonkit.logs import setup_logging
    from exporter.app import Exporter
    from exporter.readers.replay import ReplayReader

    t0 = time.monotonic()
    history = folder / "history.db"
    live_host = "gpu-node-01"  # the live exporter is the generated fleet's first host
    extra = {
        "analytics": {
            "source": "embedded",
            "history": str(history),
            "reports_dir": str(folder / "reports"),
            "listen": args.analytics_listen,
        },
        "exporter": {"reader": "replay", "hostname": live_host},
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
    fleet, last = fleet_at(now, s.analytics.timezone, args.hosts, args.gpus_per_host, args.seed)
    history.unlink(missing_ok=True)
    synthetic.write_history(fleet, history)
    days = fleet.window.hours / 24
    _step(f"generated {len(fleet.devices)} GPUs x {days:.1f} days, {len(fleet.jobs)} jobs -> {history}", t0)
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
    live = [d for host, d in fleet.devices if host == live_host]
    try:
        p = s.replay
        reader = ReplayReader(None, speed=p.speed, loop=p.loop, stagger=p.stagger, devices=live)
        exporter = Exporter(s, reader)
    except STARTUP_ERRORS as e:
        a.server.server_close()
        return start_error("demo", e, s.web.listen)
    done = threading.Event()  # from here a signal stops the daemons before the folder goes
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: done.set())
    if SIGNALLED.is_set():  # one came while generating, and its KeyboardInterrupt was lost
        a.server.server_close()
        exporter.server.server_close()  # bound, never served: nothing to shut down
        raise KeyboardInterrupt
    exporter.start()
    a.start(catch_up=False)
    _step(
        f"live {'until Ctrl-C' if args.duration is None else f'for {args.duration:g} s'}:\n"
        f"  analytics {a.url}/  the generated fleet ({len(fleet.devices)} GPUs on {args.hosts} hosts and "
        f"{MIG_HOSTS} MIG node, "
        f"{days:.1f} days up to now), report {a.url}/reports/gpuledger-{r.week}.html\n"
        f"  exporter  {exporter.url}/metrics  {live_host}'s {len(live)} GPUs (same UUIDs), live readings "
        "replayed from the bundled H200 capture, not written to the history",
        t0,
    )
    done.wait(args.duration)
    a.stop()
    exporter.stop()
    return 0
