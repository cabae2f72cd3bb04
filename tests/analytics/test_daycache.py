"""Settled days kept in files (analytics.daycache): a week from seven kept days is the week read at
once, the files are only ever a source's own whole settled days, and a bad file is read again.

Here on the embedded history (a real SQLite of the synthetic fleet, read by the embedded source)
and on hand-made days for the edge cases; in Prometheus, VictoriaMetrics and on dcgm-exporter's
series in tests/analytics/test_rollups.py and test_dcgm_truth.py."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.daycache import DayCached
from analytics.dayfiles import FORMAT
from analytics.dayparts import merge_gpus, rebin
from analytics.sources.base import GpuFigures, Source
from analytics.sources.embedded import EmbeddedSource
from domain.week import Day, GpuDay, GpuWeek, Window, days, iso_week, whole_day
from tests.support.daycache import assert_same_week
from tests.support.fleet import WEEK

HOUR = 3600.0
DAY = 86400.0


def kept(inner: Source, folder: Path, now: float, settle: float = 0.0) -> DayCached:
    return DayCached(inner, folder, "test", settle=settle, clock=lambda: now)


class Counting(EmbeddedSource):
    """The embedded source, counting the windows its GPUs are read for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read: list[Window] = []

    def gpus(self, w: Window) -> GpuFigures:
        self.read.append(w)
        return super().gpus(w)


def spans(source: Counting, w: Window) -> list[tuple[float, float]]:
    return [(x.start - w.start, x.end - w.start) for x in source.read]


def test_a_week_from_kept_days_is_the_week_read_at_once(hist: Path, tmp_path: Path) -> None:
    """Kept, each day is read alone once; a report then reads none from the store, and gives the
    week read at once; a report before they are kept reads the week at once, as before."""
    w = iso_week(WEEK)
    inner = Counting(hist)
    at_once = inner.week(w)
    assert at_once.gpus and at_once.jobs
    source = kept(inner, tmp_path, w.end)
    inner.read.clear()
    assert_same_week(source.week(w), at_once)
    assert spans(inner, w) == [(0, 7 * DAY)] and source.hits == 0
    inner.read.clear()
    assert source.keep_days(w) == 7 and len(list(tmp_path.glob("*.json"))) == 7
    assert spans(inner, w) == [(i * DAY, (i + 1) * DAY) for i in range(7)]
    assert source.keep_days(w) == 0  # all kept: nothing read
    inner.read.clear()
    assert_same_week(source.week(w), at_once)
    assert inner.read == [] and (source.hits, source.misses) == (7, 7)


def test_only_whole_settled_days_are_kept(hist: Path, tmp_path: Path) -> None:
    """A window's clipped edges and the days that ended less than ``settle`` ago are not kept; a
    later window holding the kept days takes them from their files and reads the rest at once,
    one read per run of days between them."""
    w = iso_week(WEEK)
    inner = Counting(hist)
    rolling = Window(w.start + 5 * HOUR, w.end - 7 * HOUR, "rolling", w.timezone)
    whole = [d for d in days(rolling) if d.seconds == 86400]
    assert len(whole) == 5  # the first and last days are clipped
    source = kept(inner, tmp_path, now=whole[-1].end + HOUR, settle=2 * HOUR)
    assert source.keep_days(rolling) == 4  # the last whole day ended an hour ago: not settled
    names = {p.name for p in tmp_path.glob("*.json")}
    assert names == {f"{source.key}-{int(d.start)}-{int(d.end)}.json" for d in whole[:4]}
    inner.read.clear()
    assert_same_week(source.week(rolling), inner.week(rolling))
    assert spans(inner, w)[:2] == [(5 * HOUR, DAY), (5 * DAY, 7 * DAY - 7 * HOUR)] and source.hits == 4
    later = kept(inner, tmp_path, now=w.end + 3 * HOUR, settle=2 * HOUR)
    inner.read.clear()
    assert_same_week(later.week(w), inner.week(w))
    assert spans(inner, w)[:2] == [(0, DAY), (5 * DAY, 7 * DAY)]
    assert later.keep_days(w) == 3 and later.hits == 4


