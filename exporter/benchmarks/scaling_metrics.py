"""The rows of the metric table for the users' own scaling results (``gpuledger scaling --history``,
read by ``exporter.benchmarks.scaling``): per model name, scaling kind and GPU count, the run's own
figures. A count the run could not measure has no series."""

from __future__ import annotations

from collections.abc import Callable

from domain.week import ScalingPoint, ScalingRun
from exporter.benchmarks.scaling import ScalingSnapshot
from exporter.registry import Feature, Kind, MetricDef, Value, part_row

LABELS = ("name", "scaling", "world_size")
SOURCE = "gpuledger scaling --history (the history's bench_runs)"


def _row(
    name: str,
    kind: Kind,
    unit: str,
    help: str,
    fn: Callable[[ScalingSnapshot], Value],
    labels: tuple[str, ...] = LABELS,
) -> MetricDef:
    return part_row(ScalingSnapshot, name, kind, unit, help, SOURCE, fn, labels)


def _per_count(fn: Callable[[ScalingPoint], float | None]) -> Callable[[ScalingSnapshot], Value]:
    def get(s: ScalingSnapshot) -> Value:
        return {(run.name, run.scaling, str(p.n)): v for run in s.runs for p in run.points if (v := fn(p)) is not None}

    return get


def _cost(s: ScalingSnapshot) -> Value:
    return {
        (run.name, run.scaling, str(p.n), run.currency): p.cost_per_1000_steps
        for run in s.runs
        for p in run.points
        if p.cost_per_1000_steps is not None
    }


def _last(run: ScalingRun) -> tuple[str]:
    return (run.name,)


# fmt: off
FEATURE: Feature[ScalingSnapshot] = Feature("scaling", ScalingSnapshot, (
    _row("gpuledger_scaling_step_seconds", "gauge", "seconds",
         "Steady step time of a user's training script at world_size GPUs (start-up and warm-up excluded), its "
         "last gpuledger scaling run.", _per_count(lambda p: p.step_seconds)),
    _row("gpuledger_scaling_speedup_ratio", "gauge", "ratio",
         "Speedup at world_size GPUs against one (weak: throughput ratio; strong: t(1)/t(N)).",
         _per_count(lambda p: p.speedup)),
    _row("gpuledger_scaling_efficiency_ratio", "gauge", "ratio", "Speedup over world_size: 1 is linear scaling.",
         _per_count(lambda p: p.efficiency)),
    _row("gpuledger_scaling_throughput_samples_per_second", "gauge", "",
         "Samples a second at world_size GPUs, where the run knew its samples per step.",
         _per_count(lambda p: p.samples_per_second)),
    _row("gpuledger_scaling_cost_per_1000_steps", "gauge", "",
         "Cost of 1,000 steps at world_size GPUs with the run's cost model, in its currency.", _cost,
         (*LABELS, "currency")),
    _row("gpuledger_scaling_last_run_timestamp_seconds", "gauge", "seconds",
         "When the model's last gpuledger scaling run ended.",
         lambda s: {_last(r): r.finished for r in s.runs}, ("name",)),
))
# fmt: on
