"""``gpuledger exporter --replay-gpus N --replay-mig LAYOUT``: the bundled capture's GPUs presented as
MIG instances (synthetic: the capture holds none), layouts as mig-parted names them, a bad layout
refused with one line naming the flag, and the instances sampled like NVML's."""

from __future__ import annotations

import pytest

from exporter.readers import NotSupported
from exporter.readers.mig_profiles import parse_layout
from exporter.readers.replay import ReplayReader
from exporter.sampling.sampler import Sampler
from exporter.scrape import render
from gpuledger.cli import main
from tests.support.metrics import parse_metrics
from tests.support.sampling import make_sampler


@pytest.mark.parametrize(
    ("layout", "profiles"),
    [
        ("all-1g.10gb", ("1g.10gb",) * 7),
        ("all-1g.20gb", ("1g.20gb",) * 4),  # memory slices: 4 x 2 of 8
        ("all-2g.20gb", ("2g.20gb",) * 3),
        ("all-3g.40gb", ("3g.40gb",) * 2),
        ("all-7g.80gb", ("7g.80gb",)),
        ("all-1g.18gb", ("1g.18gb",) * 7),  # an H200's
        ("3g.40gb,2g.20gb,2g.20gb", ("3g.40gb", "2g.20gb", "2g.20gb")),
        (" 3g.71gb, 1g.18gb ", ("3g.71gb", "1g.18gb")),
    ],
)
def test_layouts_as_mig_parted_names_them(layout: str, profiles: tuple[str, ...]) -> None:
    assert parse_layout(layout) == profiles


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ("4g.40gb,4g.40gb", "does not fit one GPU: 8 compute slices of 7"),
        ("3g.40gb,3g.40gb,1g.10gb", "9 memory slices of 8"),
        ("all-1g.5gb", "unknown MIG profile '1g.5gb'"),
        ("2g.20gb,9g.99gb", "unknown MIG profile '9g.99gb'"),
        ("3g.40gb,1g.18gb", "profiles of different GPUs"),
        ("1g.10gb,,1g.10gb", "give all-PROFILE"),
    ],
)
def test_a_bad_layout_exits_2_with_one_line_naming_the_flag(
    layout: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=says):
        parse_layout(layout)
    code = main(["exporter", "--reader", "replay", "--replay-gpus", "2", "--replay-mig", layout, "--check-config"])
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = [x for x in err.splitlines() if "replay.mig" in x]
    assert "--replay-mig: " in line and says in line and "Traceback" not in err


def test_a_good_layout_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["exporter", "--reader", "replay", "--replay-mig", "all-1g.10gb", "--check-config"])
    assert code == 0 and "configuration ok" in capsys.readouterr().out


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _sampled(layout: str, gpus: int = 2, seconds: int = 20) -> tuple[ReplayReader, Sampler]:
    clock = Clock()
    r = ReplayReader(None, gpus=gpus, clock=clock, mig=parse_layout(layout))
    r.open()
    s = make_sampler(r)  # type: ignore[arg-type]
    s.tick()
    for _ in range(seconds):
        clock.t += 1.0
        s.tick()
    return r, s


def test_the_replay_answers_as_nvml_does_under_mig() -> None:
    clock = Clock()
    r = ReplayReader(None, gpus=2, clock=clock, mig=parse_layout("3g.40gb,2g.20gb,1g.10gb"))
    r.open()
    for call in (lambda: r.utilization(0), lambda: r.utilization_samples(0, 0), lambda: r.gpm(1)):
        with pytest.raises(NotSupported, match="MIG mode"):
            call()
    first = r.mig_instances(0)
    assert first is not None and (first.slices, first.sm_count) == (7, 132)
    assert [i.profile for i in first.instances] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert all(i.gpm is None for i in first.instances)  # GPM's first read starts its interval
    assert first.unallocated == pytest.approx(1 / 7)
    clock.t += 5.0
    again = r.mig_instances(0)
    assert again is not None and all(i.gpm is not None for i in again.instances)
    assert [i.uuid for i in again.instances] == [i.uuid for i in first.instances]  # one identity each
    other = r.mig_instances(1)
    assert other is not None and not {i.uuid for i in other.instances} & {i.uuid for i in first.instances}
    for inst in again.instances:
        assert inst.memory is not None and inst.memory.used_bytes <= inst.memory.total_bytes
    assert len({i.gpm.sm for i in again.instances if i.gpm}) > 1  # each plays the capture at its own place
    off = ReplayReader(None, gpus=1)
    with pytest.raises(NotSupported, match="no MIG"):
        off.mig_instances(0)


def test_the_sampler_integrates_the_replayed_instances() -> None:
    _, s = _sampled("all-1g.10gb")
    snap = s.snapshot
    for g in snap.gpus:
        assert g.mig is not None and len(g.mig.instances) == 7
        assert sum(i.share for i in g.mig.instances) + g.mig.unallocated == pytest.approx(1.0)
        c = g.counters
        assert c.sampled_seconds > 0 and c.mig_sampled_seconds == pytest.approx(c.sampled_seconds)
        assert c.busy_seconds == pytest.approx(sum(i.share * i.counters.busy_seconds for i in g.mig.instances))
        assert g.gauges.utilization is None  # NVML has none under MIG
    m = parse_metrics(render.render(snap).decode())
    assert len(m["gpuledger_mig_instance_info"]) == 14
    assert {dict(k)["mig_profile"] for k in m["gpuledger_mig_share_ratio"]} == {"1g.10gb"}
    assert len(m["gpuledger_gpu_mig_sampled_seconds_total"]) == 2


def test_without_mig_the_replay_writes_no_mig_series() -> None:
    clock = Clock()
    r = ReplayReader(None, gpus=1, clock=clock)
    r.open()
    s = make_sampler(r)  # type: ignore[arg-type]
    s.tick()
    clock.t += 1.0
    s.tick()
    (g,) = s.snapshot.gpus
    assert g.mig is None and g.counters.mig_sampled_seconds is None
    text = render.render(s.snapshot).decode()
    assert "gpuledger_mig_" not in text and "gpuledger_gpu_mig_sampled_seconds_total{" not in text