def test_days_are_the_windows_local_days(hist: Path, tmp_path: Path) -> None:
    """A week in another time zone is kept as its own local days (midnight there), and a day over a
    change of clocks is whole at 23 or 25 hours."""
    w = iso_week(WEEK, "America/New_York")
    inner = EmbeddedSource(hist)
    source = kept(inner, tmp_path, now=w.end)
    assert source.keep_days(w) == 7
    assert_same_week(source.week(w), inner.week(w))
    assert {int(p.stem.split("-")[1]) % 86400 for p in tmp_path.glob("*.json")} == {5 * 3600}  # EST midnight
    spring, autumn = whole_day("2026-03-08", "America/New_York"), whole_day("2026-11-01", "America/New_York")
    assert (spring.seconds, autumn.seconds) == (23 * HOUR, 25 * HOUR)
    assert whole_day("2026-03-08", "UTC").seconds == 24 * HOUR


def test_a_window_without_its_jobs_takes_the_kept_days_too(hist: Path, tmp_path: Path) -> None:
    """The previous week's comparison reads no jobs: its kept days come from their files, the
    days between in one read each run."""
    w = iso_week(WEEK)
    inner = Counting(hist)
    source = kept(inner, tmp_path, w.end)
    assert source.keep_days(Window(w.start + 2 * DAY, w.start + 4 * DAY, "two days", w.timezone)) == 2
    inner.read.clear()
    got = source.week(w, jobs=False)
    assert spans(inner, w) == [(0, 2 * DAY), (4 * DAY, 7 * DAY)] and source.hits == 2
    assert_same_week(got, inner.week(w, jobs=False))


def test_another_source_or_setting_never_reads_the_days(hist: Path, tmp_path: Path) -> None:
    w = iso_week(WEEK)
    inner = EmbeddedSource(hist)
    kept(inner, tmp_path, w.end).keep_days(w)
    other = DayCached(inner, tmp_path, "another store", settle=0.0, clock=lambda: w.end)
    other.week(w)
    assert other.hits == 0 and other.keep_days(w) == 7
    assert len(list(tmp_path.glob("*.json"))) == 14


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # cut short (a full disk), in the job rows
        lambda text: text[: len(text.partition("\n")[0]) // 2],  # cut short in the GPU rows
        lambda text: text[:-1],  # the job rows' line without its end
        lambda text: text.partition("\n")[0],  # no job rows
        lambda text: text.rsplit("\n", 2)[0] + "\n",  # no records' line
        lambda text: "[]",
        lambda text: text.replace(f'"format":{FORMAT}', '"format":99'),
        lambda text: _file({**json.loads(text.partition("\n")[0]), "format": 2}, _jobs(text)),  # the old layout
        lambda text: text.replace('"start":', '"start":1'),  # another day's figures under this day's name
        lambda text: _file({**json.loads(text.partition("\n")[0]), "gpus": [[1, 2]]}, _jobs(text)),
        lambda text: _file(_gpus_with(text, hours=""), _jobs(text)),  # the GPUs' hours gone
        lambda text: _file(_gpus_with(text, n=3), _jobs(text)),  # fewer GPUs in the columns than it says
    ],
    ids=[
        "truncated",
        "truncated-gpus",
        "no-last-newline",
        "no-job-rows",
        "no-records-line",
        "not-an-object",
        "other-format",
        "format-2",
        "other-day",
        "bad-row",
        "no-hours",
        "gpu-count",
    ],
)
def test_a_damaged_file_is_read_again_from_the_store(
    hist: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    """It is named in a warning, deleted, its day read from the store, and kept again."""
    w = iso_week(WEEK)
    inner = EmbeddedSource(hist)
    kept(inner, tmp_path, w.end).keep_days(w)
    path = sorted(tmp_path.glob("*.json"))[3]
    path.write_text(damage(path.read_text()))  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="analytics.daycache"):
        source = kept(inner, tmp_path, w.end)
        got = source.week(w)
    assert source.hits == 6 and not path.exists()
    assert_same_week(got, inner.week(w))
    assert [r.getMessage() for r in caplog.records if path.name in r.getMessage()], caplog.text
    assert source.keep_days(w) == 1
    head, jobs, records = path.read_text().splitlines()  # written whole: three lines of JSON
    assert json.loads(head)["format"] == FORMAT and isinstance(json.loads(jobs), dict)
    assert json.loads(records) is None  # the embedded history keeps no Slurm record label sets


