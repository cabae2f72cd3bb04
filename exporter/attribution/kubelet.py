"""Pod names from the kubelet's pod-resources API (``v1.PodResourcesLister/List`` over the
kubelet's unix socket): which pod, namespace and container each GPU (by UUID) is allocated to.

gRPC through grpcio with a hand-written decoder for the few protobuf messages involved, so no
generated code is needed. Only ever called from the sampler's slow lane, never on a scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
METHOD = "/v1.PodResourcesLister/List"


@dataclass(frozen=True, slots=True)
class PodDevice:
    pod: str
    namespace: str
    container: str


class PodResourcesError(RuntimeError):
    pass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise PodResourcesError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message; bytes for length-delimited."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise PodResourcesError("truncated field")
            value, i = buf[i : i + n], i + n
        elif wire in (1, 5):  # fixed64, fixed32
            n = 8 if wire == 1 else 4
            if i + n > len(buf):
                raise PodResourcesError("truncated field")
            value, i = buf[i : i + n], i + n
        else:
            raise PodResourcesError(f"unsupported wire type {wire}")
        yield num, wire, value


def _delimited(buf: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of the length-delimited fields: every field the decoder reads is a
    string or a message; one of another wire type under the same number is an unknown field, as
    protobuf reads it (skipped, not taken for the string or message)."""
    for num, wire, value in fields(buf):
        if wire == 2:
            yield num, value


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def parse_list_response(buf: bytes, resource_prefix: str = "nvidia.com/") -> dict[str, PodDevice]:
    """GPU UUID -> pod for every device of a resource named ``nvidia.com/...``."""
    out: dict[str, PodDevice] = {}
    for num, pod_msg in _delimited(buf):
        if num != 1:  # ListPodResourcesResponse.pod_resources
            continue
        name = namespace = ""
        containers: list[bytes] = []
        for n, v in _delimited(pod_msg):
            if n == 1:
                name = _text(v)
            elif n == 2:
                namespace = _text(v)
            elif n == 3:
                containers.append(v)
        for c in containers:
            cname = ""
            devices: list[bytes] = []
            for n, v in _delimited(c):
                if n == 1:
                    cname = _text(v)
                elif n == 2:
                    devices.append(v)
            for d in devices:
                resource, ids = "", []
                for n, v in _delimited(d):
                    if n == 1:
                        resource = _text(v)
                    elif n == 2:
                        ids.append(_text(v))
                if resource.startswith(resource_prefix):
                    for device_id in ids:
                        out[device_id] = PodDevice(name, namespace, cname)
    return out


class PodResourcesClient:
    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: Any = None
        self._call: Any = None

    def list(self) -> dict[str, PodDevice]:
        try:
            import grpc
        except ImportError as e:
            raise PodResourcesError("pod names need grpcio (pip install 'gpuledger[kubernetes]')") from e
        if self._call is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
            self._call = self._channel.unary_unary(
                METHOD, request_serializer=lambda _: b"", response_deserializer=lambda b: b
            )
        try:
            return parse_list_response(self._call(None, timeout=self.timeout))
        except grpc.RpcError as e:
            raise PodResourcesError(f"{self.socket_path}: {e.code().name}: {e.details()}") from e

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._call = None
