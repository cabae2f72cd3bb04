"""The analytics daemon's monthly statements: on the 1st, one statement per key of each
``[statements] by`` grouping for last month, into ``[statements] dir``, from one read of the
month (a key is every user, account or namespace that ran a job in it), one pass over its jobs per
grouping, each statement written as it is made."""

from __future__ import annotations

import logging
from pathlib import Path

from analytics.config import FullSettings
from analytics.sources import Source
from analytics.statements.locate import job_states
from analytics.statements.read import read
from analytics.statements.render import write
from analytics.statements.statement import previous_month, statements_of
from domain.week import Window

log = logging.getLogger("gpuledger.analytics")


def write_month(source: Source, s: FullSettings, now: float, window: Window | None = None) -> list[Path]:
    """Last month's statements (or ``window``'s); [] where the month had no GPU data. The source's
    errors (SourceUnavailable) and the folder's (OSError) reach the caller."""
    w = window or previous_month(now, s.analytics.timezone)
    got = read(source, w, s, now=now)
    if not got.report.fleet.gpus:
        log.info("statements %s: no GPU data in the month; nothing written", w.label)
        return []
    states = job_states(source, w.start, w.end)
    files: list[Path] = []
    for grouping in dict.fromkeys(s.statements.by):
        for st in statements_of(got.data.jobs, got.report, grouping, states):  # one at a time
            files += write(st, list(s.statements.formats), s.statements.dir)
    log.info("statements %s: %d files in %s", w.label, len(files), s.statements.dir)
    return files
