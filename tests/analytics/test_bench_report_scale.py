"""bench/report_scale.py's data and plan, without Prometheus: the series carry what the report's
groupings read (``cluster`` on every series, ``gpuledger_job_info`` per job with the labels the
source's join asks for), the configurations run alternating, and each one's config file loads."""

from __future__ import annotations

import re
from pathlib import Path

from analytics.cli import full_settings
from analytics.report.build import GROUP_BY
from bench.report_scale import (
    CLUSTERS,
    job_attrs,
    parse_group_by,
    schedule,
    write_config,
    write_steps,
)
from exporter.sampling.job_metrics import SLURM_LABELS

SAMPLE = re.compile(r"^([a-z_]+)\{(.*)\} (\S+) (\d+)$")


def _series(path: Path) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in path.read_text().splitlines():
        m = SAMPLE.match(line)
        assert m, line
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', m[2]))
        out.append((m[1], labels, float(m[3])))
    return out


def test_every_series_names_its_cluster_and_each_job_its_slurm_attributes(tmp_path: Path) -> None:
    path = tmp_path / "day.om"
    n = write_steps(16, 950, 1000, 15, str(path))  # across 4 h: jobs in their grace, and new ones
    series = _series(path)
    assert n == len(series)
    assert {labels.get("cluster") for _, labels, _ in series} == set(CLUSTERS)
    gpus = {labels["uuid"]: labels["cluster"] for name, labels, _ in series if name == "gpuledger_gpu_info"}
    assert sorted(gpus.values()).count(CLUSTERS[0]) == 8  # half the fleet each
    info = {labels["job_id"]: labels for name, labels, v in series if name == "gpuledger_job_info" and v == 1.0}
    jobs = {labels["job_id"] for name, labels, _ in series if name == "gpuledger_job_gpu_sampled_seconds_total"}
    assert jobs and set(info) == jobs
    for job, labels in info.items():
        assert set(SLURM_LABELS) <= set(labels) and all(labels[k] for k in SLURM_LABELS)
        g, sl = map(int, job.split("-"))
        assert (labels["user"], labels["account"], labels["partition"], labels["qos"]) == job_attrs(g, sl)
        assert "uuid" not in labels  # one series per job on its host, as the exporter has it
    assert len({labels["account"] for labels in info.values()}) > 1
    assert {labels["partition"] for labels in info.values()} == {"gpu", "gpu-large"}


def test_configurations_alternate_and_load(tmp_path: Path) -> None:
    assert schedule(3, 4) == [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]
    assert parse_group_by("default") is None
    chosen = parse_group_by("user, account,partition,cluster")
    assert chosen == ["user", "account", "partition", "cluster"]
    assert write_config(tmp_path, 0, None) is None
    path = write_config(tmp_path, 1, chosen)
    assert path is not None
    assert full_settings(str(path)).analytics.group_by == chosen
    assert full_settings(None).analytics.group_by == list(GROUP_BY)
