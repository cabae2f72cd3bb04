"""A tiny fake Prometheus on loopback that answers every query with one canned (usually wrong)
answer: a body of any shape, a status, a content type, or a stream of ``size`` bytes produced
as it is sent (a 300 MB answer costs the server nothing). It records the requests it got."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

CHUNK = 1 << 16


@dataclass
class Answer:
    body: bytes = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    status: int = 200
    content_type: str = "application/json"
    size: int | None = None  # instead of body: a valid-looking JSON answer this many bytes long
    declare_length: bool = True  # send Content-Length (else chunked)
    series: int | None = None  # instead of body: a valid vector of this many GPU-like series (~110 bytes each)
    pause: float = 0.0  # seconds between chunks: a slow server, so that answers are read at the same time

    def chunks(self) -> Iterator[bytes]:
        if self.series is not None:
            yield from _vector(self.series)
            return
        if self.size is None:
            yield self.body
            return
        head = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"x":"'
        yield head
        left = self.size - len(head)
        filler = b"a" * CHUNK
        while left > 0:
            yield filler[: min(left, CHUNK)]
            left -= CHUNK

    def length(self) -> int:
        if self.series is not None:
            return sum(len(c) for c in _vector(self.series))
        return len(self.body) if self.size is None else self.size


def _vector(n: int) -> Iterator[bytes]:
    """A valid instant-query answer of ``n`` series, produced as it is sent, in chunks."""
    yield b'{"status":"success","data":{"resultType":"vector","result":['
    batch: list[bytes] = []
    for k in range(n):
        batch.append(
            b'%s{"metric":{"__name__":"gpuledger_gpu_info","instance":"node%06d:10044","job":"gpuledger",'
            b'"gpu":"%d","uuid":"GPU-%08d"},"value":[1700000000,"1"]}' % (b"," if k else b"", k // 8, k % 8, k)
        )
        if len(batch) == 512:
            yield b"".join(batch)
            batch = []
    yield b"".join(batch) + b"]}}"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


@dataclass
class FakePrometheus:
    answer: Answer = field(default_factory=Answer)
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                fake.requests.append(Seen(self.path, dict(self.headers)))
                a = fake.answer
                self.send_response(a.status)
                self.send_header("Content-Type", a.content_type)
                total = a.length()
                if a.declare_length:
                    self.send_header("Content-Length", str(total))
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in a.chunks():
                        if a.declare_length:
                            self.wfile.write(chunk)
                        else:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        if a.pause:
                            self.wfile.flush()
                            time.sleep(a.pause)
                    if not a.declare_length:
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client stopped reading: expected for big answers

            do_GET = _answer
            do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
