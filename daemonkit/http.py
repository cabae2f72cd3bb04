"""The HTTP server both daemons run: a thread per connection, optional TLS and basic auth with
bcrypt-hashed passwords (the exporter-toolkit convention), gzip when the client accepts it.

What it serves is a :class:`Site`: /metrics, the probes (never behind auth) /healthz and its
alias /readyz (the site's readiness: 503 while what it serves is not true and current) and /livez
(200 while the process serves: a liveness probe that a restart cannot fix is a crash loop), a
landing page at / and any pages of the site's own. The server knows nothing of GPUs or reports.

Hostile clients are bounded (docs/security.md, "HTTP endpoints"): a listen backlog of 128, at most
``max_connections`` connections (below the descriptor limit, which is raised to its hard limit at
start), a deadline for the request line and headers, an idle keep-alive timeout, no busy loop when
descriptors run out, and request text escaped before it reaches a log.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import io
import ipaddress
import json
import logging
import resource
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from daemonkit.auth import BasicAuth
from daemonkit.tls import tls_context

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 65536
"""Request line and headers together; more is answered 431."""
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
LOG_CHARS = 200
"""Request text (request line, path, user agent) is cut to this many characters in a log."""


@dataclass
class WebOptions:
    host: str = ""
    port: int = 0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict)  # user -> bcrypt hash
    max_connections: int = 512  # lowered to fit the descriptor limit
    header_timeout: float = 10.0  # from a request's first byte to the end of its headers
    idle_timeout: float = 30.0  # a kept-alive connection waiting for its next request
    # Per-user access (the analytics' [analytics] access = "per_user"); the defaults change nothing.
    require_user: bool = False  # a request (probes aside) names its user (basic auth, the proxy header), else 401
    proxy_user_header: str = ""  # the header a trusted reverse proxy names its authenticated user in ("": none read)
    trusted_proxies: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network] = ()  # the header from elsewhere: 403
    metrics_users: Collection[str] | None = None  # the users /metrics answers (None: whoever passes); others 403


MAX_USER_CHARS = 256
"""A user name from a proxy's header is at most this long, printable, with no surrounding spaces."""
_USER: ContextVar[str | None] = ContextVar("gpuledger_http_user", default=None)


def current_user() -> str | None:
    """The user the request being served authenticated as (basic auth or a trusted proxy's header),
    for a :class:`Site`'s methods; None when the server knows none (no auth configured)."""
    return _USER.get()


def valid_user(name: str) -> bool:
    """Whether ``name`` can be a user's name as a proxy's header gives it."""
    return 0 < len(name) <= MAX_USER_CHARS and name.isprintable() and name == name.strip()


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A client's address as a network compares it: an IPv4-mapped IPv6 address as the IPv4 one."""
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


class Site(Protocol):
    """What a server serves: /metrics, readiness (/healthz, /readyz), a landing page and any pages
    of its own. /livez needs nothing of the site."""

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        """The /metrics body (gzipped when ``gzip_ok``) and its content type."""
        ...

    def health(self) -> tuple[bool, dict[str, object]]:
        """(ready, JSON body) for /healthz and /readyz: 200 when ready, else 503."""
        ...

    def landing(self) -> str: ...
    def page(self, path: str) -> tuple[bytes, str] | int | None:
        """(body, content type) for another path, a status to refuse it with (e.g. 403), or None for 404."""
        ...


def printable(text: object, limit: int = LOG_CHARS) -> str:
    """``text`` safe for a log line: control and other non-printable characters as ``\\xNN`` (or
    ``\\uNNNN``), backslashes doubled, cut to ``limit`` characters."""
    s = str(text)
    cut = len(s) > limit
    out = "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in s[:limit])
    return out + f"...({len(s)} chars)" if cut else out