def _gpus_with(text: str, **changes: Any) -> dict[str, Any]:
    head: dict[str, Any] = json.loads(text.partition("\n")[0])
    return {**head, "gpus": {**head["gpus"], **changes}}


def _jobs(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text.split("\n")[1])
    return doc


def _file(head: dict[str, Any], jobs: object, records: object = None) -> str:
    return f"{json.dumps(head)}\n{json.dumps(jobs)}\n{json.dumps(records)}\n"


def _damaged_job(text: str, damage: Any) -> str:
    jobs = _jobs(text)
    assert jobs["n"] > 0, "the day has job rows"
    return _file(json.loads(text.split("\n")[0]), damage(jobs))


def _with(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**doc, **changes}


def _b64(values: list[int], dtype: str = "<i4") -> str:
    return base64.b64encode(np.array(values, dtype=dtype).tobytes()).decode()


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: _with(d, n_keys=d["n_keys"] + 1),  # more keys than their texts
        lambda d: _with(d, label_sets=[[5]]),  # a label that is not a (name, value) pair
        lambda d: _with(d, strings=[5, *d["strings"][1:]]),  # a text that is not a string
        lambda d: _with(d, numbers={**d["numbers"], "busy_s": _b64([1, 2], "<f8")}),  # a column cut short
        lambda d: _with(d, numbers={**d["numbers"], "busy_s": "not base64!"}),
        lambda d: _with(d, numbers={k: v for k, v in d["numbers"].items() if k != "energy_j"}),  # a column missing
        lambda d: _with(d, texts={**d["texts"], "uuid": _b64([len(d["strings"])] * d["n"])}),  # past the texts
        lambda d: _with(d, keys=_b64([-1] * d["n"])),  # before the keys
        lambda d: _with(d, n=d["n"] + 1),
        lambda d: [d],
    ],
    ids=[
        "more-keys-than-texts",
        "bad-labels",
        "not-a-string",
        "short-column",
        "not-base64",
        "missing-column",
        "index-past-texts",
        "negative-index",
        "wrong-count",
        "not-an-object",
    ],
)
def test_job_rows_found_damaged_when_made_are_read_from_the_store(
    hist: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any
) -> None:
    """A kept day's job rows are made only where the jobs are asked (a previous week's fleet
    figures need none): one found damaged then is named, its file deleted, the day's jobs read from
    the store, and the day kept again; the week is the one read at once."""
    w = iso_week(WEEK)
    inner = EmbeddedSource(hist)
    kept(inner, tmp_path, w.end).keep_days(w)
    path = sorted(tmp_path.glob("*.json"))[3]
    path.write_text(_damaged_job(path.read_text(), damage))
    source = kept(inner, tmp_path, w.end)
    fleet_only = source.week(w, jobs=False)  # the job rows are not made: the file is not found out
    assert path.exists()
    assert_same_week(fleet_only, inner.week(w, jobs=False))
    with caplog.at_level(logging.WARNING, logger="analytics.daycache"):
        got = source.week(w)
    assert not path.exists()
    assert_same_week(got, inner.week(w))
    assert [r.getMessage() for r in caplog.records if path.name in r.getMessage()], caplog.text
    assert source.keep_days(w) == 1


