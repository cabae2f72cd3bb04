"""A real Prometheus (Debian's package) started for a test, on loopback, in a temp dir."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.http import free_port, http_get
from tests.support.tools import require_binary
from tests.support.wait import wait_until


class PrometheusServer:
    def __init__(
        self,
        workdir: Path,
        targets: list[str] | None = None,
        scrape_interval: str = "1s",
        retention: str = "1d",
        jobs: dict[str, list[str]] | None = None,
    ) -> None:
        """``targets`` are scraped as job ``gpuledger``; ``jobs`` adds more scrape jobs (name -> targets)."""
        binary = require_binary("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = workdir / "prometheus.yml"
        scrape = (
            f"scrape_configs:\n  - job_name: gpuledger\n    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
            if targets
            else ""
        )
        if jobs:
            scrape = scrape or "scrape_configs:\n"
            for name, job_targets in jobs.items():
                scrape += f"  - job_name: {name}\n    static_configs: [{{targets: {json.dumps(job_targets)}}}]\n"
        cfg.write_text(f"global:\n  scrape_interval: {scrape_interval}\n  scrape_timeout: {scrape_interval}\n" + scrape)
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.retention.time={retention}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if not wait_until(lambda: http_get(self.url + "/-/ready", timeout=1)[0] == 200, 30):
            self.stop()
            raise AssertionError("prometheus did not become ready")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        code, _, body = http_get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10)
        data = json.loads(body)
        assert code == 200 and data["status"] == "success", data
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def api(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """GET /api/v1/``path``: the decoded answer, errors included (``status`` is ``error``)."""
        _, _, body = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=30)
        answer: dict[str, Any] = json.loads(body)
        return answer

    @classmethod
    def backfilled(
        cls,
        workdir: Path,
        openmetrics: Path,
        targets: list[str] | None = None,
        jobs: dict[str, list[str]] | None = None,
        scrape_interval: str = "1s",
    ) -> PrometheusServer:
        """A Prometheus holding the samples of an OpenMetrics file (past data: retention 10y), scraping
        ``targets`` and ``jobs`` (see ``__init__``) besides. Live samples must come after the backfilled
        ones (the head accepts nothing older than the newest block)."""
        promtool = require_binary("promtool")
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--max-block-duration=24h",
                str(openmetrics),
                str(workdir / "data"),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
        return cls(workdir, targets, scrape_interval, retention="10y", jobs=jobs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
