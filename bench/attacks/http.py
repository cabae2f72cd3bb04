"""Attacks on the HTTP server both daemons run, against a real exporter (replay reader) in a child
process on loopback: 100 concurrent scrapers, many idle connections, slowloris, descriptors
exhausted, HEAD, malformed request lines, a long password, control bytes in the path.

    python -m bench.attacks.http                   # the rows, as bench/hostile.py prints them
    python -m bench.attacks.http load --backlog 5  # only the 100-scraper load, old backlog

The child is ``python -m bench.attacks.http serve``: the exporter's own command line, after setting
the server's listen backlog (``--backlog``; 5 was socketserver's default, before issue 12).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.attacks import Row  # noqa: E402
from bench.common import percentile  # noqa: E402

HOST = "127.0.0.1"
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
CRLF2 = b"\r\n\r\n"
TIMEOUT = 10.0  # a scrape that takes longer counts as a timeout (Prometheus' default scrape_timeout)
# bcrypt of "secret", cost 4 (cheap on purpose: the attacks are on the server, not on bcrypt)
HASH = "$2b$04$9fsvXKUQxhaLybQYNHbCNOXkEpoXAIZXLSuWw4.1YtQDPxWmzAeE2"


# ---------------------------------------------------------------------------------------------
# the exporter under attack


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def exporter(backlog: int | None = None, nofile: int | None = None, auth: bool = False) -> Iterator[Daemon]:
    """A replay exporter on a free loopback port; ``nofile`` sets its soft and hard descriptor limit."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="gpuledger-http-") as tmp:
        log = Path(tmp) / "exporter.log"
        cmd = [sys.executable, "-m", "bench.attacks.http", "serve"]
        if backlog is not None:
            cmd += ["--backlog", str(backlog)]
        cmd += ["--", "--reader", "replay", "--no-history", "--listen", f"{HOST}:{port}", "--log-level", "debug"]
        if auth:
            conf = Path(tmp) / "web.toml"
            conf.write_text(f'[web.basic_auth_users]\nalice = "{HASH}"\n')
            cmd += ["--config", str(conf)]

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
        d = Daemon(proc, port, log)
        try:
            _wait_ready(d)
            yield d
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(d: Daemon) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if d.proc.poll() is not None:
            raise RuntimeError(f"exporter exited {d.proc.returncode}: {d.log_text()[-2000:]}")
        with contextlib.suppress(OSError):
            if b" 200 " in raw(d.port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", timeout=2)[:20]:
                return
        time.sleep(0.2)
    raise RuntimeError("exporter did not answer /healthz within 30 s")


def serve(argv: list[str]) -> int:
    """The child: the exporter's command line, after setting the listen backlog."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--backlog", type=int)
    args, rest = ap.parse_known_args(argv)
    from daemonkit.http import MetricsServer
    from exporter.cli import main as exporter_main

    if args.backlog is not None:
        MetricsServer.request_queue_size = args.backlog
    return exporter_main([a for a in rest if a != "--"])


# ---------------------------------------------------------------------------------------------
# clients


def raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes (or ``timeout``)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


async def _scrape(port: int) -> float | None:
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(TIMEOUT):
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(SCRAPE)
            body = await reader.read()
            writer.close()
        return time.monotonic() - t0 if body.startswith(b"HTTP/1.1 200") else None
    except (TimeoutError, OSError):
        return None


async def _load(port: int, scrapers: int, seconds: float) -> dict[str, float]:
    times: list[float] = []
    failed = 0
    stop = time.monotonic() + seconds

    async def one() -> None:
        nonlocal failed
        while time.monotonic() < stop:
            t = await _scrape(port)
            if t is None:
                failed += 1
            else:
                times.append(t)

    await asyncio.gather(*(one() for _ in range(scrapers)))
    return {
        "scrapes": len(times) + failed,
        "timeouts": failed,
        "p50_ms": 1000 * percentile(times, 50) if times else float("nan"),
        "p99_ms": 1000 * percentile(times, 99) if times else float("nan"),
        "max_ms": 1000 * max(times) if times else float("nan"),
    }


def load(port: int, scrapers: int = 100, seconds: float = 10.0) -> dict[str, float]:
    """``scrapers`` clients scraping /metrics back to back for ``seconds``, a new connection each."""
    return asyncio.run(_load(port, scrapers, seconds))


def idle(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that send nothing (those the server refused are left out)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 256), hard))
    out = []
    for _ in range(n):
        try:
            s = socket.create_connection((HOST, port), timeout=5)
        except OSError:
            continue
        out.append(s)
    return out


def closed_by_server(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has closed (EOF, reset, or a 503 then EOF)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            data = s.recv(4096)
            n += data == b"" or data.startswith(b"HTTP/1.1 503")
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


# ---------------------------------------------------------------------------------------------
# the attacks


def _load_row(label: str, r: dict[str, float], ok: bool) -> Row:
    return Row(
        "http",
        f"100 scrapers for 10 s ({label})",
        "no timeout, max under 1 s",
        f"{r['scrapes']:.0f} scrapes, {r['timeouts']:.0f} timeouts, p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms",
        ok,
    )


def attack_load(d: Daemon) -> Row:
    r = load(d.port)
    return _load_row("backlog 128", r, r["timeouts"] == 0 and r["max_ms"] < 1000)


def attack_idle(d: Daemon, n: int = 1000) -> Row:
    cpu0 = d.cpu_seconds()
    socks = idle(d.port, n)
    try:
        threads = 0
        for _ in range(10):  # until the accept loop has caught up
            time.sleep(0.5)
            if d.threads() == threads:
                break
            threads = d.threads()
        rss = d.rss_mib()
        t0 = time.monotonic()
        scrape = raw(d.port, SCRAPE, timeout=TIMEOUT)
        took = time.monotonic() - t0
        cpu = d.cpu_seconds() - cpu0
    finally:
        _close(socks)
    ok = scrape.startswith(b"HTTP/1.1 200") and threads < 600
    return Row(
        "http",
        f"{n} idle connections",
        "bounded threads, a scrape still answers",
        f"{len(socks)} open, {threads} threads, RSS {rss:.0f} MiB, scrape {scrape[:12]!r} in {1000 * took:.0f} ms, "
        f"CPU {cpu:.2f} s",
        ok,
    )


def attack_fds() -> Row:
    with exporter(nofile=128) as d:
        socks = idle(d.port, 300)
        try:
            cpu0 = d.cpu_seconds()
            time.sleep(2.0)
            cpu = (d.cpu_seconds() - cpu0) / 2.0
            scrape = raw(d.port, SCRAPE, timeout=TIMEOUT)
            refused = closed_by_server(socks)
        finally:
            _close(socks)
        lines = [x for x in d.log_text().splitlines() if "connection limit" in x or "too many open files" in x]
    ok = cpu < 0.2 and scrape.startswith(b"HTTP/1.1 200") and 1 <= len(lines) <= 3
    return Row(
        "http",
        "300 idle connections, descriptor limit 128",
        "no spin, a scrape answers, one log line",
        f"CPU {100 * cpu:.0f} % of a core, {refused} of 300 closed, scrape {scrape[:12]!r}, {len(lines)} log lines",
        ok,
    )


def attack_slowloris(d: Daemon) -> Row:
    s = socket.create_connection((HOST, d.port), timeout=5)
    t0 = time.monotonic()
    closed_after = None
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        while time.monotonic() - t0 < 20:
            s.sendall(b"X-a: b\r\n")
            time.sleep(1.0)
    except OSError:
        closed_after = time.monotonic() - t0
    finally:
        s.close()
    ok = closed_after is not None and closed_after < 15
    shown = "still open after 20 s" if closed_after is None else f"closed after {closed_after:.1f} s"
    return Row("http", "slowloris: a header line per second", "closed at the 10 s header deadline", shown, ok)


def attack_requests(d: Daemon) -> list[Row]:
    rows = []
    head = raw(d.port, b"HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    rows.append(
        Row(
            "http",
            "HEAD /metrics",
            "200, headers only",
            repr(head.split(b"\r\n")[0]) + f", {len(head.partition(CRLF2)[2])} body bytes",
            head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"),
        )
    )
    hz = raw(d.port, b"HEAD /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    rows.append(
        Row("http", "HEAD /healthz", "200, headers only", repr(hz.split(b"\r\n")[0]), hz.startswith(b"HTTP/1.1 200"))
    )
    for line in (
        b"GARBAGE\r\n\r\n",
        b"GET /metrics\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"\x16\x03\x01\x02\x00\r\n\r\n",
    ):
        got = raw(d.port, line)
        rows.append(
            Row(
                "http",
                f"request line {line[:16]!r}",
                "a status line (400 or 505)",
                repr(got[:24]),
                got.startswith((b"HTTP/1.1 400", b"HTTP/1.1 505")),
            )
        )
    server = raw(d.port, SCRAPE).split(b"\r\n\r\n")[0]
    hdr = next((h for h in server.split(b"\r\n") if h.lower().startswith(b"server:")), b"")
    rows.append(Row("http", "Server header", "no Python version", repr(hdr), b"Python" not in hdr))
    esc = raw(d.port, b"GET /\x1b[31mred\x1b[0m HTTP/1.1\r\nUser-Agent: \x1b]0;pwned\x07\r\nConnection: close\r\n\r\n")
    time.sleep(0.3)
    log = d.log_text()
    rows.append(
        Row(
            "http",
            "ESC bytes in path and User-Agent",
            "escaped in the log",
            f"{esc[:12]!r}; raw ESC in log: {chr(27) in log}",
            chr(27) not in log and "\\x1b" in log,
        )
    )
    return rows


def attack_auth() -> list[Row]:
    rows = []
    with exporter(auth=True) as d:
        for label, password in (("73-byte password", "p" * 73), ("1000-byte password", "p" * 1000)):
            token = base64.b64encode(f"alice:{password}".encode()).decode()
            got = raw(
                d.port, f"GET /metrics HTTP/1.1\r\nAuthorization: Basic {token}\r\nConnection: close\r\n\r\n".encode()
            )
            tb = "Traceback" in d.log_text()
            rows.append(
                Row(
                    "http",
                    label,
                    "401, no traceback",
                    f"{got[:12]!r}, traceback: {tb}",
                    got.startswith(b"HTTP/1.1 401") and not tb,
                )
            )
    return rows


def run() -> list[Row]:
    rows: list[Row] = []
    with exporter(backlog=5) as d:
        before = load(d.port)
    rows.append(_load_row("backlog 5, the old default", before, True))  # the figure before, for the record
    with exporter() as d:
        rows.append(attack_load(d))
        rows += attack_requests(d)
        rows.append(attack_slowloris(d))
        rows.append(attack_idle(d))
    rows.append(attack_fds())
    rows += attack_auth()
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="all", choices=["all", "load", "idle"])
    ap.add_argument("--backlog", type=int, help="listen backlog of the exporter under load")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--idle", type=int, default=1000)
    args = ap.parse_args()
    if args.what == "load":
        with exporter(backlog=args.backlog) as d:
            print(load(d.port, seconds=args.seconds))
        return 0
    if args.what == "idle":
        with exporter(backlog=args.backlog) as d:
            print(attack_idle(d, args.idle))
        return 0
    for r in run():
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
