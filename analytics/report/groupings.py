"""The chargeback groupings: one table, a row per grouping (docs/groupings.md). Adding a grouping is
adding its row to ``TABLE`` (and its test); the builder, the renderers (Markdown, HTML, CSV, JSON),
the served FOCUS file names, FOCUS, statements (``gpuledger statement --<name>``, ``[statements]
by``), budgets, the config's checks and the /metrics gauges all read it.

A grouping is a chargeback dimension the report sums cost by, chosen in ``[analytics] group_by``.
It has one of two scopes:

- a **job grouping** (``job=``) keys each *job* (its user, account, namespace...); the GPUs' time
  that no job held has no key in it, so its rows add up to the fleet only with the ``unallocated``
  row, which every job grouping's table, chart and FOCUS file carry;
- a **GPU grouping** (``gpu=``) keys each *GPU* (its cluster): every GPU has exactly one key, so
  its rows add up to the fleet alone, without the unallocated row. That is the one meaning of
  "GPU grouping" (:func:`adds_up_alone`).

A job (or GPU) without the attribute is under the row's ``none`` key: ``(none)``, a user-less job
``(unknown)``. ``label:<name>`` rows, one per ``[analytics] pod_labels`` name, are derived by
:func:`label` (the pod label's value on the job).

The report's own row groups host, model and gpu (keyed per GPU) and job (keyed per job) are no
chargeback groupings: they are always in the report and never chosen in group_by, budgets or
statements; ``OWN`` gives their scope, so sums and FOCUS files treat them as the groupings of that
scope. ``unallocated`` is neither: it is what no job was charged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from domain.week import GpuWeek, JobAttrs

Scope = Literal["job", "gpu"]
JOB: Scope = "job"  # keyed per job: its rows + unallocated = the fleet
GPU: Scope = "gpu"  # keyed per GPU: its rows alone = the fleet
NONE = "(none)"  # the key of the jobs (or GPUs) that lack a grouping's attribute
UNKNOWN_USER = "(unknown)"  # the user grouping's: a job without a user
LABEL = "label:"  # label:<name>: a grouping by one of [analytics] pod_labels (e.g. label:label_team)
OWN: dict[str, Scope] = {"host": GPU, "model": GPU, "gpu": GPU, "job": JOB}  # the report's own rows, no groupings
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # label:<name>'s name: a Prometheus label name
LABEL_STEM = re.compile(r"label-[A-Za-z0-9_]{1,80}")  # file_stem of a label:<name> row (a label name)


@dataclass(frozen=True, kw_only=True)
class Grouping:
    """One grouping: how it keys a job (or a GPU), how the reports name it, what else uses it."""

    name: str  # the rows' group (JSON, CSV, /metrics' group label), in group_by, budgets and statements
    job: Callable[[JobAttrs], str] | None = None  # a job grouping: the job's attribute ("": it has none)
    gpu: Callable[[GpuWeek], str] | None = None  # a GPU grouping: the GPU's attribute ("": it has none)
    none: str = NONE  # the key of the jobs (GPUs) without the attribute
    slug: str  # the section's id (HTML) and the key of its charts
    title: str  # the section's title, plural; a job grouping's adds "(and what no job was charged)"
    column: str  # the key column's header
    per: str  # the chart's "Total cost per <per>"
    statement: str = ""  # the help of `gpuledger statement --<name>` (and [statements] by takes it); "": none
    budgets: bool = True  # [budgets] rules may name it
    focus: bool = True  # FOCUS writes its <file_stem>.csv (and /reports/ serves it)
    first: bool = False  # its rows come before the job rows in the report (user, namespace: where they always were)
    always: bool = False  # its section is shown even without rows (users: what no job was charged)

    def __post_init__(self) -> None:
        if (self.job is None) == (self.gpu is None):
            raise ValueError(f"grouping {self.name!r}: give one of job= (a job grouping) or gpu= (a GPU grouping)")
        if self.statement and self.job is None:
            raise ValueError(f"grouping {self.name!r}: a statement lists jobs: a job grouping only")

    @property
    def scope(self) -> Scope:
        return JOB if self.job is not None else GPU

    def of_job(self, j: JobAttrs) -> str:
        """The job's key (a GPU grouping keys no job: its ``none``)."""
        return (self.job(j) if self.job is not None else "") or self.none

    def of_gpu(self, g: GpuWeek) -> str:
        """The GPU's key (a job grouping keys no GPU: its ``none``)."""
        return (self.gpu(g) if self.gpu is not None else "") or self.none

    @property
    def flag(self) -> str:
        """Its option of ``gpuledger statement``."""
        return f"--{self.name}"


