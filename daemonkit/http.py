"""The HTTP server both daemons run: threads per request, optional TLS and basic auth with
bcrypt-hashed passwords (the exporter-toolkit convention), gzip when the client accepts it.

What it serves is a :class:`Site`: /metrics, /healthz (never behind auth, for probes), a landing
page at / and any pages of the site's own. The server knows nothing of GPUs or reports.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import bcrypt

log = logging.getLogger(__name__)


@dataclass
class WebOptions:
    host: str = ""
    port: int = 0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict)  # user -> bcrypt hash


class Site(Protocol):
    """What a server serves: /metrics, /healthz, a landing page and any pages of its own."""

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        """The /metrics body (gzipped when ``gzip_ok``) and its content type."""
        ...

    def health(self) -> tuple[bool, dict[str, object]]: ...
    def landing(self) -> str: ...
    def page(self, path: str) -> tuple[bytes, str] | None:
        """(body, content type) for another path, or None for 404."""
        ...


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
        if self._tls is None:
            super().finish_request(request, client_address)
            return
        try:
            tls = self._tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, e)
            return
        # The wrapper took over the connection: the server closes only the plain socket it
        # accepted, so the wrapper is closed here, or its descriptor stays open until collected.
        with tls:
            super().finish_request(tls, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        scheme = "https" if self._tls else "http"
        shown = "localhost" if host in ("::", "0.0.0.0", "") else str(host)
        return f"{scheme}://{'[' + shown + ']' if ':' in shown else shown}:{port}"


def serve(server: MetricsServer, name: str = "gpuledger-http") -> threading.Thread:
    """Serve in a daemon thread; stop with ``server.shutdown()`` and ``server.server_close()``."""
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name=name, daemon=True)
    th.start()
    return th
