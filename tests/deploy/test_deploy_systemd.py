"""The systemd units (deploy/systemd): parsed and checked for what they promise (command, hardening,
the NVIDIA device access the exporter needs and none of the settings that would break NVML or
attribution), then handed to `systemd-analyze verify` and `security`.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.deploy_files import DEPLOY_DOC, INSTALLED_GPULEDGER, SYSTEMD_DIR, VENV_GPULEDGER

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
    found = sorted(SYSTEMD_DIR.glob("*.service"))
    assert {p.stem for p in found} == set(UNITS), f"unexpected units in {SYSTEMD_DIR}: {found}"
    return {p.stem: parse_unit(p) for p in found}


@pytest.mark.integration
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
        pytest.fail(f"{VENV_GPULEDGER} missing (pip install -e . in the virtualenv running the tests)")
    out = []
    for src in sorted(SYSTEMD_DIR.glob("*.service")):
        text = src.read_text()
        assert INSTALLED_GPULEDGER in text
        target = dest / src.name
        target.write_text(text.replace(INSTALLED_GPULEDGER, str(VENV_GPULEDGER)))
        out.append(target)
    return out


@pytest.mark.integration
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


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "limit"), [("gpuledger-exporter", 2.5), ("gpuledger-up", 2.5), ("gpuledger-analytics", 1.5)]
)
def test_systemd_analyze_security(name: str, limit: float) -> None:
    tool = systemd_analyze()
    unit = SYSTEMD_DIR / f"{name}.service"
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