# fmt: off
TABLE: tuple[Grouping, ...] = (
    Grouping(
        name="user", job=lambda j: j.job.user, none=UNKNOWN_USER,
        slug="users", title="Users", column="User", per="user",
        statement="the user's jobs", first=True, always=True,
    ),
    Grouping(
        name="namespace", job=lambda j: j.job.namespace,
        slug="namespaces", title="Namespaces", column="Namespace", per="namespace",
        statement="the Kubernetes namespace's jobs", first=True,
    ),
    Grouping(
        name="account", job=lambda j: j.account,
        slug="accounts", title="Accounts", column="Account", per="account",
        statement="the Slurm account's jobs",
    ),
    Grouping(
        name="partition", job=lambda j: j.partition,
        slug="partitions", title="Partitions", column="Partition", per="partition",
    ),
    Grouping(
        name="qos", job=lambda j: j.qos,
        slug="qos", title="QOS", column="QOS", per="QOS",
    ),
    Grouping(
        name="cluster", gpu=lambda g: g.cluster,
        slug="clusters", title="Clusters", column="Cluster", per="cluster",
    ),
)
# fmt: on
GROUP_BY = tuple(g.name for g in TABLE)  # [analytics] group_by's default: every row (label:<name> is chosen)


def rows() -> tuple[Grouping, ...]:
    """The table as it is now (a test may add a row)."""
    return TABLE


def names(use: Callable[[Grouping], bool] = lambda g: True) -> list[str]:
    """The table's grouping names (those ``use`` takes), in its order; label:<name> rows aside."""
    return [g.name for g in TABLE if use(g)]


@lru_cache(maxsize=1024)
def label(name: str) -> Grouping:
    """The row of ``label:<name>``: a job grouping by the pod label ``name`` (kube-state-metrics'
    ``label_<pod label>``, e.g. ``label_team``): the job's value of it."""

    def value(j: JobAttrs) -> str:
        return next((v for k, v in j.labels if k == name), "")

    return Grouping(
        name=f"{LABEL}{name}", job=value, slug=f"label-{name}", title=f"Pod label {name}", column=name, per=name
    )


def for_pod_labels(pod_labels: Iterable[str]) -> list[Grouping]:
    """The label:<name> rows that ``[analytics] pod_labels`` makes available."""
    return [label(n) for n in pod_labels]


def find(name: str) -> Grouping | None:
    """The row of grouping ``name``: the table's, or a ``label:<name>`` one; None for anything else
    (host, model, gpu, job, unallocated included: no groupings)."""
    found = next((g for g in TABLE if g.name == name), None)
    if found is None and name.startswith(LABEL) and len(name) > len(LABEL):
        return label(name.removeprefix(LABEL))
    return found


def chosen(group_by: Sequence[str]) -> list[Grouping]:
    """The rows of ``group_by``, once each, in its order; ValueError for a name no row has."""
    out: list[Grouping] = []
    for name in dict.fromkeys(group_by):
        g = find(name)
        if g is None:
            raise _unknown(name)
        out.append(g)
    return out


def is_grouping(group: str) -> bool:
    """A row group that is a chargeback grouping (not host, model, gpu, job, unallocated or fleet)."""
    return find(group) is not None


def check(name: str, use: Callable[[Grouping], bool] = lambda g: True) -> Grouping:
    """The row of ``name``, one that ``use`` takes (the config's checks); a one-line ValueError otherwise."""
    if name.startswith(LABEL) and not _LABEL_NAME.fullmatch(name.removeprefix(LABEL)):
        raise ValueError(f"{name!r}: label:<name> takes a label name (e.g. label:label_team)")
    g = find(name)
    if g is None or not use(g):
        raise _unknown(name, use)
    return g


def _unknown(name: str, use: Callable[[Grouping], bool] = lambda g: True) -> ValueError:
    labels = " or label:<name>" if use(label("label_x")) else ""  # where a label:<name> row would do
    return ValueError(f"unknown grouping {name!r}: choose from {names(use)}{labels}")


def scope_of(group: str) -> Scope | None:
    """A row group's scope: a grouping's, or one of the report's own rows' (host: gpu, job: job)."""
    g = find(group)
    return g.scope if g is not None else OWN.get(group)


def adds_up_alone(group: str) -> bool:
    """A GPU grouping (or host, model, gpu): its rows sum to the fleet without the unallocated row."""
    return scope_of(group) == GPU


def in_focus(group: str) -> bool:
    """FOCUS writes a file for the rows of ``group``: the report's own rows and the groupings with ``focus``."""
    g = find(group)
    return g.focus if g is not None else group in OWN


def file_stem(group: str) -> str:
    """``label:label_team`` -> ``label-label_team``: a group as a file name's stem."""
    return re.sub(r"[^A-Za-z0-9_]", "-", group)


def is_focus_stem(stem: str) -> bool:
    """A FOCUS file's stem that :func:`in_focus` groups make (what /reports/ serves)."""
    return bool(LABEL_STEM.fullmatch(stem)) or stem in {file_stem(g) for g in (*OWN, *names(lambda g: g.focus))}
