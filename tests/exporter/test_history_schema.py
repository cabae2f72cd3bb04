"""The history schema is frozen per version: a golden ``sqlite_master``, files made by earlier
versions opened and migrated with every row intact, and files newer than the code refused.

``tests/data/history-v{1,2,3}.sqlite`` were written by the code at commit e30d1e1 (schema v3,
run with ``SCHEMA_VERSION`` set to 1, 2 and 3) through its own insert functions;
``history-v4.sqlite`` by the code of schema v4 (the v3 file migrated, plus an hour of rows with
stalled and charged seconds); ``history-v5.sqlite`` by the code of schema v5 (the v4 file
migrated, plus jobs with their Slurm account, partition and QOS); ``history-v6.sqlite`` by the code
of schema v6 (the v5 file migrated, plus minutes with the fact table's PCIe, NVLink and violation
counters); ``history-v7.sqlite`` by the code of schema v7 (the v6 file migrated, plus minutes of the
H200 in MIG mode); ``history-v8.sqlite`` by the code of schema v8 (the v7 file migrated, plus minutes
of the A100 with its energy integrated from power); see ``tests/data/README.md``.
They are never regenerated: a new schema version adds a new file.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from domain.jobs import JobKey
from exporter import history
from exporter.history.schema import MIGRATIONS
from exporter.snapshot import ROLLUP_FIELDS

TESTS = Path(__file__).resolve().parent.parent
DATA = TESTS / "data"
GOLDEN = TESTS / "golden" / "history-schema.sql"

H0 = 1_800_000_000  # the first hour of the committed files, 2027-01-15 08:00 UTC
GPU0 = "GPU-0f0e0d0c-0000-4000-8000-000000000000"
GPU1 = "GPU-1a1b1c1d-0000-4000-8000-000000000003"
TABLES = {
    1: ("gpus", "gpu_minutes"),
    2: ("bench_runs",),
    3: ("job_minutes", "jobs"),
    4: (),
    5: ("job_attrs",),
    6: (),
    7: (),
    8: (),
}
"""The tables each version added, and so the ones a file of that version has rows in (v4 added
columns only: gpu_minutes.stalled_seconds, job_minutes.charged_seconds and stalled_seconds; v5
jobs.account and qos, and the job_attrs table; v6 columns only: the fact table's counters in
gpu_minutes; v7 one column: gpu_minutes.mig_sampled_seconds; v8 one column:
gpu_minutes.energy_integrated_seconds)."""


def schema_dump(db: sqlite3.Connection) -> str:
    """``sqlite_master`` in creation order, as SQL a reader can diff."""
    lines = [f"-- PRAGMA user_version = {db.execute('PRAGMA user_version').fetchone()[0]}"]
    for kind, name, table, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid"):
        lines.append(f"\n-- {kind} {name} on {table}")
        lines.append(f"{sql};" if sql else "-- (made by SQLite itself, no SQL)")
    return "\n".join(lines) + "\n"


Open = Callable[[Path], sqlite3.Connection]


@pytest.fixture
def open_db() -> Iterator[Open]:
    """history.connect, with every connection closed at the end of the test."""
    opened: list[sqlite3.Connection] = []

    def open_(path: Path) -> sqlite3.Connection:
        opened.append(history.connect(path))
        return opened[-1]

    yield open_
    for db in opened:
        db.close()


def fresh(open_db: Open, tmp_path: Path) -> sqlite3.Connection:
    return open_db(tmp_path / "fresh.sqlite")


def copy_of(version: int, tmp_path: Path) -> Path:
    """A writable copy of a committed file (never open the committed one: opening migrates)."""
    path = tmp_path / f"history-v{version}.sqlite"
    shutil.copyfile(DATA / path.name, path)
    return path


Row = dict[str, object]


def raw_rows(path: Path) -> dict[str, list[Row]]:
    """Every row of every table, straight from SQLite, by table, as column -> value."""
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {n: sorted((dict(r) for r in db.execute(f"SELECT * FROM {n}")), key=repr) for n in names}
    finally:
        db.close()


def test_a_fresh_file_has_the_golden_schema(open_db: Open, tmp_path: Path) -> None:
    text = schema_dump(fresh(open_db, tmp_path))
    if os.environ.get("GPULEDGER_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), (
        "the history schema changed. An intended change is a new migration at the end of "
        "exporter/history/schema.py (never an edit of an old one); then rerun with "
        "GPULEDGER_UPDATE_GOLDEN=1 and review the diff of tests/golden/history-schema.sql"
    )


def test_the_schema_stores_every_rollup_field(open_db: Open, tmp_path: Path) -> None:
    columns = [r[1] for r in fresh(open_db, tmp_path).execute("PRAGMA table_info(gpu_minutes)")]
    assert columns == ["uuid", "minute", *ROLLUP_FIELDS], (
        "ROLLUP_FIELDS and the gpu_minutes table disagree: a new counter needs a new migration "
        "(ALTER TABLE gpu_minutes ADD COLUMN <name> REAL) in exporter/history/schema.py"
    )


def test_migrations_are_numbered_one_to_the_current_version() -> None:
    assert sorted(MIGRATIONS) == list(range(1, history.SCHEMA_VERSION + 1))
    assert history.SCHEMA_VERSION >= max(TABLES)


@pytest.mark.parametrize("version", sorted(TABLES))
def test_an_old_file_migrates_with_every_row_intact(version: int, tmp_path: Path) -> None:
    path = copy_of(version, tmp_path)
    before = raw_rows(path)
    assert set(before) >= {t for v in TABLES if v <= version for t in TABLES[v]}
    assert all(before[t] for v in TABLES if v <= version for t in TABLES[v]), "every table of the file has rows"
    db = history.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    after = raw_rows(path)
    for table, rows in before.items():
        kept = [{c: r[c] for c in rows[0]} for r in after[table]] if rows else after[table]
        assert kept == rows, f"{table}: rows changed in migrating v{version}"
        added = {c: v for r in after[table] for c, v in r.items() if c not in rows[0]} if rows else {}
        assert set(added.values()) <= {None}, f"{table}: a column added later is NULL (not measured) in old rows"
    for table in set(after) - set(before):
        assert after[table] == [], f"{table}: added by a migration, so empty"


@pytest.mark.parametrize("version", sorted(TABLES))
def test_a_migrated_file_has_the_same_schema_as_a_fresh_one(version: int, open_db: Open, tmp_path: Path) -> None:
    """Exactly the same, column order included: a fresh file is made by the same migrations, so a
    column added by ALTER TABLE comes last in both."""
    migrated = open_db(copy_of(version, tmp_path))
    assert schema_dump(migrated) == schema_dump(fresh(open_db, tmp_path))
    for (table,) in migrated.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        info = f"PRAGMA table_info({table})"
        assert list(migrated.execute(info)) == list(fresh(open_db, tmp_path).execute(info)), table


def test_the_reads_understand_a_v1_file(open_db: Open, tmp_path: Path) -> None:
    db = open_db(copy_of(1, tmp_path))
    gpus = history.gpus(db)
    assert gpus[GPU0] == history.GpuIdentity(GPU0, "node-a", 0, "NVIDIA H200", "00000000:19:00.0", H0, H0 + 61 * 60)
    assert gpus[GPU1] == history.GpuIdentity(
        GPU1, "node-b", 3, "NVIDIA A100-SXM4-80GB", "00000000:C1:00.0", H0, H0 + 58 * 60
    )
    hours = {(h.uuid, h.hour): h for h in history.gpu_hours(db, H0, H0 + 7200)}
    assert sorted(hours) == [(GPU0, 0), (GPU0, 1), (GPU1, 0)]
    h = hours[(GPU0, 0)]  # minutes 0, 1, 2, 58, 59
    assert h.minutes == 5
    assert h.values["busy_seconds"] == 30.0 * 5 + (0 + 1 + 2 + 58 + 59)
    assert h.values["energy_joules"] == 6000.0 * 5 + 100.0 * 120
    assert hours[(GPU0, 1)].values["sm_active_seconds"] == 20.0 * 2 + 0.5 * (60 + 61)
    a100 = hours[(GPU1, 0)]  # no GPM, no energy counter: not measured, never 0
    assert a100.minutes == 4 and a100.values["busy_seconds"] == 12.0 * (1 + 2 + 3 + 59)
    assert a100.values["sm_active_seconds"] is None and a100.values["energy_joules"] is None
    assert history.bench_records(db) == [] and history.finished_jobs(db, 0, 10**10) == []
    assert history.job_totals(db, 0, 10**10) == []


def test_the_reads_understand_v2_benchmarks_and_v3_jobs(open_db: Open, tmp_path: Path) -> None:
    v2 = open_db(copy_of(2, tmp_path))
    records = history.bench_records(v2)
    assert [(r.finished, r.bench, r.result, r.duration, r.backend, r.world_size) for r in records] == [
        (H0 + 120.5, "allreduce", "ok", 7.5, "nccl", 1),
        (H0 + 3700.25, "train", "failed", 3.0, "nccl", 2),
        (H0 + 3800.0, "allreduce", "skipped_busy", None, "gloo", 2),
    ]
    assert records[1].data == "rank 1 exited with code 1" and records[2].data is None
    v3 = open_db(copy_of(3, tmp_path))
    jobs = history.finished_jobs(v3, H0, H0 + 7200)
    assert [(j.job_id, j.state, j.start, j.end, j.gpus, j.restarts) for j in jobs] == [
        ("4243", "FAILED", H0 + 70.0, H0 + 200.0, 2, 1),
        ("4244", "CANCELLED", None, H0 + 900.0, 4, 0),
        ("4242", "COMPLETED", H0 - 60.0, H0 + 3720.0, 1, 0),
    ]
    totals = history.job_totals(v3, H0, H0 + 3600)
    assert [t.job for t in totals] == [
        JobKey(pod="train-7d9f", namespace="ml", container="trainer"),
        JobKey(job_id="4242", user="ada"),
    ]
    for t in totals:  # minutes 0, 1, 2, 58, 59 of the first hour
        assert (t.uuid, t.sampled_seconds) == (GPU0, 30.0 * 5)
        assert t.busy_seconds == 15.0 * 5 + 120 and t.energy_joules == 3000.0 * 5 + 50.0 * 120


def test_the_reads_understand_v4_stalled_and_charged_seconds(open_db: Open, tmp_path: Path) -> None:
    v3 = open_db(copy_of(3, tmp_path))
    assert all(h.values["stalled_seconds"] is None for h in history.gpu_hours(v3, H0, H0 + 7200))
    assert [(t.charged_seconds, t.stalled_seconds) for t in history.job_totals(v3, H0, H0 + 7200)] == [(None, None)] * 2
    v4 = open_db(copy_of(4, tmp_path))
    hours = {(h.uuid, h.hour): h for h in history.gpu_hours(v4, H0, H0 + 3 * 3600)}
    assert hours[(GPU0, 0)].values["stalled_seconds"] is None  # written before v4: not measured
    assert hours[(GPU0, 2)].values["stalled_seconds"] == 0.0 + 20.0 + 40.0
    assert hours[(GPU1, 2)].values["stalled_seconds"] is None  # no GPM
    assert hours[(GPU1, 2)].values["busy_seconds"] == 90.0
    totals = {(t.uuid, t.job.job_id): t for t in history.job_totals(v4, H0 + 7200, H0 + 3 * 3600)}
    ada, bob = totals[(GPU0, "4242")], totals[(GPU1, "4250")]
    assert (ada.sampled_seconds, ada.charged_seconds, ada.stalled_seconds) == (180.0, 135.0, 45.0)
    pod = totals[(GPU0, "")]
    assert (ada.charged_seconds, pod.charged_seconds) == (135.0, 45.0)  # sharing GPU0: 180 s, its time, once
    assert (bob.charged_seconds, bob.stalled_seconds) == (178.5, None)
    mixed = {t.job: t for t in history.job_totals(v4, H0, H0 + 3 * 3600) if t.uuid == GPU0}
    # the v3 minutes, which have no shares, add the held seconds (the report scales overlaps down)
    v3_held = sum(t.sampled_seconds for t in history.job_totals(v4, H0, H0 + 7200) if t.job.job_id == "4242")
    assert v3_held > 0
    assert mixed[JobKey(job_id="4242", user="ada")].charged_seconds == 135.0 + v3_held


def test_the_reads_understand_v5_accounts_and_qos(open_db: Open, tmp_path: Path) -> None:
    v4 = open_db(copy_of(4, tmp_path))  # migrated: its finished jobs have no account, no attributes
    assert {(j.account, j.qos) for j in history.finished_jobs(v4, 0, 10**10)} == {("", "")}
    assert history.job_attributes(v4, 0, 10**10) == {}
    v5 = open_db(copy_of(5, tmp_path))
    t = H0 + 3 * 3600
    jobs = {j.job_id: j for j in history.finished_jobs(v5, t - 3600, t + 3600)}
    assert {k: (j.account, j.qos, j.partition) for k, j in jobs.items()} == {
        "4260": ("pi-lovelace", "normal", "gpu"),
        "4262": ("pi-hopper", "", "debug"),
    }
    attrs = history.job_attributes(v5, t, t + 3600)
    assert attrs == {
        "4260": history.JobAttributes("4260", "pi-lovelace", "gpu", "normal", t, t + 120),
        "4261": history.JobAttributes("4261", "pi-babbage", "long", "", t, t + 120),
    }
    assert history.job_attributes(v5, t + 180, t + 3600) == {}  # the jobs' last minute began at t + 120
    assert history.job_attributes(v5, 0, t) == {}


def test_the_reads_understand_v6_fact_counters(open_db: Open, tmp_path: Path) -> None:
    v5 = open_db(copy_of(5, tmp_path))  # migrated: no minute of it measured the new counters
    assert all(h.values["pcie_tx_bytes"] is None for h in history.gpu_hours(v5, H0, H0 + 5 * 3600))
    v6 = open_db(copy_of(6, tmp_path))
    hours = {h.uuid: h.values for h in history.gpu_hours(v6, H0 + 4 * 3600, H0 + 5 * 3600)}
    h200, a100 = hours[GPU0], hours[GPU1]
    assert (h200["pcie_tx_bytes"], h200["pcie_rx_bytes"]) == (7.2e9, 7.2e9)
    assert h200["nvlink_tx_bytes"] is None and h200["nvlink_rx_bytes"] is None  # PCIe-attached: no NVLink
    assert (h200["power_violation_seconds"], h200["thermal_violation_seconds"]) == (18.0, 0.0)
    assert (a100["nvlink_tx_bytes"], a100["nvlink_rx_bytes"]) == (1.44e11, 1.44e11)
    assert (a100["thermal_violation_seconds"], a100["energy_joules"]) == (1.5, None)
    assert a100["busy_seconds"] == 150.0


def test_the_reads_understand_v7_mig_seconds(open_db: Open, tmp_path: Path) -> None:
    v6 = open_db(copy_of(6, tmp_path))  # migrated: no minute of it says whether its GPU was in MIG mode
    assert all(h.values["mig_sampled_seconds"] is None for h in history.gpu_hours(v6, H0, H0 + 6 * 3600))
    v7 = open_db(copy_of(7, tmp_path))
    hours = {h.uuid: h.values for h in history.gpu_hours(v7, H0 + 5 * 3600, H0 + 6 * 3600)}
    h200, a100 = hours[GPU0], hours[GPU1]
    assert (h200["mig_sampled_seconds"], h200["sampled_seconds"], h200["busy_seconds"]) == (180.0, 180.0, 60.0)
    assert a100["mig_sampled_seconds"] is None and a100["busy_seconds"] == 150.0  # not in MIG mode


def test_the_reads_understand_v8_integrated_energy(open_db: Open, tmp_path: Path) -> None:
    v7 = open_db(copy_of(7, tmp_path))  # migrated: no minute of it says its energy was integrated
    assert all(h.values["energy_integrated_seconds"] is None for h in history.gpu_hours(v7, H0, H0 + 6 * 3600))
    v8 = open_db(copy_of(8, tmp_path))
    hours = {h.uuid: h.values for h in history.gpu_hours(v8, H0 + 6 * 3600, H0 + 7 * 3600)}
    h200, a100 = hours[GPU0], hours[GPU1]
    assert (h200["energy_joules"], h200["energy_integrated_seconds"]) == (72000.0, None)
    assert (a100["energy_joules"], a100["energy_integrated_seconds"]) == (45000.0, 180.0)  # all of its 180 s


def test_an_old_file_opened_read_only_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = copy_of(1, tmp_path)
    with pytest.raises(history.HistoryError, match="schema v1 needs migrating; open it with the exporter once"):
        history.connect(path, readonly=True)
    assert raw_rows(path) == raw_rows(DATA / path.name)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1


@pytest.mark.parametrize("readonly", [False, True])
def test_a_file_newer_than_the_code_is_refused_untouched(readonly: bool, tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE from_the_future (x)")
    raw.execute(f"PRAGMA user_version = {history.SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(history.HistoryError) as e:
        history.connect(path, readonly=readonly)
    assert str(e.value) == (
        f"{path}: history schema v{history.SCHEMA_VERSION + 1} is newer than this gpuledger understands "
        f"(v{history.SCHEMA_VERSION}); upgrade gpuledger to open it"
    )
    assert path.read_bytes() == before  # not even switched to WAL
    assert not path.with_name(path.name + "-wal").exists()


def test_a_failed_migration_leaves_the_file_at_its_version(tmp_path: Path) -> None:
    path = copy_of(1, tmp_path)
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE job_minutes (x)")  # in the way of migration 3
    raw.commit()
    raw.close()
    before = raw_rows(path)
    with pytest.raises(history.HistoryError, match="migrating the history schema to v3 failed: table job_minutes"):
        history.connect(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2  # migration 2 went through, 3 rolled back
    assert "jobs" not in {n for (n,) in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    after = raw_rows(path)
    assert after == {**before, "bench_runs": [], "sqlite_sequence": []}
