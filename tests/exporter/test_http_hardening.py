"""The HTTP server under hostile clients (issue 12): listen backlog, connection cap, descriptors
exhausted, header and idle deadlines, HEAD, malformed requests, the Server header, basic auth
with long passwords and bad hashes, TLS keys that cannot be used, control bytes in logs."""

from __future__ import annotations

import base64
import builtins
import errno
import http.client
import logging
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from daemonkit.auth import BasicAuth, check_password_hash
from daemonkit.http import MetricsServer, WebOptions, connection_limit, printable, serve
from daemonkit.settings import ConfigError
from exporter.config import load
from tests.support.clock import FakeMonotonic
from tests.support.http import make_cert
from tests.support.tools import require_binary
from tests.support.wait import wait_until

SALT = b"$2b$04$abcdefghijklmnopqrstuu"  # fixed: the test ids name the hashes, and xdist workers must agree
HASH = bcrypt.hashpw(b"secret", SALT).decode()


class Site:
    """A site whose /metrics can be made to block, to hold connections busy."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = 0

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        self.waiting += 1
        self.gate.wait(10)
        return b"up 1\n", "text/plain; version=0.0.4"

    def health(self) -> tuple[bool, dict[str, object]]:
        return True, {"status": "ok"}

    def landing(self) -> str:
        return "<html></html>"

    def page(self, path: str) -> tuple[bytes, str] | None:
        return None


@pytest.fixture
def site() -> Site:
    return Site()


@pytest.fixture
def make(site: Site) -> Iterator[object]:
    servers: list[MetricsServer] = []

    def start(**opts: object) -> MetricsServer:
        srv = MetricsServer(WebOptions(host="127.0.0.1", port=0, **opts), site)  # type: ignore[arg-type]
        serve(srv)
        servers.append(srv)
        return srv

    yield start
    site.gate.set()
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def port(srv: MetricsServer) -> int:
    return int(srv.server_address[1])


def exchange(srv: MetricsServer, data: bytes, timeout: float = 5.0) -> bytes:
    """``data`` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port(srv)), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def closed(s: socket.socket, timeout: float = 5.0) -> bool:
    """The server closed ``s`` (EOF or reset) within ``timeout``; False if it stays open."""
    s.settimeout(timeout)
    try:
        while data := s.recv(4096):
            if data.startswith(b"HTTP/1.1 503"):
                continue
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return bool(s.recv(1, socket.MSG_PEEK)) or False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


# ---------------------------------------------------------------------------------------------
# backlog, connection cap, descriptors


def test_listen_backlog_is_at_least_128(make: object) -> None:
    srv = make()  # type: ignore[operator]
    # Linux reports a listening socket's backlog in tcp_info.tcpi_sacked (offset 28)
    info = srv.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    assert struct.unpack_from("I", info, 28)[0] >= 128


def test_connection_limit_leaves_descriptors_to_the_daemon() -> None:
    assert connection_limit(512, 65536) == 512
    assert connection_limit(512, 1024) == 512
    assert connection_limit(512, 256) == 192
    assert connection_limit(512, 128) == 96
    assert 4 <= connection_limit(512, 20) < 20


