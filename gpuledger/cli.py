"""The ``gpuledger`` command: one subcommand per daemon or tool."""

from __future__ import annotations

import argparse
import platform

from exporter import __version__
from exporter import cli as exporter_cli
from exporter.benchmarks import cli as bench_cli


def _version(args: argparse.Namespace) -> int:
    print(f"gpuledger {__version__} (Python {platform.python_version()})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuledger", description="GPU utilisation, energy and cost, for Prometheus.")
    p.add_argument("--version", action="version", version=f"gpuledger {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ex = sub.add_parser("exporter", help="run the node exporter (serves /metrics)")
    exporter_cli.add_arguments(ex)
    ex.set_defaults(func=exporter_cli.run)
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
