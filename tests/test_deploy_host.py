"""Host deployments: the systemd units, the Dockerfile, scripts/dev-stack and docs/deploy.md.

The units are parsed and checked for what they promise (command, hardening, the NVIDIA device
access the exporter needs and none of the settings that would break NVML or attribution), then
handed to ``systemd-analyze verify`` and ``security``. The Dockerfile is parsed (no Docker engine
here) and its healthcheck command is run against a real exporter. scripts/dev-stack is started,
inspected through Prometheus' API and stopped, with real Prometheus and Alertmanager processes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, ExporterProcess, free_port, http_get, require_binary, wait_until

SYSTEMD = REPO / "deploy" / "systemd"
DOCKERFILE = REPO / "Dockerfile"
DEV_STACK = REPO / "scripts" / "dev-stack"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
RULES_DIR = REPO / "deploy" / "prometheus" / "rules"
VENV_GPULEDGER = REPO / ".venv" / "bin" / "gpuledger"
INSTALLED_GPULEDGER = "/opt/gpuledger/bin/gpuledger"

# ---------------------------------------------------------------------------------------------
# systemd units


@dataclass
class Unit:
    path: Path
    # section -> key -> every assignment in file order ("" for an empty one, which resets a list)
    sections: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)

    def all(self, section: str, key: str) -> list[str]:
        return self.sections.get(section, {}).get(key, [])

    def get(self, section: str, key: str) -> str | None:
        """The value in effect for a single-valued setting: the last assignment."""
        values = self.all(section, key)
        return values[-1] if values else None

    def effective(self, section: str, key: str) -> list[str]:
        """A list setting as systemd sees it: the assignments after the last empty one."""
        values = self.all(section, key)
        last_reset = max((i for i, v in enumerate(values) if v == ""), default=-1)
        return values[last_reset + 1 :]

    def service(self, key: str) -> str | None:
        return self.get("Service", key)


def parse_unit(path: Path) -> Unit:
    """A small systemd unit-file parser: [Section] headers, Key=Value lines, '#'/';' comments,
    backslash continuations; a key assigned more than once keeps every value."""
    unit = Unit(path)
    section: str | None = None
    pending = ""
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            if line:
                unit.comments.append(line[1:].strip())
            continue
        if pending and line[:1] in ("#", ";"):
            continue  # a comment inside a continuation is skipped
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            assert section not in unit.sections, f"{path.name}:{lineno}: section [{section}] twice"
            unit.sections[section] = {}
            continue
        assert section is not None, f"{path.name}:{lineno}: assignment before any section: {line!r}"
        assert "=" in line, f"{path.name}:{lineno}: not an assignment: {line!r}"
        key, value = line.split("=", 1)
        unit.sections[section].setdefault(key.strip(), []).append(value.strip())
    assert not pending, f"{path.name}: ends inside a continuation line"
    return unit


TRUE = {"1", "yes", "y", "true", "t", "on"}
FALSE = {"0", "no", "n", "false", "f", "off"}


def truthy(value: str | None) -> bool:
    return value is not None and value.lower() in TRUE


def test_unit_parser(tmp_path: Path) -> None:
    """The parser itself: sections, repeated keys, empty assignments, continuations, comments."""
    text = (
        "# head comment\n[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/a \\\n  --b c\n"
        "; other comment\nDeviceAllow=one\nDeviceAllow=\nDeviceAllow=two r\nPrivateTmp=yes\n"
    )
    path = tmp_path / "x.service"
    path.write_text(text)
    unit = parse_unit(path)
    assert list(unit.sections) == ["Unit", "Service"]
    assert unit.service("ExecStart") == "/bin/a --b c"
    assert unit.all("Service", "DeviceAllow") == ["one", "", "two r"]
    assert unit.effective("Service", "DeviceAllow") == ["two r"]
    assert unit.comments == ["head comment", "other comment"]
    assert truthy(unit.service("PrivateTmp")) and not truthy(unit.service("PrivateDevices"))


# unit name -> (gpuledger subcommand, options its ExecStart must pass, units it conflicts with)
UNITS: dict[str, tuple[str, dict[str, str], set[str]]] = {
    "gpuledger-exporter": ("exporter", {"--reader": "nvml"}, {"gpuledger-up.service"}),
    "gpuledger-analytics": ("analytics", {"--source": "prometheus"}, {"gpuledger-up.service"}),
    "gpuledger-up": (
        "up",
        {"--reader": "nvml"},
        {"gpuledger-exporter.service", "gpuledger-analytics.service"},
    ),
}
NVML_UNITS = {"gpuledger-exporter", "gpuledger-up"}

# hardening every unit has, as (key, value in effect)
COMMON_HARDENING = {
    "DynamicUser": "yes",
    "User": "gpuledger",  # the same dynamic uid for all three: they share /var/lib/gpuledger
    "StateDirectory": "gpuledger",
    "StateDirectoryMode": "0750",
    "UMask": "0027",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "RemoveIPC": "yes",
    "SystemCallArchitectures": "native",
    "SystemCallErrorNumber": "EPERM",
}
# what the analytics daemon (HTTP and files only) adds
ANALYTICS_HARDENING = {
    "PrivateDevices": "yes",
    "ProtectProc": "invisible",
    "ProcSubset": "pid",
    "PrivateUsers": "yes",
    "MemoryDenyWriteExecute": "yes",
}


def nvml_breaking(unit: Unit) -> list[str]:
    """The settings present in ``unit`` that would break NVML, attribution or the benchmarks."""
    found = []
    for key in ("PrivateDevices", "PrivateUsers", "MemoryDenyWriteExecute", "PrivateNetwork"):
        if truthy(unit.service(key)):
            found.append(f"{key}={unit.service(key)}")
    if (unit.service("ProtectProc") or "default") != "default":  # invisible, noaccess, ptraceable
        found.append(f"ProtectProc={unit.service('ProtectProc')}")
    if (unit.service("ProcSubset") or "all") != "all":
        found.append(f"ProcSubset={unit.service('ProcSubset')}")
    if unit.service("DevicePolicy") == "strict":  # not even /dev/null and friends
        found.append("DevicePolicy=strict")
    return found


@pytest.fixture(scope="module")
def units() -> dict[str, Unit]:
    found = sorted(SYSTEMD.glob("*.service"))
    assert {p.stem for p in found} == set(UNITS), f"unexpected units in {SYSTEMD}: {found}"
    return {p.stem: parse_unit(p) for p in found}


@pytest.fixture(scope="module")
def subcommand_help() -> Callable[[str], str]:
    cache: dict[str, str] = {}

    def get(sub: str) -> str:
        if sub not in cache:
            r = subprocess.run(
                [sys.executable, "-m", "gpuledger", sub, "--help"],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            cache[sub] = r.stdout
        return cache[sub]

    return get


@pytest.mark.parametrize("name", sorted(UNITS))
def test_systemd_unit_runs_the_right_command(
    units: dict[str, Unit], name: str, subcommand_help: Callable[[str], str]
) -> None:
    unit = units[name]
    sub, options, conflicts = UNITS[name]
    assert unit.all("Service", "ExecStart") and len(unit.all("Service", "ExecStart")) == 1
    argv = shlex.split(unit.service("ExecStart") or "")
    # the virtualenv of docs/deploy.md ("sudo python3 -m venv /opt/gpuledger")
    assert argv[0] == INSTALLED_GPULEDGER
    assert argv[1] == sub, argv
    args = argv[2:]
    for opt, value in options.items():
        assert opt in args and args[args.index(opt) + 1] == value, f"{name}: want {opt} {value} in {argv}"
    # every option it passes is one the subcommand really has
    help_text = subcommand_help(sub)
    for arg in args:
        if arg.startswith("--"):
            assert re.search(rf"(?<![\w-]){re.escape(arg.split('=')[0])}(?![\w-])", help_text), (
                f"{name}: gpuledger {sub} has no option {arg}"
            )
    assert unit.service("Type") == "exec"
    assert unit.service("Restart") == "on-failure"
    assert unit.all("Service", "EnvironmentFile") == ["-/etc/default/gpuledger"]  # optional: '-'
    assert unit.get("Install", "WantedBy") == "multi-user.target"
    assert unit.get("Unit", "Description")
    wanted = {w for v in unit.all("Unit", "Wants") for w in v.split()}
    after = {a for v in unit.all("Unit", "After") for a in v.split()}
    assert "network-online.target" in wanted and "network-online.target" in after
    assert {c for v in unit.all("Unit", "Conflicts") for c in v.split()} == conflicts
    if sub in ("analytics", "up"):
        env = dict(e.split("=", 1) for v in unit.all("Service", "Environment") for e in shlex.split(v))
        assert env.get("GPULEDGER_ANALYTICS__REPORTS_DIR") == "/var/lib/gpuledger/reports"
    if name in NVML_UNITS:
        # the NVIDIA services first (device nodes, nvidia-uvm for the benchmark rounds' CUDA)
        assert {"nvidia-persistenced.service", "modprobe@nvidia-uvm.service"} <= after
        assert "modprobe@nvidia-uvm.service" in wanted
        # a stopping exporter flushes its last minute of history
        assert unit.service("TimeoutStopSec")


@pytest.mark.parametrize("name", sorted(UNITS))
def test_systemd_unit_hardening(units: dict[str, Unit], name: str) -> None:
    unit = units[name]
    for key, want in COMMON_HARDENING.items():
        assert unit.service(key) == want, f"{name}: {key}={unit.service(key)!r}, want {want!r}"
    # no capabilities at all: the bounding set and the ambient set end empty
    for key in ("CapabilityBoundingSet", "AmbientCapabilities"):
        assert unit.all("Service", key) and unit.effective("Service", key) == [], (
            f"{name}: {key} {unit.all('Service', key)}"
        )
    families = {f for v in unit.effective("Service", "RestrictAddressFamilies") for f in v.split()}
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6"}, f"{name}: {families}"
    filters = unit.all("Service", "SystemCallFilter")
    assert filters and filters[0] == "@system-service", f"{name}: {filters}"
    assert all(f.startswith("~") for f in filters[1:]), f"{name}: a later allow list widens it: {filters}"
    for key in ("ExecStartPre", "ExecStartPost", "PermissionsStartOnly"):
        assert not unit.all("Service", key), f"{name}: {key} runs outside the sandbox/user"
    if name in NVML_UNITS:
        # NVML opens /dev/nvidiactl, /dev/nvidia0..N, nvidia-uvm, nvidia-caps: only those
        assert unit.service("DevicePolicy") == "closed"
        allowed = unit.effective("Service", "DeviceAllow")
        assert allowed, f"{name}: no DeviceAllow"
        groups = {"char-nvidia", "char-nvidiactl", "char-nvidia-uvm", "char-nvidia-caps", "char-nvidia-frontend"}
        for group in groups:
            assert any(
                fnmatch.fnmatchcase(group, spec.split()[0]) and "r" in spec.split()[1:2][0]
                for spec in allowed
                if len(spec.split()) == 2
            ), f"{name}: {group} not readable with DeviceAllow={allowed}"
        assert all(spec.split()[0].startswith("char-nvidia") for spec in allowed), allowed
        assert "video" in (unit.service("SupplementaryGroups") or "").split()
        assert nvml_breaking(unit) == [], f"{name} would break NVML/attribution: {nvml_breaking(unit)}"
    else:
        for key, want in ANALYTICS_HARDENING.items():
            assert unit.service(key) == want, f"{name}: {key}={unit.service(key)!r}, want {want!r}"
        assert not unit.all("Service", "DeviceAllow")
        # HTTP and files only: it may also do without the privileged and resource syscalls
        denied = {s for f in filters[1:] for s in f.lstrip("~").split()}
        assert {"@privileged", "@resources"} <= denied, filters


def test_nvml_breaking_detects_each_setting(units: dict[str, Unit]) -> None:
    """The NVML check above can fail: the analytics unit has every setting the others must avoid."""
    found = {s.split("=")[0] for s in nvml_breaking(units["gpuledger-analytics"])}
    assert found == {"PrivateDevices", "PrivateUsers", "MemoryDenyWriteExecute", "ProtectProc", "ProcSubset"}


def test_avoided_settings_are_explained(units: dict[str, Unit]) -> None:
    """The exporter unit's comments and docs/deploy.md say which settings it avoids and why."""
    comments = " ".join(units["gpuledger-exporter"].comments)
    for key in ("ProtectProc", "ProcSubset", "PrivateUsers", "MemoryDenyWriteExecute", "DeviceAllow"):
        assert key in comments, key
    systemd_section = DEPLOY_DOC.read_text().split("## systemd", 1)[1].split("\n## ", 1)[0]
    for key in ("PrivateDevices=yes", "ProtectProc=invisible", "ProcSubset=pid", "PrivateUsers=yes"):
        assert key in systemd_section, key
    assert "MemoryDenyWriteExecute=yes" in systemd_section
    assert "DeviceAllow=char-nvidia* rw" in systemd_section


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if not path:
        pytest.skip("systemd-analyze not installed (package systemd)")
    return path


