"""The command line and configuration: exit 2 naming the field, layering, real processes."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from daemonkit.argparse_hints import HintingParser, suggestion
from daemonkit.settings import split_listen
from exporter import cli as exporter_cli
from exporter import config
from gpuledger.cli import build_parser
from tests.support.http import http_get
from tests.support.metrics import one, parse_metrics
from tests.support.paths import CAPTURE, REPO
from tests.support.processes import ExporterProcess, run_cli
from tests.support.wait import wait_until

PLAIN_PASSWORD = '[web]\nbasic_auth_users = { prom = "hunter2" }\n'
UNKNOWN_KEY = "[exporter]\nsample_intervall = 2\n"
BAD_TOML = "[exporter\nreader = 'nvml'\n"
BAD_YAML = "exporter: [unclosed\n"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "env", "file", "named"),
    [
        (["--sample-interval", "0"], {}, None, "exporter.sample_interval"),
        (["--sample-interval", "fast"], {}, None, "exporter.sample_interval"),
        (["--listen", "nonsense"], {}, None, "web.listen"),
        (["--listen", "::1:80"], {}, None, "web.listen"),
        (["--reader", "bogus"], {}, None, "exporter.reader"),
        (["--reader", "replay:/no/such/capture.jsonl"], {}, None, "exporter.reader"),
        (["--replay-gpus", "0"], {}, None, "replay.gpus"),
        (["--replay-speed", "-1"], {}, None, "replay.speed"),
        (["--log-level", "loud"], {}, None, "log_level"),
        (["--tls-cert", "/no/cert.pem", "--tls-key", "/no/key.pem"], {}, None, "web.tls_cert_file"),
        (["--tls-cert", str(CAPTURE)], {}, None, "tls_key_file go together"),
        ([], {"GPULEDGER_EXPORTER__PCIE_INTERVAL": "-1"}, None, "exporter.pcie_interval"),
        ([], {"GPULEDGER_HISTORY__RETENTION_DAYS": "0"}, None, "history.retention_days"),
        ([], {"GPULEDGER_EXPORTER__ALLOCATED_IDLE_BELOW": "2"}, None, "exporter.allocated_idle_below"),
        ([], {"GPULEDGER_BENCH__CRON": "0 25 * * *"}, None, "bench.cron: not a crontab expression"),
        ([], {"GPULEDGER_BENCH__TIMEZONE": "Mars/Olympus"}, None, "bench.timezone: unknown time zone"),
        ([], {"GPULEDGER_BENCH__TIMEOUT": "0"}, None, "bench.timeout"),
        ([], {}, ("c.toml", '[bench]\nbenches = ["allreduce", "bogus"]\n'), "bench.benches"),
        ([], {"GPULEDGER_ATTRIBUTION__PROC_ROOT": "/no/proc"}, None, "attribution.proc_root"),
        ([], {"GPULEDGER_ATTRIBUTION__PASSWD_FILE": "/no/passwd"}, None, "attribution.passwd_file"),
        ([], {"GPULEDGER_SLURM__INTERVAL": "0"}, None, "slurm.interval"),
        ([], {"GPULEDGER_SLURM__ACCOUNTING": "slurmdbd"}, None, "slurm.accounting"),
        ([], {}, ("c.toml", PLAIN_PASSWORD), "web.basic_auth_users"),
        ([], {}, ("c.toml", UNKNOWN_KEY), "exporter.sample_intervall: unknown setting"),
        ([], {}, ("c.toml", BAD_TOML), "c.toml"),
        ([], {}, ("c.yaml", BAD_YAML), "c.yaml"),
        (["--config", "/no/such/config.toml"], {}, None, "/no/such/config.toml"),
    ],
)
def test_invalid_configuration_exits_2_naming_the_field(
    tmp_path: Path, args: list[str], env: dict[str, str], file: tuple[str, str] | None, named: str
) -> None:
    if file is not None:
        path = tmp_path / file[0]
        path.write_text(file[1])
        args = [*args, "--config", str(path)]
    res = run_cli("exporter", "--listen", "127.0.0.1:0", *args, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert named in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_layers_defaults_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "exporter:\n  sample_interval: 3\n  energy_interval: 20\n  hostname: from-file\nweb:\n  listen: ':7001'\n"
    )
    monkeypatch.setenv("GPULEDGER_EXPORTER__SAMPLE_INTERVAL", "4")
    monkeypatch.setenv("GPULEDGER_WEB__LISTEN", ":7002")
    s = config.load(f, {"web": {"listen": ":7003"}})
    assert s.exporter.health_interval == 30.0  # default
    assert s.exporter.energy_interval == 20.0 and s.exporter.hostname == "from-file"  # file
    assert s.exporter.sample_interval == 4.0  # env beats file
    assert s.web.listen == ":7003"  # flag beats env
    monkeypatch.setenv("GPULEDGER_CONFIG", str(f))
    monkeypatch.delenv("GPULEDGER_EXPORTER__SAMPLE_INTERVAL")
    assert config.load().exporter.sample_interval == 3.0  # file found through the environment


def test_listen_forms() -> None:
    assert split_listen(":10044") == ("", 10044)
    assert split_listen("0.0.0.0:1") == ("0.0.0.0", 1)
    assert split_listen("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError):
        split_listen("host:99999")


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err, err  # one line, not the usage
    return err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["exporter", "--port", "9000"],
            "gpuledger exporter: error: unknown option --port (did you mean --listen :9000?)",
        ),
        (["exporter", "--port=9000"], "unknown option --port (did you mean --listen :9000?)"),
        (["exporter", "--bind", "0.0.0.0:9000"], "(did you mean --listen 0.0.0.0:9000?)"),
        (
            ["analytics", "--port", "10046"],
            "gpuledger analytics: error: unknown option --port (did you mean --listen :10046?)",
        ),
        (["up", "--analytics-port", "9001"], "(did you mean --analytics-listen :9001?)"),
        (["demo", "--port", "9000"], "gpuledger demo: error: unknown option --port (did you mean --listen :9000?)"),
        (["demo", "--analytics-port=9001"], "(did you mean --analytics-listen :9001?)"),
        (["exporter", "--relader", "nvml"], "unknown option --relader (did you mean --reader?)"),
        (["report", "--formt", "md"], "unknown option --formt (did you mean --format?)"),
        (["bench", "all", "--quik"], "gpuledger bench: error: unknown option --quik (did you mean --quick?)"),
        (["report", "--port", "9000"], "gpuledger report: error: unknown option --port; see gpuledger report --help"),
        (["report", "stray"], "gpuledger report: error: unexpected argument 'stray'; see gpuledger report --help"),
        (["bench", "everything"], "gpuledger bench: error: argument what: invalid choice: 'everything'"),
    ],
)
def test_an_unknown_option_is_one_line_naming_it_with_what_was_meant(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert said in usage_error(argv, capsys)


def test_every_parser_gives_the_hints(capsys: pytest.CaptureFixture[str]) -> None:
    def tree(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        return [p, *(q for a in subs for c in a.choices.values() for q in tree(c))]

    assert all(isinstance(p, HintingParser) for p in tree(build_parser()))
    with pytest.raises(SystemExit) as e:
        exporter_cli.main(["--port", "9000"])  # python -m exporter
    assert e.value.code == 2
    assert "python -m exporter: error: unknown option --port (did you mean --listen :9000?)" in capsys.readouterr().err


def test_suggestions() -> None:
    known = ["-h", "--help", "--listen", "--analytics-listen", "--reader"]
    assert suggestion(known, "--port", "9000") == "--listen :9000"
    assert suggestion(known, "--port", None) == "--listen HOST:PORT"
    assert suggestion(known, "--host", "0.0.0.0") == "--listen 0.0.0.0:PORT"
    assert suggestion(known, "--analytics-port", "1") == "--analytics-listen :1"
    assert suggestion(known, "--metrics-port", "1") == "--listen :1"
    assert suggestion(known, "--readr", None) == "--reader"
    assert suggestion(known, "--zzz", None) is None
    assert suggestion(["--out", "--format"], "--port", "1") is None  # not --out: it does not listen


@pytest.mark.integration
def test_an_unknown_option_in_a_real_process_exits_2_in_one_line() -> None:
    res = run_cli("exporter", "--port", "9000")
    assert res.returncode == 2
    assert res.stderr == (
        "gpuledger exporter: error: unknown option --port (did you mean --listen :9000?); "
        "see gpuledger exporter --help\n"
    )


@pytest.mark.integration
def test_version_and_help() -> None:
    res = run_cli("version")
    assert res.returncode == 0 and res.stdout.startswith("gpuledger 0.")
    assert run_cli().returncode == 2  # no subcommand
    res = subprocess.run(
        [sys.executable, "-m", "exporter", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert res.returncode == 0 and "--listen" in res.stdout


@pytest.mark.integration
def test_without_a_driver_nvml_reader_serves_nvml_down(
    exporter_process: Callable[..., ExporterProcess],
) -> None:
    p = exporter_process("--reader", "nvml")
    m = parse_metrics(p.metrics())
    assert one(m, "gpuledger_nvml_up") == 0.0
    assert one(m, "gpuledger_exporter_info", reader="nvml") == 1.0
    assert "gpuledger_gpu_up" not in m
    out = p.stop()
    assert out.count("NVML unavailable") == 1, out  # one clear line, not one per retry


@pytest.mark.integration
def test_auto_reader_replays_the_bundled_capture_without_nvidia(
    exporter_process: Callable[..., ExporterProcess],
) -> None:
    p = exporter_process("--sample-interval", "0.2")
    assert wait_until(
        lambda: sum(parse_metrics(p.metrics()).get("gpuledger_gpu_sampled_seconds_total", {}).values()) > 0
    )
    m = parse_metrics(p.metrics())
    assert one(m, "gpuledger_exporter_info", reader="replay") == 1.0
    assert one(m, "gpuledger_gpu_info", model="NVIDIA H200") == 1.0
    assert one(m, "gpuledger_gpu_sampled_seconds_total") > 0
    assert http_get(p.url + "/healthz")[0] == 200
    out = p.stop()
    assert "replaying the bundled H200 capture" in out


@pytest.mark.integration
def test_sigterm_stops_cleanly_and_flushes_history(
    tmp_path: Path, exporter_process: Callable[..., ExporterProcess]
) -> None:
    db = tmp_path / "h.db"
    p = exporter_process("--reader", "replay", "--replay-gpus", "2", "--history", str(db), "--sample-interval", "0.1")

    def sampled_over_a_second() -> bool:
        sampled = parse_metrics(p.metrics()).get("gpuledger_gpu_sampled_seconds_total", {})
        return len(sampled) == 2 and sum(sampled.values()) > 1.0

    assert wait_until(sampled_over_a_second)
    p.stop()
    assert p.proc.returncode == 0, p.output
    import sqlite3

    rows = sqlite3.connect(db).execute("SELECT count(*), sum(sampled_seconds) FROM gpu_minutes").fetchone()
    assert rows[0] >= 2 and rows[1] > 1.0  # the partial minute of both GPUs was written on exit


RENDERING = ("analytics.pipeline", "analytics.report.html", "analytics.report.jsonio", "httpx")  # a report's run
LOADED = (
    "import sys; from gpuledger.cli import main; {call}; "
    "print(' '.join(m for m in sys.modules "
    "if m.split('.')[0] in ('analytics', 'exporter', 'jinja2', 'httpx', 'httpcore', 'torch')))"
)


@pytest.mark.parametrize(
    ("call", "absent", "present"),
    [
        ("main(['version'])", ("analytics", "jinja2", "httpx", "exporter.cli"), ()),
        (
            "main(['exporter', '--check', '--reader', 'replay'])",
            (*RENDERING, "torch"),
            ("exporter.cli", "analytics.config"),
        ),
        (  # a report that reads no Prometheus loads its client module, not httpx (0.1-0.3 s)
            "main(['report', '--source', 'embedded', '--history', '/nonexistent/h.db', '--week', '2026-W47'])",
            ("httpx", "httpcore", "analytics.sources.deadline_http", "torch"),
            ("analytics.pipeline", "analytics.sources.promapi"),
        ),
        (
            "__import__('gpuledger.cli').cli.build_parser(only='report')",
            (*RENDERING, "jinja2", "exporter.cli"),
            ("analytics.cli", "analytics.config"),
        ),
    ],
)
def test_a_subcommand_loads_its_own_modules_only(call: str, absent: tuple[str, ...], present: tuple[str, ...]) -> None:
    """``gpuledger version`` in 0.08 s of CPU, not 1.2 s: a command imports what it runs, not every
    subcommand's modules (docs/performance.md, "Start-up")."""
    r = subprocess.run(
        [sys.executable, "-c", LOADED.format(call=call)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert "Traceback" not in r.stderr, r.stderr
    loaded = set(r.stdout.split())
    assert not {m for m in loaded if m.split(".")[0] in absent or m in absent}, sorted(loaded)
    assert set(present) <= loaded


def test_the_report_package_names_load_on_first_use() -> None:
    import analytics.report as rpt
    from analytics.report import jsonio, output

    assert rpt.write is output.write and rpt.to_json is jsonio.to_json
    assert all(getattr(rpt, n) is not None for n in rpt.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rpt.nope  # noqa: B018
