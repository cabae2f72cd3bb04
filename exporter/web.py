"""The HTTP endpoint: /metrics (cached exposition), /healthz, a landing page; optional TLS
and basic auth with bcrypt-hashed passwords (the exporter-toolkit convention)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import bcrypt

from exporter import __version__
from exporter.collector import Exposition
from exporter.state import Snapshot

log = logging.getLogger(__name__)


@dataclass
class WebOptions:
    host: str = ""
    port: int = 0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict)  # user -> bcrypt hash


class BasicAuth:
    """Checks Basic credentials against bcrypt hashes; remembers credentials that passed so a
    15-second scrape does not pay bcrypt's deliberate ~100 ms every time."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {u: h.encode() for u, h in users.items()}
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    def check(self, header: str | None) -> bool:
        if not self._users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self._users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(user.encode() + b"\0" + password.encode() + b"\0" + hashed).digest()
        with self._lock:
            if key in self._ok:
                return True
        if not bcrypt.checkpw(password.encode(), hashed):
            return False
        with self._lock:
            if len(self._ok) > 1024:
                self._ok.clear()
            self._ok.add(key)
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._healthz()
            return
        if not self.server.auth.check(self.headers.get("Authorization")):
            self._send(
                401,
                b"unauthorized\n",
                "text/plain; charset=utf-8",
                {"WWW-Authenticate": 'Basic realm="gpuledger"'},
            )
            return
        if path == "/metrics":
            gzip_ok = "gzip" in (self.headers.get("Accept-Encoding") or "")
            body, ctype = self.server.site.render(self.headers.get("Accept"), gzip_ok)
            self._send(200, body, ctype, {"Content-Encoding": "gzip"} if gzip_ok else None)
        elif path == "/":
            self._send(200, self.server.site.landing().encode(), "text/html; charset=utf-8")
        elif (page := self.server.site.page(path)) is not None:
            self._send(200, *page)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _healthz(self) -> None:
        ok, info = self.server.site.health()
        self._send(200 if ok else 503, (json.dumps(info) + "\n").encode(), "application/json")

    def _send(self, code: int, body: bytes, ctype: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class Site(Protocol):
    """What a server serves: /metrics, /healthz, a landing page and any pages of its own."""

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]: ...
    def health(self) -> tuple[bool, dict[str, object]]: ...
    def landing(self) -> str: ...
    def page(self, path: str) -> tuple[bytes, str] | None:
        """(body, content type) for another path, or None for 404."""
        ...


class ExporterSite:
    """The exporter's pages, all read from the latest snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot], exposition: Exposition, stale_after: float = 10.0) -> None:
        self.snapshot = snapshot
        self.exposition = exposition
        self.stale_after = stale_after

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        return self.exposition.render(accept, gzip_ok)

    def health(self) -> tuple[bool, dict[str, object]]:
        s = self.snapshot()
        age = time.monotonic() - s.taken_monotonic if s.seq else None
        ok = age is not None and age <= self.stale_after
        return ok, {
            "status": "ok" if ok else "stale",
            "last_sample_age_seconds": None if age is None else round(age, 3),
            "stale_after_seconds": self.stale_after,
            "nvml_up": s.nvml_up,
            "gpus": len(s.gpus),
            "gpus_up": sum(g.up for g in s.gpus),
        }

    def page(self, path: str) -> tuple[bytes, str] | None:
        return None

    def landing(self) -> str:
        s = self.snapshot()
        esc = html.escape
        rows = "".join(
            f"<tr><td>{g.info.index}</td><td>{esc(g.info.model)}</td><td><code>{esc(g.info.uuid)}</code></td>"
            f"<td>{'up' if g.up else 'down'}</td></tr>"
            for g in s.gpus
        )
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>gpuledger exporter</title></head><body>"
            f"<h1>gpuledger exporter {esc(__version__)}</h1>"
            f"<p>Reader: <b>{esc(s.reader)}</b> · NVML up: {int(s.nvml_up)} · host {esc(s.hostname)}</p>"
            "<p><a href='/metrics'>/metrics</a> · <a href='/healthz'>/healthz</a></p>"
            "<table border='1' cellpadding='4'><tr><th>gpu</th><th>model</th><th>uuid</th><th>state</th></tr>"
            f"{rows}</table></body></html>"
        )


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    request_timeout = 30.0

    def __init__(self, opts: WebOptions, site: Site) -> None:
        self.opts = opts
        self.site = site
        self.auth = BasicAuth(opts.basic_auth_users)
        self._tls: ssl.SSLContext | None = None
        if opts.tls_cert_file:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(opts.tls_cert_file, opts.tls_key_file)
            self._tls = ctx
        if opts.host:
            self.address_family = socket.AF_INET6 if ":" in opts.host else socket.AF_INET
            super().__init__((opts.host, opts.port), _Handler)
            return
        try:  # no host given: every address, IPv6 and IPv4 where the kernel has IPv6
            self.address_family = socket.AF_INET6
            super().__init__(("::", opts.port), _Handler)
        except OSError:
            self.address_family = socket.AF_INET
            super().__init__(("0.0.0.0", opts.port), _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:  # "::" serves IPv4 too
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the request's own thread, so a slow client
        # cannot hold up accept().
        request.settimeout(self.request_timeout)
        if self._tls is not None:
            try:
                request = self._tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS handshake with %s failed: %s", client_address, e)
                return
        super().finish_request(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        scheme = "https" if self._tls else "http"
        shown = "localhost" if host in ("::", "0.0.0.0", "") else str(host)
        return f"{scheme}://{'[' + shown + ']' if ':' in shown else shown}:{port}"


def serve(server: MetricsServer) -> threading.Thread:
    th = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.5},
        name="gpuledger-http",
        daemon=True,
    )
    th.start()
    return th
