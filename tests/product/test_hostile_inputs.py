"""Hostile and broken inputs the daemons read: replay captures, Prometheus answers, the report's
arguments, credentials in URLs. Each gives one line naming what is wrong (exit 2 for a bad input,
1 for a source that answered wrongly), never a traceback, never a NaN exported."""

from __future__ import annotations

import base64
import logging
import math
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.config import PrometheusSettings
from analytics.sources import counters
from analytics.sources.promanswer import QueryError
from analytics.sources.promapi import PromAPI, label_value, redact
from daemonkit.logs import NOISY
from daemonkit.settings import ConfigError
from exporter.readers.capture import CaptureError, load
from exporter.readers.replay import ReplayReader
from tests.support.fake_prometheus import Answer, FakePrometheus
from tests.support.hostile_captures import BadCapture, cases
from tests.support.paths import CAPTURE
from tests.support.processes import run_cli
from tests.support.prometheus import PrometheusServer

CASES = cases()

# --- replay captures ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_malformed_capture_is_one_line_naming_file_and_line(tmp_path: Path, case: BadCapture) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(case.content)
    with pytest.raises(CaptureError) as e:
        load(p)
    message = str(e.value)
    assert message.startswith(f"{p}:{case.line}: " if case.line else f"{p}: "), message
    assert case.phrase in message and "\n" not in message and len(message) < 400, message
    assert isinstance(e.value, ConfigError)  # the commands turn it into exit 2


def test_the_bundled_capture_still_loads_and_holds_only_finite_values() -> None:
    c = load(CAPTURE)
    assert len(c.records) == 78
    for r in c.records:
        values = [r.t, r.power_watts, r.energy_joules, r.util_gpu, r.temperature_celsius, r.sm_clock_hertz]
        assert all(math.isfinite(v) and v >= 0 for v in values)
    assert all(0 <= v <= 1 for _, v in c.samples)


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + CAPTURE.read_bytes())
    assert len(load(p).records) == 78


def test_an_unreadable_capture_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=f"{tmp_path}: cannot read capture"):
        load(tmp_path)  # a folder
    with pytest.raises(CaptureError, match="No such file"):
        load(tmp_path / "missing.jsonl")


@pytest.mark.integration
@pytest.mark.parametrize("name", ["NaN time", "+Inf power", "UTF-16 (LE, BOM)", "deep nesting", "truncated mid-line"])
def test_the_exporter_refuses_a_bad_capture_with_exit_2_and_one_line(tmp_path: Path, name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    p = tmp_path / "bad.jsonl"
    p.write_bytes(case.content)
    r = run_cli("exporter", "--reader", f"replay:{p}", "--listen", "127.0.0.1:0", "--no-history", timeout=30)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{p}:{case.line}:" in lines[0] and "Traceback" not in r.stderr, r.stderr


# --- Prometheus answers -----------------------------------------------------------------------

OK_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"uuid":"a"},"value":[1,"2.5"]}]}}'
WRONG = [
    ("a JSON list", b"[1, 2]", "not an API answer"),
    ("a JSON string", b'"hello"', "not an API answer"),
    ("no data", b'{"status":"success"}', "'data' is missing"),
    ("data a list", b'{"status":"success","data":[]}', "'data' is a list"),
    ("no resultType", b'{"status":"success","data":{"result":[]}}', "resultType is None"),
    ("matrix for an instant query", b'{"status":"success","data":{"resultType":"matrix","result":[]}}', "resultType"),
    ("result not a list", b'{"status":"success","data":{"resultType":"vector","result":{}}}', "result is a dict"),
    ("a series not an object", b'{"status":"success","data":{"resultType":"vector","result":[7]}}', "result[0] is"),
    ("no metric", b'{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"2"]}]}}', "metric"),
    (
        "a label value a number",
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"2"]}]}}',
        "metric",
    ),
    ("no value", b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}', "value is missing"),
    (
        "a non-numeric value",
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"abc"]}]}}',
        "'abc' is not a number",
    ),
    (
        "a value of one element",
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}',
        "not [time, value]",
    ),
    (
        "a time a string",
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":["x","1"]}]}}',
        "time 'x'",
    ),
    ("invalid JSON", b'{"status":"success","data":', "not JSON"),
    ("deeply nested JSON", b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ("an error without a message", b'{"status":"error"}', "no error message"),
    ("status neither", b'{"status":42,"data":{}}', "no error message"),
]


