"""Reading a Prometheus text exposition."""

from __future__ import annotations

import json


def parse_metrics(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Parse a text exposition into {name: {sorted label items: value}}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def one(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str) -> float:
    """The single value of ``name`` whose labels include ``labels``."""
    hits = [v for k, v in metrics.get(name, {}).items() if all((a, b) in k for a, b in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} matches in {json.dumps(list(metrics.get(name, {})))}"
    return hits[0]
