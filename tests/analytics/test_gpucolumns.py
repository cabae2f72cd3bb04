"""A part's GPU rows as columns (analytics.gpucolumns): the same rows back, and the window's GPUs
added up on columns (analytics.dayparts.merged) equal to the bit what adding the rows one GPU at a time gives
(``analytics.dayparts.merge_rows``), or say that they cannot (hours off the window's hours)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.dayfiles import gpus_doc, gpus_of
from analytics.dayparts import merge_gpus, merge_rows, merged
from analytics.gpucolumns import GpuColumns
from domain.week import Day, GpuDay, GpuWeek, Window

DAY = 86400.0
figure = st.floats(0, 1e7, allow_nan=False)
maybe = st.none() | figure
text = st.sampled_from(["", "h1", "h2", "node,7", 'q"uote', "ünï"])


@st.composite
def gpu_part(draw: st.DrawFn, uuid: str, days: int, hours: int | None) -> GpuWeek:
    """A GPU's rows of ``days`` days with ``hours`` hours of energy (None: none)."""
    daily = tuple(GpuDay(draw(figure), draw(figure), draw(maybe)) for _ in range(days))
    return GpuWeek(
        uuid,
        draw(text),
        draw(st.sampled_from(["", "H200", "H100"])),
        draw(st.sampled_from(["", "0", "3"])),
        draw(st.sampled_from([0.0, 1.0])) * draw(figure),
        draw(figure),
        draw(maybe),
        draw(maybe),
        draw(maybe),
        draw(maybe),
        energy_by_hour=None if hours is None else tuple(draw(st.lists(figure, min_size=hours, max_size=hours))),
        daily=daily,
        stalled_s=draw(maybe),
        cluster=draw(text),
        busy_measure=draw(st.sampled_from(["", "mig_sm_active", "mixed"])),
        energy_measure=draw(st.sampled_from(["", "power"])),
    )


@st.composite
def parts(draw: st.DrawFn) -> list[tuple[tuple[Day, ...], list[GpuWeek]]]:
    """Consecutive parts of one to three days each, of some of three GPUs."""
    out: list[tuple[tuple[Day, ...], list[GpuWeek]]] = []
    t = 0.0
    for _ in range(draw(st.integers(1, 5))):
        k = draw(st.integers(1, 3))
        ds = tuple(Day(t + i * DAY, t + (i + 1) * DAY, f"d{t + i}") for i in range(k))
        t += k * DAY
        here = draw(st.lists(st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]), unique=True))
        with_hours = draw(st.booleans())
        out.append((ds, [draw(gpu_part(u, k, 24 * k if with_hours else None)) for u in here]))
    return out


@settings(max_examples=100, deadline=None)
@given(parts())
def test_the_columns_add_up_as_the_rows_do(ps: list[tuple[tuple[Day, ...], list[GpuWeek]]]) -> None:
    """Every field of every GPU, to the bit: the sums (math.fsum's), the last non-empty texts, the
    measures, the days in order (zeros where a GPU is absent), the hours on the window's."""
    w = Window(0.0, ps[-1][0][-1].end, "parts")
    cols = [(ds, GpuColumns.of(gpus, len(ds))) for ds, gpus in ps]
    got = merged(cols, w)
    assert got is not None
    assert got == merge_rows(ps, w)
    assert merge_gpus(ps, w) == got


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.lists(st.sampled_from(["GPU-a", "GPU-b"]), unique=True), st.data())
def test_a_parts_gpus_come_back_from_its_file(days: int, uuids: list[str], data: st.DataObject) -> None:
    gpus = [data.draw(gpu_part(u, days, data.draw(st.sampled_from([None, 0, 23, 24])))) for u in uuids]
    c = GpuColumns.of(gpus, days)
    assert c.rows() == tuple(gpus)
    back = gpus_of(json.loads(json.dumps(gpus_doc(gpus, days), allow_nan=False)), days)
    assert back.rows() == tuple(gpus)


def test_hours_off_the_windows_hours_are_left_to_the_rows() -> None:
    """A rolling window starting at a minute, and a part whose GPUs' hours differ in count: the
    columns say None, and merge_gpus gives what the rows give."""
    d = (Day(0.0, DAY, "d0"),)
    day = [GpuWeek("GPU-a", "h", "m", "0", 10.0, 5.0, None, None, None, 7.0, tuple([1.0] * 24), (GpuDay(10, 5, 7),))]
    rolling = Window(60.0, DAY + 60.0, "rolling")
    assert merged([(d, GpuColumns.of(day, 1))], rolling) is None
    assert merge_gpus([(d, day)], rolling) == merge_rows([(d, day)], rolling)
    ragged = [*day, GpuWeek("GPU-b", "h", "m", "1", 1.0, 0.0, None, None, None, 2.0, (2.0,), (GpuDay(1, 0, 2),))]
    whole = Window(0.0, DAY, "day")
    assert merged([(d, GpuColumns.of(ragged, 1))], whole) is None
    assert merge_gpus([(d, ragged)], whole) == merge_rows([(d, ragged)], whole)


def test_rows_of_another_count_of_days_are_refused() -> None:
    g = GpuWeek("GPU-a", "h", "m", "0", 1.0, 0.0, None, None, None, None, daily=(GpuDay(1, 0, None),))
    with pytest.raises(ValueError, match="2 days"):
        GpuColumns.of([g], 2)
