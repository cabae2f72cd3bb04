"""What a benchmark round runs: workloads, backend, world size and the size of each workload.

Torch-free: the daemon and the CLI build plans; the worker (which imports torch) reads them.
Defaults differ by backend: NCCL on GPUs gets sizes that mean something on NVLink/PCIe; gloo on
CPU gets sizes that finish in seconds on two cores (it can test correctness, not scaling).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter

from daemonkit.jsondoc import STRICT, parse

BENCHES = ("allreduce", "train", "matmul", "memcpy")
ONE_RANK = "one rank has nothing to reduce across: the all-reduce needs 2 or more GPUs (or ranks)"
"""Why a one-rank round leaves the all-reduce out: its bus bandwidth is 0 by definition there
(nccl-tests' factor 2(n-1)/n) and its time is a no-op's (~14 us at every size on an H200)."""


def for_world(benches: tuple[str, ...], world_size: int) -> tuple[str, ...]:
    """``benches`` without the all-reduce when a round has one rank (ONE_RANK)."""
    return tuple(b for b in benches if not (b == "allreduce" and world_size < 2))


EVENT_PREFIX = "@gpuledger "
"""What a worker prints before each JSON event line on stdout; the runner reads only those lines."""
Backend = Literal["nccl", "gloo"]
STARTUP_SECONDS = {"nccl": 12.0, "gloo": 5.0}  # interpreter + torch import + process group init


@dataclass(frozen=True)
class AllreducePlan:
    min_bytes: int = 1 << 10
    max_bytes: int = 1 << 30
    warmup: int = 5
    min_iters: int = 5
    max_iters: int = 200
    seconds_per_size: float = 0.25

    def sizes(self) -> list[int]:
        out, s = [], self.min_bytes
        while s <= self.max_bytes:
            out.append(s)
            s *= 2
        return out


@dataclass(frozen=True)
class TrainPlan:
    model: str = "encoder-8x1024"
    layers: int = 8
    d_model: int = 1024
    heads: int = 16
    ff: int = 4096
    seq: int = 512
    batch: int = 16  # per GPU, the same at every world size
    warmup_steps: int = 10
    steps: int = 30
    world_sizes: tuple[int, ...] = ()  # empty: 1, 2, 4, ... up to the world size, and the world size


@dataclass(frozen=True)
class MatmulPlan:
    n: int = 8192
    dtypes: tuple[str, ...] = ("bfloat16", "float16", "float32")
    seconds_per_dtype: float = 1.0
    min_iters: int = 3


@dataclass(frozen=True)
class MemcpyPlan:
    bytes: int = 1 << 30
    kinds: tuple[str, ...] = ("d2d", "h2d", "d2h")
    seconds_per_kind: float = 0.5
    min_iters: int = 3


@dataclass(frozen=True)
class Inject:
    """Faults for tests: a wrong element after one reduction, a rank that hangs, a rank that dies."""

    wrong_reduction: bool = False
    hang: bool = False
    crash: bool = False


@dataclass(frozen=True)
class Plan:
    __pydantic_config__ = STRICT  # a plan file with "max_bytes": "big" is refused, naming the field

    benches: tuple[str, ...]
    backend: Backend
    world_size: int
    allreduce: AllreducePlan = field(default_factory=AllreducePlan)
    train: TrainPlan = field(default_factory=TrainPlan)
    matmul: MatmulPlan = field(default_factory=MatmulPlan)
    memcpy: MemcpyPlan = field(default_factory=MemcpyPlan)
    collective_timeout: float = 120.0
    inject: Inject = field(default_factory=Inject)

    @property
    def device(self) -> str:
        return "cuda" if self.backend == "nccl" else "cpu"

    def train_world_sizes(self) -> list[int]:
        if self.train.world_sizes:
            return sorted({k for k in self.train.world_sizes if 1 <= k <= self.world_size})
        sizes, k = [], 1
        while k < self.world_size:
            sizes.append(k)
            k *= 2
        return [*sizes, self.world_size]

    def estimate_seconds(self) -> float:
        """An upper-end guess of the round's duration, from the plan's own time budgets."""
        t = STARTUP_SECONDS[self.backend]
        if "allreduce" in self.benches:
            t += len(self.allreduce.sizes()) * (self.allreduce.seconds_per_size + 0.05)
        if "train" in self.benches:
            per_size = 3.0 if self.backend == "nccl" else 1.5
            t += len(self.train_world_sizes()) * per_size
        if "matmul" in self.benches:
            t += len(self.matmul.dtypes) * (self.matmul.seconds_per_dtype + 0.3)
        if "memcpy" in self.benches:
            t += len(self.memcpy.kinds) * (self.memcpy.seconds_per_kind + 0.3)
        return t

    def to_json(self) -> str:
        return _PLAN.dump_json(self, indent=1).decode()

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @staticmethod
    def load(path: str | Path) -> Plan:
        """A plan file; a DocumentError (a ValueError) names each field that does not fit."""
        return parse(_PLAN, Path(path).read_bytes(), f"plan {path}")


_PLAN = TypeAdapter(Plan)

CPU_TRAIN = TrainPlan(
    model="encoder-2x128", layers=2, d_model=128, heads=4, ff=512, seq=64, batch=8, warmup_steps=3, steps=10
)


def default_plan(benches: tuple[str, ...], backend: Backend, world_size: int, *, quick: bool = False) -> Plan:
    """The plan a round runs unless told otherwise. ``quick`` shrinks everything (tests, demos)."""
    if backend == "nccl":
        plan = Plan(benches=benches, backend="nccl", world_size=world_size)
        if quick:
            plan = dataclasses.replace(
                plan,
                allreduce=AllreducePlan(min_bytes=1 << 10, max_bytes=1 << 26, seconds_per_size=0.05),
                train=dataclasses.replace(plan.train, warmup_steps=3, steps=10),
                matmul=MatmulPlan(n=4096, seconds_per_dtype=0.3),
                memcpy=MemcpyPlan(bytes=1 << 28, seconds_per_kind=0.2),
            )
        return plan
    return Plan(
        benches=benches,
        backend="gloo",
        world_size=world_size,
        allreduce=AllreducePlan(
            min_bytes=1 << 10,
            max_bytes=(1 << 20) if quick else (1 << 24),
            warmup=2,
            min_iters=3,
            max_iters=100,
            seconds_per_size=0.03 if quick else 0.1,
        ),
        train=dataclasses.replace(CPU_TRAIN, steps=5) if quick else CPU_TRAIN,
        matmul=MatmulPlan(
            n=256 if quick else 512, dtypes=("float32", "bfloat16"), seconds_per_dtype=0.1 if quick else 0.3
        ),
        memcpy=MemcpyPlan(
            bytes=(1 << 24) if quick else (1 << 26), kinds=("host",), seconds_per_kind=0.1 if quick else 0.3
        ),
        collective_timeout=60.0,
    )
