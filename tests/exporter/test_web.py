"""The HTTP endpoint: cached /metrics off the reader, /healthz, landing page, gzip, auth, TLS."""

from __future__ import annotations

import base64
import gzip
import ssl
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from daemonkit.http import MetricsServer, WebOptions, serve
from exporter.readers.fake import FakeReader
from exporter.sampling.sampler import Sampler
from exporter.scrape.cache import RenderCache
from exporter.scrape.site import ExporterSite
from tests.support.clock import FakeMonotonic
from tests.support.http import http_get, make_cert
from tests.support.metrics import parse_metrics
from tests.support.sampling import make_sampler, step
from tests.support.wait import wait_until


def start_server(sampler: Sampler, stale_after: float = 10.0, **opts: object) -> MetricsServer:
    web = WebOptions(host="127.0.0.1", port=0, **opts)  # type: ignore[arg-type]
    site = ExporterSite(lambda: sampler.snapshot, RenderCache(lambda: sampler.snapshot), stale_after)
    srv = MetricsServer(web, site)
    serve(srv)
    return srv


@pytest.fixture
def node() -> Iterator[tuple[FakeReader, Sampler, MetricsServer]]:
    r = FakeReader(4)
    s = make_sampler(r)
    s.tick()
    step(s, r, 1.0, ticks=3)
    srv = start_server(s)
    yield r, s, srv
    srv.shutdown()
    srv.server_close()
    srv.server_close()


def test_scrapes_never_touch_the_reader(node: tuple[FakeReader, Sampler, MetricsServer]) -> None:
    r, s, srv = node
    before = dict(r.calls)
    bodies = {http_get(srv.url + "/metrics")[2] for _ in range(50)}
    assert r.calls == before  # 50 scrapes, zero reader calls
    assert len(bodies) == 1  # the same snapshot renders the same bytes
    step(s, r)
    assert http_get(srv.url + "/metrics")[2] not in bodies  # a new snapshot, a new render


def test_metrics_are_served_while_the_reader_hangs() -> None:
    r = FakeReader(2)
    s = make_sampler(r, interval=0.05)
    s.start()
    srv = start_server(s)
    try:
        before = r.calls.get("utilization", 0)
        r.hang("utilization")
        # a call counted after the hang is one stuck inside the reader
        assert wait_until(lambda: r.calls.get("utilization", 0) > before)
        codes = [http_get(srv.url + "/metrics", timeout=5)[0] for _ in range(5)]
        assert codes == [200] * 5  # a scrape that waited on the reader would never return
        assert http_get(srv.url + "/healthz", timeout=5)[0] == 200
    finally:
        r.release()
        srv.shutdown()
        srv.server_close()
        s.stop()


def test_gzip_and_plain_bodies_agree(node: tuple[FakeReader, Sampler, MetricsServer]) -> None:
    _, _, srv = node
    code, headers, zipped = http_get(srv.url + "/metrics", {"Accept-Encoding": "gzip"})
    _, _, plain = http_get(srv.url + "/metrics")
    assert code == 200 and headers["Content-Encoding"] == "gzip"
    ours = [line for line in plain.decode().splitlines() if "gpuledger_" in line]
    assert [line for line in gzip.decompress(zipped).decode().splitlines() if "gpuledger_" in line] == ours
    assert parse_metrics(plain.decode())["gpuledger_nvml_up"][()] == 1.0


def test_healthz_is_200_while_fresh_and_503_when_stale(frozen_monotonic: FakeMonotonic) -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    srv = start_server(s, stale_after=0.3)
    try:
        code, _, body = http_get(srv.url + "/healthz")
        assert code == 200 and b'"status": "ok"' in body and b'"gpus_up": 1' in body
        frozen_monotonic.advance(0.4)  # the sampler has stopped ticking
        code, _, body = http_get(srv.url + "/healthz")
        assert code == 503 and b'"status": "stale"' in body
        s.tick()
        assert http_get(srv.url + "/healthz")[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()


def test_landing_page_and_404(node: tuple[FakeReader, Sampler, MetricsServer]) -> None:
    r, _, srv = node
    code, headers, body = http_get(srv.url + "/")
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert "href='/metrics'" in page and r.gpus[3].uuid in page
    assert "GPUs up" in page and "4 / 4" in page and "fake" in page  # the snapshot's figures, not a bare list
    assert http_get(srv.url + "/nope")[0] == 404


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth_with_bcrypt_hashes() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    srv = start_server(s, basic_auth_users={"prom": hashed})
    try:
        code, headers, _ = http_get(srv.url + "/metrics")
        assert code == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert http_get(srv.url + "/metrics", _basic("prom", "wrong"))[0] == 401
        assert http_get(srv.url + "/metrics", _basic("eve", "s3cret"))[0] == 401
        assert http_get(srv.url + "/metrics", {"Authorization": "Basic !!!"})[0] == 401
        assert http_get(srv.url + "/metrics", _basic("prom", "s3cret"))[0] == 200
        assert http_get(srv.url + "/metrics", _basic("prom", "s3cret"))[0] == 200  # cached check
        assert http_get(srv.url + "/")[0] == 401
        assert http_get(srv.url + "/healthz")[0] == 200  # probes need no credentials
    finally:
        srv.shutdown()
        srv.server_close()


def test_tls(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    srv = start_server(s, tls_cert_file=str(cert), tls_key_file=str(key))
    try:
        assert srv.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(cert))
        code, _, body = http_get(srv.url + "/metrics", context=ctx)
        assert code == 200 and b"gpuledger_gpu_up" in body
        with pytest.raises(OSError):
            http_get(srv.url.replace("https", "http") + "/metrics", timeout=2)
        assert http_get(srv.url + "/healthz", context=ctx)[0] == 200  # still serving after a bad client
    finally:
        srv.shutdown()
        srv.server_close()
