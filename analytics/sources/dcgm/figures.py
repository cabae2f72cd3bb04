"""The dcgm source's answers regrouped in Python: per device (a GPU, or one of its MIG instances),
per holder (a pod or a Slurm job on a device) and per GPU, day by day. ``rows`` turns them into
the window's ``GpuWeek`` and ``JobWeek``.

Per device and day: scrapes, busy (``GPU_UTIL`` / 100, else ``GR_ENGINE_ACTIVE`` where there is no
``GPU_UTIL``: MIG instances), SM-active and power at them. From the first round (``queries.cheap``)
each series' sums, exact wherever no scrape of the device was written twice; for the GPUs where one
was, or whose energy counter reset, from the second round (``queries.exact``): each copy 1/k of
each scrape. A holder's figures are those of its copy; its energy is its share of its GPU's counter
growth at its scrapes (from the first round: its series' growth, and the scrape before its first
estimated as the series' mean scrape).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from analytics.sources.dcgm.labels import Device, Targets, device_of, holder, share, uuid_of
from analytics.sources.dcgm.queries import CHEAP, COPY_WINDOW
from analytics.sources.promapi import Series
from domain.jobs import JobKey
from domain.week import Day


@dataclass(slots=True)
class Sums:
    """A device's (or a holder's) sums over a day's scrapes: scrapes (a copy 1/k of one),
    ``GPU_UTIL`` (%), ``GR_ENGINE_ACTIVE``, ``SM_ACTIVE``, power (W), its GPU's energy counter
    growth (mJ) at those scrapes; and scrapes listed (held, each copy whole)."""

    scrapes: float = 0.0
    util: float | None = None
    gr: float | None = None
    sm: float | None = None
    power: float = 0.0
    energy: float | None = None
    held: float = 0.0

    def add(self, kind: str, v: float) -> None:
        if kind in ("util", "gr", "sm", "energy"):
            setattr(self, kind, (getattr(self, kind) or 0.0) + v)
        elif kind == "share":
            self.scrapes += v
        else:
            setattr(self, kind, getattr(self, kind) + v)

    @property
    def busy(self) -> float:
        """Busy scrapes: ``GPU_UTIL`` where the device has it, else its GR engine activity."""
        if self.util is not None:
            return self.util / 100
        return self.gr or 0.0


@dataclass(slots=True)
class GpuDayFacts:
    scrapes: float = 0.0  # the GPU's own scrapes (any instance)
    power: float = 0.0  # its power at them, W (once per scrape, however many instances)
    energy_min: float | None = None  # its counter's lowest reading of the day, mJ
    energy_max: float | None = None  # and its highest
    energy_steps: float | None = None  # its counter's growth scrape by scrape, across resets, mJ
    resets: bool = False  # its counter dropped (a driver reload)
    spelling: str = "UUID"  # the label its series name it by


@dataclass
class _Day:
    devices: dict[Device, Sums] = field(default_factory=lambda: defaultdict(Sums))
    holders: dict[tuple[Device, JobKey], Sums] = field(default_factory=lambda: defaultdict(Sums))
    gpus: dict[str, GpuDayFacts] = field(default_factory=lambda: defaultdict(GpuDayFacts))
    copied: set[Device] = field(default_factory=set)  # devices written more than once at a scrape
    profiled: set[Device] = field(default_factory=set)  # devices with SM activity (stalls measured)


@dataclass
class Again:
    """A day's GPUs that need the second round, by what for (``queries.Reread``)."""

    copies: set[str] = field(default_factory=set)
    energy: set[str] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Options:
    interval: float
    host_labels: Sequence[str]
    cluster_label: str
    exporter_containers: Collection[str]


def _by_labels(series: Iterable[Series]) -> list[Series]:
    """In label order, whatever order the server answered in: the same sums, to the last bit."""
    return sorted(series, key=lambda s: sorted(s.labels.items()))


Group = tuple[tuple[str, str], ...]  # a series group's labels, sorted


