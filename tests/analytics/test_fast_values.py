"""The fast paths of a large report make the same values as the slow ones: ``domain.frozen``'s
``evolve`` and ``construct`` (for ``dataclasses.replace`` and the constructor), the ledger's
``Acc.merge`` (for adding each part again), and the job rows charged and summed as columns
(``analytics.report.chargeback``, for adding each charged row's Fig)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.report.chargeback import Charged, charge_all, keyed, summed
from analytics.report.ledger import Acc, Fig
from analytics.report.model import CostRow
from domain.frozen import construct, evolve
from domain.jobs import JobKey
from domain.week import GpuDay, GpuWeek, JobWeek

FAST = (JobWeek, GpuWeek)  # the classes evolve or construct make in the report's hot loops

text = st.text(max_size=8)
optional = st.none() | st.floats(0, 1e6)
job_keys = st.builds(JobKey, text, text, text, text, text, text, text, text)
job_rows = st.builds(
    JobWeek,
    uuid=text,
    host=text,
    job=job_keys,
    sampled_s=st.floats(0, 1e6),
    busy_s=st.floats(0, 1e6),
    energy_j=st.floats(0, 1e9),
    sm_active_s=optional,
    charged_s=optional,
    account=text,
    labels=st.lists(st.tuples(text, text), max_size=2).map(tuple),
    cluster=text,
)
gpu_rows = st.builds(
    GpuWeek,
    uuid=text,
    host=text,
    model=text,
    gpu=text,
    sampled_s=st.floats(0, 1e6),
    busy_s=st.floats(0, 1e6),
    sm_active_s=optional,
    allocated_s=optional,
    allocated_idle_s=optional,
    energy_j=optional,
    daily=st.lists(st.builds(GpuDay, st.floats(0, 1e5), st.floats(0, 1e5), optional), max_size=3).map(tuple),
)


@pytest.mark.parametrize("cls", FAST)
def test_the_fast_classes_have_a_dict_and_no_post_init(cls: type) -> None:
    """What evolve and construct rely on: no slots (they fill ``__dict__``) and no
    ``__post_init__`` (they do not call it); a change here must move the class off them."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert "__slots__" not in cls.__dict__
    assert not hasattr(cls, "__post_init__")


@settings(max_examples=200, deadline=None)
@given(job_rows, st.data())
def test_evolve_is_replace_for_job_rows(j: JobWeek, data: st.DataObject) -> None:
    names = data.draw(st.sets(st.sampled_from([f.name for f in dataclasses.fields(JobWeek)]), max_size=5))
    changes: dict[str, Any] = {
        n: data.draw(st.from_type(type(getattr(j, n)))) if n != "job" else data.draw(job_keys) for n in names
    }
    before = dataclasses.replace(j)
    got = evolve(j, **changes)
    assert got == dataclasses.replace(j, **changes)
    assert type(got) is JobWeek and got.__dict__ == dataclasses.replace(j, **changes).__dict__
    assert j == before  # the original is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.uuid = "x"  # type: ignore[misc]


@settings(max_examples=100, deadline=None)
@given(gpu_rows, text, st.floats(0, 1e6))
def test_evolve_is_replace_for_gpu_rows(g: GpuWeek, cluster: str, busy: float) -> None:
    assert evolve(g, cluster=cluster, busy_s=busy) == dataclasses.replace(g, cluster=cluster, busy_s=busy)


def test_evolve_refuses_a_name_that_is_no_field() -> None:
    j = JobWeek("u", "h", JobKey("1"), 1.0, 1.0, 1.0)
    with pytest.raises(TypeError, match=r"no field.*acount"):
        evolve(j, acount="typo")


def _row(**over: object) -> dict[str, object]:
    values: dict[str, object] = {f.name: 1.5 for f in dataclasses.fields(CostRow)}
    values.update(group="user", key="alice", gpus=3, useful_measure="busy", busy_measure="", energy_measure="counter")
    values.update(over)
    return values


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["energy_kwh", "co2e_kg", "utilization"]), optional))
def test_construct_is_the_constructor(over: dict[str, float | None]) -> None:
    values = _row(**over)
    got = construct(CostRow, values)
    assert got == CostRow(**values)  # type: ignore[arg-type]
    assert got.__dict__ == CostRow(**values).__dict__  # type: ignore[arg-type]
    assert hash(dataclasses.astuple(got)) == hash(dataclasses.astuple(CostRow(**values)))  # type: ignore[arg-type]


def test_construct_refuses_missing_and_unknown_fields() -> None:
    values = _row()
    del values["co2e_kg"]
    with pytest.raises(TypeError, match="co2e_kg"):
        construct(CostRow, values)
    with pytest.raises(TypeError, match="colour"):
        construct(CostRow, {**_row(), "colour": "red"})


figs = st.builds(
    Fig,
    gpus=st.integers(0, 1),
    available_s=st.floats(0, 1e6),
    sampled_s=st.floats(0, 1e6),
    busy_s=st.floats(0, 1e6),
    useful_s=st.floats(0, 1e6),
    sm_s=optional,
    alloc_s=optional,
    idle_s=optional,
    energy_j=optional,
    hardware=st.floats(0, 1e4),
    energy_cost=st.floats(0, 1e4),
    idle_cost=st.floats(0, 1e4),
    uuids=st.frozensets(st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]), max_size=2),
    stalled_s=optional,
    stalled_cost=st.floats(0, 1e4),
    co2e_kg=optional,
    use_sm=st.booleans(),
    busy_measure=st.sampled_from(["", "gr_engine_active"]),
    energy_measure=st.sampled_from(["", "power"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(figs, max_size=4), max_size=4))
