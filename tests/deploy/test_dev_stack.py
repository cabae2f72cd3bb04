"""scripts/dev-stack started, inspected through Prometheus' API and stopped, with Debian's real
Prometheus and Alertmanager against a replaying exporter and the analytics daemon; its
STORE=victoriametrics variant (Debian's VictoriaMetrics, vmagent and vmalert in Prometheus' place)
likewise; and docs/deploy.md naming only files that exist.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import socket
import subprocess
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_files import DEPLOY_DOC, DEV_STACK, RULES_DIR, VENV_GPULEDGER
from tests.support.http import free_port, http_get
from tests.support.metrics import parse_metrics
from tests.support.paths import REPO
from tests.support.tools import require_binary
from tests.support.wait import wait_until

# ---------------------------------------------------------------------------------------------
# scripts/dev-stack

STACK = ("alertmanager", "prometheus", "exporter", "analytics")
# STORE=victoriametrics: VictoriaMetrics on PROMETHEUS_PORT, vmagent and vmalert on their own ports
VM_STACK = ("alertmanager", "victoria-metrics", "vmagent", "vmalert", "exporter", "analytics")
STACKS = {"prometheus": STACK, "victoriametrics": VM_STACK}


def proc_alive(pid: int) -> bool:
    """Running (a zombie that nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def processes_with_env(marker: str) -> list[int]:
    """Live processes whose environment contains ``marker`` (ours: DEV_STACK_DIR=<tmp>)."""
    found = []
    needle = marker.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if (b"\0" + needle in b"\0" + environ) and proc_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class DevStack:
    def __init__(self, state: Path, store: str = "prometheus") -> None:
        self.state = state
        self.names = STACKS[store]
        ports: set[int] = set()
        while len(ports) < len(self.names):
            ports.add(free_port())
        self.ports = dict(zip(self.names, sorted(ports), strict=True))
        query = "prometheus" if store == "prometheus" else "victoria-metrics"  # on PROMETHEUS_PORT
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("GPULEDGER_") and k not in ("STORE", "VMAGENT_PORT", "VMALERT_PORT")
        }
        self.env.update(
            DEV_STACK_DIR=str(state),
            VENV=str(VENV_GPULEDGER.parent.parent),  # the virtualenv running these tests
            READER="replay",
            SCRAPE_INTERVAL="1s",
            STORE=store,
            EXPORTER_PORT=str(self.ports["exporter"]),
            ANALYTICS_PORT=str(self.ports["analytics"]),
            PROMETHEUS_PORT=str(self.ports[query]),
            ALERTMANAGER_PORT=str(self.ports["alertmanager"]),
        )
        if store == "victoriametrics":
            self.env.update(VMAGENT_PORT=str(self.ports["vmagent"]), VMALERT_PORT=str(self.ports["vmalert"]))
        self.marker = f"DEV_STACK_DIR={state}"
        self.started = ""  # what `start` printed
        # the Prometheus API: Prometheus', or VictoriaMetrics' in its place
        self.prometheus = f"http://127.0.0.1:{self.ports[query]}"

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def __call__(self, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(DEV_STACK), *args], capture_output=True, text=True, env=self.env, cwd=REPO, timeout=timeout
        )

    def recorded_pids(self) -> dict[str, int]:
        pids = {}
        for line in (self.state / "pids").read_text().splitlines():
            name, pid = line.split()
            pids[name] = int(pid)
        return pids

    def logs(self) -> str:
        out = []
        for log in sorted(self.state.rglob("*.log")):
            out.append(f"--- {log.relative_to(self.state)}\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def api(self, path: str, base: str | None = None) -> Any:
        """The data of a Prometheus-style JSON answer (Prometheus, VictoriaMetrics, vmagent, vmalert)."""
        status, _, body = http_get((base or self.prometheus) + path, timeout=5)
        assert status == 200, body
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]

    def cleanup(self) -> None:
        """Stop whatever is left of this stack: the script's stop, then SIGKILL for stragglers
        (only processes carrying this stack's DEV_STACK_DIR)."""
        runner = self.state / "dev-stack.pid"
        if runner.exists():
            self("stop", timeout=60)
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            left = processes_with_env(self.marker)
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            if left:
                wait_until(lambda: not processes_with_env(self.marker), timeout=grace, interval=0.2)


