"""The idle-job actions' row of the metric table (``exporter.slurm.idle``; absent while
``[slurm] idle_action`` is off)."""

from __future__ import annotations

from exporter.registry import Feature, part_row
from exporter.slurm.idle import ACTIONS, IdleActions

# fmt: off
FEATURE: Feature[IdleActions] = Feature("idle", IdleActions, (
    part_row(IdleActions, "gpuledger_idle_job_actions_total", "counter", "",
             "Actions on Slurm jobs whose GPUs here stayed idle ([slurm] idle_action): warned (scontrol notify), "
             "cancelled (scancel), refused (idle long enough, but not in idle_cancel_partitions or not listed "
             "running), failed (the command failed).", "scontrol notify, squeue, scancel",
             lambda a: {(k,): float(a.counts.get(k, 0)) for k in ACTIONS}, ("action",)),
))
# fmt: on