def test_merging_rows_is_adding_their_parts(parts: list[list[Fig]]) -> None:
    """The builder adds job rows into their groupings' keys first, then merges those into each
    grouping's rows: the rows are those of adding every job row to each (None stays None)."""
    one, merged = Acc(), Acc()
    for part in parts:
        acc = Acc()
        for f in part:
            one.add(f)
            acc.add(f)
        merged.merge(acc)
    a, b = one.row("user", "alice"), merged.row("user", "alice")
    for name in (field.name for field in dataclasses.fields(CostRow)):
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-9), name
        else:
            assert x == y, name


def _fig_of(ch: Charged, p: int) -> Fig:
    """The charged row at position ``p`` as the ledger's Fig (the slow path's part)."""

    def known(name: str) -> float | None:
        v = float(ch.cols[name][p])
        return None if math.isnan(v) else v

    g = int(ch.gpu[p])
    t = float(ch.cols["time"][p])
    return Fig(
        gpus=0,
        available_s=t,
        sampled_s=t,
        busy_s=float(ch.cols["busy"][p]),
        useful_s=float(ch.cols["useful"][p]),
        sm_s=known("sm"),
        alloc_s=known("alloc"),
        idle_s=known("idle"),
        energy_j=float(ch.cols["energy"][p]),
        hardware=float(ch.cols["hardware"][p]),
        energy_cost=float(ch.cols["energy_cost"][p]),
        idle_cost=float(ch.cols["idle_cost"][p]),
        uuids=frozenset({ch.uuids[g]}),
        stalled_s=known("stalled"),
        stalled_cost=float(ch.cols["stalled_cost"][p]),
        co2e_kg=known("co2e"),
        use_sm=bool(ch.use_sm[p]),
        busy_measure=ch.busy_measure[g],
        energy_measure=ch.energy_measure[g],
    )


charged_rows = st.builds(  # job_rows on three GPUs (and one without figures), a few jobs
    dataclasses.replace,
    job_rows,
    uuid=st.sampled_from(["GPU-a", "GPU-b", "GPU-c", "GPU-gone"]),
    job=st.sampled_from([JobKey("1", "ann"), JobKey("2", "bob"), JobKey("", "", "p", "ns"), JobKey("3")]),
    allocated_idle_s=optional,
    stalled_s=optional,
    partition=st.sampled_from(["", "gpu"]),
)
gpu_figs = st.fixed_dictionaries(
    {u: figs.map(lambda f: dataclasses.replace(f, gpus=1)) for u in ("GPU-a", "GPU-b", "GPU-c")}
)


@settings(max_examples=300, deadline=None)
@given(st.lists(charged_rows, max_size=12), gpu_figs, st.floats(0, 10), st.sampled_from([0.0, 1.0, 1e9]))
def test_job_rows_summed_by_columns_are_their_parts_added(
    jobs: list[JobWeek], gpus: dict[str, Fig], rate: float, min_useful_h: float
) -> None:
    """The build's columns (``analytics.report.chargeback``): each job's and each key's sums and
    cost rows are those of adding every charged row's Fig into an Acc in the charging order (the
    ledger's slow path), to the bit; a row on a GPU without figures is charged nothing; each GPU
    and column: its jobs never have more than the GPU, and the GPU's rest is what they left."""
    ch = charge_all(
        jobs, gpus, dict.fromkeys(gpus, rate), dict.fromkeys(gpus, 1e-6), {"GPU-a": 1e-7, "GPU-b": None, "GPU-c": 0.0}
    )
    assert sorted(map(id, ch.orphans)) == sorted(id(j) for j in jobs if j.uuid == "GPU-gone")
    keys, at = keyed(ch, lambda j: j.job.job_id or j.job.pod)
    sums = summed(ch, at, len(keys), uuids=True)
    slow = [Acc() for _ in keys]
    for p, i in enumerate(at.tolist()):
        slow[i].add(_fig_of(ch, p))
    fast = sums.rows("job", keys, range(len(keys)), min_useful_h)
    for i, (a, b) in enumerate(zip(slow, fast, strict=True)):
        assert dataclasses.astuple(a.row("job", keys[i], min_useful_h)) == dataclasses.astuple(b)
        assert sums.acc(i).row("job", keys[i], min_useful_h) == a.row("job", keys[i], min_useful_h)
    for g, uuid in enumerate(ch.uuids):
        mine = ch.gpu == g
        for col, cap in (("time", gpus[uuid].sampled_s), ("busy", gpus[uuid].busy_s), ("useful", gpus[uuid].useful_s)):
            assert ch.cols[col][mine].sum() <= cap * (1 + 1e-9) + 1e-6, (uuid, col)
    total = Acc()
    for p in range(len(at)):
        total.add(_fig_of(ch, p))
    total.merge(ch.unallocated)
    fleet = Acc()
    for f in gpus.values():
        fleet.add(f)
    for name in ("available", "busy", "useful", "hardware", "energy_cost", "idle_cost"):
        assert math.isclose(getattr(total, name), getattr(fleet, name), rel_tol=1e-9, abs_tol=1e-6), name
