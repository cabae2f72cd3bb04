"""The Prometheus client's connection settings against a real Prometheus serving HTTPS with basic
auth (its own web config), and the bearer token as a header."""

from __future__ import annotations

import hashlib
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import bcrypt
import httpx
import pytest

from analytics.config import PrometheusSettings
from analytics.sources import SourceUnavailable
from analytics.sources.promanswer import QueryError
from analytics.sources.promapi import PromAPI
from tests.support.http import free_port, make_cert
from tests.support.tools import require_binary
from tests.support.wait import wait_until


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Prometheus on HTTPS (self-signed) with user ``reports`` / ``s3cret``."""
    binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("secure")
    cert, key = make_cert(tmp)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (tmp / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:\n  reports: '{hashed}'\n"
    )
    (tmp / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={tmp / 'web.yml'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"https://127.0.0.1:{port}"

    def ready() -> bool:
        ctx = ssl.create_default_context(cafile=str(cert))
        try:
            return httpx.get(url + "/-/ready", verify=ctx, auth=("reports", "s3cret"), timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(ready, 30), "prometheus did not start"
        yield url, cert
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _api(url: str, **kw: object) -> PromAPI:
    return PromAPI(PrometheusSettings(url=url, retries=0, timeout=5, **kw))


@pytest.mark.integration
def test_https_with_basic_auth_and_a_ca_file(secure: tuple[str, Path]) -> None:
    url, cert = secure
    with closing(_api(url, username="reports", password="s3cret", ca_file=cert)) as api:
        [series] = api.query("vector(7)", time.time())
    assert series.value == 7.0
    # verify_tls = false: the self-signed certificate is accepted without its CA
    with closing(_api(url, username="reports", password="s3cret", verify_tls=False)) as api:
        assert api.query("vector(1)", time.time())


@pytest.mark.integration
def test_refusals_are_clear(secure: tuple[str, Path]) -> None:
    url, cert = secure
    wrong = closing(_api(url, username="reports", password="wrong", ca_file=cert))
    with wrong as api, pytest.raises(QueryError, match="401"):  # wrong password: refused, not retried
        api.query("vector(1)", time.time())
    no_ca = closing(_api(url, username="reports", password="s3cret"))
    with no_ca as api, pytest.raises(SourceUnavailable, match="CERTIFICATE_VERIFY_FAILED"):  # the certificate fails
        api.query("vector(1)", time.time())


TOKEN = "eyJhbGciOiJIUzI1NiJ9." + hashlib.sha256(b"token").hexdigest() * 24  # a long bearer token (a JWT)


@pytest.mark.parametrize(
    ("auth", "secrets"),
    [
        ({"username": "fleet", "password": "correct horse"}, ["correct horse", "ZmxlZXQ6Y29ycmVjdCBob3JzZQ=="]),
        ({"bearer_token": TOKEN}, [TOKEN, TOKEN[40:120]]),
    ],
    ids=["basic", "bearer"],
)
@pytest.mark.parametrize(
    "answer",
    [
        lambda auth: httpx.Response(401, text=f'cannot find the provided auth token "{auth}" in config'),
        lambda auth: httpx.Response(400, text="x" * 60 + auth),  # the secret across the excerpt's cut
        lambda auth: httpx.Response(403, json={"status": "error", "errorType": "auth", "error": f"denied: {auth}"}),
        lambda auth: httpx.Response(200, json={"status": auth}),
    ],
    ids=["text", "text-at-the-cut", "json-error", "json-status"],
)
def test_a_server_quoting_the_credentials_back_never_gets_them_printed(
    auth: dict[str, str], secrets: list[str], answer: object
) -> None:
    """A gateway that refuses credentials may quote them (vmauth: 'cannot find the provided auth
    token "Basic ..."'): the error names the refusal with the credentials as ***, none of them whole
    or cut."""

    def server(request: httpx.Request) -> httpx.Response:
        return answer(request.headers["Authorization"])  # type: ignore[operator,no-any-return]

    api = PromAPI(
        PrometheusSettings(url="http://gateway.invalid/prometheus", retries=0, **auth),
        transport=httpx.MockTransport(server),
    )
    with closing(api), pytest.raises(QueryError) as e:
        api.query("up", 0)
    said = str(e.value)
    assert "***" in said, said
    for secret in secrets:
        assert secret not in said and secret[:12] not in said, said


def test_bearer_token_from_settings_or_file(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})

    (tmp_path / "token").write_text("from-file\n")
    for kw in ({"bearer_token": "abc"}, {"bearer_token_file": tmp_path / "token"}):
        s = PrometheusSettings(url="http://prometheus.invalid", **kw)
        PromAPI(s, transport=httpx.MockTransport(server)).query("up", 0)
    assert seen == ["Bearer abc", "Bearer from-file"]


def test_long_queries_are_posted(tmp_path: Path) -> None:
    methods: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        methods.append(request.method)
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})

    api = PromAPI(PrometheusSettings(url="http://prometheus.invalid"), transport=httpx.MockTransport(server))
    api.query("up", 0)
    api.query('up{uuid=~"' + "|".join(f"GPU-{i:036d}" for i in range(1024)) + '"}', 0)
    assert methods == ["GET", "POST"]


def test_extra_headers_go_with_every_query_a_tenant_for_mimir() -> None:
    seen: list[tuple[str | None, str | None]] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("X-Scope-OrgID"), request.headers.get("User-Agent")))
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})

    s = PrometheusSettings(url="http://mimir.invalid/prometheus", headers={"X-Scope-OrgID": "team-a|team-b"})
    api = PromAPI(s, transport=httpx.MockTransport(server))
    api.query("up", 0)
    api.query('up{uuid=~"' + "|".join(f"GPU-{i:036d}" for i in range(1024)) + '"}', 0)  # POSTed: the same
    assert seen == [("team-a|team-b", "gpuledger-analytics")] * 2


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"X Scope": "a"}, "is not an HTTP header name"),
        ({"": "a"}, "is not an HTTP header name"),
        ({"Authorization": "Bearer x"}, "gpuledger's own"),
        ({"user-agent": "me"}, "gpuledger's own"),
        ({"X-Scope-OrgID": "a\r\nX-Evil: 1"}, "without line breaks"),
        ({"X-Scope-OrgID": "caf\u00e9"}, "printable ASCII"),
    ],
)
def test_bad_headers_are_refused_naming_the_field(headers: dict[str, str], said: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in headers.items())  # TOML's basic strings
    cfg.write_text(f"[prometheus]\nheaders = {{{table}}}\n")
    r = subprocess.run(
        [sys.executable, "-m", "gpuledger", "report", "--config", str(cfg), "--source", "prometheus"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    [line] = [x for x in r.stderr.splitlines() if x.strip().startswith("prometheus.headers:")]  # the field, once
    assert said in line, r.stderr
