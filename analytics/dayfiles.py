"""A kept day's file (``analytics.daycache``): two lines of JSON. The first is an object with the
day, the source's key and its reading (``carry``) and a row per GPU; the second a list of the job
rows. Each row is its dataclass' fields in order (the field names are written too: a file of
another layout is read again from the store). The job rows are parsed, checked and made into
``JobWeek`` rows only where the jobs are asked (``JobRows``): a previous week's fleet figures read
the first line alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from analytics.sources.base import GpuFigures
from domain.frozen import construct, of_fields
from domain.jobs import JobKey
from domain.week import Day, GpuDay, GpuWeek, JobWeek, Window

FORMAT = 2  # the files' layout; another value is read again from the store (1: one JSON object)


@dataclass(frozen=True)
class Part:
    """Consecutive days of a window: one kept day (``jobs`` set: from its file, or read to be
    written), or days read from the store at once (``live``: the days between kept ones)."""

    days: tuple[Day, ...]
    gpus: tuple[GpuWeek, ...]
    approximations: tuple[str, ...]
    targets: Mapping[str, str]
    carry: str  # the source's state of its reading (``carry_state``), kept with the file
    live: GpuFigures | None = None
    jobs: tuple[JobWeek, ...] | JobRows | None = None

    def window(self, timezone: str) -> Window:
        return Window(self.days[0].start, self.days[-1].end, self.days[0].date, timezone)


class JobRows:
    """A kept day's job rows as its file holds them (the second line's text), parsed, checked and
    made into ``JobWeek`` rows only where the jobs are asked: a previous week's fleet figures need
    none (240,000 rows at 10,000 GPUs). Damage found then is a ValueError, TypeError, KeyError or
    IndexError (``DayCached.jobs`` reads that day's jobs from the store)."""

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._made: tuple[JobWeek, ...] = ()

    def made(self) -> tuple[JobWeek, ...]:
        if self._text is not None:
            rows = json.loads(self._text)
            if not isinstance(rows, list):
                raise ValueError("the job rows are not a list")
            keys: dict[tuple[Any, ...], JobKey] = {}  # a job's key once for its rows on each of its GPUs
            n, n_key, out = len(JOB_FIELDS), len(KEY_FIELDS), []
            for row in rows:  # the rest of a row that is not whole fails below
                if len(row) != n or len(row[KEY]) != n_key:
                    raise ValueError(f"a job row of {len(row)} fields")
                k = tuple(row[KEY])
                if (key := keys.get(k)) is None:
                    key = keys[k] = JobKey(*k)
                row[KEY] = key
                row[LABELS] = tuple(map(tuple, row[LABELS])) if row[LABELS] else ()
                out.append(of_fields(JobWeek, dict(zip(JOB_FIELDS, row, strict=True))))  # every field, no other
            self._made, self._text = tuple(out), None
        return self._made


GPU_FIELDS = tuple(f.name for f in fields(GpuWeek))
JOB_FIELDS = tuple(f.name for f in fields(JobWeek))
KEY_FIELDS = tuple(f.name for f in fields(JobKey))
DAILY, HOURS = GPU_FIELDS.index("daily"), GPU_FIELDS.index("energy_by_hour")
KEY, LABELS = JOB_FIELDS.index("job"), JOB_FIELDS.index("labels")


def encode(x: Part, key: str) -> str:
    """A day's figures as two lines of JSON: the day and a row per GPU, then the job rows, each
    row its fields in the dataclass' order."""

    def gpu(g: GpuWeek) -> list[Any]:
        row: list[Any] = [getattr(g, f) for f in GPU_FIELDS]
        row[DAILY] = [[d.sampled_s, d.busy_s, d.energy_j] for d in g.daily]
        return row

    def job(j: JobWeek) -> list[Any]:
        row: list[Any] = [getattr(j, f) for f in JOB_FIELDS]
        row[KEY] = [getattr(j.job, f) for f in KEY_FIELDS]
        return row

    head = {
        "format": FORMAT,
        "key": key,
        "start": x.days[0].start,
        "end": x.days[0].end,
        "date": x.days[0].date,
        "carry": x.carry,
        "approximations": list(x.approximations),
        "targets": dict(x.targets),
        "gpu_fields": GPU_FIELDS,
        "job_fields": JOB_FIELDS,
        "key_fields": KEY_FIELDS,
        "gpus": [gpu(g) for g in x.gpus],
    }
    jobs = [job(j) for j in (x.jobs if isinstance(x.jobs, tuple) else ())]
    dump = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    return f"{dump(head)}\n{dump(jobs)}\n"


def parse(text: str, d: Day, key: str) -> dict[str, Any]:
    """A day's file, its first line parsed and checked against the day and source it is read for
    (ValueError, TypeError, KeyError or IndexError where it is not theirs); ``jobs``: the second
    line's text."""
    first, newline, jobs = text.partition("\n")
    doc = json.loads(first)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    got = (doc["format"], doc["key"], doc["start"], doc["end"])
    if got != (FORMAT, key, d.start, d.end):
        raise ValueError(f"format, source or day {got[0]!r}, {got[1]!r}, {got[2]!r}..{got[3]!r} is not this one")
    layout = (tuple(doc["gpu_fields"]), tuple(doc["job_fields"]), tuple(doc["key_fields"]))
    if layout != (GPU_FIELDS, JOB_FIELDS, KEY_FIELDS):
        raise ValueError("written by another version")
    if not newline or not jobs.endswith("\n"):
        raise ValueError("its job rows are cut short")
    doc["jobs"] = jobs
    return doc


def rows_of(doc: dict[str, Any], d: Day) -> Part:
    """A parsed day's rows (ValueError, TypeError, KeyError or IndexError where they are not whole)."""

    def gpu(row: list[Any]) -> GpuWeek:
        if len(row) != len(GPU_FIELDS):
            raise ValueError(f"a GPU row of {len(row)} fields")
        row[DAILY] = tuple(GpuDay(*x) for x in row[DAILY])
        if row[HOURS] is not None:
            row[HOURS] = tuple(row[HOURS])
        return construct(GpuWeek, dict(zip(GPU_FIELDS, row, strict=True)))

    return Part(
        (d,),
        tuple(map(gpu, doc["gpus"])),
        tuple(map(str, doc["approximations"])),
        {str(u): str(t) for u, t in doc["targets"].items()},
        str(doc["carry"]),
        jobs=JobRows(doc["jobs"]),
    )
