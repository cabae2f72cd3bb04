"""The PromQL the dcgm source sends: a fixed set per day of the window (whatever the GPUs), each
evaluated at the day's end over the day less 1 ms (so a scrape at midnight counts in one day only,
in Prometheus 2 and 3 and VictoriaMetrics alike).

Two rounds a day. The first (``cheap``) reads every series with range functions, one pass over
its samples, plus a few subqueries of one selector: how many scrapes each device and each GPU had
(``count by`` at each scrape interval: a device written twice at one scrape counts once). Where a
device's series together hold no more samples than it had scrapes, no scrape was written twice,
and every figure is exact from the first round.

Where a device's series are repeated at one scrape (a copy per ``hpc_job`` or per time-sliced
pod, the same values), or its GPU's energy counter reset that day (a driver reload), the second
round (``exact``) reads that GPU's series again one scrape at a time (a subquery at the scrape
interval, each step's window ``(t - interval, t]`` holding one scrape): a copy counts 1/k of a
scrape where k copies were written, so a device's copies add up to it once and each holder gets
its equal share; the energy counter's growth is taken scrape by scrape across the reset. Only for
those GPUs (a ``UUID`` matcher): a week of a fleet without sharing costs no per-scrape joins.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from analytics.sources.dcgm.labels import DEVICE, DRAM, ENERGY, GR, POWER, SM, TENSOR, UTIL, UUIDS
from analytics.sources.promapi import label_value
from domain.week import Day, Window
from exporter.sampling.stalls import StallRule


def ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


# the first round's answers per day, in the order ``Queries.cheap`` sends them: per series group
# (scrapes, sums of each field, the energy counter's lowest and highest reading), the devices'
# most samples in a window of ``COPY_WINDOW`` scrapes (more than that: copies), counter resets
# within a series
CHEAP = ("held", "util", "gr", "sm", "power", "energy_min", "energy_max")
CHEAP_KINDS = (*CHEAP, "window_samples", "resets")
# the second round's, for the GPUs that need each: per series group, each copy's 1/k of each scrape;
# per GPU its scrapes (any MIG instance), its power at them and its energy counter's growth
EXACT_KINDS = ("share", "util", "gr", "sm", "power", "energy", "energy_steps", "gpu_scrapes", "gpu_power")
COPY_WINDOW = 10  # scrapes: a device with more samples than this in a window of them was written twice
GAP_LOOKBACK = 3600.0  # after a gap in a GPU's scrapes, its counter grew from its last reading this recent


class Queries:
    def __init__(self, interval: float, by: Sequence[str], cluster_label: str) -> None:
        self.i = interval
        self.by = ", ".join(dict.fromkeys(by))
        self.dev = ", ".join(DEVICE)
        self.gpu = ", ".join(UUIDS)
        self.cluster = f"{cluster_label}, " if cluster_label else ""

    def last(self, metric: str) -> str:
        """The scrape in ``(t - interval, t]``: one per step, none in a gap."""
        return f"last_over_time({metric}[{ms(self.i - 0.001)}])"

    def cheap(self, d: Day) -> list[tuple[str, float]]:
        r, by, dev, gpu = ms(d.seconds - 0.001), self.by, self.dev, self.gpu
        # (t - w, t], w of COPY_WINDOW scrapes, at every w (Prometheus 2 includes both ends of a range)
        window, step = ms(COPY_WINDOW * self.i - 0.001), ms(COPY_WINDOW * self.i)
        queries = [
            f"sum by ({by}) (count_over_time({POWER}[{r}]))",
            *(f"sum by ({by}) (sum_over_time({m}[{r}]))" for m in (UTIL, GR, SM, POWER)),
            f"min by ({by}) (min_over_time({ENERGY}[{r}]))",
            f"max by ({by}) (max_over_time({ENERGY}[{r}]))",
            f"max_over_time((sum by ({dev}) (count_over_time({POWER}[{window}])))[{r}:{step}])",
            f"sum by ({gpu}) (resets({ENERGY}[{r}]))",
        ]
        assert len(queries) == len(CHEAP_KINDS)
        return [(q, d.end) for q in queries]

    def exact(self, d: Day, reread: Reread) -> list[tuple[str, tuple[str, float]]]:
        """The second round, (kind, query) for each kind ``reread`` asks for: each copy's share of
        each scrape (GPUs with copies; the energy also where a counter reset), the GPU's own
        scrapes and power (those and MIG GPUs), its counter's growth scrape by scrape (resets)."""
        r, i, by, out = ms(d.seconds - 0.001), ms(self.i), self.by, []
        on_dev = f"on ({self.dev}) group_left"

        def per_copy(only: Only, plus: str | None) -> str:
            """Each copy's 1/k of a scrape of ``plus`` (its device's value), or of its power."""
            p = self.last(only(POWER))
            value = p if plus is None else f"{p} * 0 + {plus}"
            return f"sum by ({by}) (sum_over_time((({value}) / {on_dev} count by ({self.dev}) ({p}))[{r}:{i}]))"

        if c := reread.copies:
            out.append(("share", per_copy(c, "1")))
            for kind, m in (("util", UTIL), ("gr", GR), ("sm", SM)):
                out.append((kind, per_copy(c, f"{on_dev} max by ({self.dev}) ({self.last(c(m))})")))
            out.append(("power", per_copy(c, None)))
        if e := reread.energy:
            growth, _ = self._energy_steps(e)
            out.append(("energy", per_copy(e, f"on ({self.gpu}) group_left() {growth}")))
            out.append(("energy_steps", f"sum_over_time(({growth})[{r}:{i}])"))
        if g := reread.gpus:
            p = self.last(g(POWER))
            out.append(("gpu_scrapes", f"count_over_time((count by ({self.gpu}) ({p}))[{r}:{i}])"))
            out.append(("gpu_power", f"sum_over_time((max by ({self.gpu}) ({p}))[{r}:{i}])"))
        return [(kind, (q, d.end)) for kind, q in out]

    def _energy_steps(self, only: Only) -> tuple[str, str]:
        """A GPU's energy counter scrape by scrape (every copy and MIG instance holds the device's
        reading): its growth since the scrape before, or since its last reading before a gap (an
        exporter restart); where the counter dropped (a driver reload), the reading itself, the
        growth since the reload. And the drops. (Across a gap the last reading is the highest of
        the GPU's series then: one scrape's.)"""
        g, w, e = self.gpu, ms(self.i - 0.001), only(ENERGY)
        now = f"max by ({g}) (last_over_time({e}[{w}]))"
        before = f"max by ({g}) (last_over_time({e}[{w}] offset {ms(self.i)}))"
        last = f"max by ({g}) (last_over_time({e}[{ms(GAP_LOOKBACK)}] offset {ms(self.i)}))"
        delta = f"({now} - {before} or ({now} unless on ({g}) {before}) - on ({g}) {last})"
        return f"({delta} >= 0 or ({now} and on ({g}) {delta} < 0))", f"{delta} < 0"

    def start_counter(self, t: float) -> tuple[str, float]:
        """Each GPU's energy counter at the window's start (its last reading of the day before)."""
        return (f"max by ({self.gpu}) (last_over_time({ENERGY}[1d]))", t)

    def targets(self, w: Window, jobs: Collection[str]) -> tuple[str, float]:
        """The scrape targets of dcgm-exporter (its series' ``job``s) and their own pods."""
        cl, re = self.cluster, "|".join(label_value(_re_escape(j)) for j in sorted(jobs))
        return (
            f'max by ({cl}instance, job, namespace, pod) (max_over_time(up{{job=~"{re}"}}[{ms(w.seconds)}]))',
            w.end,
        )

    def earlier(self, t: float, before: float) -> tuple[str, float]:
        return (f"count(last_over_time({POWER}[{ms(before)}]))", t)

    def first_scrape(self, d: Day) -> str:
        return f"min(min_over_time(timestamp({POWER})[{ms(d.seconds - 0.001)}:{ms(self.i)}]))"

    def stalled_blocks(self, s: StallRule, block: float, only: Only) -> str:
        """The devices (of ``only``'s GPUs) whose every scrape in ``(t - block, t]`` looks
        stalled: the coarse search (range functions only, one step a block), which any run of
        ``2 x block`` contains."""
        b, on = ms(block - 0.001), f"and on ({self.dev})"

        def dev(agg: str, metric: str) -> str:
            return f"{agg} by ({self.dev}) ({agg}_over_time({only(metric)}[{b}]))"

        below = ((SM, s.sm_below), (TENSOR, s.tensor_below), (DRAM, s.dram_below))
        quiet = " ".join(f"{on} {dev('max', m)} < {v:g}" for m, v in below)
        busy = f"({dev('min', UTIL)} / 100 >= {s.util_above:g} or {dev('min', GR)} >= {s.util_above:g})"
        return f"{busy} {quiet}"

    def stalled(self, s: StallRule, only: Only | None = None) -> str:
        """A device's busy fraction at each scrape where it looks stalled (busy, yet SMs, tensor
        cores and DRAM near still): ``GPU_UTIL`` / 100 for a whole GPU, ``GR_ENGINE_ACTIVE`` for
        a MIG instance (which has no ``GPU_UTIL``)."""
        on, sel = f"and on ({self.dev})", only or (lambda m: m)

        def dev(metric: str) -> str:
            return f"max by ({self.dev}) ({self.last(sel(metric))})"

        below = ((SM, s.sm_below), (TENSOR, s.tensor_below), (DRAM, s.dram_below))
        quiet = " ".join(f"{on} {dev(m)} < {v:g}" for m, v in below)
        whole = f"({dev(UTIL)} / 100 >= {s.util_above:g} {quiet})"
        mig = f"({dev(GR)} >= {s.util_above:g} {quiet})"
        return f"{whole} or {mig}"

    def stalled_copies(self, s: StallRule, only: Only | None = None) -> str:
        """Every copy (holder) of a device at the scrapes where it looks stalled."""
        p = self.last(only(POWER) if only else POWER)
        return f"count by ({self.by}) ({p} and on ({self.dev}) ({self.stalled(s, only)}))"


@dataclass(frozen=True)
class Reread:
    """The GPUs of one day (named by one label) that need the second round, by what for."""

    copies: Only | None = None  # a device written more than once at a scrape: everything per copy
    energy: Only | None = None  # a counter reset: the energy scrape by scrape, per copy too
    gpus: Only | None = None  # copies or MIG instances: the GPU's own scrapes and power


class Only:
    """A metric's selector narrowed to some GPUs, by their ``UUID`` label (``uuid`` under
    dcgm-exporter's ``--use-old-namespace``)."""

    def __init__(self, uuids: Collection[str], label: str = "UUID") -> None:
        self.label = label
        self.re = "|".join(label_value(_re_escape(u)) for u in sorted(uuids))

    def __call__(self, metric: str) -> str:
        return f'{metric}{{{self.label}=~"{self.re}"}}'


def _re_escape(v: str) -> str:
    """``v`` as an RE2 literal (GPU UUIDs are letters, digits and dashes; anything else is escaped)."""
    return "".join(c if c.isalnum() or c in "-_" else "\\" + c for c in v)
