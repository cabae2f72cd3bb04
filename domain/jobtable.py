"""A window's job rows as columns: what ``JobWeek`` rows hold, one list or array per field.

At 10,000 GPUs a week has about 200,000 job rows. Made as objects day by day, added up, copied for
the Slurm join and read back field by field into the chargeback's arrays, they took 6 s of a 17 s
report (docs/performance.md). A ``JobTable`` keeps them as columns from the kept days' files to the
chargeback (``analytics.dayfiles``, ``analytics.dayparts.merge_jobs``,
``analytics.sources.enrich.join_slurm``, ``analytics.report.chargeback``): the figures are numpy
arrays (NaN where a source did not measure one: None in the row), the text fields lists of
``str``, the job keys and the pods' labels lists of shared objects.

It is a ``Sequence[JobWeek]``: everything that reads rows (the statements, a test) gets the same
``JobWeek`` rows, made once, on first use, and kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from domain.frozen import of_fields
from domain.jobs import JobKey
from domain.week import JobAttrs, JobWeek

Floats = npt.NDArray[np.float64]
Labels = tuple[tuple[str, str], ...]

FIELDS = tuple(f.name for f in fields(JobWeek))
# the figures: the first three always measured; the rest None (NaN here) where a source lacks them
FIGURES = ("sampled_s", "busy_s", "energy_j")
OPTIONAL = ("sm_active_s", "allocated_idle_s", "charged_s", "stalled_s", "nvlink_bytes", "pcie_bytes")
NUMBERS = (*FIGURES, *OPTIONAL)
TEXTS = ("uuid", "host", "partition", "account", "qos", "cluster")
assert set(FIELDS) == {*NUMBERS, *TEXTS, "job", "labels"}, "JobTable holds every JobWeek field"


class JobView(NamedTuple):
    """A table row's texts and key, without its figures (``domain.week.JobAttrs``): what a
    grouping or a job key reads, made for 200,000 rows in a tenth of the time of their ``JobWeek``."""

    uuid: str
    host: str
    job: JobKey
    partition: str
    account: str
    qos: str
    labels: Labels
    cluster: str


class JobTable(Sequence[JobWeek]):
    """Job rows as columns (module docstring). Build one with ``of`` (from rows) or from columns of
    equal length; never changed after (``with_`` makes a new one that shares the other columns)."""

    __slots__ = ("_rows", "_views", "keys", "labels", "n", "numbers", "texts")

    def __init__(
        self,
        texts: Mapping[str, list[str]],
        keys: list[JobKey],
        labels: list[Labels],
        numbers: Mapping[str, Floats],
    ) -> None:
        n = len(keys)
        if texts.keys() != set(TEXTS) or numbers.keys() != set(NUMBERS):
            raise ValueError("a job table needs every column")
        if {len(labels), *map(len, texts.values()), *(len(x) for x in numbers.values())} != {n}:
            raise ValueError("the job table's columns are not of one length")
        self.n = n
        self.texts = dict(texts)
        self.keys = keys
        self.labels = labels
        self.numbers = {k: np.asarray(v, dtype=np.float64) for k, v in numbers.items()}
        self._rows: tuple[JobWeek, ...] | None = None
        self._views: list[JobView] | None = None

    @classmethod
    def of(cls, rows: Iterable[JobWeek]) -> JobTable:
        """The table of ``rows`` (a table is itself)."""
        if isinstance(rows, JobTable):
            return rows
        rows = rows if isinstance(rows, Sequence) else tuple(rows)
        texts = {name: [getattr(j, name) for j in rows] for name in TEXTS}
        numbers = {name: np.array([getattr(j, name) for j in rows], dtype=np.float64) for name in NUMBERS}
        table = cls(texts, [j.job for j in rows], [j.labels for j in rows], numbers)
        table._rows = tuple(rows)
        return table

    @classmethod
    def joined(cls, parts: Sequence[JobTable]) -> JobTable:
        """The parts' rows, one after the other."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            {name: [v for p in parts for v in p.texts[name]] for name in TEXTS},
            [k for p in parts for k in p.keys],
            [x for p in parts for x in p.labels],
            {name: np.concatenate([p.numbers[name] for p in parts]) if parts else np.zeros(0) for name in NUMBERS},
        )

    def with_(
        self,
        texts: Mapping[str, list[str]] | None = None,
        keys: list[JobKey] | None = None,
        numbers: Mapping[str, Floats] | None = None,
    ) -> JobTable:
        """This table with some columns replaced."""
        return JobTable(
            {**self.texts, **(texts or {})},
            self.keys if keys is None else keys,
            self.labels,
            {**self.numbers, **(numbers or {})},
        )

    def taken(self, at: Sequence[int] | npt.NDArray[np.intp]) -> JobTable:
        """The rows at positions ``at``, in that order."""
        idx = np.asarray(at, dtype=np.intp)
        pick = idx.tolist()
        return JobTable(
            {name: [col[i] for i in pick] for name, col in self.texts.items()},
            [self.keys[i] for i in pick],
            [self.labels[i] for i in pick],
            {name: col[idx] for name, col in self.numbers.items()},
        )

    def in_clusters(self, clusters: Mapping[str, str]) -> JobTable:
        """Each row with its GPU's cluster (``WeekData``: "" where the GPUs are in one cluster)."""
        cluster = [clusters.get(u, "") for u in self.texts["uuid"]]
        return self if cluster == self.texts["cluster"] else self.with_(texts={"cluster": cluster})

    # --- as rows ------------------------------------------------------------------------------

    def views(self) -> Sequence[JobAttrs]:
        """Each row's texts and key: its ``JobView``, made on first use and kept (the rows
        themselves where they are made already)."""
        if self._rows is not None:
            return self._rows
        if self._views is None:
            t = self.texts
            cols = (t["uuid"], t["host"], self.keys, t["partition"], t["account"], t["qos"], self.labels, t["cluster"])
            self._views = list(map(JobView._make, zip(*cols, strict=True)))
        return self._views

    def _row(self, i: int) -> JobWeek:
        """Row ``i`` alone (a table shows a few jobs' rows: the rest are not made)."""
        values: dict[str, Any] = {}
        for name in FIELDS:
            if name in self.texts:
                values[name] = self.texts[name][i]
            elif name == "job":
                values[name] = self.keys[i]
            elif name == "labels":
                values[name] = self.labels[i]
            else:
                v = float(self.numbers[name][i])
                values[name] = None if math.isnan(v) and name in OPTIONAL else v
        return of_fields(JobWeek, values)

    def rows(self) -> tuple[JobWeek, ...]:
        """The ``JobWeek`` rows, made on first use and kept."""
        if self._rows is None:
            cols: list[list[Any]] = []
            for name in FIELDS:
                if name in self.texts:
                    cols.append(self.texts[name])
                elif name == "job":
                    cols.append(self.keys)
                elif name == "labels":
                    cols.append(self.labels)
                else:
                    values = self.numbers[name].tolist()
                    cols.append([None if math.isnan(v) else v for v in values] if name in OPTIONAL else values)
            self._rows = tuple(
                of_fields(JobWeek, dict(zip(FIELDS, row, strict=True))) for row in zip(*cols, strict=True)
            )
        return self._rows

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> JobWeek: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[JobWeek, ...]: ...

    def __getitem__(self, i: int | slice) -> JobWeek | tuple[JobWeek, ...]:
        if self._rows is not None or isinstance(i, slice):
            return self.rows()[i]
        if not -self.n <= i < self.n:
            raise IndexError("job table index out of range")
        i %= self.n
        return self._row(i)

    def __iter__(self) -> Iterator[JobWeek]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JobTable | tuple):
            return self.rows() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.rows())

    def __repr__(self) -> str:
        return f"JobTable({self.n} rows)"