def test_a_folder_that_cannot_be_written_loses_nothing(
    hist: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    w = iso_week(WEEK)
    inner = EmbeddedSource(hist)
    blocked = tmp_path / "file"
    blocked.write_text("")
    source = DayCached(inner, blocked / "days", "test", settle=0.0, clock=lambda: w.end)
    with caplog.at_level(logging.WARNING, logger="analytics.daycache"):
        assert source.keep_days(w) == 0
    assert "cannot write in" in caplog.text
    assert_same_week(source.week(w), inner.week(w))


def test_days_long_past_are_deleted(hist: Path, tmp_path: Path) -> None:
    """A write deletes the days that ended more than KEEP_DAYS (62) ago."""
    w = iso_week(WEEK)
    inner = EmbeddedSource(hist)
    kept(inner, tmp_path, w.end).keep_days(w)
    sorted(tmp_path.glob("*.json"), key=lambda p: p.name.rsplit("-", 1)[1])[-1].unlink()
    later = kept(inner, tmp_path, now=w.start + 3 * DAY + 62 * DAY + 1)
    assert later.keep_days(w) == 1  # the write prunes
    assert len(list(tmp_path.glob("*.json"))) == 4  # the first three days ended before the horizon


# --- the adding up, on hand-made days -------------------------------------------------------

figure = st.floats(0, 1e6, allow_nan=False)
maybe = st.none() | figure


@st.composite
def gpu_day(draw: st.DrawFn, uuid: str, energy_hours: bool) -> GpuWeek:
    sampled = draw(figure)
    busy = draw(st.floats(0, 1)) * sampled
    energy = draw(maybe)
    return GpuWeek(
        uuid,
        draw(st.sampled_from(["", "h1", "h2"])),
        "H200",
        "0",
        sampled,
        busy,
        draw(maybe),
        draw(maybe),
        draw(maybe),
        energy,
        energy_by_hour=tuple(draw(st.lists(figure, min_size=24, max_size=24))) if energy_hours else None,
        daily=(GpuDay(sampled, busy, energy),),
        stalled_s=draw(maybe),
        busy_measure=draw(st.sampled_from(["", "mig_sm_active", "mixed"])),
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 8), hours=st.booleans())
def test_merged_days_add_up(data: st.DataObject, n: int, hours: bool) -> None:
    """Each figure is the sum of the days that measured it; a GPU absent from a day counts zero for
    it (its day and its 24 hours); a measure two sampling days disagree on is mixed."""
    uuids = ["GPU-a", "GPU-b", "GPU-c"]
    parts = []
    for i in range(n):
        here = data.draw(st.lists(st.sampled_from(uuids), unique=True))
        gpus = [data.draw(gpu_day(u, hours)) for u in here]
        parts.append(((Day(i * DAY, (i + 1) * DAY, f"d{i}"),), gpus))
    merged = {g.uuid: g for g in merge_gpus(parts, Window(0.0, n * DAY, "days"))}
    assert list(merged) == sorted({g.uuid for _, gpus in parts for g in gpus})
    for uuid, g in merged.items():
        mine = [next((x for x in gpus if x.uuid == uuid), None) for _, gpus in parts]
        present = [x for x in mine if x is not None]
        assert g.sampled_s == pytest.approx(math.fsum(x.sampled_s for x in present))
        assert g.busy_s <= g.sampled_s * (1 + 1e-12)
        energies = [x.energy_j for x in present if x.energy_j is not None]
        assert g.energy_j == (pytest.approx(math.fsum(energies)) if energies else None)
        assert [d.sampled_s for d in g.daily] == [x.sampled_s if x else 0.0 for x in mine]
        if hours:
            assert g.energy_by_hour is not None and len(g.energy_by_hour) == 24 * n
        measures = {x.busy_measure for x in present if x.sampled_s > 0}
        assert g.busy_measure == (measures.pop() if len(measures) == 1 else ("mixed" if measures else ""))


@settings(max_examples=100, deadline=None)
@given(
    offset=st.integers(0, 86399),
    cuts=st.lists(st.integers(1, 6), max_size=4, unique=True),
    joules=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=200, max_size=200),
)
def test_rebinned_hours_keep_the_sum_and_line_up_where_they_can(
    offset: int, cuts: list[int], joules: list[float]
) -> None:
    """A window's parts (split at local midnights) give their hours from their own starts; on the
    window's hours they keep the total, and where the window starts on the hour each hour is a
    part-hour as it was."""
    w = Window(float(offset), offset + 7 * DAY, "w")
    ds = days(w)
    bounds = sorted({0, *cuts, len(ds)})
    parts, used = [], 0
    for a, b in itertools.pairwise(bounds):
        span = ds[a:b]
        n = math.ceil((span[-1].end - span[0].start) / HOUR)
        parts.append((span, joules[used : used + n]))
        used += n
    got = rebin(parts, w)
    assert len(got) == math.ceil(w.seconds / HOUR)
    assert math.fsum(got) == pytest.approx(math.fsum(joules[:used]), rel=1e-9, abs=1e-6)
    if offset % 3600 == 0:  # every part is whole hours of the window's
        assert used == len(got) and list(got) == [h for _, hours in parts for h in hours]
