"""A kept day's file (``analytics.daycache``): three lines of JSON, each holding rows as columns.
The first is an object with the day, the source's key and its reading (``carry``), the field
names (a file of another layout is read again from the store) and the GPUs
(``analytics.gpucolumns``: each text once in ``strings`` and a column of int32 indexes into it per
text field, each figure a float64 column, NaN where not measured, the days and the hours). The
second holds the job rows (``domain.jobtable``): the same for their texts, each job key and each
pod's label set once with a column of indexes, and each figure a column. The arrays are
little-endian, in base64. The third holds the label sets of the jobs' Slurm records
(``records_doc``), where the source gives them. The second and third lines are read only where
the jobs are asked (``JobRows``, ``RecordLine``): a previous week's fleet figures read the first
line alone. A 10,000-GPU week's seven days of job
rows (240,000) are read in 0.6-0.8 s, where as JSON rows made into objects they took 2.5-3.4 s
(docs/performance.md).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from analytics.gpucolumns import NUMBERS as GPU_NUMBERS
from analytics.gpucolumns import TEXTS as GPU_TEXTS
from analytics.gpucolumns import GpuColumns
from analytics.sources.base import GpuFigures, LabelSet, RecordSets, label_sets
from domain.jobs import JobKey
from domain.jobtable import NUMBERS, TEXTS, JobTable, Labels
from domain.week import Day, GpuWeek, JobWeek, Window

FORMAT = 4  # the files' layout; another value is read again from the store (2: rows as JSON lists; 3: no records)


@dataclass(frozen=True)
class Part:
    """Consecutive days of a window: one kept day (``jobs`` set: from its file, or read to be
    written), or days read from the store at once (``live``: the days between kept ones)."""

    days: tuple[Day, ...]
    gpus: tuple[GpuWeek, ...] | GpuColumns  # columns: from its file
    approximations: tuple[str, ...]
    targets: Mapping[str, str]
    carry: str  # the source's state of its reading (``carry_state``), kept with the file
    live: GpuFigures | None = None
    jobs: tuple[JobWeek, ...] | JobTable | JobRows | None = None
    records: RecordSets | RecordLine | None = None  # the Slurm records' label sets, where the source keeps them

    def window(self, timezone: str) -> Window:
        return Window(self.days[0].start, self.days[-1].end, self.days[0].date, timezone)


class JobRows:
    """A kept day's job rows as its file holds them (the second line's text), read into a
    ``JobTable`` only where the jobs are asked. Damage found then is a ValueError, TypeError,
    KeyError or IndexError (``DayCached.jobs`` reads that day's jobs from the store)."""

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._made = JobTable.of(())

    def made(self) -> JobTable:
        if self._text is not None:
            self._made, self._text = table_of(self._text), None
        return self._made


class RecordLine:
    """A kept day's Slurm record label sets as its file holds them (the third line's text), read
    only where a report joins its jobs to them; None where the source keeps none. Damage found
    then is a ValueError, TypeError, KeyError or IndexError."""

    def __init__(self, text: str) -> None:
        self._text = text

    def made(self) -> RecordSets | None:
        return records_from(json.loads(self._text))


def _b64(a: npt.NDArray[Any]) -> str:
    return base64.b64encode(a.tobytes()).decode("ascii")


def _array(text: object, dtype: str, n: int) -> npt.NDArray[Any]:
    if not isinstance(text, str):
        raise TypeError("a job column is not base64 text")
    a = np.frombuffer(base64.b64decode(text, validate=True), dtype=dtype)
    if len(a) != n:
        raise ValueError(f"a job column of {len(a)} values, not {n}")
    return a


def _picked(items: list[Any], text: object, n: int) -> list[Any]:
    """``items`` at the indexes of the column ``text`` (n of them, each in range)."""
    at = _array(text, "<i4", n)
    if n and (int(at.min()) < 0 or int(at.max()) >= len(items)):
        raise IndexError("a job column indexes past its table")
    return list(map(items.__getitem__, at.tolist()))


def _coded(values: Iterable[Any], index: dict[Any, int]) -> str:
    """Each value's place in ``index`` (added where new), as a base64 int32 column."""
    return _b64(np.array([index.setdefault(v, len(index)) for v in values], dtype="<i4"))


def _count(doc: dict[str, Any], key: str, what: str) -> int:
    n = doc[key]
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"{n!r} {what}")
    return n


