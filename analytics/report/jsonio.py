"""A :class:`Report` as versioned JSON, one key and one row per line, and back (strictly)."""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator
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


@functools.cache
def _adapters() -> tuple[TypeAdapter[Report], dict[str, TypeAdapter[Any]], dict[str, TypeAdapter[Any]]]:
    """The report's, each field's and each row list's TypeAdapter, made on first use (40-70 ms: a
    command that imports this module and writes no JSON does not pay for them)."""
    fields = {name: TypeAdapter(hint) for name, hint in typing.get_type_hints(Report).items()}
    return TypeAdapter(Report), fields, {name: TypeAdapter(cls) for name, cls in LISTS.items()}


@dataclass(frozen=True)
class _Head:
    """What a report file says it is, read before the rest (other keys are ignored here)."""

    schema: object = None


@functools.cache
def _head() -> TypeAdapter[_Head]:
    return TypeAdapter(_Head)


def to_json(report: Report) -> str:
    """One key per line and one row per line: readable and diffable. Each value is written by
    its TypeAdapter (a non-finite number, never meant to occur, becomes null: "not measured")."""
    return "".join(json_pieces(report))


KEY_SEP, ROW_SEP = ",\n ", ",\n  "  # between keys, between a list's rows


def json_pieces(report: Report) -> Iterator[str]:
    """``to_json``'s text in pieces, a row at a time, made as they are written: a 10,000-GPU
    week's 73 MB file is never one string, nor three (its parts, their join, its decoding)."""
    _, fields, lists = _adapters()
    yield "{\n "
    for n, (name, adapter) in enumerate(fields.items()):
        value = getattr(report, name)
        yield (KEY_SEP if n else "") + f'"{name}": '
        if name in lists and value:
            dump = lists[name].dump_json
            yield "[\n  "
            for i, row in enumerate(value):
                yield (ROW_SEP if i else "") + dump(row).decode()
            yield "\n ]"
        else:
            yield adapter.dump_json(value).decode()
    yield "\n}\n"


def from_json(text: str | bytes) -> Report:
    """Rebuild a report from :func:`to_json`, strictly: a string where a number belongs, or an
    unknown key, is a ValueError naming the field; so is a different schema."""
    what = f"not a {SCHEMA} report"
    found = parse(_head(), text, what).schema
    if found != SCHEMA:
        raise ValueError(f"{what} (schema: {found!r})")
    return parse(_adapters()[0], text, what)
