"""Process -> user, Slurm job, pod: cgroup layouts, fabricated /proc trees, a real gRPC kubelet."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import pytest

from exporter.attribution.cgroup import CgroupFacts, facts
from exporter.attribution.kubelet import METHOD, PodDevice, PodResourcesClient, PodResourcesError, parse_list_response
from exporter.attribution.procfs import Owner, ProcReader, Users
from tests.support.procfs import (
    K8S_CGROUPFS_V1,
    K8S_CGROUPFS_V2_GUARANTEED,
    K8S_SYSTEMD_V1,
    K8S_SYSTEMD_V2,
    PLAIN_USER,
    SLURM_V1,
    SLURM_V2,
    make_proc,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SLURM_V1, CgroupFacts(job_id="4242")),
        (SLURM_V2, CgroupFacts(job_id="977")),
        (
            K8S_SYSTEMD_V2,
            CgroupFacts(
                pod_uid="8f3d5c1e-1234-4a6b-9f1e-0a1b2c3d4e5f",
                container_id="4b1c9f0e2d3a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344",
            ),
        ),
        (
            K8S_SYSTEMD_V1,
            CgroupFacts(
                pod_uid="0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
                container_id="aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899",
            ),
        ),
        (
            K8S_CGROUPFS_V1,
            CgroupFacts(
                pod_uid="5e6f7081-9a0b-4c1d-8e2f-30415263748a",
                container_id="1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef",
            ),
        ),
        (
            K8S_CGROUPFS_V2_GUARANTEED,
            CgroupFacts(pod_uid="c0ffee00-1111-2222-3333-444455556666", container_id="fedcba9876543210fedcba98"),
        ),
        (PLAIN_USER, CgroupFacts()),
        ("0::/system.slice/myjob_12.service\n", CgroupFacts()),  # not Slurm: no false job
        ("garbage without colons\n", CgroupFacts()),
    ],
)
def test_cgroup_layouts(text: str, expected: CgroupFacts) -> None:
    assert facts(text) == expected


def test_owners_from_a_fabricated_proc_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0::/root:/bin/sh\nalice:x:1001:1001::/home/alice:/bin/sh\nbob:x:1002:1002::/:/bin/sh\n")
    make_proc(proc, 100, uid=1001, cgroup=SLURM_V1)
    make_proc(proc, 101, uid=1001, cgroup=SLURM_V2)
    make_proc(proc, 102, uid=0, cgroup=K8S_SYSTEMD_V2)
    make_proc(proc, 103, uid=1002, cgroup=PLAIN_USER, environ={"HOME": "/", "SLURM_JOB_ID": "55"})
    make_proc(proc, 104, uid=4321, cgroup=PLAIN_USER)
    r = ProcReader(proc, Users(passwd))
    assert r.owner(100) == Owner(uid=1001, user="alice", job_id="4242")
    assert r.owner(101) == Owner(uid=1001, user="alice", job_id="977")
    container = "4b1c9f0e2d3a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344"
    pod = "8f3d5c1e-1234-4a6b-9f1e-0a1b2c3d4e5f"
    assert r.owner(102) == Owner(uid=0, user="root", pod_uid=pod, container_id=container)
    # outside every job cgroup on a node that has them (100, 101): SLURM_JOB_ID alone names no job
    # (a node without job cgroups: tests/exporter/test_claims.py)
    assert r.owner(103) == Owner(uid=1002, user="bob")
    assert r.owner(104) == Owner(uid=4321, user="4321")  # unknown uid: the number
    assert r.owner(999) is None  # never there


def test_a_process_that_exits_mid_read_is_not_attributed_and_pid_reuse_is_noticed(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    make_proc(proc, 200, uid=0, cgroup=SLURM_V1, status=False)  # stat and cgroup read, then gone
    r = ProcReader(proc, Users(None))
    assert r.owner(200) is None
    make_proc(proc, 201, uid=0, cgroup=SLURM_V1, start=5000)
    assert r.owner(201) is not None and r.owner(201).job_id == "4242"  # type: ignore[union-attr]
    shutil.rmtree(proc / "201")
    make_proc(proc, 201, uid=0, cgroup=SLURM_V2, start=6000)  # the pid now belongs to another process
    assert r.owner(201).job_id == "977"  # type: ignore[union-attr]
    shutil.rmtree(proc / "201")
    assert r.owner(201) is None


# --- a real gRPC kubelet -------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _s(num: int, text: str) -> bytes:
    return _field(num, text.encode())


def encode_pods(pods: list[tuple[str, str, str, str, list[str]]]) -> bytes:
    """ListPodResourcesResponse: (pod, namespace, container, resource, device ids)."""
    out = b""
    for pod, ns, container, resource, ids in pods:
        device = _s(1, resource) + b"".join(_s(2, i) for i in ids) + _field(3, b"")  # with an empty topology
        cont = _s(1, container) + _field(2, device) + _varint(3 << 3 | 0) + _varint(7)  # and a cpu id
        out += _field(1, _s(1, pod) + _s(2, ns) + _field(3, cont))
    return out


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[str, list[bytes]]]:
    grpc = pytest.importorskip("grpc")
    response: list[bytes] = [b""]
    sock = str(tmp_path / "kubelet.sock")

    def handle(request: bytes, context: object) -> bytes:
        return response[0]

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                handle, request_deserializer=lambda b: b, response_serializer=lambda b: b
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    yield sock, response
    server.stop(0)


HOSTILE = 'tr"ain\\ing\n<script>ü'


def test_pod_names_from_the_kubelet_over_grpc(kubelet: tuple[str, list[bytes]]) -> None:
    sock, response = kubelet
    assert METHOD == "/v1.PodResourcesLister/List"
    response[0] = encode_pods(
        [
            ("llm-train-0", HOSTILE, "trainer", "nvidia.com/gpu", ["GPU-aaaa", "GPU-bbbb"]),
            ("web", "default", "nginx", "cpu", ["0"]),
            ("infer", "serving", "triton", "nvidia.com/mig-1g.10gb", ["MIG-cccc"]),
        ]
    )
    client = PodResourcesClient(sock)
    pods = client.list()
    assert pods == {
        "GPU-aaaa": PodDevice("llm-train-0", HOSTILE, "trainer"),
        "GPU-bbbb": PodDevice("llm-train-0", HOSTILE, "trainer"),
        "MIG-cccc": PodDevice("infer", "serving", "triton"),
    }
    client.close()


def test_a_missing_kubelet_is_an_error_not_a_crash(tmp_path: Path) -> None:
    pytest.importorskip("grpc")
    client = PodResourcesClient(str(tmp_path / "nope.sock"), timeout=1.0)
    with pytest.raises(PodResourcesError, match="UNAVAILABLE"):
        client.list()


def test_truncated_protobuf_is_rejected() -> None:
    with pytest.raises(PodResourcesError):
        parse_list_response(_field(1, _s(1, "pod"))[:-2])
