"""The kubelet pod-resources decoder (exporter/attribution/kubelet.py) against real protobuf: replies
built with code that grpc_tools.protoc generates at test time from tests/proto/podresources_v1.proto
(the kubelet's v1 field numbers), decoded by the hand-written decoder and by protobuf itself, which
must agree: several pods, containers and devices, packed CPU ids, NUMA topology, memory, DRA
resources, empty messages, unknown fields of every wire type, wrong wire types, truncated replies,
and the reply served by a generated gRPC servicer."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from exporter.attribution.kubelet import METHOD, PodDevice, PodResourcesClient, PodResourcesError, parse_list_response

PROTO = Path(__file__).parent.parent / "proto" / "podresources_v1.proto"
NVIDIA = "nvidia.com/"
HOSTILE = 'tr"ain\\ing\n<script>ü'


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the _grpc module imports the _pb2 one by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The generated messages (pb.v1) and gRPC stubs (pb.grpc), made fresh for this test run."""
    out = tmp_path_factory.mktemp("podresources")
    cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={out}"]
    res = subprocess.run([*cmd, f"--grpc_python_out={out}", str(PROTO)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    names = ("podresources_v1_pb2", "podresources_v1_pb2_grpc")
    try:
        yield SimpleNamespace(v1=_load(names[0], out / f"{names[0]}.py"), grpc=_load(names[1], out / f"{names[1]}.py"))
    finally:
        for name in names:
            sys.modules.pop(name, None)


def by_protobuf(pb: SimpleNamespace, data: bytes, prefix: str = NVIDIA) -> dict[str, PodDevice]:
    """What the decoder must return, as protobuf itself reads the reply."""
    reply = pb.v1.ListPodResourcesResponse.FromString(data)
    return {
        device_id: PodDevice(pod.name, pod.namespace, container.name)
        for pod in reply.pod_resources
        for container in pod.containers
        for device in container.devices
        if device.resource_name.startswith(prefix)
        for device_id in device.device_ids
    }


def topology(pb: SimpleNamespace, *numa: int) -> Any:
    return pb.v1.TopologyInfo(nodes=[pb.v1.NUMANode(ID=n) for n in numa])


def cluster(pb: SimpleNamespace) -> Any:
    """A node's reply: every field of the v1 List reply set somewhere."""
    v1 = pb.v1
    memory = [
        v1.ContainerMemory(memory_type="memory", size=64 << 30, topology=topology(pb, 0)),
        v1.ContainerMemory(memory_type="hugepages-1Gi", size=2 << 30, topology=topology(pb, 0, 1)),
    ]
    dra = v1.DynamicResource(
        claim_name="gpu-claim",
        claim_namespace="research",
        claim_resources=[
            v1.ClaimResource(
                cdi_devices=[v1.CDIDevice(name="nvidia.com/gpu=gpu-3")],
                driver_name="gpu.nvidia.com",
                pool_name="node-7",
                device_name="gpu-3",
            )
        ],
    )
    train = v1.PodResources(
        name="llm-train-0",
        namespace=HOSTILE,
        containers=[
            v1.ContainerResources(
                name="trainer",
                devices=[
                    v1.ContainerDevices(
                        resource_name="nvidia.com/gpu",
                        device_ids=["GPU-aaaa", "GPU-bbbb"],
                        topology=topology(pb, 0, 1),
                    ),
                    v1.ContainerDevices(resource_name="example.com/nic", device_ids=["0000:3b:00.0"]),
                ],
                cpu_ids=[*range(64), 2**40, -1],  # packed, with a 10-byte varint
                memory=memory,
                dynamic_resources=[dra],
            ),
            v1.ContainerResources(name="log-shipper", cpu_ids=[64, 65]),  # no device
            v1.ContainerResources(
                name="evaluator",
                devices=[v1.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-cccc"])],
            ),
        ],
        cpu_ids=[66, 67],  # pod-level resources
        memory=memory[:1],
    )
    infer = v1.PodResources(
        name="infer",
        namespace="serving",
        containers=[
            v1.ContainerResources(
                name="triton",
                devices=[
                    v1.ContainerDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=["MIG-dddd"]),
                    v1.ContainerDevices(resource_name="nvidia.com/gpu"),  # no ids
                ],
            )
        ],
    )
    web = v1.PodResources(
        name="web",
        namespace="default",
        containers=[
            v1.ContainerResources(name="nginx", devices=[v1.ContainerDevices(resource_name="cpu", device_ids=["0"])])
        ],
    )
    unnamed = v1.PodResources(  # name, namespace and container name empty: proto3 leaves them out
        containers=[
            v1.ContainerResources(
                devices=[v1.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-eeee"])]
            )
        ]
    )
    return v1.ListPodResourcesResponse(pod_resources=[train, v1.PodResources(), infer, web, unnamed])


CLUSTER = {
    "GPU-aaaa": PodDevice("llm-train-0", HOSTILE, "trainer"),
    "GPU-bbbb": PodDevice("llm-train-0", HOSTILE, "trainer"),
    "GPU-cccc": PodDevice("llm-train-0", HOSTILE, "evaluator"),
    "MIG-dddd": PodDevice("infer", "serving", "triton"),
    "GPU-eeee": PodDevice("", "", ""),
}


def future_fields(pb: SimpleNamespace, seed: int) -> bytes:
    return bytes(
        pb.v1.FutureFields(
            varint=seed,
            fixed64=2**64 - 1 - seed,
            blob=b"\x0a\x05nvidia" * 2,  # looks like a field 1 inside: it must stay opaque
            fixed32=seed,
            zigzag=-seed - 1,
            packed=[seed, -seed, 2**62],
            real=seed / 3,
        ).SerializeToString()
    )


def with_future_fields(pb: SimpleNamespace, reply: Any) -> Any:
    """The reply with unknown fields of every wire type merged into every message in it."""
    messages: list[Any] = [reply]
    for pod in reply.pod_resources:
        messages.append(pod)
        for container in pod.containers:
            messages.append(container)
            messages.extend(container.devices)
    for seed, message in enumerate(messages):
        message.MergeFromString(future_fields(pb, seed))
    return reply


# ---- the decoder reads what protobuf wrote -------------------------------------------------------


def test_a_nodes_reply(pb: SimpleNamespace) -> None:
    data = cluster(pb).SerializeToString()
    assert parse_list_response(data) == CLUSTER
    assert by_protobuf(pb, data) == CLUSTER
    fpga = parse_list_response(data, resource_prefix="example.com/")
    assert fpga == {"0000:3b:00.0": PodDevice("llm-train-0", HOSTILE, "trainer")}


def test_the_packed_cpu_ids_are_packed(pb: SimpleNamespace) -> None:
    container = pb.v1.ContainerResources(cpu_ids=[1, 2, 3]).SerializeToString()
    assert container == bytes([3 << 3 | 2, 3, 1, 2, 3]), "cpu_ids: one length-delimited field"


def test_empty_messages(pb: SimpleNamespace) -> None:
    v1 = pb.v1
    assert parse_list_response(v1.ListPodResourcesResponse().SerializeToString()) == {}
    empty = v1.ListPodResourcesResponse(
        pod_resources=[
            v1.PodResources(),
            v1.PodResources(containers=[v1.ContainerResources()]),
            v1.PodResources(containers=[v1.ContainerResources(devices=[v1.ContainerDevices()])]),
            v1.PodResources(
                containers=[v1.ContainerResources(devices=[v1.ContainerDevices(device_ids=["GPU-no-resource"])])]
            ),
        ]
    ).SerializeToString()
    assert empty, "four empty pods are still four fields"
    assert parse_list_response(empty) == by_protobuf(pb, empty) == {}


def test_unknown_fields_of_every_wire_type_are_skipped(pb: SimpleNamespace) -> None:
    reply = with_future_fields(pb, cluster(pb))
    data = reply.SerializeToString()
    assert len(data) > len(cluster(pb).SerializeToString()), "the unknown fields were dropped"
    assert by_protobuf(pb, data) == CLUSTER
    assert parse_list_response(data) == CLUSTER


def skewed_reply(pb: SimpleNamespace) -> bytes:
    """The cluster reply with, in every message, v1 field numbers under the wrong wire types."""
    v1 = pb.v1
    reply = cluster(pb)
    for pod in reply.pod_resources:
        pod.MergeFromString(v1.SkewedPod(name=7, namespace=3, containers=5).SerializeToString())
        for container in pod.containers:
            container.MergeFromString(v1.SkewedContainer(name=9, devices=4).SerializeToString())
            for device in container.devices:
                device.MergeFromString(v1.SkewedDevice(resource_name=11, device_ids=[12, 13]).SerializeToString())
    return bytes(reply.SerializeToString()) + bytes(v1.SkewedResponse(pod_resources=2).SerializeToString())


def test_a_field_of_the_wrong_wire_type_is_an_unknown_field(pb: SimpleNamespace) -> None:
    data = skewed_reply(pb)
    assert by_protobuf(pb, data) == CLUSTER
    assert parse_list_response(data) == CLUSTER


def test_every_truncation_is_an_error_and_only_truncations(pb: SimpleNamespace) -> None:
    data = bytes(with_future_fields(pb, cluster(pb)).SerializeToString())
    boundaries = 0
    for end in range(len(data)):
        try:
            expected = by_protobuf(pb, data[:end])
        except DecodeError:
            with pytest.raises(PodResourcesError):
                parse_list_response(data[:end])
        else:
            boundaries += 1
            assert parse_list_response(data[:end]) == expected, f"cut at {end} of {len(data)}"
    assert boundaries >= len(cluster(pb).pod_resources), "no cut fell between two fields"


# ---- any reply -----------------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)  # no lone surrogates
_RESOURCES = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com", "example.com/fpga", "cpu", ""])
_CPU_IDS = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6)
_DEVICES = st.lists(
    st.tuples(_RESOURCES | _TEXT, st.lists(_TEXT, max_size=3), st.lists(st.integers(0, 7), max_size=2)), max_size=3
)
_CONTAINERS = st.lists(st.tuples(_TEXT, _DEVICES, _CPU_IDS), max_size=3)
_PODS = st.lists(st.tuples(_TEXT, _TEXT, _CONTAINERS, _CPU_IDS), max_size=4)


def build(pb: SimpleNamespace, pods: list[Any]) -> Any:
    v1 = pb.v1
    return v1.ListPodResourcesResponse(
        pod_resources=[
            v1.PodResources(
                name=name,
                namespace=namespace,
                cpu_ids=pod_cpus,
                containers=[
                    v1.ContainerResources(
                        name=cname,
                        cpu_ids=cpus,
                        devices=[
                            v1.ContainerDevices(resource_name=r, device_ids=ids, topology=topology(pb, *numa))
                            for r, ids, numa in devices
                        ],
                    )
                    for cname, devices, cpus in containers
                ],
            )
            for name, namespace, containers, pod_cpus in pods
        ]
    )


@given(pods=_PODS, unknown=st.booleans())
def test_any_reply(pb: SimpleNamespace, pods: list[Any], unknown: bool) -> None:
    reply = build(pb, pods)
    if unknown:
        with_future_fields(pb, reply)
    data = reply.SerializeToString()
    for prefix in (NVIDIA, "example.com/", ""):
        assert parse_list_response(data, resource_prefix=prefix) == by_protobuf(pb, data, prefix)


# ---- served by a generated gRPC servicer ---------------------------------------------------------


def test_the_client_calls_the_generated_service(pb: SimpleNamespace, tmp_path: Path) -> None:
    grpc = pytest.importorskip("grpc")
    requests: list[Any] = []

    class Kubelet(pb.grpc.PodResourcesListerServicer):  # type: ignore[misc, name-defined]
        def List(self, request: Any, context: Any) -> Any:
            requests.append(request)
            return with_future_fields(pb, cluster(pb))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb.grpc.add_PodResourcesListerServicer_to_server(Kubelet(), server)
    sock = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    client = PodResourcesClient(str(sock))
    try:
        assert client.list() == CLUSTER
        assert client.list() == CLUSTER  # the channel is kept
    finally:
        client.close()
        server.stop(0)
    service = pb.v1.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert METHOD == f"/{service.full_name}/{service.methods_by_name['List'].name}"
    assert [r.SerializeToString() for r in requests] == [b"", b""]