OPEN: list[PromAPI] = []


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus() as f:
        yield f
    while OPEN:
        OPEN.pop().close()


def api_for(fake: FakePrometheus, **settings: object) -> PromAPI:
    """A client of ``fake`` with credentials in its URL (closed with the fixture)."""
    url = fake.url.replace("http://", "http://admin:s3cr3t@")
    OPEN.append(PromAPI(PrometheusSettings(url=url, retries=0, **settings)))
    return OPEN[-1]


@pytest.mark.integration
@pytest.mark.parametrize(("what", "body", "phrase"), WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_shaped_answer_is_one_query_error_naming_the_url(
    fake: FakePrometheus, what: str, body: bytes, phrase: str
) -> None:
    fake.answer = Answer(body)
    api = api_for(fake)
    with pytest.raises(QueryError) as e:
        api.query("up", 0)
    message = str(e.value)
    assert phrase in message, message
    assert "s3cr3t" not in message and "\n" not in message
    if "error" not in what:
        assert fake.url in message, message


@pytest.mark.integration
@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        (b'{"status":"success","data":{"resultType":"vector","result":[]}}', "resultType is 'vector'"),
        (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}}]}}', "values is not a list"),
        (
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"],[2]]}]}}',
            "values[1] is a list, not [time, value]",
        ),
        (
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}',
            "'x' is not a number",
        ),
    ],
)
def test_a_wrong_shaped_range_answer_is_one_query_error(fake: FakePrometheus, body: bytes, phrase: str) -> None:
    fake.answer = Answer(body)
    with pytest.raises(QueryError, match="unexpected answer from") as e:
        api_for(fake).query_range("up", 0, 60, 15)
    assert phrase in str(e.value)


@pytest.mark.integration
def test_an_html_error_page_is_named_as_such(fake: FakePrometheus) -> None:
    fake.answer = Answer(
        b"<html><body><h1>404 Not Found</h1>\x1b[31m</body></html>", status=404, content_type="text/html"
    )
    with pytest.raises(QueryError, match=r"HTTP 404 from .*: not JSON \(text/html: '<html><body><h1>404") as e:
        api_for(fake).query("up", 0)
    assert "\x1b" not in str(e.value)


@pytest.mark.integration
def test_well_shaped_answers_still_read_including_nan_values(fake: FakePrometheus) -> None:
    fake.answer = Answer(OK_VECTOR)
    (s,) = api_for(fake).query("up", 0)
    assert s.labels == {"uuid": "a"} and s.value == 2.5
    fake.answer = Answer(
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}'
    )
    (s,) = api_for(fake).query("up", 0)
    assert math.isnan(s.value)
    fake.answer = Answer(
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"+Inf"]]}]}}'
    )
    (rs,) = api_for(fake).query_range("up", 0, 60, 15)
    assert rs.points == [(1.0, math.inf)]


@pytest.mark.integration
@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
def test_an_answer_over_the_size_cap_fails_before_it_is_read(fake: FakePrometheus, declare_length: bool) -> None:
    fake.answer = Answer(size=64 * 2**20, declare_length=declare_length)
    with pytest.raises(QueryError, match=r"too large .*prometheus.max_response_bytes = 1,048,576"):
        api_for(fake, max_response_bytes=2**20).query("up", 0)
    fake.answer = Answer(OK_VECTOR)  # a small answer under the same cap reads
    assert len(api_for(fake, max_response_bytes=2**20).query("up", 0)) == 1