@pytest.fixture
def dev_stack(tmp_path: Path) -> Iterator[DevStack]:
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    if not VENV_GPULEDGER.exists():
        pytest.fail(f"{VENV_GPULEDGER} missing: scripts/dev-stack runs the virtualenv running the tests")
    stack = DevStack(tmp_path / "stack")
    try:
        yield stack
    finally:
        stack.cleanup()


def poll(what: str, get: Callable[[], Any], ok: Callable[[Any], bool], stack: DevStack, timeout: float = 40) -> Any:
    """Poll until ``ok(get())``; on timeout fail with the last value and the stack's logs."""
    last: list[Any] = [None]

    def pred() -> bool:
        last[0] = get()
        return ok(last[0])

    if not wait_until(pred, timeout=timeout, interval=0.5):
        pytest.fail(f"{what}: not after {timeout} s; last: {json.dumps(last[0])[:3000]}\n{stack.logs()}")
    return last[0]


def rule_groups_in_repo() -> dict[tuple[str, str], int]:
    out = {}
    files = sorted(RULES_DIR.glob("*.yml"))
    assert files
    for f in files:
        for group in yaml.safe_load(f.read_text())["groups"]:
            out[(f.name, group["name"])] = len(group["rules"])
    return out


# ---------------------------------------------------------------------------------------------
# scripts/dev-stack with STORE=victoriametrics: started once for the module by its first test, which
# comes before the Prometheus variant's tests: vmalert starts each rule group at a phase of the group's
# interval (1 minute or more here), and the first recorded series are awaited last, so that wait runs
# while the Prometheus stack is tested. The last test stops it.


@pytest.fixture(scope="module")
def vm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    for binary in ("victoria-metrics", "vmagent", "vmalert", "prometheus-alertmanager"):
        require_binary(binary)
    if not VENV_GPULEDGER.exists():
        pytest.fail(f"{VENV_GPULEDGER} missing: scripts/dev-stack runs the virtualenv running the tests")
    stack = DevStack(tmp_path_factory.mktemp("vm-dev-stack") / "stack", store="victoriametrics")
    try:
        r = stack("start")
        assert r.returncode == 0, r.stdout + r.stderr + stack.logs()
        stack.started = r.stdout
        yield stack
    finally:
        stack.cleanup()


