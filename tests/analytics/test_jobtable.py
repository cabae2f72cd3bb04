"""Job rows as columns (domain.jobtable) and in a kept day's file (analytics.dayfiles): the same
rows back, whatever their texts, Nones, labels and shared keys; the days added up on columns
(analytics.dayparts.merge_jobs) to math.fsum's bit; and the Slurm join on columns joins each row
as it joined the rows one by one."""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.dayfiles import jobs_doc as doc_of
from analytics.dayfiles import table_of
from analytics.dayparts import merge_jobs
from analytics.sources.base import JobRecords, SchedulerJob
from analytics.sources.enrich import join_slurm
from domain.jobs import JobKey
from domain.jobtable import FIELDS, JobTable
from domain.week import GpuWeek, JobWeek

# texts as users and schedulers write them: empty, quotes, commas, newlines, non-ASCII, formulas
text = st.sampled_from(["", "alice", "bob,1", 'say "hi"', "line\nbreak", "ünïcödé", "=SUM(A1)", "GPU-0"]) | st.text(
    max_size=6
)
figure = st.floats(0, 1e9, allow_nan=False)
maybe = st.none() | figure
key = st.builds(JobKey, text, text, text, text, text, text, text, text)
labels = st.lists(st.tuples(text, text), max_size=2).map(tuple)


@st.composite
def job_rows(draw: st.DrawFn) -> list[JobWeek]:
    keys = draw(st.lists(key, min_size=1, max_size=4))  # shared by several rows, as a job's on its GPUs
    return draw(
        st.lists(
            st.builds(
                JobWeek,
                text,
                text,
                st.sampled_from(keys),
                figure,
                figure,
                figure,
                maybe,
                maybe,
                text,
                maybe,
                maybe,
                text,
                text,
                maybe,
                maybe,
                labels,
                text,
            ),
            max_size=12,
        )
    )


@settings(max_examples=150, deadline=None)
@given(job_rows())
def test_a_table_is_its_rows(rows: list[JobWeek]) -> None:
    table = JobTable.of(rows)
    assert len(table) == len(rows)
    fresh = JobTable(table.texts, table.keys, table.labels, table.numbers)  # rows made from the columns
    assert list(fresh) == rows
    assert [fresh[i] for i in range(len(rows))] == rows  # one row alone, before the rest are made
    assert fresh == tuple(rows) and tuple(rows) == fresh
    for name in ("sm_active_s", "charged_s", "pcie_bytes"):
        col = table.numbers[name]
        assert [None if math.isnan(v) else v for v in col.tolist()] == [getattr(j, name) for j in rows]


@settings(max_examples=150, deadline=None)
@given(job_rows())
def test_a_days_job_rows_come_back_from_its_file(rows: list[JobWeek]) -> None:
    """Every field of every row, to the bit, through the file's JSON line."""
    line = json.dumps(doc_of(JobTable.of(rows)), allow_nan=False)
    back = list(table_of(line))
    assert back == rows
    for a, b in zip(back, rows, strict=True):
        assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS]
        assert (a.job.account, a.job.partition, a.job.qos) == (b.job.account, b.job.partition, b.job.qos)


def test_a_file_keeps_each_text_and_key_once() -> None:
    """200 rows of one job on two GPUs: two GPU texts, one key, however many rows."""
    k = JobKey("7", "alice")
    rows = [JobWeek(f"GPU-{i % 2}", "node", k, 1.0, 0.5, 9.0) for i in range(200)]
    doc = doc_of(JobTable.of(rows))
    assert doc["n"] == 200 and doc["n_keys"] == 1
    assert sorted(doc["strings"]) == sorted({"GPU-0", "GPU-1", "node", "", "7", "alice"})
    back = table_of(json.dumps(doc))
    assert all(x is back.keys[0] for x in back.keys)  # one key object, shared by its rows


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
            st.sampled_from(["", "11", "12"]),
            st.sampled_from(["", "alice"]),
            st.sampled_from(["", "acct-row"]),
        ),
        max_size=10,
    )
)
def test_the_slurm_join_on_columns_joins_each_row_as_one_row(rows: list[tuple[str, str, str, str]]) -> None:
    """Each row takes the scheduler's record of its job on its GPU's cluster (the record's user
    where the row has none), else what its processes claimed; rows without a job id are as they were."""
    gpus = [
        GpuWeek(u, "h", "m", "0", 1.0, 0.0, None, None, None, None, cluster=c)
        for u, c in (("GPU-a", "x"), ("GPU-b", "x"), ("GPU-c", "y"))
    ]
    jobs = [
        JobWeek(u, "h", JobKey(job, user, account=acct), 1.0, 0.5, 2.0, account=acct, partition="p-row")
        for u, job, user, acct in rows
    ]
    scheduler = {("x", "11"): SchedulerJob("bob", "acct-x", "gpu", "high")}
    claims = {("y", "12", "alice"): ("acct-claimed", "cpu", "low")}
    got = join_slurm(jobs, gpus, {}, JobRecords(scheduler=scheduler, claims_by_cluster=claims))
    assert len(got) == len(jobs)
    for j, row in zip(got, jobs, strict=True):
        if not row.job.job_id:
            assert j == row
        elif row.uuid in ("GPU-a", "GPU-b") and row.job.job_id == "11":  # cluster x: the record
            assert (j.account, j.partition, j.qos) == ("acct-x", "gpu", "high")
            assert j.job.user == (row.job.user or "bob")
            assert j.job.slurm() == ("acct-x", "gpu", "high")
        else:  # no record: what the job's processes claimed, on its cluster with its user
            claimed = claims.get(("y" if row.uuid == "GPU-c" else "x", row.job.job_id, row.job.user), ("", "", ""))
            assert (j.account, j.partition, j.qos) == claimed == j.job.slurm()
            assert j.job.user == row.job.user
        assert (j.uuid, j.sampled_s, j.energy_j) == (row.uuid, row.sampled_s, row.energy_j)
    assert np.array_equal(got.numbers["busy_s"], JobTable.of(jobs).numbers["busy_s"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["GPU-a", "GPU-b"]), st.sampled_from(["1", "2", "3"]), figure, maybe)),
        min_size=1,
        max_size=7,
    )
)
def test_merged_job_rows_add_up_per_gpu_and_job(per_day: list[list[tuple[str, str, float, float | None]]]) -> None:
    """One row per (GPU, job) over the days, GPU by GPU, a GPU's jobs in the order they first come;
    its figures the days' ``math.fsum`` to the bit, None where no day measured it; its host the
    last day's that names one, the rest the first day's."""
    gpus = [
        GpuWeek(u, "h", "m", "0", 1.0, 0.0, None, None, None, None, cluster=c)
        for u, c in (("GPU-a", "x"), ("GPU-b", "y"))
    ]
    days_rows = [
        [
            JobWeek(u, f"h{d}" if s > 1 else "", JobKey(job, "alice"), s, s / 2, s, charged_s=c, partition=f"p{d}")
            for u, job, s, c in rows
        ]
        for d, rows in enumerate(per_day)
    ]
    merged = merge_jobs(days_rows, gpus)
    keys = [(j.uuid, j.job) for j in merged]
    every = [(x.uuid, x.job) for rows in days_rows for x in rows]
    assert keys == sorted(dict.fromkeys(every), key=lambda k: k[0])  # GPU by GPU, each in first-seen order
    for j in merged:
        mine = [x for rows in days_rows for x in rows if (x.uuid, x.job) == (j.uuid, j.job)]
        assert j.sampled_s == math.fsum(x.sampled_s for x in mine)
        assert j.busy_s == math.fsum(x.busy_s for x in mine)
        charged = [x.charged_s for x in mine if x.charged_s is not None]
        assert j.charged_s == (math.fsum(charged) if charged else None)
        assert j.stalled_s is None and j.sm_active_s is None
        assert j.host == next((x.host for x in reversed(mine) if x.host), "")
        assert j.partition == mine[0].partition
        assert j.cluster == {"GPU-a": "x", "GPU-b": "y"}[j.uuid]


