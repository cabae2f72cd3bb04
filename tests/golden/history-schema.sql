-- PRAGMA user_version = 8

-- table gpus on gpus
CREATE TABLE gpus (
        uuid TEXT PRIMARY KEY,
        hostname TEXT NOT NULL,
        gpu_index INTEGER NOT NULL,
        model TEXT NOT NULL,
        pci_bus_id TEXT NOT NULL,
        first_seen INTEGER NOT NULL,
        last_seen INTEGER NOT NULL
    );

-- index sqlite_autoindex_gpus_1 on gpus
-- (made by SQLite itself, no SQL)

-- table gpu_minutes on gpu_minutes
CREATE TABLE gpu_minutes (
        uuid TEXT NOT NULL,
        minute INTEGER NOT NULL,
        sampled_seconds REAL, busy_seconds REAL, sm_active_seconds REAL, tensor_active_seconds REAL, dram_active_seconds REAL, energy_joules REAL, allocated_seconds REAL, allocated_idle_seconds REAL, stalled_seconds REAL, pcie_tx_bytes REAL, pcie_rx_bytes REAL, nvlink_tx_bytes REAL, nvlink_rx_bytes REAL, power_violation_seconds REAL, thermal_violation_seconds REAL, sync_boost_violation_seconds REAL, board_limit_violation_seconds REAL, low_utilization_violation_seconds REAL, reliability_violation_seconds REAL, mig_sampled_seconds REAL, energy_integrated_seconds REAL,
        PRIMARY KEY (uuid, minute)
    ) WITHOUT ROWID;

-- index gpu_minutes_by_minute on gpu_minutes
CREATE INDEX gpu_minutes_by_minute ON gpu_minutes (minute);

-- table bench_runs on bench_runs
CREATE TABLE bench_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        finished REAL NOT NULL,
        bench TEXT NOT NULL,
        result TEXT NOT NULL,
        duration REAL,
        backend TEXT NOT NULL,
        world_size INTEGER NOT NULL,
        data TEXT
    );

-- table sqlite_sequence on sqlite_sequence
CREATE TABLE sqlite_sequence(name,seq);

-- index bench_runs_by_bench on bench_runs
CREATE INDEX bench_runs_by_bench ON bench_runs (bench, finished);

-- table job_minutes on job_minutes
CREATE TABLE job_minutes (
        uuid TEXT NOT NULL,
        minute INTEGER NOT NULL,
        job_id TEXT NOT NULL,
        user TEXT NOT NULL,
        pod TEXT NOT NULL,
        namespace TEXT NOT NULL,
        container TEXT NOT NULL,
        sampled_seconds REAL NOT NULL,
        busy_seconds REAL NOT NULL,
        energy_joules REAL NOT NULL, charged_seconds REAL, stalled_seconds REAL,
        PRIMARY KEY (uuid, minute, job_id, user, pod, namespace, container)
    ) WITHOUT ROWID;

-- index job_minutes_by_minute on job_minutes
CREATE INDEX job_minutes_by_minute ON job_minutes (minute);

-- table jobs on jobs
CREATE TABLE jobs (
        cluster TEXT NOT NULL,
        job_id TEXT NOT NULL,
        name TEXT NOT NULL,
        user TEXT NOT NULL,
        partition TEXT NOT NULL,
        state TEXT NOT NULL,
        submit REAL,
        eligible REAL,
        start REAL,
        end REAL NOT NULL,
        gpus INTEGER NOT NULL,
        exit_code TEXT NOT NULL,
        restarts INTEGER NOT NULL, account TEXT, qos TEXT,
        PRIMARY KEY (cluster, job_id, end)
    ) WITHOUT ROWID;

-- index jobs_by_end on jobs
CREATE INDEX jobs_by_end ON jobs (end);

-- table job_attrs on job_attrs
CREATE TABLE job_attrs (
        job_id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        partition TEXT NOT NULL,
        qos TEXT NOT NULL,
        first_minute INTEGER NOT NULL,
        last_minute INTEGER NOT NULL
    ) WITHOUT ROWID;

-- index job_attrs_by_last_minute on job_attrs
CREATE INDEX job_attrs_by_last_minute ON job_attrs (last_minute);
