"""``gpuledger job ID`` and ``gpuledger statement``: flags on top of the config file and the
environment, as ``gpuledger report``'s.

Exit codes: 0 done; 1 the source could not be read, the job is unknown or the period has no
data (nothing is written); 2 invalid configuration or flags, naming which.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from analytics import cli as analytics_cli
from analytics.pipeline import describe, make_source
from analytics.sources import SourceUnavailable
from analytics.statements import statement
from analytics.statements.job import AmbiguousJob, UnknownJob, job_figures
from analytics.statements.locate import NotSupported, job_states
from analytics.statements.read import read
from analytics.statements.render import FORMATS, job_text, write
from analytics.statements.statement import period, statement_of
from daemonkit.argcheck import writable_dir
from daemonkit.settings import ConfigError


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="ID", help="Slurm job id, pod name or namespace/pod")
    analytics_cli._common(p)


def run_job(args: argparse.Namespace) -> int:
    try:
        s = analytics_cli.settings_from(args)
        source = make_source(s)
        f = job_figures(source, args.job, s, time.time())
    except (ConfigError, NotSupported) as e:
        print(f"gpuledger job: {e}", file=sys.stderr)
        return 2
    except SourceUnavailable as e:
        print(f"gpuledger job: source unavailable: {e}", file=sys.stderr)
        return 1
    except AmbiguousJob as e:
        print(
            f"gpuledger job: {args.job!r} names a job in each of {len(e.keys)} clusters: name one, e.g. "
            f"{' or '.join(e.keys[:3])}",
            file=sys.stderr,
        )
        return 1
    except UnknownJob:
        print(f"gpuledger job: no job {args.job!r} in {describe(source, s)}", file=sys.stderr)
        return 1
    print(job_text(f))
    return 0


def add_statement_arguments(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    for name in statement.names():  # --user U, --namespace N, --account A
        g = statement.by(name)
        who.add_argument(g.flag, dest=_dest(name), metavar=name[0].upper(), help=g.statement)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--month", metavar="YYYY-MM", help="a calendar month, e.g. 2026-11")
    when.add_argument("--week", metavar="YYYY-Www", help="an ISO week, e.g. 2026-W48")
    p.add_argument("--out", dest="statement_out", metavar="DIR", help="folder (default statements.dir)")
    p.add_argument("--format", dest="statement_format", metavar="LIST", help="comma-separated: html,md,csv")
    analytics_cli._common(p)


def _dest(grouping: str) -> str:
    return "statement_" + re.sub(r"\W", "_", grouping)


def run_statement(args: argparse.Namespace) -> int:
    grouping, key = next((g, v) for g in statement.names() if (v := getattr(args, _dest(g), None)) is not None)
    try:
        s = analytics_cli.settings_from(args)
        formats: list[str] = list(s.statements.formats)
        if args.statement_format:
            formats = [f.strip() for f in args.statement_format.split(",") if f.strip()]
            if bad := [f for f in formats if f not in FORMATS]:
                raise ConfigError(f"--format: unknown {', '.join(bad)}; choose from {', '.join(FORMATS)}")
        try:
            window = period(args.month, args.week, s.analytics.timezone)
        except ValueError as e:
            raise ConfigError(f"--month/--week: {e}") from None
        out = Path(args.statement_out) if args.statement_out else s.statements.dir
        folder = writable_dir(out, "--out" if args.statement_out else "statements.dir")
        source = make_source(s)
        got = read(source, window, s)
        states = job_states(source, window.start, window.end)
    except ConfigError as e:
        print(f"gpuledger statement: {e}", file=sys.stderr)
        return 2
    except SourceUnavailable as e:
        print(f"gpuledger statement: source unavailable: {e}", file=sys.stderr)
        return 1
    if not got.report.fleet.gpus:
        print(f"gpuledger statement: no data in {window.label} from {describe(source, s)}", file=sys.stderr)
        return 1
    st = statement_of(got.data.jobs, got.report, grouping, key, states)
    try:
        files = write(st, formats, folder)
    except OSError as e:
        print(f"gpuledger statement: cannot write in {folder}: {e.strerror or e}", file=sys.stderr)
        return 1
    t = st.totals
    failed = "—" if t.failed_cost is None else f"{t.failed_cost:,.2f}"
    print(
        f"{grouping} {key}, {window.label}: {t.jobs} jobs, {t.charged_gpu_hours:,.1f} GPU-hours, "
        f"total {t.total_cost:,.2f} {st.currency}, idle {t.idle_cost:,.2f}, failed jobs {failed}"
    )
    for a in st.advice:
        print(f"  {a}")
    for path in files:
        print(f"  wrote {path}")
    return 0