def rewritten_units(dest: Path) -> list[Path]:
    """Copies of the units whose ExecStart runs the project's virtualenv instead of /opt/gpuledger."""
    if not VENV_GPULEDGER.exists():
        pytest.fail(f"{VENV_GPULEDGER} missing (pip install -e . in .venv)")
    out = []
    for src in sorted(SYSTEMD.glob("*.service")):
        text = src.read_text()
        assert INSTALLED_GPULEDGER in text
        target = dest / src.name
        target.write_text(text.replace(INSTALLED_GPULEDGER, str(VENV_GPULEDGER)))
        out.append(target)
    return out


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = systemd_analyze()
    copies = rewritten_units(tmp_path)
    assert len(copies) == 3
    r = subprocess.run([tool, "verify", *map(str, copies)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys or bad values too, so every message about our units fails
    messages = [
        line for line in (r.stdout + r.stderr).splitlines() if any(p.name in line or str(p) in line for p in copies)
    ]
    assert r.returncode == 0 and not messages, r.stdout + r.stderr

    # the check above can fail: a misspelt key in a copy is reported
    bad = tmp_path / "bad" / "gpuledger-exporter.service"
    bad.parent.mkdir()
    bad.write_text(copies[1].read_text().replace("ProtectSystem=strict", "ProtectSystm=strict"))
    r = subprocess.run([tool, "verify", str(bad)], capture_output=True, text=True, timeout=60)
    assert "ProtectSystm" in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("name", "limit"), [("gpuledger-exporter", 2.5), ("gpuledger-up", 2.5), ("gpuledger-analytics", 1.5)]
)
def test_systemd_analyze_security(name: str, limit: float) -> None:
    tool = systemd_analyze()
    unit = SYSTEMD / f"{name}.service"
    r = subprocess.run(
        [tool, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(rf"Overall exposure level for {re.escape(unit.name)}: (\d+(?:\.\d+)?)", r.stdout)
    assert m, r.stdout[-2000:] + r.stderr
    score = float(m.group(1))
    assert score <= limit, f"{name}: exposure {score} > {limit}\n{r.stdout}"


# ---------------------------------------------------------------------------------------------
# Dockerfile


@dataclass
class Instruction:
    op: str  # upper case
    args: str
    stage: int  # 0-based index of the FROM it belongs to
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their continuation lines joined; comments (also inside a continuation)
    and blank lines dropped."""
    out: list[Instruction] = []
    stage = -1
    pending: list[str] = []
    start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = lineno
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(p for p in pending if p)
        pending = []
        op, _, args = joined.partition(" ")
        op = op.upper()
        if op == "FROM":
            stage += 1
        out.append(Instruction(op, args.strip(), stage, start))
    assert not pending, "Dockerfile ends inside a continuation line"
    return out


def exec_form(args: str) -> list[str] | None:
    """The JSON (exec) form of CMD/ENTRYPOINT/RUN, else None."""
    if not args.startswith("["):
        return None
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None  # Docker runs what is not valid JSON in a shell
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy "ENV KEY value"
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_dockerfile_parser() -> None:
    text = '# c\nFROM a AS b\nRUN x \\\n  # inner comment\n  && y\n\nfrom c\nENV A=1 \\\n    B="two words"\n'
    ins = parse_dockerfile(text)
    assert [(i.op, i.args, i.stage) for i in ins] == [
        ("FROM", "a AS b", 0),
        ("RUN", "x && y", 0),
        ("FROM", "c", 1),
        ("ENV", 'A=1 B="two words"', 1),
    ]
    assert env_pairs(ins[3].args) == {"A": "1", "B": "two words"}


def final_stage(ins: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in ins)
    return [i for i in ins if i.stage == last]


def test_dockerfile_is_multi_stage(dockerfile: list[Instruction]) -> None:
    froms = [i for i in dockerfile if i.op == "FROM"]
    assert len(froms) >= 2
    assert dockerfile[0].op in ("FROM", "ARG")
    aliases = {}
    for f in froms:
        words = f.args.split()
        assert ":" in words[0] or "@" in words[0], f"unpinned base image {words[0]}"
        if len(words) == 3 and words[1].upper() == "AS":
            aliases[words[2]] = f.stage
    build_aliases = {a for a, s in aliases.items() if s < max(i.stage for i in dockerfile)}
    assert build_aliases, "the build stage has no name"
    final = final_stage(dockerfile)
    copied_from = [m.group(1) for i in final if i.op == "COPY" for m in [re.search(r"--from=(\S+)", i.args)] if m]
    assert copied_from and set(copied_from) <= build_aliases, copied_from
    # the build stage builds wheels; the final one installs them without an index
    build = [i for i in dockerfile if i.stage == aliases[copied_from[0]]]
    assert any(i.op == "RUN" and "pip wheel" in i.args for i in build)
    assert any(i.op == "RUN" and "pip install" in i.args and "--no-index" in i.args for i in final)


def test_dockerfile_runs_as_non_root(dockerfile: list[Instruction]) -> None:
    final = final_stage(dockerfile)
    users = [i for i in final if i.op == "USER"]
    assert users, "no USER in the final stage"
    last_run = max(n for n, i in enumerate(final) if i.op == "RUN")
    last_user = max(n for n, i in enumerate(final) if i.op == "USER")
    assert last_user > last_run, "a RUN after the last USER runs as that user; the last USER must follow every RUN"
    user, _, group = final[last_user].args.partition(":")
    assert user not in ("0", "root", ""), final[last_user].args
    assert group not in ("0", "root"), final[last_user].args
    # the uid really is created, with the state folder it owns
    assert any(i.op == "RUN" and f"--uid {user}" in i.args and "/var/lib/gpuledger" in i.args for i in final)


def test_dockerfile_metadata(dockerfile: list[Instruction], subcommand_help: Callable[[str], str]) -> None:
    final = final_stage(dockerfile)
    ports = {p.split("/")[0] for i in final if i.op == "EXPOSE" for p in i.args.split()}
    assert {"10044", "10045"} <= ports
    env: dict[str, str] = {}
    for i in final:
        if i.op == "ENV":
            env.update(env_pairs(i.args))
    assert env.get("NVIDIA_DRIVER_CAPABILITIES") == "compute,utility"
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "all"
    assert env.get("HEALTH_URL") == "http://127.0.0.1:10044/healthz"
    assert env.get("STATE_DIRECTORY") == "/var/lib/gpuledger"
    assert len([i for i in final if i.op == "HEALTHCHECK"]) == 1
    entry = [i for i in final if i.op == "ENTRYPOINT"]
    cmd = [i for i in final if i.op == "CMD"]
    assert len(entry) == 1 and len(cmd) == 1
    assert exec_form(entry[0].args) == ["gpuledger"]
    default = exec_form(cmd[0].args)
    assert default is not None and default[0] == "exporter"
    assert default[default.index("--reader") + 1] == "nvml"
    # every option of the default command exists
    for arg in default[1:]:
        if arg.startswith("--"):
            assert arg in subcommand_help("exporter"), arg
    # the installed extras exist in pyproject.toml
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["gpuledger"]
    for i in dockerfile:
        if i.op == "RUN":
            for extras in re.findall(r"[\w.]+\[([\w,]+)\]", i.args):
                assert set(extras.split(",")) <= set(project["optional-dependencies"]), extras


def test_dockerfile_torch_only_with_bench(dockerfile: list[Instruction]) -> None:
    final = final_stage(dockerfile)
    args = [i.args for i in final if i.op == "ARG" and i.args.split("=")[0] == "BENCH"]
    assert args == ["BENCH=false"], args
    torch_runs = [i for i in dockerfile if i.op == "RUN" and "torch" in i.args]
    assert torch_runs, "no RUN installs torch"
    guard = re.compile(r"""if \[ "?\$\{?BENCH\}?"? = "?true"? \]; then (.*?); fi""")
    bench = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["bench"]
    for run in torch_runs:
        m = guard.search(run.args)
        assert m, f"line {run.line}: torch without a BENCH guard: {run.args}"
        outside = run.args[: m.start()] + run.args[m.end() :]
        assert "torch" not in outside, f"line {run.line}: torch outside the guard: {run.args}"
        assert run.stage == max(i.stage for i in dockerfile), "torch in the build stage"
        # the guarded install is the project's bench extra
        installed = [w for w in shlex.split(m.group(1)) if not w.startswith("-") and w not in ("pip", "install")]
        assert installed == bench, (installed, bench)


def test_dockerfile_copy_sources_exist(dockerfile: list[Instruction]) -> None:
    copied: set[str] = set()
    for i in dockerfile:
        if i.op not in ("COPY", "ADD"):
            continue
        words = exec_form(i.args) or shlex.split(i.args)
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        assert len(paths) >= 2, i.args
        for src in paths[:-1]:
            assert glob.glob(str(REPO / src)), f"line {i.line}: COPY source {src} not in the repository"
            copied.add(src.strip("./").split("/")[0])
    # what the wheel build needs: pyproject.toml, its readme and every package it includes
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert pattern.rstrip("*") in copied, f"package {pattern} not copied into the build stage"
    ignore = REPO / ".dockerignore"
    if ignore.exists():
        patterns = [p.strip() for p in ignore.read_text().splitlines() if p.strip() and not p.startswith("#")]
        for src in copied:
            assert not any(fnmatch.fnmatch(src, p.strip("/")) for p in patterns), f"{src} is .dockerignored"


def healthcheck_argv(dockerfile: list[Instruction]) -> tuple[dict[str, str], list[str]]:
    (hc,) = [i for i in dockerfile if i.op == "HEALTHCHECK"]
    options = dict(re.findall(r"--([\w-]+)=(\S+)", hc.args.split("CMD", 1)[0]))
    argv = exec_form(hc.args.split("CMD", 1)[1].strip())
    assert argv is not None, f"HEALTHCHECK CMD not in exec form: {hc.args}"
    return options, argv


def test_dockerfile_healthcheck_options(dockerfile: list[Instruction]) -> None:
    options, argv = healthcheck_argv(dockerfile)
    assert {"interval", "timeout", "start-period", "retries"} <= set(options)
    assert argv[:2] == ["python", "-c"]
    # the probe gives up before Docker kills it
    probe_timeouts = [float(t) for t in re.findall(r"timeout=(\d+(?:\.\d+)?)", argv[2])]
    assert probe_timeouts and max(probe_timeouts) < float(options["timeout"].rstrip("s"))


def run_healthcheck(argv: list[str], health_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["HEALTH_URL"] = health_url
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env=env, timeout=30)


def test_dockerfile_healthcheck_command_runs(
    dockerfile: list[Instruction], exporter_process: Callable[..., ExporterProcess]
) -> None:
    _, argv = healthcheck_argv(dockerfile)
    p = exporter_process("--reader", "replay", "--replay-gpus", "2", "--no-history")
    healthy = f"{p.url}/healthz"
    r = run_healthcheck(argv, healthy)
    assert r.returncode == 0, r.stderr
    r = run_healthcheck(argv, f"  {healthy}  {healthy} ")  # space-separated, all probed
    assert r.returncode == 0, r.stderr
    closed = free_port()
    for url in (f"http://127.0.0.1:{closed}/healthz", f"{healthy} http://127.0.0.1:{closed}/healthz"):
        r = run_healthcheck(argv, url)
        assert r.returncode != 0, f"HEALTH_URL={url!r} passed"
        assert "Connection refused" in r.stderr or "URLError" in r.stderr, r.stderr
    # a URL that answers, but not 200
    r = run_healthcheck(argv, f"{healthy} {p.url}/no-such-page")
    assert r.returncode != 0


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
        pytest.fail(f"{VENV_GPULEDGER} missing: scripts/dev-stack runs the project's .venv")
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


@pytest.mark.timeout(120)
def test_dev_stack_end_to_end(dev_stack: DevStack) -> None:
    t0 = time.monotonic()
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
