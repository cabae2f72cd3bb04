"""dcgm-exporter's series in the shapes today's clusters store them (``analytics.synthetic_dcgm``,
modelled from dcgm-exporter's own source), loaded into a real Prometheus and a real
VictoriaMetrics, read by the dcgm source and compared with the exact truth of the generated model:

- Kubernetes (7 GPUs): the Helm chart with ``NODE_NAME`` and honorLabels false, upgraded mid-way
  (``Hostname`` -> ``hostname``, a new exporter pod, a new driver); the GPU Operator with
  honorLabels true and a time-sliced GPU (one copy of each series per pod); a MIG node
  (``3g.40gb,2g.20gb,1g.10gb,1g.10gb`` and ``all-1g.10gb`` changing to ``4g.40gb,3g.40gb``) with
  pods per slice; an old manifest without ``NODE_NAME`` (its host label the exporter pod's name);
- Slurm (5 GPUs): ``--hpc-job-mapping-dir`` (a copy of each series per job listed), one GPU
  shared by two jobs at times, a MIG GPU with jobs per instance, the scheduler's job records.

Tolerances (the issue's): 1 % energy and GPU-hours, 0.5 pp utilisation and SM activity, 2 % held
GPU-hours per namespace and per job."""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.config import FullSettings, PrometheusSettings
from analytics.cost import CostModel
from analytics.daycache import DayCached
from analytics.report.build import build, job_key
from analytics.sources import SourceUnavailable
from analytics.sources.dcgm import DcgmSource
from analytics.sources.dcgm.queries import CHEAP_KINDS, EXACT_KINDS
from analytics.sources.dcgm.rows import GR_ENGINE
from analytics.sources.dcgm.stalls import SPANS_PER_CHUNK
from analytics.sources.promanswer import QueryError
from analytics.statements.job import job_figures
from analytics.statements.statement import statement
from analytics.synthetic_dcgm import DcgmFleet, Truth, kubernetes_fleet, slurm_fleet
from domain.jobs import JobKey
from domain.week import WeekData, Window, days
from tests.support.clock import ANCHOR
from tests.support.conservation import assert_conserves
from tests.support.daycache import assert_same_week
from tests.support.prometheus import PrometheusServer
from tests.support.victoria import VictoriaMetricsServer, VmAuthGateway

pytestmark = pytest.mark.integration  # a real Prometheus and VictoriaMetrics

INTERVAL = 30.0
WINDOW = Window(ANCHOR, ANCHOR + 3 * 86400, "dcgm-3d")
DATA_START = ANCHOR + 7980.0  # the history begins inside the window
AFTER = WINDOW.end + 86400  # "now" for the job command: the window is past, within its lookback
UTIL_PP = 0.5
ENERGY_REL = 0.01
HELD_REL = 0.02
RATE = 7.0  # per GPU-hour: a job on a 1g.10gb slice pays 1.0 an hour
COST = {"rules": [{"kind": "cloud", "price_per_gpu_hour": RATE, "energy_included": True}]}


@pytest.fixture(scope="module")
def fleets() -> list[DcgmFleet]:
    span = (WINDOW.end - DATA_START) / 86400 + 0.01  # past the window's end: the end is clipped
    return [
        kubernetes_fleet(DATA_START, span, INTERVAL, seed=7),
        slurm_fleet(DATA_START, span, INTERVAL, seed=7, job_info=True),
    ]


@pytest.fixture(scope="module")
def truth(fleets: list[DcgmFleet]) -> Truth:
    parts = [f.truth(WINDOW.start, WINDOW.end) for f in fleets]
    return Truth(
        gpu={k: v for t in parts for k, v in t.gpu.items()},
        holders={k: v for t in parts for k, v in t.holders.items()},
        slurm_jobs={k: v for t in parts for k, v in t.slurm_jobs.items()},
        exporter_pods=frozenset().union(*(t.exporter_pods for t in parts)),
        history_start=min(t.history_start for t in parts),
    )


def _joined(fleets: list[DcgmFleet], folder: Path, suffix: str, write: str) -> Path:
    out = folder / f"all.{suffix}"
    with out.open("w") as all_:
        for i, f in enumerate(fleets):
            part = folder / f"part{i}.{suffix}"
            getattr(f, write)(part)
            all_.writelines(x for x in part.read_text().splitlines(keepends=True) if not x.startswith("# EOF"))
            part.unlink()
        if suffix == "om":
            all_.write("# EOF\n")
    return out


