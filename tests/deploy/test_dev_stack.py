"""scripts/dev-stack started, inspected through Prometheus' API and stopped, with Debian's real
Prometheus and Alertmanager against a replaying exporter and the analytics daemon; and
docs/deploy.md naming only files that exist.
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
from tests.support.paths import REPO
from tests.support.tools import require_binary
from tests.support.wait import wait_until

# ---------------------------------------------------------------------------------------------
# scripts/dev-stack

STACK = ("alertmanager", "prometheus", "exporter", "analytics")


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
    def __init__(self, state: Path) -> None:
        self.state = state
        ports: set[int] = set()
        while len(ports) < 4:
            ports.add(free_port())
        self.ports = dict(zip(STACK, sorted(ports), strict=True))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
        self.env.update(
            DEV_STACK_DIR=str(state),
            VENV=str(VENV_GPULEDGER.parent.parent),  # the virtualenv running these tests
            READER="replay",
            SCRAPE_INTERVAL="1s",
            EXPORTER_PORT=str(self.ports["exporter"]),
            ANALYTICS_PORT=str(self.ports["analytics"]),
            PROMETHEUS_PORT=str(self.ports["prometheus"]),
            ALERTMANAGER_PORT=str(self.ports["alertmanager"]),
        )
        self.marker = f"DEV_STACK_DIR={state}"
        self.prometheus = f"http://127.0.0.1:{self.ports['prometheus']}"

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

    def api(self, path: str) -> Any:
        status, _, body = http_get(self.prometheus + path, timeout=5)
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
    r = dev_stack("stop", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped" in r.stdout
    everything = [runner, *pids.values()]
    assert wait_until(lambda: not any(proc_alive(p) for p in everything), timeout=5), [
        p for p in everything if proc_alive(p)
    ]
    assert processes_with_env(dev_stack.marker) == []
    for name, port in dev_stack.ports.items():
        assert port_free(port), f"{name}'s port {port} still in use after stop"
    r = dev_stack("status")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "not running" in r.stdout
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

    # without a stack: status says so (3), stop is a no-op (0)
    r = run("status")
    assert r.returncode == 3 and "not running" in r.stdout, r.stdout + r.stderr
    r = run("stop")
    assert r.returncode == 0 and "not running" in r.stdout, r.stdout + r.stderr


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
