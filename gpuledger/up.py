"""``gpuledger up``: the exporter and the analytics daemon in one process on the embedded
history: the single-node default, no Prometheus needed. The exporter serves :10044, the analytics
:10045 (its /metrics, and the reports under /reports/).

With ``analytics.source = "prometheus"`` in the config (or GPULEDGER_ANALYTICS__SOURCE) the
analytics read that Prometheus instead, and the exporter's history is its own affair: on, or off
with ``--no-history``. On the embedded source ``--no-history`` is refused (exit 2): the analytics
would have nothing to read."""

from __future__ import annotations

import argparse

from analytics.cli import STARTUP_ERRORS, full_settings, start_error
from analytics.config import FullSettings
from daemonkit.argcheck import distinct_listen
from daemonkit.settings import ConfigError
from daemonkit.signals import wait_for_signal
from exporter import cli as exporter_cli
from exporter.config import default_history_path
from exporter.readers import Reader

DESCRIPTION = "Run the exporter and the analytics daemon in one process, on this node's embedded history."
EPILOG = "Example:\n  gpuledger up --reports-dir /var/lib/gpuledger/reports"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description, p.epilog, p.formatter_class = DESCRIPTION, EPILOG, argparse.RawDescriptionHelpFormatter
    exporter_cli.add_arguments(p)  # --config, --listen, --reader, --history, ...
    p.add_argument("--analytics-listen", metavar="HOST:PORT", help="the analytics /metrics (default :10045)")
    p.add_argument("--reports-dir", metavar="DIR", help="where weekly reports are written")
    p.add_argument("--timezone", metavar="ZONE", help="weeks start on Monday 00:00 here (default UTC)")


def prepare(s: FullSettings, reader: Reader, no_history: bool = False) -> FullSettings:
    """Both halves share one history file: the exporter writes it, the analytics read it; unless
    the analytics read Prometheus (``analytics.source``): the history is then on or off as
    configured. ``no_history``: it was turned off by ``--no-history`` (named in the refusal)."""
    prometheus = s.analytics.source != "embedded"
    if not s.history.enabled:
        if prometheus:
            return s
        what = "--no-history" if no_history else "history.enabled = false"
        raise ConfigError(
            f"{what}: gpuledger up's analytics read the embedded history the exporter writes; keep it, "
            'or set analytics.source = "prometheus" (and prometheus.url) for them to read Prometheus'
        )
    path = s.history.path
    if path is None:
        # a replayed capture gets a file of its own, never mixed into a real GPU's history
        base = default_history_path()
        path = base if reader.kind == "nvml" else base.with_name("history-replay.db")
    analytics = {} if prometheus else {"source": "embedded", "history": path}
    return s.model_copy(
        update={
            "history": s.history.model_copy(update={"path": path}),
            "analytics": s.analytics.model_copy(update=analytics),
        }
    )


def exporter_settings(s: FullSettings) -> FullSettings:
    """The exporter's half of the settings. With per-user access ([analytics] access = "per_user")
    its /metrics, which carries every job's user and job id, is the admins' as the analytics' is:
    only the admins among [web]'s basic-auth users pass (it reads no proxy header)."""
    a = s.analytics
    if a.access != "per_user":
        return s
    admins = {u: h for u, h in s.web.basic_auth_users.items() if u in a.admins}
    if not admins:
        raise ConfigError(
            "analytics.admins: gpuledger up with per_user access needs an admin among web.basic_auth_users: the "
            "exporter's /metrics carries every job's user and is the admins' (it reads no proxy header)"
        )
    return s.model_copy(update={"web": s.web.model_copy(update={"basic_auth_users": admins})})


def run(args: argparse.Namespace) -> int:
    from analytics.daemon import Analytics
    from daemonkit.logs import setup_logging
    from exporter.app import Exporter, build_reader

    analytics = {"listen": args.analytics_listen, "reports_dir": args.reports_dir, "timezone": args.timezone}
    extra = {**exporter_cli.overrides(args), "analytics": {k: v for k, v in analytics.items() if v is not None}}
    address: str | None = None  # the one being bound, named in "cannot listen"
    try:
        s = full_settings(args.config, extra)
        distinct_listen(s.web.listen, "--listen", s.analytics.listen, "--analytics-listen")
        setup_logging(s.log_level)
        reader = build_reader(s)
        s = prepare(s, reader, args.no_history)
        address = s.web.listen
        exporter = Exporter(exporter_settings(s), reader)
        exporter.start()  # first: it creates the history file the analytics open
        address = s.analytics.listen
        try:
            a = Analytics(s)
        except BaseException:
            exporter.stop()
            raise
    except STARTUP_ERRORS as e:
        return start_error("up", e, address)
    a.start()
    history = s.history.path if s.history.enabled else "off"
    source = "Prometheus" if s.analytics.source != "embedded" else "the history"
    print(f"gpuledger up: exporter {exporter.url}/metrics, analytics {a.url}/metrics from {source}, history {history}")
    wait_for_signal()
    a.stop()
    exporter.stop()
    return 0
