"""The Dockerfile read as Docker reads it (instructions, continuation lines joined, stages
numbered) and its HEALTHCHECK run as Docker runs it: for the deployment tests and the health tests."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass


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


def healthcheck_argv(dockerfile: list[Instruction]) -> tuple[dict[str, str], list[str]]:
    (hc,) = [i for i in dockerfile if i.op == "HEALTHCHECK"]
    options = dict(re.findall(r"--([\w-]+)=(\S+)", hc.args.split("CMD", 1)[0]))
    argv = exec_form(hc.args.split("CMD", 1)[1].strip())
    assert argv is not None, f"HEALTHCHECK CMD not in exec form: {hc.args}"
    return options, argv


def run_healthcheck(argv: list[str], health_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["HEALTH_URL"] = health_url
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env=env, timeout=30)
