"""Loopback ports, HTTP requests, a self-signed certificate."""

from __future__ import annotations

import random
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.tools import require_binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def lasting_port() -> int:
    """A free port that no other process is handed meanwhile: below the kernel's ephemeral range
    (``free_port``'s, and every outgoing connection's local port), picked at random in
    [20000, that range's start) and checked free now. For a port bound long after it is chosen
    (torchrun's rendezvous store, a minute into a scaling run): an ephemeral one was taken by
    another test's connection in between, and the store failed (CI, 2026-12-07)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    for _ in range(100):
        port = random.randrange(20000, max(low, 20001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def http_get(
    url: str, headers: dict[str, str] | None = None, timeout: float = 5.0, context: object = None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:  # type: ignore[call-overload]
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def make_cert(tmp: Path) -> tuple[Path, Path]:
    openssl = require_binary("openssl")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