def test_idle_connections_make_room_for_a_scrape(make: object) -> None:
    srv = make(max_connections=4)  # type: ignore[operator]
    idle = [socket.create_connection(("127.0.0.1", port(srv))) for _ in range(4)]
    try:
        assert wait_until(lambda: srv.connections == 4)
        got = exchange(srv, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200")
        assert closed(idle[0])  # the oldest connection that sent nothing made room
        assert srv.connections <= 4
    finally:
        for s in idle:
            s.close()


def test_busy_connections_beyond_the_cap_get_503_at_once(make: object, site: Site) -> None:
    srv = make(max_connections=3)  # type: ignore[operator]
    site.gate.clear()
    busy = [socket.create_connection(("127.0.0.1", port(srv))) for _ in range(3)]
    try:
        for s in busy:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert wait_until(lambda: site.waiting == 3)
        got = exchange(srv, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 503")
        site.gate.set()
        assert all(s.recv(4096).startswith(b"HTTP/1.1 200") for s in busy)
    finally:
        site.gate.set()
        for s in busy:
            s.close()


class _NoDescriptors:
    def __init__(self, real: socket.socket) -> None:
        self.real = real
        self.calls = 0

    def accept(self) -> tuple[socket.socket, object]:
        self.calls += 1
        raise OSError(errno.EMFILE, "Too many open files")

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def test_descriptors_exhausted_backs_off_and_logs_one_line(caplog: pytest.LogCaptureFixture, site: Site) -> None:
    srv = MetricsServer(WebOptions(host="127.0.0.1", port=0), site)
    clock, slept = FakeMonotonic(), list[float]()
    srv.clock, srv.sleep = clock.monotonic, slept.append
    real = srv.socket
    srv.socket = _NoDescriptors(real)  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.INFO, logger="daemonkit.http"):
            for _ in range(20):
                srv._handle_request_noblock()  # type: ignore[attr-defined]
                clock.advance(0.5)
            errors = [r for r in caplog.records if "too many open files" in r.getMessage().lower()]
            assert len(errors) == 1  # one line for 20 failed accepts in 10 s
            assert len(slept) == 20 and all(s > 0 for s in slept)  # never retried at once
            assert slept[0] < slept[5] <= 1.0  # backs off, up to a second
            clock.advance(60)
            srv._handle_request_noblock()  # type: ignore[attr-defined]
            assert len([r for r in caplog.records if "too many open files" in r.getMessage().lower()]) == 2
        srv.socket = real
        serve(srv)
        assert exchange(srv, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200")
    finally:
        srv.socket = real
        srv.shutdown()
        srv.server_close()


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512));"
        "from daemonkit.http import raise_fd_limit;"
        "print(raise_fd_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["512", "512"]


# ---------------------------------------------------------------------------------------------
# deadlines


def test_headers_trickled_past_the_deadline_are_cut_off(make: object) -> None:
    clock = FakeMonotonic()
    srv = make(header_timeout=10.0)  # type: ignore[operator]
    srv.clock = clock.monotonic
    s = socket.create_connection(("127.0.0.1", port(srv)), timeout=5)
    try:
        assert wait_until(lambda: srv.connections == 1)  # accepted: its deadline runs from now
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-a: b\r\n")
        clock.advance(9)
        s.sendall(b"X-b: c\r\n")
        assert still_open(s)  # within the deadline
        clock.advance(2)
        s.sendall(b"X-c: d\r\n")
        assert closed(s)  # past it: the next read refuses to wait
    finally:
        s.close()


def test_a_kept_alive_connection_is_closed_when_idle(make: object) -> None:
    clock = FakeMonotonic()
    srv = make(idle_timeout=30.0)  # type: ignore[operator]
    srv.clock = clock.monotonic
    conn = http.client.HTTPConnection("127.0.0.1", port(srv), timeout=5)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read()
        clock.advance(20)
        conn.request("GET", "/healthz")  # kept alive, within the idle timeout
        assert conn.getresponse().status == 200
        clock.advance(31)
        assert conn.sock is not None
        conn.sock.sendall(b"G")
        assert closed(conn.sock)
    finally:
        conn.close()


def test_oversized_headers_get_431(make: object) -> None:
    srv = make()  # type: ignore[operator]
    many = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000) for i in range(90))
    got = exchange(srv, b"GET /metrics HTTP/1.1\r\n" + many + b"\r\n")
    assert got.startswith(b"HTTP/1.1 431")


# ---------------------------------------------------------------------------------------------
# methods, malformed requests, headers


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/", "/nowhere"])
def test_head_answers_like_get_without_a_body(make: object, path: str) -> None:
    srv = make()  # type: ignore[operator]
    conn = http.client.HTTPConnection("127.0.0.1", port(srv), timeout=5)
    try:
        conn.request("GET", path)
        get = conn.getresponse()
        body = get.read()
        conn.request("HEAD", path)
        head = conn.getresponse()
        assert head.read() == b""
        assert head.status == get.status != 501
        assert head.getheader("Content-Length") == str(len(body))
        conn.request("GET", "/healthz")  # the connection still frames requests right
        assert conn.getresponse().status == 200
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),  # HTTP/0.9: would get a body with no status line
        (b"GET / HTTP/1.1 extra\r\n\r\n", 400),
        (b"GET / FOO/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.x\r\n\r\n", 400),
        (b"GET / HTTP/9.9\r\n\r\n", 505),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # a TLS hello on plain HTTP
        (b"\x00\xff\xfe <script>\r\n\r\n", 400),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405),
        (b"BREW /pot HTTP/1.1\r\n\r\n", 501),
    ],
)
def test_malformed_requests_get_a_status_line(make: object, request_bytes: bytes, status: int) -> None:
    srv = make()  # type: ignore[operator]
    got = exchange(srv, request_bytes)
    assert got.startswith(b"HTTP/1.1 %d " % status), got[:80]
    body = got.partition(b"\r\n\r\n")[2]
    assert b"script" not in body and b"aaaa" not in body  # nothing of the request echoed


