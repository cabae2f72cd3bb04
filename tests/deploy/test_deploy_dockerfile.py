"""The Dockerfile, parsed (no Docker engine here): multi-stage, non-root, healthcheck, ports, the
NVIDIA environment, torch only with BENCH=true, every COPY source present; its healthcheck command
run against a real exporter.
"""

from __future__ import annotations

import fnmatch
import glob
import re
import shlex
import tomllib
from collections.abc import Callable

import pytest

from tests.support.deploy_files import DOCKERFILE
from tests.support.dockerfile import (
    Instruction,
    env_pairs,
    exec_form,
    healthcheck_argv,
    parse_dockerfile,
    run_healthcheck,
)
from tests.support.http import free_port
from tests.support.paths import REPO
from tests.support.processes import ExporterProcess

# ---------------------------------------------------------------------------------------------
# Dockerfile


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


def global_args(ins: list[Instruction]) -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults (what a FROM may name)."""
    out: dict[str, str] = {}
    for i in ins:
        if i.op == "FROM":
            break
        if i.op == "ARG":
            name, _, default = i.args.partition("=")
            out[name] = default
    return out


def test_dockerfile_is_multi_stage(dockerfile: list[Instruction]) -> None:
    froms = [i for i in dockerfile if i.op == "FROM"]
    assert len(froms) >= 2
    assert dockerfile[0].op in ("FROM", "ARG")
    args = global_args(dockerfile)
    aliases = {}
    for f in froms:
        words = f.args.split()
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), words[0])
        assert ":" in image or "@" in image, f"unpinned base image {words[0]} ({image})"
        if len(words) == 3 and words[1].upper() == "AS":
            aliases[words[2]] = f.stage
    build_aliases = {a for a, s in aliases.items() if s < max(i.stage for i in dockerfile)}
    assert build_aliases, "the build stage has no name"
    final = final_stage(dockerfile)
    # the final stage takes the build stage's wheels: COPY --from, or a RUN bind mount from it
    copied_from = [
        m.group(1)
        for i in final
        if i.op in ("COPY", "RUN")
        for m in [re.search(r"--from=(\S+)", i.args) or re.search(r"--mount=type=bind,(?:\S*,)?from=([^,\s]+)", i.args)]
        if m
    ]
    assert copied_from and set(copied_from) <= build_aliases, copied_from
    # the build stage builds wheels; the final one installs them without an index
    build = [i for i in dockerfile if i.stage == aliases[copied_from[0]]]
    assert any(i.op == "RUN" and "pip wheel" in i.args for i in build)
    assert any(i.op == "RUN" and "pip install" in i.args and "--no-index" in i.args for i in final)


def test_dockerfile_takes_any_python_base_and_installs_into_a_venv(dockerfile: list[Instruction]) -> None:
    # BASE (default: the official slim image) names both stages' base; Debian's own python3
    # refuses system-wide pip installs, so pip runs only inside a virtualenv
    assert global_args(dockerfile).get("BASE", "").startswith("python:3.")
    froms = [i.args.split()[0] for i in dockerfile if i.op == "FROM"]
    assert froms and all(f in ("${BASE}", "$BASE") for f in froms), froms
    venvs = set()
    for i in dockerfile:
        if i.op != "RUN" or "pip " not in i.args:
            continue
        venvs |= set(re.findall(r"python3 -m venv (\S+)", i.args))
        for call in re.findall(r"(\S*pip) (?:install|wheel)", i.args):
            in_venv = call == "pip" or any(call.startswith(v + "/") for v in venvs)  # bare pip: PATH's venv
            assert in_venv, f"line {i.line}: {call} outside a venv"
    final = final_stage(dockerfile)
    env: dict[str, str] = {}
    for i in final:
        if i.op == "ENV":
            env.update(env_pairs(i.args))
    venv = "/opt/gpuledger"
    assert venv in venvs
    assert env["PATH"].startswith(f"{venv}/bin:"), "the venv's python and gpuledger come first on PATH"


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


@pytest.mark.integration
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
        words = shlex.split(m.group(1))
        assert words[0].endswith("pip") and words[1] == "install", words
        installed = [w for w in words[2:] if not w.startswith("-")]
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


def test_dockerfile_healthcheck_options(dockerfile: list[Instruction]) -> None:
    options, argv = healthcheck_argv(dockerfile)
    assert {"interval", "timeout", "start-period", "retries"} <= set(options)
    assert argv[:2] == ["python", "-c"]
    # the probe gives up before Docker kills it
    probe_timeouts = [float(t) for t in re.findall(r"timeout=(\d+(?:\.\d+)?)", argv[2])]
    assert probe_timeouts and max(probe_timeouts) < float(options["timeout"].rstrip("s"))


@pytest.mark.integration
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
