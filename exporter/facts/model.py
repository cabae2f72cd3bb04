"""The row format of the GPU fact table: one ``Fact`` per reading, grouped into metric ``Family``s.

A row says everything about its fact: its name, its metric family (and its label values there),
how NVML answers it and what the fake answers (``exporter.readers.probes``), the lane that reads
it, whether it is one value per NVLink link, and for a counter the history keeps, its column.
Everything else reads the rows: the readers, the lanes, the snapshot, the metric table, the
history's INSERT. Captures may hold any fact by name; the bundled one holds none of them.

Lanes: ``fast`` is every fast round (keep it to calls of a few µs); ``energy``, ``health`` and
``pcie`` are the slow lane's cadences (``exporter.sampling.slowlane.Cadence``: 10, 30 and 30 s by
default; ``pcie`` 0 turns its facts off). The field values due in one round are asked in one
``nvmlDeviceGetFieldValues`` call per GPU.

Values: a gauge is served as last read. A counter is served as its increase since the exporter
started (its first reading is the baseline; a counter that goes backwards, as after a driver
reload, restarts from its new value), so the metric and the history's minutes add up alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from exporter.readers.probes import Fake, Nvml

Lane = Literal["fast", "energy", "health", "pcie"]
LANES: tuple[Lane, ...] = ("fast", "energy", "health", "pcie")
NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
LINK = "link"
"""The label of a per-link fact's link index."""


@dataclass(frozen=True)
class Family:
    """A metric family of the table (a row of ``exporter.scrape.table.METRICS``). Its facts, one
    or several, each fill one set of its label values."""

    name: str  # as exposed: counters end in _total
    kind: Literal["gauge", "counter"]
    unit: str  # Prometheus base unit, "" for counts and states
    help: str  # name the NVML call, say what "absent" means
    labels: tuple[str, ...] = ()  # beyond gpu and uuid (and link, first, for per-link facts)


@dataclass(frozen=True)
class Fact:
    """One GPU fact: a row of the table. It is the probe the readers read (``name``, ``nvml``,
    ``fake``, ``counter``, ``per_link``)."""

    name: str  # the reader call (reader_errors_total{call}); the key in a capture's "facts"
    metric: Family
    nvml: Nvml
    lane: Lane
    fake: Fake
    labels: tuple[str, ...] = ()  # this fact's values of metric.labels
    per_link: bool = False  # one value per NVLink link (absent without NVLink)
    history: str | None = None  # gpu_minutes column of a counter; added by a migration in history/schema.py

    @property
    def counter(self) -> bool:
        return self.metric.kind == "counter"


def check(facts: tuple[Fact, ...]) -> tuple[Fact, ...]:
    """The table as given, or ValueError naming the first row that breaks a rule."""
    names: set[str] = set()
    columns: set[str] = set()
    families: dict[str, Family] = {}
    keys: dict[str, set[tuple[str, ...]]] = {}
    for f in facts:
        fam = f.metric
        if not NAME.match(f.name) or f.name in names:
            raise ValueError(f"fact {f.name!r}: names are unique, lower case, letters, digits and _")
        names.add(f.name)
        if f.lane not in LANES:
            raise ValueError(f"fact {f.name}: lane {f.lane!r} is none of {', '.join(LANES)}")
        if families.setdefault(fam.name, fam) is not fam:
            raise ValueError(f"fact {f.name}: two families are named {fam.name}")
        if len(f.labels) != len(fam.labels) or f.labels in keys.setdefault(fam.name, set()):
            raise ValueError(f"fact {f.name}: needs its own values of {fam.name}'s labels {fam.labels}")
        keys[fam.name].add(f.labels)
        if any(g.metric is fam and g.per_link != f.per_link for g in facts):
            raise ValueError(f"fact {f.name}: the facts of {fam.name} are all per link or none is")
        if (fam.kind == "counter") != fam.name.endswith("_total"):
            raise ValueError(f"family {fam.name}: a counter's name ends in _total, a gauge's does not")
        if f.history is not None:
            if not f.counter or not NAME.match(f.history) or f.history in columns:
                raise ValueError(f"fact {f.name}: a history column is a counter's own, {f.history!r}")
            columns.add(f.history)
    return facts
