"""A report as one user may see it (``[analytics] access = "per_user"``, docs/security.md): their
own row of the user grouping, their own jobs (rows, idle holders, stalled jobs), and the fleet's
figures only where the site allows them; never another user's name, job id or cost.

A job row carries no user: which user a job is comes from ``owners`` (job row key -> user), which
the daemon keeps beside each report it builds (:func:`analytics.pipeline.make_report`). A job
without an owner is nobody's: no user sees it (a report written before per-user access, or by
``gpuledger report``, shows a user none of its jobs).

Left out for a user, always: the rows of every other job grouping (account, namespace, partition,
QOS, pod labels), which sum every user's jobs of a key, and any note, approximation or reason that
names another user or job. Kept only with ``fleet_totals`` (``[analytics] per_user_fleet_totals``):
the fleet row, hosts, models, GPUs, GPU groupings (cluster), the unallocated row, days, queue,
failures, the multi-GPU verdict, rent vs buy and the week-over-week deltas: sums over the fleet with
no user's name or job in them. Without it the headline (the ``fleet`` row) is the user's own row.
Benchmarks and prices (the hardware and the configuration) are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from analytics.report import groupings
from analytics.report.groupings import NONE, UNKNOWN_USER
from analytics.report.model import UNALLOCATED, CostRow, IdleRow, LinkRow, Report, StalledRow

NOBODY = (UNKNOWN_USER, NONE, "")
"""Keys that are no user's name: whoever claims one sees no user or job rows."""
LEFT_OUT = "(a line naming other users or jobs is left out of your view)"


def _fleet_group(group: str) -> bool:
    """A row group that sums the fleet's GPUs (host, model, gpu, cluster) or what no job held."""
    return group == UNALLOCATED or groupings.scope_of(group) == groupings.GPU


def _zero(r: Report) -> CostRow:
    f = r.fleet
    return CostRow(
        "fleet", "fleet", 0, 0.0, 0.0, 0.0, None, 0.0, None, None, None, None, None, 0.0, 0.0, 0.0, None, 0.0,
        f.coverage, useful_measure=f.useful_measure, busy_measure=f.busy_measure,
        energy_measure=f.energy_measure,
    )  # fmt: skip


def banner(user: str, fleet_totals: bool) -> str:
    """The note that says whose view a report is and what it leaves out."""
    shown = "the fleet's totals, hosts, models, GPUs, days, queue and failures" if fleet_totals else "your own totals"
    return (
        f"per-user view for {user}: your own user row, jobs, idle and stalled jobs, and {shown}; "
        "other groupings (accounts, namespaces, partitions...) sum other users' jobs and are left out"
    )


def for_user(r: Report, user: str, owners: Mapping[str, str], fleet_totals: bool) -> Report:
    """``r`` as ``user`` may see it (see the module's help)."""
    me = "" if user in NOBODY else user
    mine_jobs = {k for k, owner in owners.items() if me and owner == me}
    rows = [
        x
        for x in r.rows
        if (x.group == "user" and me and x.key == me)
        or (x.group == "job" and x.key in mine_jobs)
        or (fleet_totals and _fleet_group(x.group))
    ]
    own = next((x for x in r.rows if x.group == "user" and me and x.key == me), None)
    fleet = r.fleet if fleet_totals else dataclasses.replace(own, group="fleet", key="fleet") if own else _zero(r)
    others = {x.key for x in r.rows if x.group in ("user", "job") and x.key not in mine_jobs and x.key != me}
    others |= {o for o in owners.values() if o != me} | {k for k, o in owners.items() if o != me}
    held: list[IdleRow | StalledRow | LinkRow] = [*r.idle_holders, *r.stalled_jobs, *r.link_jobs]
    others |= {x.user for x in held if x.user != me} | {x.job for x in held if x.user != me}
    others -= {*NOBODY, UNALLOCATED}

    def clean(lines: list[str]) -> list[str]:
        out = [x if not any(o in x for o in others) else LEFT_OUT for x in lines]
        return list(dict.fromkeys(out))

    fleet_only = {
        name: getattr(r, name) if fleet_totals else []
        for name in ("daily", "queue", "failures", "multi_gpu", "scaling", "rent_vs_buy", "deltas")
    }
    return dataclasses.replace(
        r,
        fleet=fleet,
        rows=rows,
        idle_holders=[x for x in r.idle_holders if me and x.user == me],
        stalled_jobs=[x for x in r.stalled_jobs if me and x.user == me],
        link_jobs=[x for x in r.link_jobs if me and x.user == me],
        notes=[*clean(r.notes), banner(user, fleet_totals)],
        approximations=clean(r.approximations),
        incomplete_reasons=clean(r.incomplete_reasons),
        **fleet_only,
    )
