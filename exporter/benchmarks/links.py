"""The links during a benchmark round: NVLink bytes moved by the all-reduce sweep and the links'
line rate, beside the sweep's bus bandwidth (torch-free; the daemon measures, not the ranks).

The sampler reads the fact table's NVLink rows (``exporter.facts.nvlink.ROUND``: the data byte
counters behind ``gpuledger_gpu_nvlink_bytes_total``, each link's state and speed) of every GPU
when rank 0 says the all-reduce begins and again when its result (or error) arrives; the round's
bytes are the counters' increase between the two reads, summed over GPUs and links. A link whose
counter went backwards (a driver reload) adds nothing, as in the lanes. The line rate is, per GPU,
the sum of its active links' speeds (per direction, as busbw is), and the slowest GPU's sets the
node's. A node without NVLink (NotSupported) gets no figures: absent, not zero.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from exporter.benchmarks.results import AllreduceLinks, RoundResult
from exporter.facts import nvlink
from exporter.readers import FactValue

log = logging.getLogger(__name__)

Reading = Mapping[int, Mapping[str, FactValue]]
"""By GPU index, the facts that answered (``Sampler.read_facts``)."""
ACTIVE = 1.0  # NVML_NVLINK_STATE_ACTIVE
BENCH = "allreduce"


def _links(v: FactValue | None) -> Mapping[int, float]:
    return v if isinstance(v, Mapping) else {}


def moved(before: Reading, after: Reading, fact: str) -> tuple[float, int] | None:
    """The increase of a per-link counter between two readings, summed over the GPUs and links in
    both, and how many GPUs that is; None when no GPU answered both times."""
    total, gpus = 0.0, 0
    for index, now in after.items():
        then = before.get(index, {})
        if fact not in now or fact not in then:
            continue
        a, b = _links(then[fact]), _links(now[fact])
        total += sum(b[link] - a[link] for link in b.keys() & a.keys() if b[link] >= a[link])
        gpus += 1
    return (total, gpus) if gpus else None


def line_rate(reading: Reading) -> float | None:
    """The slowest GPU's NVLink line rate per direction: the sum of its active links' speeds (every
    link with a speed where the state was not read); None when no GPU told a speed."""
    rates = []
    for facts in reading.values():
        speed, state = _links(facts.get(nvlink.LINK_SPEED.name)), _links(facts.get(nvlink.LINK_STATE.name))
        rate = sum(v for link, v in speed.items() if state.get(link, ACTIVE) == ACTIVE and v > 0)
        if rate > 0:
            rates.append(rate)
    return min(rates) if rates else None


def figures(before: Reading, after: Reading) -> AllreduceLinks | None:
    tx, rx = moved(before, after, nvlink.TX.name), moved(before, after, nvlink.RX.name)
    if tx is None or rx is None:
        return None
    return AllreduceLinks(tx[0], rx[0], max(tx[1], rx[1]), line_rate(after) or line_rate(before))


class RoundLinks:
    """Watches one round's events and reads the links at the all-reduce's begin and end."""

    def __init__(self, read: Callable[[], Reading]) -> None:
        self._read = read
        self.before: Reading | None = None
        self.after: Reading | None = None

    def on_event(self, ev: Mapping[str, Any]) -> None:
        if ev.get("bench") != BENCH:
            return
        kind = ev.get("event")
        if kind == "begin":
            self.before = self._read()
        elif kind in ("result", "error") and self.before is not None and self.after is None:
            self.after = self._read()

    def watching(self, then: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        """An event callback that reads the links, then hands the event on to ``then``."""

        def on_event(ev: dict[str, Any]) -> None:
            try:
                self.on_event(ev)
            except Exception:  # the links are an addition: never the round's failure
                log.exception("reading the NVLink counters for the benchmark round failed")
            then(ev)

        return on_event

    def attach(self, result: RoundResult) -> None:
        """Put the figures on the round's all-reduce result, if both reads were made and the links answered."""
        if result.allreduce is None or self.before is None or self.after is None:
            return
        links = figures(self.before, self.after)
        if links is not None:
            result.allreduce = dataclasses.replace(result.allreduce, links=links)
