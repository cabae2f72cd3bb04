"""A :class:`Report` as versioned JSON, one key and one row per line, and back (strictly)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from analytics.report.model import (
    SCHEMA,
    BenchRow,
    CostRow,
    DayRow,
    Delta,
    FailureRow,
    IdleRow,
    LinkRow,
    PriceRow,
    QueueRow,
    RentRow,
    Report,
    ScalingRow,
    StalledRow,
    VerdictRow,
)
from daemonkit.jsondoc import parse

LISTS: dict[str, type[Any]] = {  # the report's row lists and their row types; CSV writes one file each
    "rows": CostRow,
    "daily": DayRow,
    "queue": QueueRow,
    "failures": FailureRow,
    "benchmarks": BenchRow,
    "multi_gpu": VerdictRow,
    "rent_vs_buy": RentRow,
    "deltas": Delta,
    "prices": PriceRow,
    "idle_holders": IdleRow,
    "stalled_jobs": StalledRow,
    "link_jobs": LinkRow,
    "scaling": ScalingRow,
}
_REPORT = TypeAdapter(Report)
_FIELDS = {name: TypeAdapter(hint) for name, hint in typing.get_type_hints(Report).items()}
_ROWS = {name: TypeAdapter(cls) for name, cls in LISTS.items()}


@dataclass(frozen=True)
class _Head:
    """What a report file says it is, read before the rest (other keys are ignored here)."""

    schema: object = None


_HEAD = TypeAdapter(_Head)


def to_json(report: Report) -> str:
    """One key per line and one row per line: readable and diffable. Each value is written by
    its TypeAdapter (a non-finite number, never meant to occur, becomes null: "not measured")."""
    parts = []
    for name, adapter in _FIELDS.items():
        value = getattr(report, name)
        if name in _ROWS and value:
            rows = b",\n  ".join(map(_ROWS[name].dump_json, value))
            parts.append(b'"%s": [\n  %s\n ]' % (name.encode(), rows))
        else:
            parts.append(b'"%s": %s' % (name.encode(), adapter.dump_json(value)))
    return (b"{\n " + b",\n ".join(parts) + b"\n}\n").decode()


def from_json(text: str | bytes) -> Report:
    """Rebuild a report from :func:`to_json`, strictly: a string where a number belongs, or an
    unknown key, is a ValueError naming the field; so is a different schema."""
    what = f"not a {SCHEMA} report"
    found = parse(_HEAD, text, what).schema
    if found != SCHEMA:
        raise ValueError(f"{what} (schema: {found!r})")
    return parse(_REPORT, text, what)
