"""A real Prometheus (Debian's package) started for a test, on loopback, in a temp dir."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.http import free_port, http_get
from tests.support.tools import promtool, require_binary
from tests.support.wait import wait_until

CACHE_ENV = "GPULEDGER_TEST_BLOCKS"  # a folder shared by the run's workers (tests/conftest.py sets it)


def _backfill(openmetrics: Path, data: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics`` into ``data``. Many modules backfill the same
    synthetic fleet: where ``$GPULEDGER_TEST_BLOCKS`` names a folder, each distinct file becomes
    blocks once a run (under a lock: the workers never build one twice) and each server gets a copy
    (not links: Prometheus compacts and deletes the blocks of its data folder)."""
    binary = require_binary("promtool")

    def create(out: Path) -> None:
        cmd = ["tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h"]
        promtool([*cmd, str(openmetrics), str(out)], check=True, capture_output=True, timeout=600)

    cache = os.environ.get(CACHE_ENV)
    if not cache:
        create(data)
        return
    h = hashlib.sha256(str(binary).encode())
    with openmetrics.open("rb") as f:
        h.update(hashlib.file_digest(f, "sha256").digest())
    blocks = Path(cache) / h.hexdigest()[:32]
    blocks.parent.mkdir(parents=True, exist_ok=True)
    with (blocks.parent / f"{blocks.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (blocks / ".whole").exists():
            shutil.rmtree(blocks, ignore_errors=True)  # a build stopped half-way
            create(blocks)
            (blocks / ".whole").touch()
    for block in blocks.iterdir():
        if block.is_dir():
            shutil.copytree(block, data / block.name)


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
        _backfill(openmetrics, workdir / "data")
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
