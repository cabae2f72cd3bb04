"""Every command README.md and docs/ show works as shown.

- Every ``gpuledger`` command (also those after an image name in ``docker run``/``podman run``)
  parses with the program's own parser: a renamed or removed flag fails here.
- Every ``scripts/`` and ``bench/`` command names a file that exists, and each flag it shows is one
  the program offers (its ``--help``, or the script's text).
- The one-shot commands (report, job, statement, demo --no-serve, version, the doc generators)
  run for real against a generated week in an embedded history and in a real Prometheus, and the
  servers (exporter, analytics, up, demo) start and answer on /metrics; the benchmarks are run by
  tests/exporter/test_bench_runs.py, the images and stacks by scripts/test-image. What a reader's example
  names that the fixture cannot have (their history path, their Prometheus, their job id, week
  and account) is mapped to the fixture's own, in SUBSTITUTIONS below.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics import synthetic
from domain.week import iso_week
from gpuledger.cli import build_parser
from tests.support import fleet as fleets
from tests.support.doc_commands import DocCommand, doc_commands, doc_files
from tests.support.http import free_port, http_get
from tests.support.paths import REPO
from tests.support.wait import wait_until

COMMANDS = doc_commands()
IMAGE = re.compile(r"^(localhost/)?gpuledger:[\w.-]+$")
SERVERS = {"exporter", "analytics", "up", "demo"}
ONE_SHOT = {"report", "job", "statement", "version"}
# a reader's placeholders and shell variables, as the parser should see them
PLACEHOLDERS = {"<bench>": "all", "$SLURM_NNODES": "2", "$head:29400": "node1:29400", "$SLURM_JOB_ID": "7"}


def _gpuledger_argv(c: DocCommand) -> list[str] | None:
    """The gpuledger arguments of a command: its own, or those after an image name."""
    if c.program == "gpuledger":
        return [PLACEHOLDERS.get(a, a) for a in c.argv[1:]]
    if c.argv[0] in ("docker", "podman") and "run" in c.argv:
        words = list(c.argv)
        for i, w in enumerate(words):
            if IMAGE.match(w):
                rest = words[i + 1 :]
                return rest or None  # the image's default command is the exporter's
    return None


HELP = frozenset({"-h", "--help"})


def _where(x: object) -> str:
    return x.where if isinstance(x, DocCommand) else ""


def _gpuledger_commands() -> list[tuple[DocCommand, list[str]]]:
    found = []
    for c in COMMANDS:
        argv = _gpuledger_argv(c)
        if argv:
            found.append((c, [a.replace("bench-7.json", "bench.json") for a in argv]))
    return found


def test_the_docs_show_commands_at_all() -> None:
    """The extraction finds what is there (a broken extractor would pass every check below)."""
    shown = {tuple(argv[:1]) for _, argv in _gpuledger_commands()}
    wanted = {"report", "job", "statement", "exporter", "analytics", "up", "demo", "bench"}
    assert {(w,) for w in wanted} <= shown
    assert len(_gpuledger_commands()) >= 40
    assert any(c.program == "scripts/test" for c in COMMANDS)


@pytest.mark.parametrize(("c", "argv"), _gpuledger_commands(), ids=_where)
def test_every_gpuledger_command_in_the_docs_parses(c: DocCommand, argv: list[str]) -> None:
    parser = build_parser()
    names_a_command = c.inline and len(argv) == 1 and not argv[0].startswith("-")
    if names_a_command:  # prose naming a command ("see `gpuledger job`"): it exists
        sub = next(a for a in parser._actions if a.dest == "command")
        assert argv[0] in (sub.choices or {}), f"{c.where}: no command {argv[0]!r}"
        return
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        # --help prints and exits 0, as it does for a reader; any other exit is argparse refusing
        if not (e.code == 0 and HELP & set(argv)):
            pytest.fail(f"{c.where}: `{c.text}` does not parse (exit {e.code})")


def _files_commands() -> list[DocCommand]:
    return [c for c in COMMANDS if c.program.startswith(("scripts/", "bench/", "bench.")) and c.program != "bench/"]


@pytest.mark.parametrize("c", _files_commands(), ids=lambda c: c.where)
def test_every_script_and_benchmark_in_the_docs_exists_with_its_flags(c: DocCommand) -> None:
    prog = c.program
    if Path(prog).stem.isupper():
        return  # bench/results/NAME.json: a placeholder in prose
    if prog.startswith("bench.") or (prog.startswith("bench/") and not prog.endswith(".py")):
        module = prog if prog.startswith("bench.") else prog.replace("/", ".")
        path = REPO / (module.replace(".", "/") + ".py")
        assert path.is_file() or (REPO / prog).exists(), f"{c.where}: {prog} does not exist"
        if not path.is_file():
            return  # a folder or a results file named in prose
    else:
        path = REPO / prog
        assert path.is_file(), f"{c.where}: {prog} does not exist"
    if path.suffix == ".json":
        return
    flags = [a.split("=", 1)[0] for a in c.argv if a.startswith("--")]
    if not flags:
        return
    if path.suffix == ".py":
        module = str(path.relative_to(REPO).with_suffix("")).replace("/", ".")
        words = list(c.argv[c.argv.index(prog) + 1 :]) if prog in c.argv else []
        verbs = [w for w in words if not w.startswith("-")][:1]
        offered = subprocess.run(
            [sys.executable, "-m", module, *verbs, "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
        ).stdout
    else:
        offered = path.read_text()
    for flag in flags:
        assert flag in offered, f"{c.where}: {prog} has no {flag}"


# --- the commands, run ---------------------------------------------------------------------------

SUBSTITUTIONS = {
    # what the example names -> what the fixture has
    "/var/lib/gpuledger/history.db": "{history}",
    "F": "{history}",
    "http://prometheus:9090": "{prometheus}",
    "http://prometheus.example:9090": "{prometheus}",
    "/etc/gpuledger/gpuledger.toml": "{config}",
    "reports/": "{out}",
    "statements/": "{out}",
    "2026-W48": "{week}",
    "W": "{week}",
    "2026-11": "{month}",
    "48213": "{job}",
    "ID": "{job}",
    "ml/trainer-0": "{job}",
    "grant-42": "grant-42",
}


def _last_full_week(now: float) -> str:
    y, w, _ = (dt.datetime.fromtimestamp(now, dt.UTC) - dt.timedelta(days=7)).isocalendar()
    return f"{y}-W{w:02d}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A generated week (the last full one before now: the Prometheus job lookup and the
    daemons look back from the wall clock) in an embedded history and a real Prometheus."""
    folder = tmp_path_factory.mktemp("docs-commands")
    week = _last_full_week(time.time())
    fleet = synthetic.generate(iso_week(week), hosts=1, gpus_per_host=2, seed=11)
    history = fleets.history(fleet, folder)
    job = fleet.jobs[0]
    with sqlite3.connect(history) as db:  # the account an example statement asks for
        db.execute("UPDATE jobs SET account = 'grant-42' WHERE job_id = ?", (job.job_id,))
    (folder / "gpuledger").mkdir()
    (folder / "dcgm").mkdir()
    prom = fleets.prometheus(fleet, folder / "gpuledger")
    dcgm = fleets.prometheus(fleet, folder / "dcgm", naming="dcgm")  # the same week in dcgm-exporter's series
    config = folder / "gpuledger.toml"
    config.write_text(f'[analytics]\nsource = "embedded"\nhistory = "{history}"\n')
    monday = dt.datetime.fromisocalendar(int(week[:4]), int(week[6:]), 1)
    try:
        yield {
            "history": str(history),
            "prometheus": prom.url,
            "prometheus_dcgm": dcgm.url,
            "config": str(config),
            "week": week,
            "month": f"{monday.year}-{monday.month:02d}",
            "job": job.job_id,
            "folder": str(folder),
        }
    finally:
        prom.stop()
        dcgm.stop()


