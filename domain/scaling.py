"""``gpuledger scaling`` results as the history keeps them (``bench_runs``, bench ``scaling``, the
command's ``--json`` document as data): read back into ``domain.week.ScalingRun`` by the exporter
(its ``/metrics``) and the analytics (the weekly report) alike.

A record that is not such a document (damaged, hand-edited, from a later version with another
shape) is skipped, never guessed at: ``scaling_from`` returns None and the caller says nothing of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from domain.week import ScalingPoint, ScalingRun

BENCH = "scaling"  # bench_runs.bench of a gpuledger scaling result


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def scaling_from(finished: float, text: str | bytes) -> ScalingRun | None:
    """The run a record's data holds; None when it is not a scaling document."""
    try:
        doc = json.loads(text)
        rows = doc["rows"]
        points = tuple(
            ScalingPoint(
                n=int(r["n"]),
                status=str(r.get("status", "ok")),
                step_seconds=_num(r.get("step_seconds")),
                speedup=_num(r.get("speedup")),
                efficiency=_num(r.get("efficiency")),
                samples_per_second=_num(r.get("throughput_samples_per_second")),
                cost_per_1000_steps=_num(r.get("cost_per_1000_steps")),
            )
            for r in rows
        )
        return ScalingRun(
            name=str(doc["name"]),
            finished=finished,
            scaling=str(doc.get("scaling", "weak")),
            method=str(doc.get("method", "")),
            unit=str(doc.get("unit", "GPUs")),
            currency=str(doc.get("currency", "")),
            points=points,
            verdicts=tuple(str(v) for v in doc.get("verdicts", [])),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def last_per_name(runs: Iterable[ScalingRun]) -> tuple[ScalingRun, ...]:
    """The latest run of each name, by name."""
    last: dict[str, ScalingRun] = {}
    for r in runs:
        if r.name not in last or r.finished >= last[r.name].finished:
            last[r.name] = r
    return tuple(last[k] for k in sorted(last))
