"""The exporter and the CLI as real child processes; benchmark process groups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.http import free_port, http_get
from tests.support.paths import REPO
from tests.support.wait import wait_until


def process_group_gone(pgid: int) -> bool:
    from exporter.benchmarks.runner import group_alive

    return not group_alive(pgid)


class ExporterProcess:
    """``python -m exporter`` as a child process on a free loopback port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{self.port}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
            cwd=REPO,
        )

    def wait_ready(self, timeout: float = 20.0, probe: str = "/livez") -> None:
        """Wait until ``probe`` answers 200: by default /livez, the process serves (its first
        sampling round is done by then); "/readyz" also wants NVML up and the sampler fresh."""
        ok = wait_until(lambda: http_get(self.url + probe, timeout=1)[0] == 200, timeout)
        if not ok:
            self.stop()
            raise AssertionError(f"exporter did not answer 200 on {probe}:\n{self.output}")

    def metrics(self) -> str:
        return http_get(self.url + "/metrics")[2].decode()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None and not self.proc.stdout.closed:  # stop() may run twice
            with self.proc.stdout:
                self.output = self.proc.stdout.read()
        return self.output

    output = ""


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=timeout,
    )


def processes_with(tag: str) -> list[int]:
    """The processes whose command line holds ``tag`` (a test's marker argument)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in cmdline:
            found.append(int(pid))
    return found