@pytest.mark.integration
def test_a_report_gives_up_once_its_answers_fill_the_memory_cap(fake: FakePrometheus, tmp_path: Path) -> None:
    """Every answer valid and under the per-answer cap (100,000 GPU-shaped series, 15 MB): before,
    the report grew past 2.6 GB and crashed on the first series without `le` after 78 queries; now
    it stops at the report's cap with one line naming it, having read a handful of answers."""
    fake.answer = Answer(series=100_000, declare_length=False)
    r = run_cli(
        "report", "--days", "1", "--source", "prometheus", "--prometheus-url", fake.url, "--out", str(tmp_path),
        env={"GPULEDGER_PROMETHEUS__MAX_REPORT_MEMORY_BYTES": str(300 * 2**20)},
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert "the report holds" in line and "prometheus.max_report_memory_bytes = 314,572,800" in line
    assert len(fake.requests) < 40  # it stopped early, not at the end


@pytest.mark.integration
def test_series_without_the_labels_a_query_groups_by_are_skipped(fake: FakePrometheus, tmp_path: Path) -> None:
    """A server answering every query with the same GPU-like series: no `le` on the queue's buckets,
    no `world_size` on the benchmarks' series: skipped, never a KeyError."""
    fake.answer = Answer(series=40)
    r = run_cli(
        "report", "--days", "1", "--source", "prometheus", "--prometheus-url", fake.url, "--out", str(tmp_path),
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (tmp_path / "gpuledger-last-1d.json").exists() and "INCOMPLETE" in r.stderr  # and says so


def test_the_size_cap_has_a_floor() -> None:
    with pytest.raises(ValueError, match="max_response_bytes"):
        PrometheusSettings(max_response_bytes=10)


# --- credentials in URLs ----------------------------------------------------------------------


@pytest.mark.integration
def test_credentials_in_the_url_are_sent_but_never_logged(
    fake: FakePrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx logs every request URL at INFO, httpcore more at DEBUG
    for noisy in NOISY:  # which an earlier test in this process may have quietened (setup_logging)
        caplog.set_level(logging.DEBUG, logger=noisy)
    secret = "s3cr3t"
    basic = base64.b64encode(b"admin:" + secret.encode()).decode()
    api = api_for(fake)
    fake.answer = Answer(OK_VECTOR)
    api.query("up", 0)
    assert fake.requests[-1].headers.get("Authorization") == f"Basic {basic}"
    errors = []
    for answer in (Answer(b"[]"), Answer(b"<html>", status=404), Answer(size=2**21), Answer(b"", status=503)):
        fake.answer = answer
        with pytest.raises((QueryError, Exception)) as e:
            api_for(fake, max_response_bytes=2**20).query("up", 0)
        errors.append(str(e.value))
    with socket.socket() as sock:  # a port nobody listens on: held, bound and not listening, while the
        sock.bind(("127.0.0.1", 0))  # query runs, so no other test's server can take it meanwhile
        dead = sock.getsockname()[1]
        OPEN.append(PromAPI(PrometheusSettings(url=f"http://admin:{secret}@127.0.0.1:{dead}", retries=0)))
        with pytest.raises(Exception) as e:
            OPEN[-1].query("up", 0)
    errors.append(str(e.value))
    assert any("HTTP Request" in r.getMessage() for r in caplog.records), "httpx's request log was captured"
    for text in [caplog.text, *errors]:
        assert secret not in text and basic not in text


def test_redact_removes_userinfo_from_any_url() -> None:
    assert redact("http://admin:secret@host:9090/x?q=1") == "http://***@host:9090/x?q=1"
    assert redact("https://host/a@b") == "https://host/a@b"
    assert redact("http://[::1") == "<an invalid URL>"
    s = PrometheusSettings(url="http://admin:p%40ss@host:9090")
    assert s.url == "http://host:9090" and s.password is not None and s.password.get_secret_value() == "p@ss"


# --- label values in PromQL -------------------------------------------------------------------

HOSTILE_VALUES = ["GPU-new\nline", 'GPU-"quoted"', "GPU-back\\slash", "GPU-tab\tx", "GPU-cr\rx", "GPU-.*", "GPU-a|b"]


def test_label_value_escapes_what_promql_strings_require() -> None:
    assert label_value('a\\b"c\nd\re\tf') == 'a\\\\b\\"c\\nd\\re\\tf'
    assert "\n" not in counters._any_of(set(HOSTILE_VALUES))


@pytest.mark.integration
def test_hostile_label_values_select_exactly_their_series_in_a_real_prometheus(tmp_path: Path) -> None:
    def om_escape(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    t = int(time.time()) - 3600
    om = tmp_path / "hostile.om"
    lines = ["# TYPE hostile counter"]
    lines += [f'hostile_total{{uuid="{om_escape(v)}"}} {i + 1} {t}' for i, v in enumerate(HOSTILE_VALUES)]
    lines += [f'hostile_total{{uuid="GPU-other{i}"}} 100 {t}' for i in range(3)]
    om.write_text("\n".join([*lines, "# EOF", ""]))
    prom = PrometheusServer.backfilled(tmp_path, om)
    api = PromAPI(PrometheusSettings(url=prom.url, retries=0))
    try:
        for i, v in enumerate(HOSTILE_VALUES):
            exact = api.query(f'last_over_time(hostile_total{{uuid="{label_value(v)}"}}[2h])', t + 60)
            assert [(s.labels["uuid"], s.value) for s in exact] == [(v, i + 1)]
            regex = api.query(f"last_over_time(hostile_total{counters._only({v})}[2h])", t + 60)
            assert [s.labels["uuid"] for s in regex] == [v]
        together = api.query(f"last_over_time(hostile_total{counters._only(set(HOSTILE_VALUES))}[2h])", t + 60)
        assert sorted(s.labels["uuid"] for s in together) == sorted(HOSTILE_VALUES)
    finally:
        api.close()
        prom.stop()


# --- the commands' arguments -----------------------------------------------------------------


def one_line_error(r: object, code: int, *phrases: str) -> None:
    rc, err = r.returncode, r.stderr  # type: ignore[attr-defined]
    assert rc == code, (rc, err)
    assert "Traceback" not in err, err
    for p in phrases:
        assert p in err, err


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--days", "-1"], "--days"),
        (["--days", "0"], "--days"),
        (["--days", "1e9"], "--days"),
        (["--days", "nan"], "--days"),
        (["--days", "inf"], "--days"),
        (["--days", "0.0001"], "--days"),
        (["--days", "abc"], "--days"),
        (["--days", "1", "--week", "2026-W47"], "--week"),
        (["--week", "2026-W99"], "--week"),
        (["--days", "1", "--out", "/etc/passwd"], "--out: /etc/passwd is not a folder"),
        (["--days", "1", "--out", "/etc/passwd/reports"], "--out: cannot create"),
        (["--days", "1", "--out", "/proc/gpuledger"], "--out: cannot create"),
        (["--days", "1", "--source", "prometheus", "--prometheus-url", "http://h:99999"], "port"),
        (["--days", "1", "--source", "prometheus", "--prometheus-url", "http://"], "prometheus.url"),
        (["--days", "1", "--source", "prometheus", "--prometheus-url", "ftp://admin:pw@h"], "prometheus.url"),
        (["--days", "1", "--source", "prometheus", "--prometheus-url", "http://a b"], "prometheus.url"),
    ],
)
def test_bad_report_arguments_exit_2_naming_the_argument(tmp_path: Path, args: list[str], phrase: str) -> None:
    r = run_cli(
        "report", *args, "--history", str(tmp_path / "none.db"), *([] if "--out" in args else ["--out", str(tmp_path)])
    )
    one_line_error(r, 2, phrase)
    assert "pw" not in r.stderr.replace("pwd", "")
    assert not list(tmp_path.glob("gpuledger-last-*"))


@pytest.mark.integration
def test_the_report_names_a_missing_ca_file_and_an_unreadable_token_file(tmp_path: Path) -> None:
    base = [
        "report",
        "--days",
        "1",
        "--source",
        "prometheus",
        "--prometheus-url",
        "http://127.0.0.1:1",
        "--out",
        str(tmp_path),
    ]
    r = run_cli(*base, env={"GPULEDGER_PROMETHEUS__CA_FILE": str(tmp_path / "missing.pem")})
    one_line_error(r, 2, "prometheus.ca_file", "missing.pem")
    bad_pem = tmp_path / "ca.pem"
    bad_pem.write_text("not a certificate")
    r = run_cli(*base, env={"GPULEDGER_PROMETHEUS__CA_FILE": str(bad_pem)})
    one_line_error(r, 2, "prometheus.ca_file", "not a PEM")
    token = tmp_path / "token"
    token.write_bytes(b"\xff\xfe binary")
    r = run_cli(*base, env={"GPULEDGER_PROMETHEUS__BEARER_TOKEN_FILE": str(token)})
    one_line_error(r, 2, "prometheus.bearer_token_file", "not UTF-8")
    r = run_cli(*base, env={"GPULEDGER_PROMETHEUS__BEARER_TOKEN_FILE": str(tmp_path)})
    one_line_error(r, 2, "bearer_token_file")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("what", "body", "phrase"), WRONG[:4] + WRONG[11:12], ids=[w[0] for w in WRONG[:4] + WRONG[11:12]]
)
def test_the_report_on_a_wrong_shaped_prometheus_exits_1_with_one_line(
    fake: FakePrometheus, tmp_path: Path, what: str, body: bytes, phrase: str
) -> None:
    fake.answer = Answer(body)
    url = fake.url.replace("http://", "http://admin:s3cr3t@")
    args = ["report", "--days", "1", "--source", "prometheus", "--prometheus-url", url, "--out", str(tmp_path)]
    r = run_cli(*args, "--log-level", "debug")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "s3cr3t" not in r.stderr + r.stdout, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("gpuledger report: source unavailable:") and phrase in last and fake.url in last, last
    assert not list(tmp_path.iterdir())


@pytest.mark.integration
def test_bench_json_onto_an_unwritable_path_exits_2_before_running(tmp_path: Path) -> None:
    r = run_cli("bench", "allreduce", "--json", "/nonexistent/dir/out.json")
    one_line_error(r, 2, "--json", "/nonexistent/dir")
    r = run_cli("bench", "allreduce", "--json", str(tmp_path))
    one_line_error(r, 2, "--json", "is a folder")


@pytest.mark.integration
def test_demo_dir_onto_a_file_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    r = run_cli("demo", "--dir", str(f), "--no-serve")
    one_line_error(r, 2, "--dir", "is not a folder")


@pytest.mark.integration
def test_up_with_equal_ports_exits_2_naming_both(tmp_path: Path) -> None:
    h = str(tmp_path / "h.db")
    r = run_cli(
        "up", "--reader", "replay", "--history", h, "--listen", ":18931", "--analytics-listen", "127.0.0.1:18931"
    )
    one_line_error(r, 2, "--analytics-listen", "127.0.0.1:18931", "--listen")


@pytest.mark.integration
def test_up_names_the_address_already_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = f"127.0.0.1:{busy.getsockname()[1]}"
        h = str(tmp_path / "h.db")
        r = run_cli("up", "--reader", "replay", "--history", h, "--listen", "127.0.0.1:0", "--analytics-listen", taken)
    one_line_error(r, 1, "cannot listen on", taken)


def test_replay_reader_refuses_a_bad_capture_before_serving(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(next(c for c in CASES if c.name == "NaN time").content)
    with pytest.raises(CaptureError, match=":3: bad or missing field t"):
        ReplayReader(p)


@pytest.mark.integration
def test_answers_that_fit_one_by_one_wait_for_each_other_instead_of_failing(fake: FakePrometheus) -> None:
    """Three answers of ~0.45 MiB under a 1 MiB cap, read at once: together over it, so one waits
    for the others (at 10,000 GPUs four 24 MB per-job answers failed the report's job figures)."""
    fake.answer = Answer(series=3_000, declare_length=False, pause=0.01)
    size = fake.answer.length()
    assert 0.4 * 2**20 < size < 0.5 * 2**20
    api = api_for(fake, max_response_bytes=2**20, concurrency=3)
    answers = api.query_many([("up", 0)] * 3)
    assert [len(a) for a in answers] == [3_000] * 3
    assert (api._reading, getattr(api, "_readers", 0), getattr(api, "_waiting", 0)) == (0, 0, 0)  # all given back