def query(stack: DevStack, promql: str) -> list[Any]:
    """An instant query's result, from VictoriaMetrics' Prometheus API. It makes what it received
    searchable first: new series take it some seconds otherwise (waits, not results, change)."""
    status, _, body = http_get(stack.prometheus + "/internal/force_flush", timeout=10)
    assert status == 200, body
    data = stack.api("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    result: list[Any] = data["result"]
    return result


def duration_seconds(text: str) -> int:
    """A Prometheus duration of one unit (1m, 5m, 1h) in seconds."""
    m = re.fullmatch(r"(\d+)([smhd])", text)
    assert m, text
    return int(m[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def vmalert_groups(stack: DevStack) -> list[Any]:
    groups: list[Any] = stack.api("/api/v1/rules", base=stack.url("vmalert"))["groups"]
    return groups


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_vm_dev_stack_starts_and_says_what_runs(vm_stack: DevStack) -> None:
    out = vm_stack.started
    assert "reader replay, store victoriametrics" in out, out
    for name in VM_STACK:
        assert re.search(rf"^  {re.escape(name)} +http://127\.0\.0\.1:{vm_stack.ports[name]}/", out, re.M), (name, out)
    assert "prometheus" not in {line.split()[0] for line in out.splitlines()[1:] if line.startswith("  ")}
    pids = vm_stack.recorded_pids()
    assert set(pids) == set(VM_STACK), pids
    r = vm_stack("status")
    assert r.returncode == 0, r.stdout + r.stderr
    for name, pid in pids.items():
        assert f"{name}: pid {pid}, running" in r.stdout, r.stdout
    # vmagent's scrape config is the generated prometheus.yml's jobs and targets, without what only
    # Prometheus reads (vmagent parses it strictly)
    prom = yaml.safe_load((vm_stack.state / "prometheus.yml").read_text())
    scrape = yaml.safe_load((vm_stack.state / "vmagent.yml").read_text())
    assert scrape["scrape_configs"] == prom["scrape_configs"]
    assert scrape["global"] == {"scrape_interval": "1s"}
    assert not {"rule_files", "alerting"} & set(scrape)


# ---------------------------------------------------------------------------------------------
# the Prometheus variant


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_dev_stack_end_to_end(dev_stack: DevStack) -> None:
    r = dev_stack("start")
    assert r.returncode == 0, r.stdout + r.stderr + dev_stack.logs()
    for name in STACK:
        assert f"127.0.0.1:{dev_stack.ports[name]}" in r.stdout, r.stdout
    assert "reader replay" in r.stdout
    runner = int((dev_stack.state / "dev-stack.pid").read_text())
    pids = dev_stack.recorded_pids()
    assert set(pids) == set(STACK), pids
    assert all(proc_alive(p) for p in [runner, *pids.values()])

    # Prometheus scrapes both gpuledger jobs ...
    def targets_up(data: Any) -> bool:
        up = {t["labels"]["job"]: t["scrapeUrl"] for t in data["activeTargets"] if t["health"] == "up"}
        return set(up) >= {"gpuledger", "gpuledger-analytics"}

    data = poll("both jobs up", lambda: dev_stack.api("/api/v1/targets"), targets_up, dev_stack)
    urls = {t["labels"]["job"]: t["scrapeUrl"] for t in data["activeTargets"]}
    assert urls["gpuledger"] == f"http://127.0.0.1:{dev_stack.ports['exporter']}/metrics"
    assert urls["gpuledger-analytics"] == f"http://127.0.0.1:{dev_stack.ports['analytics']}/metrics"

    # ... has every rule group of every rule file ...
    want = rule_groups_in_repo()
    groups = dev_stack.api("/api/v1/rules")["groups"]
    got = {(Path(g["file"]).name, g["name"]): len(g["rules"]) for g in groups}
    assert got == want
    assert all(Path(g["file"]).parent == RULES_DIR for g in groups)
    # health "ok" once evaluated (a rule that fails to evaluate says "err")
    bad = [
        (g["name"], rule["name"], rule.get("lastError")) for g in groups for rule in g["rules"] if rule.get("lastError")
    ]
    assert not bad, bad

    # ... sends alerts to this Alertmanager ...
    am_url = f"http://127.0.0.1:{dev_stack.ports['alertmanager']}/"
    data = poll(
        "the Alertmanager active",
        lambda: dev_stack.api("/api/v1/alertmanagers"),
        lambda d: any(a["url"].startswith(am_url) for a in d["activeAlertmanagers"]),
        dev_stack,
    )
    assert len(data["activeAlertmanagers"]) == 1

    # ... and sees the 8 replayed GPUs
    query = "/api/v1/query?" + urllib.parse.urlencode({"query": 'count(gpuledger_gpu_info{job="gpuledger"})'})
    poll(
        "8 GPUs",
        lambda: dev_stack.api(query)["result"],
        lambda res: bool(res) and res[0]["value"][1] == "8",
        dev_stack,
    )

    # status: the four processes, running
    r = dev_stack("status")
    assert r.returncode == 0, r.stdout + r.stderr
    for name, pid in pids.items():
        assert f"{name}: pid {pid}, running" in r.stdout, r.stdout

    # a second start is refused, and leaves the running one alone
    r = dev_stack("start")
    assert r.returncode != 0
    assert "already running" in r.stderr and str(runner) in r.stderr, r.stderr
    assert int((dev_stack.state / "dev-stack.pid").read_text()) == runner
    assert (dev_stack.state / "ready").exists()
    assert dev_stack("status").returncode == 0

    # stop: every recorded process ends, nothing listens on the ports any more
    assert_stops_everything(dev_stack, [runner, *pids.values()])
    # the state folder and the logs stay
    for name in STACK:
        log = dev_stack.state / "logs" / f"{name}.log"
        assert log.is_file(), log
    assert (dev_stack.state / "logs" / "prometheus.log").stat().st_size > 0
    assert (dev_stack.state / "dev-stack.log").is_file()
    assert (dev_stack.state / "prometheus.yml").is_file()
    assert not (dev_stack.state / "ready").exists()


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_dev_stack_busy_port(dev_stack: DevStack) -> None:
    port = dev_stack.ports["prometheus"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        r = dev_stack("start", timeout=60)
        assert r.returncode != 0, r.stdout
        assert f"port {port} is in use" in r.stderr, r.stderr
        assert "PROMETHEUS_PORT" in r.stderr  # says how to choose another
        # nothing of the stack runs, or listens
        assert wait_until(lambda: processes_with_env(dev_stack.marker) == [], timeout=10), processes_with_env(
            dev_stack.marker
        )
        for name, p in dev_stack.ports.items():
            if name != "prometheus":
                assert port_free(p), f"{name}'s port {p} in use"
        assert not (dev_stack.state / "ready").exists()
        r = dev_stack("status")
        assert r.returncode == 3, r.stdout + r.stderr


@pytest.mark.integration
def test_dev_stack_help_and_unknown_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["DEV_STACK_DIR"] = str(tmp_path / "state")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DEV_STACK), *args], capture_output=True, text=True, env=env, timeout=30)

    header = DEV_STACK.read_text().split("\nset -euo", 1)[0]
    documented = sorted(set(re.findall(r"\b([A-Z][A-Z_]+)=", header)))
    for flag in ("--help", "-h", "help"):
        r = run(flag)
        assert r.returncode == 0 and r.stderr == "", (flag, r.stderr)
        lines = r.stdout.splitlines()
        assert lines[0].startswith("scripts/dev-stack: gpuledger with a real Prometheus"), lines[:2]
        assert not any(line.startswith("#") or line.startswith("set -") for line in lines), r.stdout
        for sub in ("run", "start", "status", "stop"):
            assert f"scripts/dev-stack {sub}" in r.stdout or f"scripts/dev-stack [{sub}]" in r.stdout, sub
        for var in (
            "EXPORTER_PORT",
            "ANALYTICS_PORT",
            "PROMETHEUS_PORT",
            "ALERTMANAGER_PORT",
            "READER",
            "DEV_STACK_DIR",
            "SCRAPE_INTERVAL",
            "STORE",
            "VMAGENT_PORT",
            "VMALERT_PORT",
        ):
            assert f"{var}=" in r.stdout, var
    # every variable the help names is one the script reads
    code = DEV_STACK.read_text().split("\nset -euo", 1)[1]
    for var in documented:
        assert "${" + var in code, f"scripts/dev-stack documents {var} but never reads it"

    r = run("bogus")
    assert r.returncode == 1
    assert r.stdout == ""
    assert "unknown command 'bogus'" in r.stderr and "start" in r.stderr, r.stderr
    assert not (tmp_path / "state").exists()

    # an unknown store: one line naming the choices, before anything starts
    env["STORE"] = "mimir"
    r = run("run")
    del env["STORE"]
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr == "dev-stack: STORE must be prometheus or victoriametrics (got 'mimir')\n", r.stderr
    assert not (tmp_path / "state").exists()

    # without a stack: status says so (3), stop is a no-op (0)
    r = run("status")
    assert r.returncode == 3 and "not running" in r.stdout, r.stdout + r.stderr
    r = run("stop")
    assert r.returncode == 0 and "not running" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------
# the VictoriaMetrics variant, continued


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_vm_dev_stack_series_arrive_through_vmagent(vm_stack: DevStack) -> None:
    def both_up(data: Any) -> bool:
        return {t["labels"]["job"] for t in data["activeTargets"] if t["health"] == "up"} >= {
            "gpuledger",
            "gpuledger-analytics",
        }

    data = poll(
        "vmagent scrapes both jobs",
        lambda: vm_stack.api("/api/v1/targets", base=vm_stack.url("vmagent")),
        both_up,
        vm_stack,
    )
    urls = {t["labels"]["job"]: t["scrapeUrl"] for t in data["activeTargets"]}
    assert urls == {
        "gpuledger": f"{vm_stack.url('exporter')}/metrics",
        "gpuledger-analytics": f"{vm_stack.url('analytics')}/metrics",
    }
    # in VictoriaMetrics, as vmagent wrote them: the 8 replayed GPUs' series of each gpuledger_gpu_* family
    per_family = 'count by (__name__) ({__name__=~"gpuledger_gpu_.+", job="gpuledger"})'
    result = poll(
        "the exporter's gpuledger_gpu_* series in VictoriaMetrics",
        lambda: query(vm_stack, per_family),
        lambda res: (
            {s["metric"]["__name__"] for s in res}
            >= {"gpuledger_gpu_info", "gpuledger_gpu_sampled_seconds_total", "gpuledger_gpu_busy_seconds_total"}
        ),
        vm_stack,
    )
    counts = {s["metric"]["__name__"]: s["value"][1] for s in result}
    assert counts["gpuledger_gpu_info"] == "8", counts
    assert counts["gpuledger_gpu_sampled_seconds_total"] == "8", counts
    info = query(vm_stack, 'gpuledger_gpu_info{job="gpuledger"}')
    assert {s["metric"]["instance"] for s in info} == {f"127.0.0.1:{vm_stack.ports['exporter']}"}
    assert {s["metric"]["gpu"] for s in info} == {str(i) for i in range(8)}
    # and the other job's, the analytics daemon (vmagent's first scrapes may precede its start: up 0)
    poll(
        "the analytics daemon up in VictoriaMetrics",
        lambda: query(vm_stack, 'up{job="gpuledger-analytics"}'),
        lambda res: [s["value"][1] for s in res] == ["1"],
        vm_stack,
    )


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_vm_dev_stack_vmalert_loads_every_rule_group(vm_stack: DevStack) -> None:
    want = rule_groups_in_repo()
    groups = vmalert_groups(vm_stack)
    got = {(Path(g["file"]).name, g["name"]): len(g["rules"]) for g in groups}
    assert got == want
    assert all(Path(g["file"]).parent == RULES_DIR for g in groups)
    # each group keeps its own interval (SCRAPE_INTERVAL only for a group without one)
    intervals = {g["name"]: g["interval"] for g in groups}
    for f in sorted(RULES_DIR.glob("*.yml")):
        for group in yaml.safe_load(f.read_text())["groups"]:
            assert intervals[group["name"]] == duration_seconds(group.get("interval", "1s")), group["name"]
    # VictoriaMetrics answers /api/v1/rules for vmalert (-vmalert.proxyURL), as Grafana asks a Prometheus
    proxied = vm_stack.api("/api/v1/rules")["groups"]
    assert {(Path(g["file"]).name, g["name"]) for g in proxied} == set(want)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_vm_dev_stack_analytics_reads_victoriametrics(vm_stack: DevStack) -> None:
    pid = vm_stack.recorded_pids()["analytics"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert argv[argv.index("--prometheus-url") + 1] == vm_stack.prometheus  # VictoriaMetrics' port
    analytics = vm_stack.url("analytics")

    def healthz() -> Any:
        return json.loads(http_get(analytics + "/healthz", timeout=5)[2])

    health = poll("the analytics' /healthz", healthz, lambda d: d.get("status") == "ok", vm_stack)
    assert health["source"] == "prometheus" and health["refresh_errors"] == 0, health
    # answered by VictoriaMetrics: ok, or no_data while it holds less than the first minute
    status, _, body = http_get(analytics + "/metrics", timeout=5)
    assert status == 200
    runs = parse_metrics(body.decode())["gpuledger_analytics_runs_total"]
    refresh = {dict(k)["result"]: v for k, v in runs.items() if dict(k)["task"] == "refresh"}
    assert refresh["error"] == 0 and refresh["ok"] + refresh["no_data"] >= 1, refresh


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_vm_dev_stack_writes_recorded_series_back(vm_stack: DevStack) -> None:
    # Every group of deploy/prometheus/rules sets its own interval (1 minute or more), and vmalert
    # starts each group at a phase of that interval derived from the group's file and name: the
    # first recorded series come within the shortest interval of a recording group, whatever
    # SCRAPE_INTERVAL is.
    groups = vmalert_groups(vm_stack)
    shortest = min(g["interval"] for g in groups if any(r["type"] == "recording" for r in g["rules"]))

    def written(groups: list[Any]) -> list[Any]:
        return [r for g in groups for r in g["rules"] if r["type"] == "recording" and r["lastSamples"] > 0]

    groups = poll(
        "vmalert evaluates a recording rule",
        lambda: vmalert_groups(vm_stack),
        lambda gs: bool(written(gs)),
        vm_stack,
        timeout=shortest + 20,
    )
    errors = [(g["name"], r["name"], r["lastError"]) for g in groups for r in g["rules"] if r["lastError"]]
    assert not errors, errors

    def stored(selector: str, series: int) -> None:
        poll(
            f"{selector} written back to VictoriaMetrics",
            lambda: query(vm_stack, f"count({selector})"),
            lambda res: bool(res) and int(res[0]["value"][1]) >= series,
            vm_stack,
            timeout=15,
        )

    for rule in written(groups):
        labels = ", ".join(f'{k}="{v}"' for k, v in sorted((rule.get("labels") or {}).items()))
        stored(f"{rule['name']}{{{labels}}}", rule["lastSamples"])


def assert_stops_everything(stack: DevStack, everything: list[int]) -> None:
    """``stop`` ends every recorded process (and the runner), nothing of the stack is left, its
    ports are free and ``status`` says it is not running (exit 3)."""
    r = stack("stop", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped" in r.stdout
    assert wait_until(lambda: not any(proc_alive(p) for p in everything), timeout=5), [
        p for p in everything if proc_alive(p)
    ]
    assert processes_with_env(stack.marker) == []
    for name, port in stack.ports.items():
        assert port_free(port), f"{name}'s port {port} still in use after stop"
    r = stack("status")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "not running" in r.stdout


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_vm_dev_stack_stop_leaves_nothing(vm_stack: DevStack) -> None:
    runner = int((vm_stack.state / "dev-stack.pid").read_text())
    pids = vm_stack.recorded_pids()
    assert_stops_everything(vm_stack, [runner, *pids.values()])
    for name in VM_STACK:
        assert (vm_stack.state / "logs" / f"{name}.log").is_file(), name
    assert any((vm_stack.state / "victoria-metrics").iterdir()), "VictoriaMetrics kept no data in the state folder"
    assert not (vm_stack.state / "ready").exists()


# ---------------------------------------------------------------------------------------------
# docs/deploy.md

REPO_PATH = re.compile(r"(?<![\w./$@-])((?:deploy|grafana|scripts|docs)/[\w.*/-]*[\w*/]|Dockerfile)(?![\w:@-])")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def doc_paths(text: str) -> set[str]:
    return {m.group(1).rstrip("/") for m in REPO_PATH.finditer(text)}


def test_doc_path_extraction() -> None:
    text = (
        "see `deploy/compose/` and deploy/kubernetes/generate.py, `grafana/grafana:12.2.0` (an image), "
        "/var/lib/grafana/dashboards/x, $DEV_STACK_DIR/x, grafana/dashboards/*.json and `scripts/dev-stack`."
    )
    assert doc_paths(text) == {
        "deploy/compose",
        "deploy/kubernetes/generate.py",
        "grafana/dashboards/*.json",
        "scripts/dev-stack",
    }


def test_deploy_doc_names_files_that_exist() -> None:
    text = DEPLOY_DOC.read_text()
    paths = doc_paths(text)
    assert {"deploy/systemd", "scripts/dev-stack", "Dockerfile", "deploy/compose/alertmanager.yml"} <= paths
    missing = sorted(p for p in paths if not glob.glob(str(REPO / p)))
    assert not missing, f"docs/deploy.md names files that do not exist: {missing}"

    # relative links (other docs) and in-page anchors
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # a "# comment" in a code block is no heading
    anchors = {github_slug(h) for h in re.findall(r"^#+ (.+)$", prose, flags=re.M)}
    links = MD_LINK.findall(text)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        if target:
            assert (DEPLOY_DOC.parent / target).exists(), f"docs/deploy.md links to missing {target}"
        elif anchor:
            assert anchor in anchors, f"docs/deploy.md links to #{anchor}; headings: {sorted(anchors)}"


def github_slug(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")