def _joined_row(j: JobWeek, cluster: str, target: str, records: JobRecords) -> JobWeek:
    """One row joined alone, as the docstring of ``join_slurm`` says: the reference."""
    k = j.job
    if not k.job_id:
        return j
    rec = records.scheduler.get((cluster, k.job_id))
    claim = records.claim(cluster, target, k)
    fields = (rec.account or claim[0], rec.partition or claim[1], rec.qos or claim[2]) if rec else claim
    user = k.user or (rec.user if rec else "")
    key = JobKey(k.job_id, user, k.pod, k.namespace, k.container, *fields)
    return replace(j, job=key, account=fields[0], partition=fields[1], qos=fields[2])


CLUSTERS = ("", "x", "y")
TARGETS = ("", "node-1:9400", "node-2:9400")
fields3 = st.tuples(text, text, text)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["GPU-a", "GPU-b", "GPU-c", "GPU-d"]), st.tuples(*map(st.sampled_from, (CLUSTERS, TARGETS)))
    ),
    job_rows(),
    st.lists(st.builds(SchedulerJob, text, text, text, text), min_size=1),
    st.lists(fields3, min_size=1),
    st.randoms(use_true_random=False),
)
def test_the_slurm_join_equals_joining_each_row_alone(
    gpus_at: dict[str, tuple[str, str]],
    rows: list[JobWeek],
    recs: list[SchedulerJob],
    claimed: list[tuple[str, str, str]],
    rnd: random.Random,
) -> None:
    """Rows of a job share one key object, or carry equal copies; on GPUs of several clusters and
    scrape targets, and on a GPU the source does not list (no cluster, no target); each job with a
    scheduler's record, a claim by scrape target, a claim by cluster and user, some or none, on
    one cluster or another."""
    uuids = [*gpus_at, "GPU-unlisted"]
    rows = [replace(j, uuid=rnd.choice(uuids), job=copy.copy(j.job) if rnd.random() < 0.3 else j.job) for j in rows]
    gpus = [GpuWeek(u, "h", "m", "0", 1.0, 0.0, None, None, None, None, cluster=c) for u, (c, _) in gpus_at.items()]
    targets = {u: t for u, (_, t) in gpus_at.items()}
    scheduler, by_target, by_cluster = {}, {}, {}
    for k in {j.job for j in rows}:
        if rnd.random() < 0.4:
            scheduler[rnd.choice(CLUSTERS), k.job_id] = rnd.choice(recs)
        if rnd.random() < 0.4:
            by_target[rnd.choice(CLUSTERS), rnd.choice(TARGETS), k.job_id] = rnd.choice(claimed)
        if rnd.random() < 0.4:
            by_cluster[rnd.choice(CLUSTERS), k.job_id, k.user] = rnd.choice(claimed)
    records = JobRecords(scheduler=scheduler, claims_by_target=by_target, claims_by_cluster=by_cluster)
    got = join_slurm(rows, gpus, targets, records)
    want = [_joined_row(j, gpus_at.get(j.uuid, ("", ""))[0], targets.get(j.uuid, ""), records) for j in rows]
    assert list(got) == want
    with_id = [(j.job.slurm(), (j.account, j.partition, j.qos)) for j in got if j.job.job_id]
    assert all(a == b for a, b in with_id)  # a joined row's key says what its row says
