"""The fact table's rows of the metric table: one per-GPU row per metric family of ``exporter.facts``,
appended to the ``gpu`` feature, in the table's order. Each fact fills its label values of its
family (and ``link``, for a per-link fact); a fact a GPU lacks is absent."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from exporter.facts import FACTS, LINK, Fact, Family
from exporter.readers import Call, Field
from exporter.registry import MetricDef, Value, gpu_row
from exporter.snapshot import GpuSnapshot


def _source(facts: tuple[Fact, ...]) -> str:
    """Where the values come from, for docs/metrics.md: the NVML reads and the lane."""
    fields = [f.nvml.field for f in facts if isinstance(f.nvml, Field)]
    scope = " per link" if facts[0].per_link else ""
    reads = [f"nvmlDeviceGetFieldValues({', '.join(fields)}){scope}"] if fields else []
    reads += dict.fromkeys(f.nvml.describe() for f in facts if isinstance(f.nvml, Call))
    lanes = "/".join(dict.fromkeys(f.lane for f in facts))
    return f"{', '.join(reads)} ({lanes} lane)"


def _values(facts: tuple[Fact, ...]) -> Callable[[GpuSnapshot], Value]:
    def value(g: GpuSnapshot) -> Value:
        out: dict[tuple[str, ...], float] = {}
        for f in facts:
            v = g.facts.get(f.name)
            if isinstance(v, Mapping):
                out.update({(str(link), *f.labels): x for link, x in v.items()})
            elif v is not None:
                out[f.labels] = v
        return out or None

    return value


def rows(facts: tuple[Fact, ...]) -> tuple[MetricDef, ...]:
    """A row per family, in the order its first fact comes in ``facts``."""
    families: dict[str, tuple[Family, tuple[Fact, ...]]] = {}
    for f in facts:
        fam, members = families.get(f.metric.name, (f.metric, ()))
        families[fam.name] = (fam, (*members, f))
    out = []
    for fam, members in families.values():
        labels = ((LINK,) if members[0].per_link else ()) + fam.labels
        out.append(gpu_row(fam.name, fam.kind, fam.unit, fam.help, _source(members), _values(members), labels))
    return tuple(out)


ROWS: tuple[MetricDef, ...] = rows(FACTS)
