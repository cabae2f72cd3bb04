"""Input files and servers the daemons read: the real CLI on every malformed replay capture (in
this process: 43 Python starts would take most of the time), and as child processes on a fake
Prometheus answering in every wrong shape (and 300 MB) and on every bad argument. Each row: exit
code, seconds, the first (or last) line on stderr. Bounded: each command 25 s at most."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.attacks import Row
from exporter.readers import capture
from gpuledger import cli as gpuledger_cli
from tests.support.fake_prometheus import Answer, FakePrometheus
from tests.support.hostile_captures import BadCapture, cases

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 25.0
SECRET = "s3cr3t-in-url"


@dataclass(frozen=True)
class Ran:
    code: int | None  # None: timed out
    seconds: float
    stderr: str
    stdout: str

    @property
    def first(self) -> str:
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        return lines[0][:110] if lines else "(nothing on stderr)"

    @property
    def last(self) -> str:
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        return lines[-1][:140] if lines else "(nothing on stderr)"

    def observed(self, line: str | None = None) -> str:
        code = "timed out" if self.code is None else f"exit {self.code}"
        return f"{code} in {self.seconds:.1f} s: {line or self.first}"

    @property
    def traceback(self) -> bool:
        return "Traceback" in self.stderr


def cli(*args: str, env: dict[str, str] | None = None) -> Ran:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")} | (env or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "gpuledger", *args],
            capture_output=True,
            text=True,
            env=full,
            cwd=REPO,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else str(e.stderr or "")
        return Ran(None, time.monotonic() - t0, err, "")
    return Ran(p.returncode, time.monotonic() - t0, p.stderr, p.stdout)


def in_process(*args: str) -> Ran:
    """``gpuledger ARGS`` in this process (the CLI's own code, without a Python start per case)."""
    err, out = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code: int | None = gpuledger_cli.main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
        except Exception:  # a traceback is what is being looked for
            traceback.print_exc(file=err)
            code = 1
    return Ran(code, time.monotonic() - t0, err.getvalue(), out.getvalue())


def _capture(tmp: Path, i: int, c: BadCapture) -> Row:
    """The exporter on a malformed capture. Only run once ``load`` refused it (a capture it took
    would start a daemon in this process): one it takes is a failed row."""
    path = tmp / f"capture-{i}.jsonl"
    path.write_bytes(c.content)
    attack, expected = f"replay capture: {c.name}", "exit 2, one line naming file:line"
    try:
        capture.load(path)
    except capture.CaptureError:
        pass
    else:
        return Row("inputs", attack, expected, "loaded: the exporter would replay it", False)
    r = in_process("exporter", "--reader", f"replay:{path}", "--listen", "127.0.0.1:0", "--no-history")
    where = f"{path}:{c.line}:" if c.line else f"{path}:"
    one = len([x for x in r.stderr.splitlines() if x.strip()]) == 1
    ok = r.code == 2 and one and where in r.first and not r.traceback
    return Row("inputs", attack, expected, r.observed(r.first.replace(str(tmp) + "/", "")), ok)


WRONG_ANSWERS: list[tuple[str, Answer]] = [
    ("a JSON list", Answer(b"[1, 2]")),
    ("no data", Answer(b'{"status":"success"}')),
    ("data a list", Answer(b'{"status":"success","data":[]}')),
    (
        "resultType matrix for an instant query",
        Answer(b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
    ),
    ("no metric", Answer(b'{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"2"]}]}}')),
    (
        "a non-numeric value",
        Answer(b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"abc"]}]}}'),
    ),
    ("invalid JSON", Answer(b'{"status":"success","data":')),
    ("an HTML error page (HTTP 200)", Answer(b"<html><h1>Gateway</h1></html>", content_type="text/html")),
    ("an HTML error page (HTTP 404)", Answer(b"<html><h1>Not found</h1></html>", status=404, content_type="text/html")),
    ("an error without a message", Answer(b'{"status":"error"}', status=400)),
]


def _answers() -> list[Callable[[], Row]]:
    jobs: list[Callable[[], Row]] = []
    for what, answer in WRONG_ANSWERS:

        def job(what: str = what, answer: Answer = answer) -> Row:
            with FakePrometheus(answer) as fake, tempfile.TemporaryDirectory() as out:
                url = fake.url.replace("http://", f"http://admin:{SECRET}@")
                r = cli("report", "--days", "1", "--source", "prometheus", "--prometheus-url", url, "--out", out)
                ok = r.code == 1 and fake.url in r.last and not r.traceback and SECRET not in r.stderr + r.stdout
            line = r.last.replace(fake.url, "URL")
            return Row("inputs", f"prometheus answers {what}", "exit 1, one line naming the URL", r.observed(line), ok)

        jobs.append(job)
    return jobs


