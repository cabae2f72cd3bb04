"""httpx's transport whose every socket operation (connect, TLS handshake, each read and write)
also ends by a deadline (the report's, for ``analytics.sources.promapi``). httpx's timeouts are per
operation: a server that sends a byte every few seconds never trips them, and kept a report for
54 s past a 15 s deadline."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx


class DeadlineTransport(httpx.HTTPTransport):
    """An ``httpx.HTTPTransport`` on a network backend whose operations end ``left()`` seconds from
    now (None: no deadline)."""

    def __init__(self, verify: bool | ssl.SSLContext, left: Callable[[], float | None]) -> None:
        super().__init__(verify=verify)
        # the pool HTTPTransport builds (its default limits), on a network backend that knows the deadline
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_DeadlineBackend(left),
        )


def _capped(timeout: float | None, left: float | None, error: type[Exception]) -> float | None:
    """``timeout`` capped by the seconds ``left`` (None: no deadline); ``error`` once none are left."""
    if left is None:
        return timeout
    if left <= 0:
        raise error("the report's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, left: Callable[[], float | None]) -> None:
        self._backend = httpcore.SyncBackend()
        self._left = left

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _capped(timeout, self._left(), httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options), self._left
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _capped(timeout, self._left(), httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, timeout, socket_options), self._left)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, left: Callable[[], float | None]) -> None:
        self._stream = stream
        self._left = left

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped(timeout, self._left(), httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(timeout, self._left(), httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        timeout = _capped(timeout, self._left(), httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout), self._left)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)