class Figures:
    def __init__(self, spans: Sequence[Day], o: Options) -> None:
        self.spans, self.o = spans, o
        self.days = [_Day() for _ in spans]
        self.groups: list[dict[Group, dict[str, float]]] = [{} for _ in spans]  # day -> group -> kind -> value
        self.start: dict[str, float] = {}  # uuid -> its energy counter at the window's start, mJ
        self.latest: dict[str, tuple[int, float, Group]] = {}  # uuid -> (day, counter, labels)
        self.models: dict[str, str] = {}
        self.exporter_pods: set[str] = set()
        self.targets: Targets = {}
        self.unknown_profiles: set[str] = set()
        self.stalled: dict[Device, float] = defaultdict(float)  # busy seconds of counted stalled scrapes
        self.stalled_holders: dict[tuple[Device, JobKey], float] = defaultdict(float)

    # --- the first round ----------------------------------------------------------------

    def cheap(self, d: int, answers: Mapping[str, list[Series]]) -> None:
        """A day's series groups (with their GPU's figures folded in by ``fold``), and what needs
        the second round."""
        day, groups = self.days[d], self.groups[d]
        for kind in CHEAP:
            for s in answers[kind]:
                groups.setdefault(tuple(sorted(s.labels.items())), {})[kind] = s.value
        for items, got in groups.items():
            uuid = uuid_of(dict(items))
            if not uuid or "held" not in got:
                continue
            facts = day.gpus[uuid]  # provisional: a GPU with copies or MIG instances is read again
            facts.scrapes += got["held"]
            facts.power += got.get("power", 0.0)
            if "energy_min" in got:
                low = got["energy_min"]
                facts.energy_min = low if facts.energy_min is None else min(facts.energy_min, low)
                facts.energy_max = max(facts.energy_max or got["energy_max"], got["energy_max"])
            if ("UUID", uuid) not in items:
                facts.spelling = "uuid"
            last = self.latest.get(uuid)  # its most recent series: the highest counter on its last day
            counter = got.get("energy_max", float("-inf"))
            if last is None or last[0] < d or (counter, items) > (last[1], last[2]):
                self.latest[uuid] = (d, counter, items)
        day.copied = {device_of(s.labels) for s in answers["window_samples"] if s.value > COPY_WINDOW + 0.5}
        for s in answers["resets"]:
            day.gpus[uuid_of(s.labels)].resets |= s.value > 0

    def scrape_targets(self, series: Iterable[Series]) -> None:
        """The scrape targets' own pods (``up``): the exporter's, never a holder."""
        cl, targets = self.o.cluster_label, defaultdict(set)
        for s in series:
            key = (s.labels.get(cl, "") if cl else "", s.labels.get("instance", ""), s.labels.get("job", ""))
            targets[key].add((s.labels.get("namespace", ""), s.labels.get("pod", "")))
            self.exporter_pods.add(s.labels.get("pod", ""))
        self.targets = {k: frozenset(v) for k, v in targets.items()}

    def fold(self) -> None:
        """Each day's groups into their devices and holders (once the scrape targets are known)."""
        i = self.o.interval
        for day, groups in zip(self.days, self.groups, strict=True):
            for items in sorted(groups):
                labels, got = dict(items), groups[items]
                dev = device_of(labels)
                if not dev.uuid or "held" not in got:
                    continue
                self.models.setdefault(dev.uuid, labels.get("modelName", ""))
                n = got["held"]
                sums = Sums(n, got.get("util"), got.get("gr"), got.get("sm"), got.get("power", 0.0), None, n)
                if "energy_max" in got:  # its growth, and the scrape before its first as its mean scrape
                    grew = got["energy_max"] - got["energy_min"]
                    sums.energy = grew * n / (n - 1) if n > 1 else sums.power * i * 1000
                _merge(day.devices[dev], sums)
                if sums.sm is not None:
                    day.profiled.add(dev)
                if (who := self.holder_of(labels)) is not None:
                    _merge(day.holders[dev, who], sums)

    def to_read_again(self, d: int) -> dict[str, Again]:
        """The GPUs (by the label that names them) whose day needs the second round, and for
        what: a device written twice at one scrape (more samples in a window than it had
        scrapes), a GPU in MIG mode (its scrapes are those of any instance), an energy counter
        that reset (within a series, or a reading below the one before the day)."""
        day = self.days[d]
        out: dict[str, Again] = defaultdict(Again)
        for items in self.groups[d]:
            dev = device_of(dict(items))
            again = out[day.gpus[dev.uuid].spelling]
            if dev in day.copied:
                again.copies.add(dev.uuid)
            if dev in day.copied or dev.mig:
                again.gpus.add(dev.uuid)
        for uuid, facts in day.gpus.items():
            low, before = facts.energy_min, self.before(uuid, d)
            if facts.resets or (low is not None and before is not None and low < before):
                facts.resets = True
                out[facts.spelling].energy.add(uuid)
        return {k: v for k, v in out.items() if v.copies or v.energy or v.gpus}

    def before(self, uuid: str, d: int) -> float | None:
        """The GPU's energy counter before day ``d``: its highest reading on its last day with
        data before (the window's start where none), mJ."""
        for e in range(d - 1, -1, -1):
            facts = self.days[e].gpus.get(uuid)
            if facts is not None and facts.energy_max is not None:
                return facts.energy_max
        return self.start.get(uuid)

    # --- the second round ---------------------------------------------------------------

    def exact(self, d: int, again: Again, answers: Mapping[str, list[Series]]) -> None:
        """The second round's answers for day ``d``: the GPUs with copies, each copy 1/k of each
        scrape (held time stays the first round's: each copy whole); the energy per copy and
        scrape by scrape where a counter reset; the GPU's own scrapes and power."""
        day = self.days[d]
        for dev in [x for x in day.devices if x.uuid in again.copies]:
            day.devices[dev] = Sums(held=day.devices[dev].held)
        for key in [x for x in day.holders if x[0].uuid in again.copies]:
            day.holders[key] = Sums(held=day.holders[key].held)
        for key in [x for x in day.holders if x[0].uuid in again.energy]:
            day.holders[key].energy = None
        for kind in ("share", "util", "gr", "sm", "power", "energy"):
            for s in _by_labels(answers.get(kind, [])):
                dev = device_of(s.labels)
                if dev.uuid not in (again.energy if kind == "energy" else again.copies):
                    continue
                if kind != "energy":
                    day.devices[dev].add(kind, s.value)
                if (who := self.holder_of(s.labels)) is not None:
                    day.holders[dev, who].add(kind, s.value)
        for uuid in again.gpus:
            day.gpus[uuid].scrapes = day.gpus[uuid].power = 0.0
        for kind in ("gpu_scrapes", "gpu_power", "energy_steps"):
            for s in answers.get(kind, []):
                facts = day.gpus[uuid_of(s.labels)]
                if kind == "energy_steps":
                    facts.energy_steps = s.value
                else:
                    setattr(facts, kind.removeprefix("gpu_"), s.value)

    # --- stalls -------------------------------------------------------------------------

    def holder_of(self, labels: Mapping[str, str]) -> JobKey | None:
        """A series' holder, by the window's scrape targets."""
        return holder(labels, self.targets, self.o.cluster_label, self.o.exporter_containers)

    def add_stalled(self, dev: Device, seconds: float, holders: Mapping[JobKey, float]) -> None:
        self.stalled[dev] += seconds
        for who, v in holders.items():
            self.stalled_holders[dev, who] += v

    # --- shares -------------------------------------------------------------------------

    def share(self, dev: Device) -> float:
        """The device's share of its GPU; an instance whose profile names no slices counts one."""
        s = share(dev, self.models.get(dev.uuid, ""))
        if s is None:
            self.unknown_profiles.add(dev.profile)
            return share(Device(dev.uuid, dev.instance, "1g."), self.models.get(dev.uuid, "")) or 0.0
        return s


def _merge(into: Sums, s: Sums) -> None:
    into.scrapes += s.scrapes
    into.held += s.held
    into.power += s.power
    for kind in ("util", "gr", "sm", "energy"):
        v = getattr(s, kind)
        if v is not None:
            setattr(into, kind, (getattr(into, kind) or 0.0) + v)