def _texts(values: object, n: int | None = None) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError("texts of a job row that are not strings")
    if n is not None and len(values) != n:
        raise ValueError(f"{len(values)} texts, not {n}")
    return values


def gpus_doc(gpus: Sequence[GpuWeek] | GpuColumns, days: int) -> dict[str, Any]:
    """The GPU rows of a day's first line as columns: each text once, a column of indexes per text
    field, each figure, the days (n x days x 3) and the hours (one after the other, with each
    GPU's count, -1 where it has none) in base64."""
    c = gpus if isinstance(gpus, GpuColumns) else GpuColumns.of(gpus, days)
    strings: dict[str, int] = {}
    doc = {
        "n": c.n,
        "texts": {name: _coded(c.texts[name], strings) for name in GPU_TEXTS},
        "numbers": {name: _b64(c.numbers[name].astype("<f8")) for name in GPU_NUMBERS},
        "daily": _b64(c.daily.astype("<f8")),
        "hours": _b64(c.hours.astype("<f8")),
        "hours_n": _b64(c.hours_n.astype("<i4")),
    }
    return {**doc, "strings": list(strings)}


def gpus_of(doc: Any, days: int) -> GpuColumns:
    """The GPU columns of a day's first line (ValueError, TypeError, KeyError or IndexError where
    they are not whole)."""
    if not isinstance(doc, dict):
        raise ValueError("the GPU rows are not an object")
    n = _count(doc, "n", "GPU rows")
    strings = _texts(doc["strings"])
    hours_n = _array(doc["hours_n"], "<i4", n)
    return GpuColumns(
        {name: _picked(strings, doc["texts"][name], n) for name in GPU_TEXTS},
        {name: _array(doc["numbers"][name], "<f8", n) for name in GPU_NUMBERS},
        _array(doc["daily"], "<f8", n * days * 3).reshape(n, days, 3),
        _array(doc["hours"], "<f8", int(np.maximum(hours_n, 0).sum())),
        hours_n,
    )


def records_doc(r: RecordSets | None) -> dict[str, Any] | None:
    """The label sets as a table: every label name once, and per set a row of indexes into
    ``strings`` (0, "", where the set has no such label)."""
    if r is None:
        return None
    names = sorted({name for labels in (*r.scheduler, *r.claims) for name, _ in labels})
    strings = {"": 0}

    def rows(sets: frozenset[LabelSet]) -> str:
        return _coded((dict(labels).get(name, "") for labels in sorted(sets) for name in names), strings)

    doc = {"cluster_label": r.cluster_label, "names": names, "n_scheduler": len(r.scheduler), "n_claims": len(r.claims)}
    doc |= {"scheduler": rows(r.scheduler), "claims": rows(r.claims)}
    return {**doc, "strings": list(strings)}


def records_from(doc: Any) -> RecordSets | None:
    """The label sets of ``records_doc`` (ValueError, TypeError, KeyError or IndexError where they
    are not whole)."""
    if doc is None:
        return None
    if not isinstance(doc, dict) or not isinstance(doc["cluster_label"], str):
        raise ValueError("the records are not an object")
    names, strings = _texts(doc["names"]), _texts(doc["strings"])

    def sets(key: str) -> frozenset[LabelSet]:
        n = _count(doc, f"n_{key}", "record label sets")
        k = len(names)
        codes = _picked(strings, doc[key], n * k)
        rows = zip(*(codes[i::k] for i in range(k)), strict=True) if k else iter([()] * n)
        return label_sets(compress(zip(names, row, strict=True), row) for row in rows)  # "": no such label

    return RecordSets(doc["cluster_label"], sets("scheduler"), sets("claims"))