def test_server_header_names_no_python(make: object) -> None:
    srv = make()  # type: ignore[operator]
    head = exchange(srv, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n").partition(b"\r\n\r\n")[0]
    assert b"\r\nServer: gpuledger\r\n" in head + b"\r\n"
    assert b"Python" not in head


# ---------------------------------------------------------------------------------------------
# basic auth


def _auth(user: str, password: str | bytes) -> str:
    raw = user.encode() + b":" + (password if isinstance(password, bytes) else password.encode())
    return "Basic " + base64.b64encode(raw).decode()


@pytest.mark.parametrize("password", ["p" * 73, "secret" + "x" * 100, "s" * 10_000, b"secret\0", "secret"[:-1]])
def test_bad_passwords_get_401_not_a_traceback(
    make: object, password: str | bytes, caplog: pytest.LogCaptureFixture
) -> None:
    srv = make(basic_auth_users={"alice": HASH})  # type: ignore[operator]
    with caplog.at_level(logging.DEBUG):
        got = exchange(
            srv,
            f"GET /metrics HTTP/1.1\r\nAuthorization: {_auth('alice', password)}\r\nConnection: close\r\n\r\n".encode(),
        )
    assert got.startswith(b"HTTP/1.1 401")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    good = exchange(
        srv, f"GET /metrics HTTP/1.1\r\nAuthorization: {_auth('alice', 'secret')}\r\nConnection: close\r\n\r\n".encode()
    )
    assert good.startswith(b"HTTP/1.1 200")


def test_an_unknown_user_costs_a_bcrypt_check_of_the_same_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[bytes] = []
    real = bcrypt.checkpw

    def spy(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", spy)
    auth = BasicAuth({"alice": bcrypt.hashpw(b"secret", bcrypt.gensalt(5)).decode()})
    assert not auth.check(_auth("mallory", "secret"))
    assert not auth.check(_auth("alice", "wrong"))
    assert not auth.check(_auth("alice", "x" * 80))
    assert len(checked) == 3  # every miss pays bcrypt
    assert {h[:7] for h in checked} == {b"$2b$05$"}  # at the configured cost


@pytest.mark.parametrize(
    ("hashed", "says"),
    [
        ("hunter2", "not plain text"),
        ("$2b$03$" + HASH[7:], "outside 4-14"),
        ("$2b$15$" + HASH[7:], "outside 4-14"),
        ("$2b$31$" + HASH[7:], "outside 4-14"),
        ("$2b$04$" + "z" * 53, "not a valid bcrypt hash"),
        (bcrypt.hashpw(b"", SALT).decode(), "empty password"),
    ],
)
def test_bad_hashes_are_refused_naming_the_user(hashed: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check_password_hash(hashed)
    with pytest.raises(ConfigError) as e:
        load(overrides={"web": {"basic_auth_users": {"alice": hashed, "bob": HASH}}})
    assert "web.basic_auth_users.alice:" in str(e.value) and says in str(e.value)
    assert "bob" not in str(e.value) and hashed not in str(e.value)  # never echoes a password


def test_a_good_hash_passes() -> None:
    assert check_password_hash(HASH) == HASH
    assert load(overrides={"web": {"basic_auth_users": {"alice": HASH}}}).web.basic_auth_users == {"alice": HASH}


def test_exporter_exits_2_on_a_cost_31_hash(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    conf.write_text(f'[web.basic_auth_users]\nalice = "$2b$31${HASH[7:]}"\n')
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "--config", str(conf), "--reader", "replay", "--no-history"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "web.basic_auth_users.alice" in out.stderr and "Traceback" not in out.stderr


# ---------------------------------------------------------------------------------------------
# TLS


def _encrypted_key(tmp: Path) -> Path:
    key = tmp / "enc.pem"
    subprocess.run(
        [
            *(require_binary("openssl"), "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"),
            *("-aes256", "-pass", "pass:hunter2", "-out", str(key)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return key


def test_tls_keys_that_cannot_be_used_name_the_field(tmp_path: Path, site: Site) -> None:
    cert, key = make_cert(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = make_cert(other)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        (str(cert), str(_encrypted_key(tmp_path)), "web.tls_key_file", "encrypted"),
        (str(cert), str(tmp_path), "web.tls_key_file", "cannot read"),  # a folder: unreadable as a file
        (str(cert), str(tmp_path / "missing.pem"), "web.tls_key_file", "cannot read"),
        (str(cert), str(other_key), "web.tls_key_file", "does not match"),
        (str(cert), str(junk), "web.tls_key_file", "not a PEM private key"),
        (str(junk), str(key), "web.tls_cert_file", "not a PEM certificate"),
    ]
    for c, k, field, says in cases:
        with pytest.raises(ConfigError) as e:
            MetricsServer(WebOptions(host="127.0.0.1", port=0, tls_cert_file=c, tls_key_file=k), site)
        assert str(e.value).startswith(field + ":") and says in str(e.value), (c, k, str(e.value))


def test_an_unreadable_key_names_the_field(tmp_path: Path, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root (as CI runs) reads a mode-000 file anyway: the refusal a user meets is raised by hand."""
    cert, key = make_cert(tmp_path)
    real_open = builtins.open

    def refuse(file: Any, *args: Any, **kw: Any) -> Any:
        if str(file) == str(key):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kw)

    monkeypatch.setattr(builtins, "open", refuse)
    with pytest.raises(ConfigError, match=r"^web.tls_key_file: cannot read .*Permission denied"):
        MetricsServer(WebOptions(host="127.0.0.1", port=0, tls_cert_file=str(cert), tls_key_file=str(key)), site)


def test_exporter_exits_2_on_an_encrypted_key_without_waiting(tmp_path: Path) -> None:
    cert, _ = make_cert(tmp_path)
    key = _encrypted_key(tmp_path)
    out = subprocess.run(
        [
            *(sys.executable, "-m", "exporter", "--reader", "replay", "--no-history", "--listen", "127.0.0.1:0"),
            *("--tls-cert", str(cert), "--tls-key", str(key)),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "web.tls_key_file" in out.stderr and "encrypted" in out.stderr


# ---------------------------------------------------------------------------------------------
# logs


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("GET /\x1b[31m HTTP/1.1", "GET /\\x1b[31m HTTP/1.1"),
        ("a\x00b\x7fc\x9bd", "a\\x00b\\x7fc\\x9bd"),
        ("line\r\nX-Forged: 1", "line\\x0d\\x0aX-Forged: 1"),
        ("\u2028\ufeff", "\\u2028\\ufeff"),
        ("back\\x1b", "back\\\\x1b"),  # a literal backslash cannot pass for an escape
    ],
)
def test_printable_escapes_control_characters(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_caps_the_length() -> None:
    out = printable("a" * 100_000)
    assert len(out) < 300 and out.endswith("(100000 chars)")


def test_request_text_reaches_the_log_escaped(make: object, caplog: pytest.LogCaptureFixture) -> None:
    srv = make()  # type: ignore[operator]
    with caplog.at_level(logging.DEBUG, logger="daemonkit.http"):
        exchange(
            srv,
            b"GET /\x1b[2J" + b"x" * 5000 + b" HTTP/1.1\r\nUser-Agent: \x1b]0;owned\x07\r\nConnection: close\r\n\r\n",
        )
        exchange(srv, b"\x1b[31mBAD\r\n\r\n")
        assert wait_until(lambda: len(caplog.records) >= 2)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "\\x1b]0;owned\\x07" in text
    assert max(len(r.getMessage()) for r in caplog.records) < 1000
