"""A real VictoriaMetrics (Debian's package, single node) started for a test, on loopback, in a temp dir.

Past data goes in through ``/api/v1/import/prometheus`` (text lines ``name{labels} value TIMESTAMP_MS``),
then ``/internal/force_flush`` makes it searchable. It answers ``/api/v1/query`` and
``/api/v1/query_range`` as Prometheus does."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from tests.support.http import free_port, http_get
from tests.support.tools import require_binary
from tests.support.wait import wait_until

CHUNK = 4 << 20  # bytes per import request


class VictoriaMetricsServer:
    def __init__(self, workdir: Path) -> None:
        binary = require_binary("victoria-metrics")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (workdir / "victoria-metrics.log").open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"-storageDataPath={workdir / 'vm-data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=100y",
                "-search.disableCache",  # each query sees the data imported before it
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if not wait_until(lambda: http_get(self.url + "/health", timeout=1)[0] == 200, 30):
            self.stop()
            raise AssertionError("victoria-metrics did not become ready")

    def _post(self, body: bytes) -> None:
        req = urllib.request.Request(f"{self.url}/api/v1/import/prometheus", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status in (200, 204), r.status

    def import_lines(self, lines: Iterable[str]) -> int:
        """Import ``name{labels} value TIMESTAMP_MS`` lines and flush; returns the number of lines."""
        n, buf, size = 0, [], 0
        for line in lines:
            buf.append(line)
            size += len(line) + 1
            n += 1
            if size >= CHUNK:
                self._post(("\n".join(buf) + "\n").encode())
                buf, size = [], 0
        if buf:
            self._post(("\n".join(buf) + "\n").encode())
        code, _, body = http_get(f"{self.url}/internal/force_flush", timeout=60)
        assert code == 200, body
        return n

    @classmethod
    def imported(cls, workdir: Path, lines_file: Path) -> VictoriaMetricsServer:
        """A VictoriaMetrics holding the samples of an import file (one line per sample)."""
        server = cls(workdir)
        try:
            with lines_file.open() as f:
                server.import_lines(line.rstrip("\n") for line in f if line.strip())
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class VmAuthGateway:
    """Debian's vmauth in front of ``upstream``: only ``user:password`` gets through, and only to
    paths under ``prefix`` (the request's path is passed on whole). The shape of a query gateway with
    a path prefix: Mimir's query frontend at ``/prometheus``, Grafana Cloud's ``/api/prom``; a client
    that drops the prefix or the credentials is refused."""

    def __init__(self, workdir: Path, upstream: str, prefix: str, user: str, password: str) -> None:
        binary = require_binary("vmauth")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{prefix}"
        cfg = workdir / "vmauth.yml"
        cfg.write_text(
            "users:\n"
            f"  - username: {json.dumps(user)}\n"
            f"    password: {json.dumps(password)}\n"
            "    url_map:\n"
            f"      - src_paths: [{json.dumps(prefix + '/api/v1/.+')}]\n"
            f"        url_prefix: {json.dumps(upstream)}\n"
        )
        self.log = (workdir / "vmauth.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"-auth.config={cfg}", f"-httpListenAddr=127.0.0.1:{self.port}"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if not wait_until(lambda: http_get(f"http://127.0.0.1:{self.port}/health", timeout=1)[0] == 200, 30):
            self.stop()
            raise AssertionError("vmauth did not become ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
        self.log.close()
