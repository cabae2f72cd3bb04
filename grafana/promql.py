"""PromQL fragments the dashboards share.

Per-GPU series carry ``instance``, ``job``, ``gpu`` and ``uuid``; the identity (``hostname``,
``model``) is on ``gpuledger_gpu_info`` only. Every per-GPU query therefore joins the identity,
which adds the host and model for legends and is also how the ``$hostname`` variable filters.
Utilisation-like shares are ``rate(x_seconds_total) / rate(sampled_seconds_total)``: exact means
over the window, whatever the scrape interval (docs/metrics.md).
"""

from __future__ import annotations

RATE = "$__rate_interval"
RANGE = "$__range"

JOB = 'job=~"$job"'
GPU = 'job=~"$job", uuid=~"$gpu"'
INFO = 'gpuledger_gpu_info{job=~"$job", hostname=~"$hostname", uuid=~"$gpu"}'
# one series per GPU even while a driver upgrade briefly leaves two info series behind
IDENTITY = f"max by (instance, gpu, uuid, hostname, model) ({INFO})"
# the exporters (nodes) of the selected GPUs
NODES = 'max by (instance, hostname) (gpuledger_gpu_info{job=~"$job", hostname=~"$hostname", uuid=~"$gpu"})'


def sel(metric: str, labels: str = GPU, extra: str = "") -> str:
    """``metric{labels, extra}``: by default under the dashboard's job and GPU selection."""
    inner = ", ".join(x for x in (labels, extra) if x)
    return f"{metric}{{{inner}}}"


def per_gpu(expr: str) -> str:
    """A per-GPU ``expr`` with ``hostname`` and ``model`` joined on, for the selected hosts only."""
    return f"({expr}) * on (instance, gpu, uuid) group_left (hostname, model) {IDENTITY}"


def per_node(expr: str) -> str:
    """A per-exporter ``expr`` (no ``gpu`` label) with ``hostname`` joined on via ``instance``."""
    return f"({expr}) * on (instance) group_left (hostname) {NODES}"


def counter(name: str) -> str:
    """The per-GPU ``*_seconds_total`` counter of a quantity (busy, sm_active, ...)."""
    return f"gpuledger_gpu_{name}_seconds_total"


def rate(metric: str, window: str = RATE, labels: str = GPU, extra: str = "") -> str:
    return f"rate({sel(metric, labels, extra)}[{window}])"


def increase(metric: str, window: str = RANGE, labels: str = GPU, extra: str = "") -> str:
    return f"increase({sel(metric, labels, extra)}[{window}])"


def share(name: str, window: str = RATE) -> str:
    """Per GPU: the share of sampled time a quantity was on (busy, sm_active, allocated_idle, ...)."""
    return per_gpu(f"{rate(counter(name), window)} / {rate(counter('sampled'), window)}")


WEEK_BUCKETS = "604799s"  # a week of 5-minute rollup buckets, the one stamped exactly 7 days ago left out


def rolled(name: str, window: str = WEEK_BUCKETS) -> str:
    """Per GPU: a counter's growth over ``window``, summed from its 5-minute rollup
    (``gpuledger:gpu_<name>:increase5m``): a week is 2,016 buckets, not a week of raw samples."""
    return f"sum_over_time({sel(f'gpuledger:gpu_{name}:increase5m')}[{window}])"


def rolled_share(name: str, window: str = WEEK_BUCKETS) -> str:
    """``share`` from the rollups: the buckets of ``name`` seconds over those of sampled seconds."""
    return per_gpu(f"{rolled(f'{name}_seconds', window)} / {rolled('sampled_seconds', window)}")


def pooled_share(name: str, by: str = "", window: str = RATE) -> str:
    """The share over all selected GPUs (or per ``by``): summed rates, then the ratio, so each GPU
    weighs by its sampled time."""
    grp = f" by ({by})" if by else ""
    return f"sum{grp} ({per_gpu(rate(counter(name), window))}) / sum{grp} ({per_gpu(rate(counter('sampled'), window))})"


def gpu_equivalents(name: str) -> str:
    """The sum over GPUs of a share: how many GPUs' worth were busy, allocated, ..."""
    return f"sum ({share(name)})"


# --- prices (served by the analytics daemon; its GPU-hour price is keyed by `host`) ---------------
GPU_PRICE = (
    'max by (hostname, model, currency) (label_replace(gpuledger_price_gpu_hour, "hostname", "$1", "host", "(.*)"))'
)
PUE = "max (gpuledger_price_pue)"
KWH_PRICE = "max by (currency) (gpuledger_price_energy_kwh)"
# per selected GPU: its hardware (or rental) price per hour, with the currency label
HARDWARE_PER_HOUR = f"({IDENTITY} * on (hostname, model) group_left (currency) {GPU_PRICE})"


def energy_cost_per_hour(window: str = RATE) -> str:
    """Per GPU: kW drawn (joules per second / 1000) × PUE × price per kWh = energy cost per hour."""
    return (
        f"({per_gpu(rate('gpuledger_gpu_energy_joules_total', window))}) / 1000"
        f" * on () group_left {PUE} * on () group_left (currency) {KWH_PRICE}"
    )


def cost_per_hour(by: str = "currency") -> str:
    """Hardware + energy cost per hour now, summed ``by`` (which must include currency)."""
    return f"sum by ({by}) ({HARDWARE_PER_HOUR}) + on ({by}) sum by ({by}) ({energy_cost_per_hour()})"


def idle_cost_per_hour(by: str = "currency") -> str:
    """The hardware price of the time GPUs are not busy, per hour now (the reports' idle cost)."""
    return (
        f"sum by ({by}) ((1 - ({share('busy')})) * on (instance, gpu, uuid) group_left (currency) {HARDWARE_PER_HOUR})"
    )