def _escape(c: str) -> str:
    if c == "\\":
        return "\\\\"
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one (systemd's default soft limit is 1,024);
    returns the soft limit now in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.debug("cannot raise the descriptor limit from %d to %d: %s", soft, hard, e)
    return soft


def connection_limit(wanted: int, fd_soft_limit: int) -> int:
    """``wanted`` connections, or fewer to leave a quarter of the descriptors (at least 32) to
    the rest of the daemon: history, NVML, /proc, logs, child processes."""
    if fd_soft_limit == resource.RLIM_INFINITY or fd_soft_limit <= 0:
        return wanted
    return min(wanted, max(4, fd_soft_limit - max(32, fd_soft_limit // 4)))


class _HeadersTooLarge(http.client.HTTPException):
    pass


class _Once:
    """Lets a log line through at most once per ``interval`` seconds."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._last: float | None = None
        self.suppressed = 0

    def __call__(self, now: float) -> bool:
        if self._last is not None and now - self._last < self.interval:
            self.suppressed += 1
            return False
        self._last = now
        return True


@dataclass
class _Conn:
    """One accepted connection, as the accept loop sees it."""

    sock: socket.socket
    reading: bool = True  # waiting for (or reading) a request line and headers: may be evicted
    served: int = 0  # requests answered on it
    since: float = 0.0  # when it was accepted, or its last answer was sent (server clock)


class _DeadlineReader(io.RawIOBase):
    """The connection's input with deadlines: every read waits only for what is left of the
    time a request line and its headers may take, so a client trickling a byte at a time cannot
    hold the connection. Counts the bytes read for a request, to refuse oversized headers."""

    def __init__(self, sock: socket.socket, server: MetricsServer) -> None:
        self.sock = sock
        self.server = server
        self._wait_until: float | None = None
        self._header_deadline: float | None = None
        self._read = 0

    def readable(self) -> bool:
        return True

    def arm(self, wait_until: float, from_first_byte: bool) -> None:
        """A request may start until ``wait_until`` (a server clock time); its request line and
        headers are due by then too, or, ``from_first_byte``, ``header_timeout`` after its first byte."""
        self._wait_until = wait_until
        self._header_deadline = None if from_first_byte else self._wait_until
        self._read = 0

    def disarm(self) -> None:
        self._wait_until = self._header_deadline = None
        self.sock.settimeout(self.server.request_timeout)

    def readinto(self, buf: Any) -> int:
        deadline = self._header_deadline or self._wait_until
        if deadline is not None:
            left = deadline - self.server.clock()
            if left <= 0:
                raise TimeoutError("request line and headers took too long")
            self.sock.settimeout(min(left, self.server.request_timeout))
        n = self.sock.recv_into(buf)
        if self._wait_until is not None:
            if self._header_deadline is None and n:
                now = self.server.clock()
                if now > self._wait_until:  # the next request came after the idle timeout
                    raise TimeoutError("idle connection")
                self._header_deadline = now + self.server.header_timeout
            self._read += n
            if self._read > MAX_HEADER_BYTES + io.DEFAULT_BUFFER_SIZE:
                raise _HeadersTooLarge(f"request headers over {MAX_HEADER_BYTES} bytes")
        return n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # an error before the version is known still gets a status line
    server_version = "gpuledger"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: MetricsServer
    _head = False
    raw_requestline: bytes

    def version_string(self) -> str:
        return self.server_version  # no Python version

    def setup(self) -> None:
        super().setup()
        self.conn: _Conn = getattr(self.server.local, "conn", None) or _Conn(self.connection, since=self.server.clock())
        self.rfile.close()
        self.reader = _DeadlineReader(self.connection, self.server)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        self.conn.reading = True
        self._head = False
        if self.conn.served == 0:  # a new connection: request line and headers within header_timeout
            self.reader.arm(self.conn.since + self.server.header_timeout, from_first_byte=False)
        else:  # kept alive: idle_timeout after the last answer for the next request to start
            self.reader.arm(self.conn.since + self.server.idle_timeout, from_first_byte=True)
        try:
            super().handle_one_request()
        except _HeadersTooLarge:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        except OSError as e:  # reset, or shut down by the accept loop to make room
            log.debug("%s: connection closed: %s", self.address_string(), e)
            self.close_connection = True

    def parse_request(self) -> bool:
        words = self.raw_requestline.split()
        if len(words) == 2:  # HTTP/0.9 has no status line: refuse it with one
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            self.command, self.request_version = None, self.default_request_version  # type: ignore[assignment]
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 requests are not served")
            return False
        ok = super().parse_request()  # reads the headers, under the same deadline
        self.reader.disarm()
        self.conn.reading = False
        self.conn.served += 1
        if ok and (
            self.headers.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in self.headers
        ):
            self.close_connection = True  # a body is never read: do not take it for the next request
        return ok

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            self._route(path)
        except Exception as e:
            log.error(
                "%s %s: %s", self.command, printable(path), printable(repr(e)), exc_info=log.isEnabledFor(logging.DEBUG)
            )
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR)

    def do_HEAD(self) -> None:
        self._head = True
        self.do_GET()

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._send(
            405, b"method not allowed\n", "text/plain; charset=utf-8", {"Allow": "GET, HEAD", "Connection": "close"}
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _route(self, path: str) -> None:
        if path in ("/healthz", "/readyz"):
            self._healthz()
            return
        if path == "/livez":
            self._send(200, b'{"status": "alive"}\n', "application/json")
            return
        user, refused = self._identify()
        if refused:
            self._refuse_user(refused)
            return
        token = _USER.set(user)
        try:
            self._serve(path, user)
        finally:
            _USER.reset(token)

    def _identify(self) -> tuple[str | None, int]:
        """(the request's user, 0) when it may pass, else (None, 401 or 403). A trusted proxy's
        header names the user; the header from any other address is refused (403); else basic
        auth; without either, a server that requires a user answers 401."""
        opts = self.server.opts
        if opts.proxy_user_header:
            values = self.headers.get_all(opts.proxy_user_header) or []
            if values:
                addr = _address(str(self.client_address[0]))
                if addr is None or not any(addr in net for net in opts.trusted_proxies):
                    if self.server.forged_log(self.server.clock()):  # at most a line a minute
                        log.warning(
                            "%s: %s from an address that is not a trusted proxy: 403",
                            printable(self.client_address[0]),
                            opts.proxy_user_header,
                        )
                    return None, 403
                name = values[0].strip()
                return (name, 0) if len(values) == 1 and valid_user(name) else (None, 401)
        auth = self.server.auth
        if auth.enabled:
            user = auth.user(self.headers.get("Authorization"))
            return (user, 0) if user is not None else (None, 401)
        return None, 401 if opts.require_user else 0

    def _refuse_user(self, code: int) -> None:
        if code == 403:
            self._send(403, b"forbidden\n", "text/plain; charset=utf-8")
            return
        challenge = {"WWW-Authenticate": 'Basic realm="gpuledger"'} if self.server.auth.enabled else None
        self._send(401, b"unauthorized\n", "text/plain; charset=utf-8", challenge)

    def _serve(self, path: str, user: str | None) -> None:
        metrics_users = self.server.opts.metrics_users
        if path == "/metrics" and metrics_users is not None and user not in metrics_users:
            self._refuse_user(401 if user is None else 403)
        elif path == "/metrics":
            gzip_ok = "gzip" in (self.headers.get("Accept-Encoding") or "")
            body, ctype = self.server.site.render(self.headers.get("Accept"), gzip_ok)
            self._send(200, body, ctype, {"Content-Encoding": "gzip"} if gzip_ok else None)
        elif path == "/":
            self._send(200, self.server.site.landing().encode(), "text/html; charset=utf-8")
        elif isinstance(page := self.server.site.page(path), int):
            phrase = HTTPStatus(page).phrase.lower()
            self._send(page, f"{phrase}\n".encode(), "text/plain; charset=utf-8")
        elif page is not None:
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
        self.conn.since = self.server.clock()  # before the client can have the answer
        self.end_headers()
        if not self._head:
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A short plain-text error that echoes nothing of the request; the connection closes."""
        status = HTTPStatus(code)
        self.log_error("%d %s", code, message or status.phrase)
        self.close_connection = True
        body = f"{code} {status.phrase}\n".encode()
        self._send(code, body, "text/plain; charset=utf-8", {"Connection": "close"})

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if not log.isEnabledFor(logging.DEBUG):
            return
        headers = getattr(self, "headers", None)
        agent = headers.get("User-Agent", "-") if headers is not None else "-"
        code = code.value if isinstance(code, HTTPStatus) else code
        log.debug('%s "%s" %s "%s"', self.address_string(), printable(self.requestline), code, printable(agent))

    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s", self.address_string(), printable(format % args))


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the listen backlog; socketserver's 5 dropped SYNs under 100 scrapers
    request_timeout = 30.0  # one read or one whole write (sendall) on a connection
    accept_backoff = (0.05, 1.0)  # seconds asleep after accept() fails for want of descriptors

    def __init__(self, opts: WebOptions, site: Site) -> None:
        self.opts = opts
        self.site = site
        self.auth = BasicAuth(opts.basic_auth_users)
        self.header_timeout = opts.header_timeout
        self.idle_timeout = opts.idle_timeout
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep
        self.local = threading.local()
        self.fd_limit = raise_fd_limit()
        self.max_connections = connection_limit(opts.max_connections, self.fd_limit)
        self._conns: dict[int, _Conn] = {}  # id(socket) -> connection, in accept order
        self._conns_lock = threading.Lock()
        self._backoff = 0.0
        self._full_log, self._fd_log, self.forged_log = _Once(), _Once(), _Once()
        self._tls: ssl.SSLContext | None = None
        if opts.tls_cert_file:
            self._tls = tls_context(opts.tls_cert_file, opts.tls_key_file)
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

    @property
    def connections(self) -> int:
        with self._conns_lock:
            return len(self._conns)

    def get_request(self) -> tuple[socket.socket, Any]:
        """accept(), sleeping a little (longer each time, up to a second) while descriptors are
        exhausted: the listening socket stays readable, and retrying at once would spin a core."""
        try:
            got = super().get_request()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                if self._fd_log(self.clock()):
                    log.error(
                        "%s: cannot accept connections: %s (%d open here, descriptor limit %d); "
                        "backing off, scrapes wait in the listen queue",
                        self.url,
                        e.strerror,
                        self.connections,
                        self.fd_limit,
                    )
                lo, hi = self.accept_backoff
                self._backoff = min(hi, max(lo, 2 * self._backoff))
                self.sleep(self._backoff)
            raise
        self._backoff = 0.0
        return got

    def process_request(self, request: Any, client_address: Any) -> None:
        conn = self._admit(request, client_address)
        if conn is None:
            return
        t = threading.Thread(target=self._serve_connection, args=(conn, client_address), daemon=True)
        try:
            t.start()
        except RuntimeError:  # no thread to be had
            self._release(request)
            raise

    def _admit(self, request: socket.socket, client_address: Any) -> _Conn | None:
        """A slot for the connection, making room by closing the oldest one that is still waiting
        for its request (never-served ones first); with none to close, a 503 and close."""
        victim = None
        with self._conns_lock:
            if len(self._conns) >= self.max_connections:
                waiting = [c for c in self._conns.values() if c.reading]
                victim = next((c for c in waiting if c.served == 0), waiting[0] if waiting else None)
                if victim is not None:
                    del self._conns[id(victim.sock)]
            full = len(self._conns) >= self.max_connections
            if not full:
                conn = self._conns[id(request)] = _Conn(request, since=self.clock())
        if victim is not None:
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RDWR)  # its thread's read returns at once
        if (full or victim is not None) and self._full_log(self.clock()):
            log.warning(
                "%s: connection limit %d reached (descriptor limit %d): %s",
                self.url,
                self.max_connections,
                self.fd_limit,
                "closing connections that sent no request" if not full else "answering 503",
            )
        if not full:
            return conn
        self._refuse(request)
        return None

    def _refuse(self, request: socket.socket) -> None:
        try:
            if self._tls is None:
                request.setblocking(False)
                request.send(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def _release(self, request: socket.socket) -> None:
        with self._conns_lock:
            self._conns.pop(id(request), None)

    def _serve_connection(self, conn: _Conn, client_address: Any) -> None:
        self.local.conn = conn
        try:
            self.process_request_thread(conn.sock, client_address)
        finally:
            self.local.conn = None
            self._release(conn.sock)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the connection's own thread, so a slow client cannot
        # hold up accept(); it has header_timeout for each step, and counts as waiting (may be
        # closed to make room) until its request is read.
        if self._tls is None:
            request.settimeout(self.request_timeout)
            super().finish_request(request, client_address)
            return
        request.settimeout(self.header_timeout)
        try:
            tls = self._tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, printable(e))
            return
        # The wrapper took over the connection: the server closes only the plain socket it
        # accepted, so the wrapper is closed here, or its descriptor stays open until collected.
        with tls:
            super().finish_request(tls, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line for an error while serving a connection, never a traceback on stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.debug("%s: %s", client_address, printable(repr(exc)))
            return
        log.error(
            "error serving %s: %s", client_address, printable(repr(exc)), exc_info=log.isEnabledFor(logging.DEBUG)
        )

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        scheme = "https" if self._tls else "http"
        shown = "localhost" if host in ("::", "0.0.0.0", "") else str(host)
        return f"{scheme}://{'[' + shown + ']' if ':' in shown else shown}:{port}"


POLL_SECONDS = 0.1


SWITCH_INTERVAL = 0.0005
"""Seconds a Python thread may hold the interpreter before another gets a turn (Python's default
is 0.005). A scrape is a few short steps, each waiting for its turn while the sampler renders: at
the default, 56 MIG instances' /metrics had a spaced p99 of 10 ms on 2 cores; at 0.5 ms, 3.8 ms,
the sampler's round no slower (bench/mig_scale.py, docs/performance.md)."""


def serve(server: MetricsServer, name: str = "gpuledger-http") -> threading.Thread:
    """Serve in a daemon thread; stop with ``server.shutdown()`` and ``server.server_close()``.
    ``shutdown()`` waits for the loop's next poll: 0.1 s (ten idle wake-ups a second, nothing
    measurable) lets a daemon stop, and a test's server with it, in a fifth of the standard 0.5 s.
    The process's thread switch interval becomes ``SWITCH_INTERVAL``: a daemon that serves favours
    its requests' latency."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name=name, daemon=True)
    th.start()
    return th