@pytest.fixture(scope="module")
def prometheus(fleets: list[DcgmFleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    folder = tmp_path_factory.mktemp("prom")
    server = PrometheusServer.backfilled(folder, _joined(fleets, folder, "om", "write_openmetrics"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def victoria(fleets: list[DcgmFleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetricsServer]:
    folder = tmp_path_factory.mktemp("vm")
    server = VictoriaMetricsServer.imported(folder, _joined(fleets, folder, "txt", "write_import"))
    yield server
    server.stop()


def source(url: str, **auth: str) -> DcgmSource:
    return DcgmSource(PrometheusSettings(url=url, dcgm_scrape_interval=INTERVAL, kube_state_metrics=False, **auth))


def read(url: str, *, jobs: bool = True, **auth: str) -> tuple[WeekData, int]:
    """The window from the dcgm source at ``url``, and the queries it sent."""
    s = source(url, **auth)
    try:
        with s.api.report():
            return s.week(WINDOW, jobs=jobs), s.api.queries
    finally:
        s.api.close()


@pytest.fixture(scope="module", params=["prometheus", "victoriametrics"])
def store(request: pytest.FixtureRequest) -> tuple[str, str, WeekData, int]:
    server = request.getfixturevalue("prometheus" if request.param == "prometheus" else "victoria")
    data, queries = read(server.url)
    return request.param, server.url, data, queries


def test_gpus_match_the_truth(store: tuple[str, str, WeekData, int], truth: Truth) -> None:
    name, _, data, _ = store
    assert data.problems == (), name
    assert {g.uuid for g in data.gpus} == set(truth.gpu), name  # MIG GPUs too, each once
    for g in data.gpus:
        t = truth.gpu[g.uuid]
        assert g.host == t.host, (name, g.uuid)  # the node: across the upgrade, and without NODE_NAME
        assert g.sampled_s == pytest.approx(t.sampled_s, rel=1e-9), (name, g.uuid)
        assert abs(g.busy_s / g.sampled_s - t.util) * 100 < UTIL_PP, (name, g.uuid)
        assert g.busy_s == pytest.approx(t.busy_s, rel=1e-6), (name, g.uuid)
        assert g.busy_s <= g.sampled_s  # a shared GPU is never above 100 %
        assert g.energy_j == pytest.approx(t.energy_j, rel=ENERGY_REL), (name, g.uuid)
        assert (g.sm_active_s is None) == (t.sm_active_s is None), (name, g.uuid)
        if t.sm_active_s is not None:
            assert g.sm_active_s == pytest.approx(t.sm_active_s, rel=1e-6)
        assert (g.stalled_s is None) == (t.stalled_s is None), (name, g.uuid)
        if t.stalled_s is not None:
            assert g.stalled_s == pytest.approx(t.stalled_s, rel=1e-6, abs=1e-6), (name, g.uuid)
        assert (g.busy_measure == GR_ENGINE) == t.mig, (name, g.uuid)  # said on the row
        assert sum(d.sampled_s for d in g.daily) == pytest.approx(g.sampled_s)
    assert any(t.stalled_s for t in truth.gpu.values())  # the stall rule has something to count
    got_h, true_h = sum(g.sampled_s for g in data.gpus), sum(t.sampled_s for t in truth.gpu.values())
    assert got_h == pytest.approx(true_h, rel=1e-9)
    got_e, true_e = sum(g.energy_j or 0.0 for g in data.gpus), sum(t.energy_j for t in truth.gpu.values())
    assert got_e == pytest.approx(true_e, rel=ENERGY_REL)
    assert any("MIG mode" in a for a in data.approximations)


def test_holders_match_the_truth(store: tuple[str, str, WeekData, int], truth: Truth) -> None:
    """Every pod and Slurm job on a GPU or a MIG slice, and never the exporter's own pod."""
    name, _, data, _ = store
    got = {(j.uuid, _identity(j.job)): j for j in data.jobs}
    assert set(got) == set(truth.holders), name
    exporters = {pod for _, pod in truth.exporter_pods}
    assert not any(j.job.pod in exporters for j in data.jobs)
    for key, t in truth.holders.items():
        j = got[key]
        assert j.sampled_s == pytest.approx(t.held_s, rel=1e-9), (name, key)
        assert j.charged_s == pytest.approx(t.charged_s, rel=1e-9), (name, key)
        assert j.busy_s == pytest.approx(t.busy_s, rel=1e-6, abs=1e-6), (name, key)
        assert j.energy_j == pytest.approx(t.energy_j, rel=ENERGY_REL, abs=1.0), (name, key)
        if t.sm_active_s is not None:
            assert j.sm_active_s == pytest.approx(t.sm_active_s, rel=1e-6, abs=1e-6)
        if t.stalled_s is not None:
            assert j.stalled_s == pytest.approx(t.stalled_s, rel=1e-6, abs=1e-6), (name, key)
        if job := truth.slurm_jobs.get(key[1].job_id):  # the scheduler's record, joined
            assert (j.job.user, j.account, j.partition, j.qos) == (job.user, job.account, job.partition, job.qos)
    for uuid, g in ((g.uuid, g) for g in data.gpus):  # held and charged within the GPU, per scrape
        mine = [j for j in data.jobs if j.uuid == uuid]
        assert sum(j.charged_s or 0.0 for j in mine) <= g.sampled_s * (1 + 1e-9)
        assert sum(j.busy_s for j in mine) <= g.busy_s * (1 + 1e-9)
    held: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # namespace -> (got, true)
    for key, t in truth.holders.items():
        if key[1].namespace:
            held[key[1].namespace][0] += got[key].sampled_s
            held[key[1].namespace][1] += t.held_s
    assert len(held) >= 3
    for ns, (a, b) in held.items():
        assert a == pytest.approx(b, rel=HELD_REL), (name, ns)


def _identity(k: JobKey) -> JobKey:
    """A row's job as the truth keys it (the truth's Slurm jobs carry their id alone)."""
    return JobKey(job_id=k.job_id) if k.job_id else k


def alone_on_1g(fleets: list[DcgmFleet]) -> set[tuple[str, JobKey]]:
    """The holders that only ever held a 1g.10gb slice, alone."""
    seen: dict[tuple[str, JobKey], bool] = {}
    for f in fleets:
        for uuid, scrapes in f.scrapes.items():
            for s in scrapes:
                for k in s.jobs:
                    ok = s.instance.profile == "1g.10gb" and len(s.holders) == 1
                    seen[uuid, k] = seen.get((uuid, k), True) and ok
    return {key for key, ok in seen.items() if ok}


def test_a_slice_is_a_share_and_the_report_conserves(
    store: tuple[str, str, WeekData, int], truth: Truth, fleets: list[DcgmFleet]
) -> None:
    name, _, data, _ = store
    r = build(data, CostModel.model_validate(COST), now=AFTER)
    assert r.fleet.gpus == len(truth.gpu), name
    assert {row.key for row in r.group("host")} == {t.host for t in truth.gpu.values()}
    assert "dcgm-exporter" not in {row.key for row in r.group("namespace")}  # the exporter holds nothing
    assert_conserves(r, groups=("user", "namespace", "account", "partition", "job"))
    busy_from = {row.key.rsplit(" ", 1)[1]: row.busy_measure for row in r.group("gpu")}
    assert {u for u, m in busy_from.items() if m == "gr_engine_active"} == {u for u, t in truth.gpu.items() if t.mig}
    # a pod on a 1g.10gb slice of an H100 held 1/7 GPU-hour per hour and pays 1/7 of the GPU's rate
    rows = {row.key: row for row in r.group("job")}
    one_g = sorted(k for k in alone_on_1g(fleets) if k in truth.holders and truth.holders[k].held_s)
    assert len(one_g) >= 3, "the data has jobs alone on a 1g.10gb slice"
    for uuid, key in one_g:
        j = next(x for x in data.jobs if (x.uuid, _identity(x.job)) == (uuid, key))
        row, listed_h = rows[job_key(j)], truth.holders[uuid, key].held_s * 7 / 3600  # the hours it was listed
        assert row.allocated_gpu_hours == pytest.approx(listed_h / 7, rel=1e-9), (name, key)
        assert row.hardware_cost == pytest.approx(RATE * listed_h / 7, rel=1e-6), (name, key)


def test_history_start_and_bounded_queries(store: tuple[str, str, WeekData, int], truth: Truth) -> None:
    _, _, data, queries = store
    assert data.history_start == pytest.approx(truth.history_start, abs=1e-3)
    # per day its queries and (where a GPU's scrapes were written twice, it is in MIG mode or its
    # counter reset) the second round; the counters at the start and the scrape targets (2); the
    # history's start (at most 4 + a query a day); the stalls' range queries (the coarse search's,
    # and at most 2 x SPANS_PER_CHUNK per 10,000 scrape intervals where it found any); the Slurm
    # watcher's queue (6), failures (3), benchmarks (2, and 6 for the users' gpuledger scaling runs)
    # and job records (2): whatever the GPUs
    n = len(days(WINDOW))
    shared = 6 + 3 + (2 + 6) + 2
    assert queries <= (len(CHEAP_KINDS) + len(EXACT_KINDS)) * n + 2 + (4 + n) + (1 + 2 * SPANS_PER_CHUNK) + shared


def test_kept_days_give_the_window_read_at_once(store: tuple[str, str, WeekData, int], tmp_path: Path) -> None:
    """dcgm-exporter's series kept day by day in files (analytics.daycache: the dcgm source's jobs
    need its own reading of each day's GPUs, so a day is kept whole, GPUs and jobs together): the
    window from the files is the window read at once."""
    _, url, expected, _ = store
    kept = DayCached(source(url), tmp_path, url, settle=0.0, clock=lambda: WINDOW.end)
    try:
        assert kept.keep_days(WINDOW) == 3
        got = kept.week(WINDOW)
    finally:
        kept.close()
    assert kept.hits == 3
    assert_same_week(got, expected)


def test_without_jobs(prometheus: PrometheusServer, truth: Truth) -> None:
    data, _ = read(prometheus.url, jobs=False)
    assert data.jobs == () and len(data.gpus) == len(truth.gpu)


def test_behind_a_gateway_with_a_path_prefix_and_basic_auth(victoria: VictoriaMetricsServer, tmp_path: Path) -> None:
    """The analytics pointed at a query gateway's URL with a path (Mimir's frontend at /prometheus,
    Grafana Cloud's /api/prom): here Debian's vmauth, which lets only the credentials through and
    only to paths under the prefix, in front of VictoriaMetrics (which answers under /prometheus
    too). Every query goes under the prefix with the credentials: the week is the one read from the
    store directly. Wrong credentials, or the prefix dropped, are refused, never read as no data."""
    gateway = VmAuthGateway(tmp_path, victoria.url, "/prometheus", "fleet", "s3cret")
    try:
        direct, n = read(victoria.url)
        through, m = read(gateway.url, username="fleet", password="s3cret")
        assert m == n and through.gpus and through.problems == ()
        assert_same_week(through, direct)
        said = []
        for url, password in ((gateway.url, "wrong"), (gateway.url.removesuffix("/prometheus"), "s3cret")):
            with pytest.raises((QueryError, SourceUnavailable), match=r"HTTP 40[01]") as refused:
                read(url, username="fleet", password=password)
            said.append(str(refused.value))
        wrong, no_prefix = said
        assert 'auth token "Basic ***"' in wrong, wrong  # vmauth quotes the Authorization it was sent: hidden
        assert base64.b64encode(b"fleet:wrong").decode() not in wrong
        assert f"{gateway.url.removesuffix('/prometheus')}/api/v1/query" in no_prefix, no_prefix
    finally:
        gateway.stop()


def test_gpuledger_job_and_statement_on_dcgm_series(prometheus: PrometheusServer, truth: Truth) -> None:
    s = FullSettings(
        analytics={"source": "prometheus"},
        prometheus={"url": prometheus.url, "naming": "dcgm", "dcgm_scrape_interval": INTERVAL},
        cost=COST,
    )
    src = source(prometheus.url)
    try:
        slurm = sorted((t.charged_s, k) for k, t in truth.holders.items() if k[1].job_id)
        _, (_, key) = slurm[-1]  # the Slurm job charged the most
        f = job_figures(src, key.job_id, s, AFTER)
        assert f.job == key.job_id and f.user == truth.slurm_jobs[key.job_id].user
        charged = sum(t.charged_s for (u, k), t in truth.holders.items() if k.job_id == key.job_id)
        assert f.row.sampled_gpu_hours * 3600 == pytest.approx(charged, rel=HELD_REL)
        pod = next(k for (_, k), t in sorted(truth.holders.items()) if k.pod and t.held_s > 3600)
        assert job_figures(src, f"{pod.namespace}/{pod.pod}", s, AFTER).job == f"{pod.namespace}/{pod.pod}"
        user = truth.slurm_jobs[key.job_id].user
        st = statement(src, "user", user, WINDOW, s, now=AFTER)
        mine = {j for j, rec in truth.slurm_jobs.items() if rec.user == user}
        assert {x.job for x in st.jobs} <= mine and key.job_id in {x.job for x in st.jobs}
        assert st.totals.charged_gpu_hours > 0
    finally:
        src.api.close()


def test_without_up_series_the_exporter_is_told_by_its_labels(
    fleets: list[DcgmFleet], truth: Truth, tmp_path: Path
) -> None:
    """Where ``up`` is not stored (a federated or remote-written copy), the exporter's own pod is
    still no holder: its container name or its host label give it away."""
    lines = _joined(fleets[:1], tmp_path, "txt", "write_import").read_text().splitlines(keepends=True)
    kept = tmp_path / "no-up.txt"
    kept.write_text("".join(x for x in lines if not x.startswith("up{")))
    server = VictoriaMetricsServer.imported(tmp_path, kept)
    try:
        data, _ = read(server.url)
    finally:
        server.stop()
    k8s = {k: t for k, t in truth.holders.items() if k[0] in {g.uuid for g in fleets[0].gpus}}
    assert {(j.uuid, j.job) for j in data.jobs} == set(k8s)
    assert any("no `up` series" in a for a in data.approximations)