def jobs_doc(jobs: JobTable) -> dict[str, Any]:
    """The second line of a day's file (module docstring)."""
    strings: dict[str, int] = {}
    keys: dict[tuple[str, ...], int] = {}
    label_sets: dict[Labels, int] = {}

    key_rows = [tuple(getattr(k, f) for f in KEY_FIELDS) for k in jobs.keys]
    doc = {
        "n": len(jobs),
        "texts": {name: _coded(jobs.texts[name], strings) for name in TEXTS},
        "keys": _coded(key_rows, keys),
        "labels": _coded(jobs.labels, label_sets),
        "numbers": {name: _b64(jobs.numbers[name].astype("<f8")) for name in NUMBERS},
        "n_keys": len(keys),
        "key_texts": _coded([text for k in keys for text in k], strings),  # each key's fields in turn
        "label_sets": [[list(pair) for pair in labels] for labels in label_sets],
    }
    return {**doc, "strings": list(strings)}


def table_of(text: str) -> JobTable:
    """The job rows of a day's second line (ValueError, TypeError, KeyError or IndexError where
    they are not whole)."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("the job rows are not an object")
    n = _count(doc, "n", "job rows")
    strings = _texts(doc["strings"])
    n_keys = _count(doc, "n_keys", "job keys")
    key_texts = _picked(strings, doc["key_texts"], n_keys * len(KEY_FIELDS))
    keys = list(map(JobKey, *(key_texts[i :: len(KEY_FIELDS)] for i in range(len(KEY_FIELDS)))))
    label_sets: list[Labels] = [
        tuple((a, b) for a, b in (_texts(pair, 2) for pair in labels)) for labels in doc["label_sets"]
    ]
    return JobTable(
        {name: _picked(strings, doc["texts"][name], n) for name in TEXTS},
        _picked(keys, doc["keys"], n),
        _picked(label_sets, doc["labels"], n),
        {name: _array(doc["numbers"][name], "<f8", n) for name in NUMBERS},
    )


GPU_FIELDS = tuple(f.name for f in fields(GpuWeek))
JOB_FIELDS = tuple(f.name for f in fields(JobWeek))
KEY_FIELDS = tuple(f.name for f in fields(JobKey))


def encode(x: Part, key: str) -> str:
    """A day's figures as three lines of JSON: the day and its GPUs (``gpus_doc``), its job rows
    (``jobs_doc``), as columns, and its Slurm records' label sets (``records_doc``; null where the
    source keeps none)."""

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
        "gpus": gpus_doc(x.gpus, len(x.days)),
    }
    jobs = JobTable.of(x.jobs if isinstance(x.jobs, tuple | JobTable) else ())
    dump = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    records = x.records.made() if isinstance(x.records, RecordLine) else x.records
    return f"{dump(head)}\n{dump(jobs_doc(jobs))}\n{dump(records_doc(records))}\n"


def parse(text: str, d: Day, key: str) -> dict[str, Any]:
    """A day's file, its first line parsed and checked against the day and source it is read for
    (ValueError, TypeError, KeyError or IndexError where it is not theirs); ``jobs``: the second
    line's text."""
    lines = text.split("\n")
    if len(lines) != 4 or lines[3]:
        raise ValueError("its job rows or records are cut short")
    first, jobs, records = lines[:3]
    doc = json.loads(first)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    got = (doc["format"], doc["key"], doc["start"], doc["end"])
    if got != (FORMAT, key, d.start, d.end):
        raise ValueError(f"format, source or day {got[0]!r}, {got[1]!r}, {got[2]!r}..{got[3]!r} is not this one")
    layout = (tuple(doc["gpu_fields"]), tuple(doc["job_fields"]), tuple(doc["key_fields"]))
    if layout != (GPU_FIELDS, JOB_FIELDS, KEY_FIELDS):
        raise ValueError("written by another version")
    doc["jobs"], doc["records"] = jobs, records
    return doc


def rows_of(doc: dict[str, Any], d: Day) -> Part:
    """A parsed day's GPU columns (ValueError, TypeError, KeyError or IndexError where they are not whole)."""
    return Part(
        (d,),
        gpus_of(doc["gpus"], 1),
        tuple(map(str, doc["approximations"])),
        {str(u): str(t) for u, t in doc["targets"].items()},
        str(doc["carry"]),
        jobs=JobRows(doc["jobs"]),
        records=RecordLine(doc["records"]),
    )
