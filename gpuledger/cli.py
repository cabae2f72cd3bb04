"""The ``gpuledger`` command: one subcommand per daemon or tool."""

from __future__ import annotations

import argparse
import platform

from analytics import cli as analytics_cli
from analytics.config import FullSettings
from daemonkit.argparse_hints import HintingParser, describe
from exporter import __version__
from exporter import cli as exporter_cli
from exporter.benchmarks import cli as bench_cli
from gpuledger import demo, scaling, up
from gpuledger import statements as statements_cli


def _version(args: argparse.Namespace) -> int:
    print(f"gpuledger {__version__} (Python {platform.python_version()})")
    return 0


def _exporter(args: argparse.Namespace) -> int:
    """The exporter, validating the whole file: the analytics' sections too (the exporter alone
    may not import the analytics, so ``python -m exporter`` checks its own sections only)."""
    return exporter_cli.run(args, FullSettings)


def build_parser() -> argparse.ArgumentParser:
    p = HintingParser(prog="gpuledger")
    describe(
        p,
        "GPU utilisation, energy and cost, for Prometheus: an exporter, an analytics daemon and reports.",
        "gpuledger demo",
        "gpuledger exporter --listen :10044",
        "gpuledger COMMAND --help",
    )
    p.add_argument("--version", action="version", version=f"gpuledger {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ex = sub.add_parser("exporter", help="run the node exporter (serves /metrics)")
    exporter_cli.add_arguments(ex)
    exporter_cli.add_check_argument(ex)
    describe(ex, exporter_cli.DESCRIPTION, *(f"gpuledger exporter {e}" for e in exporter_cli.EXAMPLES))
    ex.set_defaults(func=_exporter)
    an = sub.add_parser("analytics", help="run the analytics daemon (weekly reports, rolling figures on /metrics)")
    analytics_cli.add_analytics_arguments(an)
    describe(
        an,
        "Run the analytics daemon: write the weekly reports and serve rolling cost figures on /metrics.",
        "gpuledger analytics --prometheus-url http://prometheus:9090 --listen :10045 --reports-dir /var/lib/gpuledger",
    )
    an.set_defaults(func=analytics_cli.run_analytics)
    rep = sub.add_parser("report", help="write one report (HTML, JSON, CSV, Markdown) and exit")
    analytics_cli.add_report_arguments(rep)
    describe(
        rep,
        "Write one report of a week or of the last N days (HTML, JSON, CSV, Markdown), then exit.",
        "gpuledger report --week 2026-W48 --prometheus-url http://prometheus:9090 --out reports/",
        "gpuledger report --days 1 --source embedded --history history.db --format md",
    )
    rep.set_defaults(func=analytics_cli.run_report)
    job = sub.add_parser("job", help="one job's GPUs, hours, efficiency and cost, with advice (like seff)")
    statements_cli.add_job_arguments(job)
    describe(
        job,
        "Show one job's GPUs, GPU-hours, efficiency and cost, with advice (like Slurm's seff).",
        "gpuledger job 123456 --prometheus-url http://prometheus:9090",
        "gpuledger job ml-team/train-7f9c --source embedded --history /var/lib/gpuledger/history.db",
    )
    job.set_defaults(func=statements_cli.run_job)
    st = sub.add_parser("statement", help="a user's, account's or namespace's statement of a month or week")
    statements_cli.add_statement_arguments(st)
    describe(
        st,
        "Write the statement of a user, Slurm account or Kubernetes namespace for a month or a week.",
        "gpuledger statement --user alice --month 2026-11 --format html,csv",
        "gpuledger statement --account physics --week 2026-W48 --out statements/",
    )
    st.set_defaults(func=statements_cli.run_statement)
    u = sub.add_parser("up", help="exporter + analytics in one process on the embedded history (single node)")
    up.add_arguments(u)  # up.py gives its own description and example
    u.set_defaults(func=up.run)
    d = sub.add_parser("demo", help="a generated fleet's week, reported and served live; no GPU needed")
    demo.add_arguments(d)  # demo.py gives its own description and example
    d.set_defaults(func=demo.run)
    bench = sub.add_parser("bench", help="run torch.distributed benchmarks once (all-reduce, training, GEMM, copies)")
    bench_cli.add_arguments(bench)
    describe(bench, *bench_cli.HELP)
    bench.set_defaults(func=bench_cli.run)
    sc = sub.add_parser("scaling", help="does multi-GPU pay for your training script? speedup and cost at 1..N GPUs")
    scaling.add_arguments(sc)
    describe(sc, *scaling.HELP)
    sc.set_defaults(func=scaling.run)
    ver = sub.add_parser("version", help="print the version")
    describe(ver, "Print gpuledger's version and the Python it runs on.", "gpuledger version")
    ver.set_defaults(func=_version)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
