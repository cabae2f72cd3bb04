"""Grafana's row repeats, evaluated without Grafana: a row with ``repeat`` is shown once per value
of its variable, with the panels under it (up to the next row), each copy with that value as the
variable (Grafana's scoped vars); everything else once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Shown:
    panel: Json
    row: str  # the title of the row it is under ("" above the first row)
    scoped: dict[str, str]  # the repeated row's variable and value; empty when not repeated


def sections(d: Json) -> Iterator[tuple[Json | None, list[Json]]]:
    """Each row (None for panels above the first) and the panels under it."""
    row: Json | None = None
    under: list[Json] = []
    for p in d["panels"]:
        if p["type"] == "row":
            if row is not None or under:
                yield row, under
            row, under = p, []
        else:
            under.append(p)
    if row is not None or under:
        yield row, under


def shown(d: Json, values: Mapping[str, Sequence[str]]) -> list[Shown]:
    """The panels as Grafana shows them when each repeated variable has ``values`` (a repeat by a
    variable not in ``values`` is shown no time: Grafana has no value to repeat by)."""
    out: list[Shown] = []
    for row, under in sections(d):
        var = (row or {}).get("repeat")
        title = (row or {}).get("title", "")
        copies = [{}] if not var else [{var: v} for v in values.get(var, ())]
        for scoped in copies:
            out += [Shown(p, title, scoped) for p in under]
    return out
