"""The ``gpuledger`` command: one subcommand per daemon or tool.

Each subcommand's module is imported only when that subcommand is run (or its full parser is
asked, ``build_parser()``): ``gpuledger version`` or ``gpuledger exporter`` do not load the
analytics, the report's renderers or the benchmarks (docs/performance.md, "Start-up")."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable

from daemonkit.argparse_hints import HintingParser, describe
from exporter import __version__


def _version(args: argparse.Namespace) -> int:
    print(f"gpuledger {__version__} (Python {platform.python_version()})")
    return 0


def _exporter(args: argparse.Namespace) -> int:
    """The exporter, validating the whole file: the analytics' sections too (the exporter alone
    may not import the analytics, so ``python -m exporter`` checks its own sections only)."""
    from analytics.config import FullSettings
    from exporter import cli as exporter_cli

    return exporter_cli.run(args, FullSettings)


def _exporter_args(p: argparse.ArgumentParser) -> None:
    from exporter import cli as exporter_cli

    exporter_cli.add_arguments(p)
    exporter_cli.add_check_argument(p)
    describe(p, exporter_cli.DESCRIPTION, *(f"gpuledger exporter {e}" for e in exporter_cli.EXAMPLES))
    p.set_defaults(func=_exporter)


def _analytics_args(p: argparse.ArgumentParser) -> None:
    from analytics import cli as analytics_cli

    analytics_cli.add_analytics_arguments(p)
    describe(
        p,
        "Run the analytics daemon: write the weekly reports and serve rolling cost figures on /metrics.",
        "gpuledger analytics --prometheus-url http://prometheus:9090 --listen :10045 --reports-dir /var/lib/gpuledger",
    )
    p.set_defaults(func=analytics_cli.run_analytics)


def _report_args(p: argparse.ArgumentParser) -> None:
    from analytics import cli as analytics_cli

    analytics_cli.add_report_arguments(p)
    describe(
        p,
        "Write one report of a week or of the last N days (HTML, JSON, CSV, Markdown), then exit.",
        "gpuledger report --week 2026-W48 --prometheus-url http://prometheus:9090 --out reports/",
        "gpuledger report --days 1 --source embedded --history history.db --format md",
    )
    p.set_defaults(func=analytics_cli.run_report)


def _job_args(p: argparse.ArgumentParser) -> None:
    from gpuledger import statements as statements_cli

    statements_cli.add_job_arguments(p)
    describe(
        p,
        "Show one job's GPUs, GPU-hours, efficiency and cost, with advice (like Slurm's seff).",
        "gpuledger job 123456 --prometheus-url http://prometheus:9090",
        "gpuledger job ml-team/train-7f9c --source embedded --history /var/lib/gpuledger/history.db",
    )
    p.set_defaults(func=statements_cli.run_job)


def _statement_args(p: argparse.ArgumentParser) -> None:
    from gpuledger import statements as statements_cli

    statements_cli.add_statement_arguments(p)
    describe(
        p,
        "Write the statement of a user, Slurm account or Kubernetes namespace for a month or a week.",
        "gpuledger statement --user alice --month 2026-11 --format html,csv",
        "gpuledger statement --account physics --week 2026-W48 --out statements/",
    )
    p.set_defaults(func=statements_cli.run_statement)


def _up_args(p: argparse.ArgumentParser) -> None:
    from gpuledger import up

    up.add_arguments(p)  # up.py gives its own description and example
    p.set_defaults(func=up.run)


def _demo_args(p: argparse.ArgumentParser) -> None:
    from gpuledger import demo

    demo.add_arguments(p)  # demo.py gives its own description and example
    p.set_defaults(func=demo.run)


def _bench_args(p: argparse.ArgumentParser) -> None:
    from exporter.benchmarks import cli as bench_cli

    bench_cli.add_arguments(p)
    describe(p, *bench_cli.HELP)
    p.set_defaults(func=bench_cli.run)


def _scaling_args(p: argparse.ArgumentParser) -> None:
    from gpuledger import scaling

    scaling.add_arguments(p)
    describe(p, *scaling.HELP)
    p.set_defaults(func=scaling.run)


def _version_args(p: argparse.ArgumentParser) -> None:
    describe(p, "Print gpuledger's version and the Python it runs on.", "gpuledger version")
    p.set_defaults(func=_version)


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "exporter": ("run the node exporter (serves /metrics)", _exporter_args),
    "analytics": ("run the analytics daemon (weekly reports, rolling figures on /metrics)", _analytics_args),
    "report": ("write one report (HTML, JSON, CSV, Markdown) and exit", _report_args),
    "job": ("one job's GPUs, hours, efficiency and cost, with advice (like seff)", _job_args),
    "statement": ("a user's, account's or namespace's statement of a month or week", _statement_args),
    "up": ("exporter + analytics in one process on the embedded history (single node)", _up_args),
    "demo": ("a generated fleet's week, reported and served live; no GPU needed", _demo_args),
    "bench": ("run torch.distributed benchmarks once (all-reduce, training, GEMM, copies)", _bench_args),
    "scaling": ("does multi-GPU pay for your training script? speedup and cost at 1..N GPUs", _scaling_args),
    "version": ("print the version", _version_args),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command's parser; with ``only``, the arguments of that subcommand alone are
    filled in (the others are listed, with their help line): its module alone is imported."""
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
    for name, (help_line, fill) in COMMANDS.items():
        command = sub.add_parser(name, help=help_line)
        if only is None or only == name:
            fill(command)
    return p


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    # the first word that is not an option names the subcommand (the top level's options take no value)
    named = next((w for w in words if not w.startswith("-")), "")
    args = build_parser(only=named).parse_args(words)
    code: int = args.func(args)
    return code