def _big_answer() -> Row:
    """A 300 MB answer, chunked (no length announced): the report stops at the cap; its peak memory."""
    with FakePrometheus(Answer(size=300 * 2**20, declare_length=False)) as fake, tempfile.TemporaryDirectory() as out:
        code = (
            "import resource, subprocess, sys;"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
            "print(p.stderr)"
        )
        argv = [sys.executable, "-m", "gpuledger", "report", "--days", "1", "--source", "prometheus"]
        argv += ["--prometheus-url", fake.url, "--out", out]
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO
        )
        seconds = time.monotonic() - t0
    head, _, err = p.stdout.partition("\n")
    rc, rss_kib = (int(x) for x in head.split())
    last = [x for x in err.splitlines() if x.strip()][-1:] or [""]
    ok = rc == 1 and "too large" in last[0] and rss_kib < 1024 * 1024
    observed = f"exit {rc} in {seconds:.1f} s, peak {rss_kib / 1024:,.0f} MiB: {last[0].replace(fake.url, 'URL')[:90]}"
    return Row("inputs", "prometheus answers 300 MB (chunked)", "exit 1 at the size cap, under 1 GiB", observed, ok)


def _credentials() -> Row:
    """Credentials in the URL, a debug log, queries that fail: the secret appears nowhere."""
    with FakePrometheus(Answer(b"", status=503)) as fake, tempfile.TemporaryDirectory() as out:
        url = fake.url.replace("http://", f"http://admin:{SECRET}@")
        r = cli(
            "report",
            "--days",
            "1",
            "--source",
            "prometheus",
            "--prometheus-url",
            url,
            "--out",
            out,
            "--log-level",
            "debug",
        )
        sent = sum("Authorization" in q.headers for q in fake.requests)
    n = (r.stderr + r.stdout).count(SECRET)
    lines = len(r.stderr.splitlines())
    observed = f"exit {r.code}: {lines} log lines, the password in {n}; sent as basic auth in {sent} requests"
    return Row(
        "inputs", "user:password in the Prometheus URL (debug log)", "never logged", observed, n == 0 and sent > 0
    )


def _arguments(tmp: Path) -> list[Callable[[], Row]]:
    afile = tmp / "a-file"
    afile.write_text("x")
    token = tmp / "token"
    token.write_bytes(b"\xff\xfe")
    prom = ["--source", "prometheus", "--prometheus-url", "http://127.0.0.1:1"]
    hist = ["--history", str(tmp / "none.db")]
    out = ["--out", str(tmp / "out")]
    cases_: list[tuple[str, list[str], dict[str, str], str, int]] = [
        ("report --days -1", ["report", "--days", "-1", *hist, *out], {}, "--days", 2),
        ("report --days 0", ["report", "--days", "0", *hist, *out], {}, "--days", 2),
        ("report --days 1e9", ["report", "--days", "1e9", *hist, *out], {}, "--days", 2),
        ("report --days nan", ["report", "--days", "nan", *hist, *out], {}, "--days", 2),
        ("report --out onto a file", ["report", "--days", "1", *hist, "--out", str(afile)], {}, "--out", 2),
        ("report --out /etc/passwd", ["report", "--days", "1", *hist, "--out", "/etc/passwd"], {}, "--out", 2),
        ("report --out under /proc", ["report", "--days", "1", *hist, "--out", "/proc/x"], {}, "--out", 2),
        (
            "report, a URL with port 99999",
            ["report", "--days", "1", "--source", "prometheus", "--prometheus-url", "http://h:99999", *out],
            {},
            "prometheus.url",
            2,
        ),
        (
            "report, a missing CA file",
            ["report", "--days", "1", *prom, *out],
            {"GPULEDGER_PROMETHEUS__CA_FILE": str(tmp / "missing.pem")},
            "prometheus.ca_file",
            2,
        ),
        (
            "report, a token file not UTF-8",
            ["report", "--days", "1", *prom, *out],
            {"GPULEDGER_PROMETHEUS__BEARER_TOKEN_FILE": str(token)},
            "bearer_token_file",
            2,
        ),
        (
            "bench --json onto a missing folder",
            ["bench", "allreduce", "--json", "/nonexistent/x.json"],
            {},
            "--json",
            2,
        ),
        ("demo --dir onto a file", ["demo", "--dir", str(afile), "--no-serve"], {}, "--dir", 2),
        (
            "up, both ports equal",
            [
                "up",
                "--reader",
                "replay",
                "--history",
                str(tmp / "h.db"),
                "--listen",
                ":18977",
                "--analytics-listen",
                ":18977",
            ],
            {},
            ":18977",
            2,
        ),
    ]
    jobs: list[Callable[[], Row]] = []
    for name, args, env, phrase, want in cases_:

        def job(
            name: str = name, args: list[str] = args, env: dict[str, str] = env, phrase: str = phrase, want: int = want
        ) -> Row:
            r = cli(*args, env=env)
            ok = r.code == want and phrase in r.stderr and not r.traceback
            return Row(
                "inputs", name, f"exit {want} naming {phrase}", r.observed(r.last.replace(str(tmp) + "/", "")), ok
            )

        jobs.append(job)
    return jobs


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gpuledger-inputs-") as d:
        tmp = Path(d)
        rows = [_capture(tmp, i, c) for i, c in enumerate(cases())]
        jobs = [*_answers(), *_arguments(tmp), _credentials]
        with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 2)) as pool:
            rows += list(pool.map(lambda job: job(), jobs))
        rows.append(_big_answer())  # alone: its peak memory is measured
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    for row in run():
        print(("ok " if row.ok else "NO ") + f"{row.attack}: {row.observed}")