def _substituted(argv: list[str], world: dict[str, str], out: Path) -> list[str]:
    values = world | {"out": str(out)}
    if "dcgm" in argv:
        values["prometheus"] = world["prometheus_dcgm"]
    return [SUBSTITUTIONS.get(a, a).format(**values) for a in argv]


def _env(world: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    # an example without --source or --history reads the fixture's history, as a node's default would
    env |= {"GPULEDGER_CONFIG": world["config"], "HOME": world["folder"], "GPULEDGER_HISTORY__PATH": world["history"]}
    env["GPULEDGER_PROMETHEUS__URL"] = world["prometheus"]  # and a Prometheus where a node's config says
    return env


def _one_shot() -> list[tuple[DocCommand, list[str]]]:
    """Each distinct one-shot command once, at its first place in the docs (the same words run the
    same way wherever they appear: 37 places, 20 commands); the parse test covers every place."""
    seen: set[tuple[str, ...]] = set()
    found = []
    for c, a in _gpuledger_commands():
        if (
            c.program == "gpuledger"
            and (a[0] in ONE_SHOT or {"--check-config", "--no-serve"} & set(a))
            and not HELP & set(a)  # `gpuledger report --help`: the parse test runs it
            and tuple(a) not in seen
        ):
            seen.add(tuple(a))
            found.append((c, a))
    return found


@pytest.mark.integration
@pytest.mark.parametrize(("c", "argv"), _one_shot(), ids=_where)
def test_every_one_shot_command_in_the_docs_runs(
    c: DocCommand, argv: list[str], world: dict[str, str], tmp_path: Path
) -> None:
    if argv[0] in ("job", "statement") and len(argv) == 1:
        argv = [*argv, "{job}"] if argv[0] == "job" else [*argv, "--user", "alice", "--week", "{week}"]
    if argv[0] == "job" and argv[1:] == ["ID"]:
        argv = ["job", "{job}"]
    if argv[0] == "report" and not {"--week", "--days"} & set(argv):
        argv = [*argv, "--week", "{week}"]  # the default (last full week) is the same week, pinned against midnight
    args = _substituted(argv, world, tmp_path / "out")
    args = [a.format(**world) if "{" in a else a for a in args]
    if "--out" not in args and argv[0] in ("report", "statement"):
        args += ["--out", str(tmp_path / "out")]
    if argv[0] == "demo":  # a smaller fleet, in the test's folder
        args += ["--dir", str(tmp_path / "out"), "--hosts", "1", "--gpus-per-host", "2"]
    cmd = [sys.executable, "-m", "gpuledger", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(world), cwd=tmp_path, timeout=120)
    said = r.stdout[-800:] + r.stderr[-1500:]
    assert r.returncode == 0, f"{c.where}: `{c.text}` -> {args} exit {r.returncode}\n{said}"
    assert "Traceback" not in r.stderr
    if argv[0] in ("report", "statement", "demo"):
        assert any(p.is_file() for p in (tmp_path / "out").rglob("*")), f"{c.where}: nothing written"


def _servers() -> list[tuple[DocCommand, list[str]]]:
    seen: set[tuple[str, ...]] = set()
    found = []
    for c, a in _gpuledger_commands():
        if a[0] in SERVERS and not {"--no-serve", "--check-config", *HELP} & set(a) and tuple(a) not in seen:
            seen.add(tuple(a))
            found.append((c, a))
    return found


@pytest.mark.integration
@pytest.mark.parametrize(("c", "argv"), _servers(), ids=_where)
def test_every_server_command_in_the_docs_starts_and_serves(
    c: DocCommand, argv: list[str], world: dict[str, str], tmp_path: Path
) -> None:
    port, other = free_port(), free_port()
    args = _substituted(argv, world, tmp_path / "out")
    if "--listen" not in args:
        args += ["--listen", f"127.0.0.1:{port}"]
    if args[0] in ("up", "demo") and "--analytics-listen" not in args:
        args += ["--analytics-listen", f"127.0.0.1:{other}"]
    if args[0] == "demo":
        args += ["--dir", str(tmp_path / "demo"), "--hosts", "1", "--gpus-per-host", "2"]
    if args[0] == "up" and "--reader" not in args:
        args += ["--reader", "replay"]  # this machine has no GPU: auto would choose replay too
    if args[0] == "exporter" and "--reader" not in args:
        args += ["--reader", "replay"]
    env = _env(world) | {"GPULEDGER_HISTORY__PATH": str(tmp_path / "node-history.db")}
    if args[0] == "analytics":
        env["GPULEDGER_HISTORY__PATH"] = world["history"]
    if args[0] == "up" and "--no-history" in args:  # as the page says: with the analytics on Prometheus
        env["GPULEDGER_ANALYTICS__SOURCE"] = "prometheus"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuledger", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        served = wait_until(lambda: http_get(f"http://127.0.0.1:{port}/metrics", timeout=1)[0] == 200, 60)
        alive = proc.poll() is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    assert served and alive, f"{c.where}: `{c.text}` -> {args} did not serve /metrics:\n{out[-2000:]}"
    assert "Traceback" not in out, out[-2000:]


# --- the files they name --------------------------------------------------------------------------

_PATH = re.compile(
    r"(?<![\w/.-])((?:exporter|analytics|daemonkit|gpuledger|grafana|deploy|bench|scripts|tests|docs|examples)"
    r"/[\w./{}*,<>-]*[\w*}/])"
)
NOT_PATHS = {"deploy/gpuledger-analytics", "grafana/grafana", "gpuledger/group", "gpuledger/key"}  # kubectl, images


def _expand(p: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(",") for q in _expand(p[: m.start()] + alt + p[m.end() :])]


def test_every_file_the_docs_name_exists() -> None:
    missing = []
    for page in doc_files():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for m in _PATH.finditer(line):
                p = m.group(1).rstrip(".,")
                if "<" in p or Path(p).stem.isupper() or p in NOT_PATHS:  # NAME.json: a placeholder
                    continue
                missing += [f"{page.name}:{n}: {q}" for q in _expand(p) if not list(REPO.glob(q.rstrip("/")))]
    assert not missing, "\n".join(missing)
