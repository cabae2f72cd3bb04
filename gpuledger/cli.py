"""The ``gpuledger`` command: one subcommand per daemon or tool."""

from __future__ import annotations

import argparse
import platform

from analytics import cli as analytics_cli
from analytics.config import FullSettings
from exporter import __version__
from exporter import cli as exporter_cli
from exporter.benchmarks import cli as bench_cli
from gpuledger import demo, up
from gpuledger import statements as statements_cli


def _version(args: argparse.Namespace) -> int:
    print(f"gpuledger {__version__} (Python {platform.python_version()})")
    return 0


def _exporter(args: argparse.Namespace) -> int:
    """The exporter, validating the whole file: the analytics' sections too (the exporter alone
    may not import the analytics, so ``python -m exporter`` checks its own sections only)."""
    return exporter_cli.run(args, FullSettings)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuledger", description="GPU utilisation, energy and cost, for Prometheus.")
    p.add_argument("--version", action="version", version=f"gpuledger {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ex = sub.add_parser("exporter", help="run the node exporter (serves /metrics)")
    exporter_cli.add_arguments(ex)
    exporter_cli.add_check_argument(ex)
    ex.set_defaults(func=_exporter)
    an = sub.add_parser("analytics", help="run the analytics daemon (weekly reports, rolling figures on /metrics)")
    analytics_cli.add_analytics_arguments(an)
    an.set_defaults(func=analytics_cli.run_analytics)
    rep = sub.add_parser("report", help="write one report (HTML, JSON, CSV, Markdown) and exit")
    analytics_cli.add_report_arguments(rep)
    rep.set_defaults(func=analytics_cli.run_report)
    job = sub.add_parser("job", help="one job's GPUs, hours, efficiency and cost, with advice (like seff)")
    statements_cli.add_job_arguments(job)
    job.set_defaults(func=statements_cli.run_job)
    st = sub.add_parser("statement", help="a user's, account's or namespace's statement of a month or week")
    statements_cli.add_statement_arguments(st)
    st.set_defaults(func=statements_cli.run_statement)
    u = sub.add_parser("up", help="exporter + analytics in one process on the embedded history (single node)")
    up.add_arguments(u)
    u.set_defaults(func=up.run)
    d = sub.add_parser("demo", help="a generated fleet's week, reported and served live; no GPU needed")
    demo.add_arguments(d)
    d.set_defaults(func=demo.run)
    bench = sub.add_parser("bench", help="run torch.distributed benchmarks once (all-reduce, training, GEMM, copies)")
    bench_cli.add_arguments(bench)
    bench.set_defaults(func=bench_cli.run)
    ver = sub.add_parser("version", help="print the version")
    ver.set_defaults(func=_version)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
