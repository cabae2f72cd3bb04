"""Slurm job states, defined once: the watcher, the sources, the report, the dashboards and the
synthetic fleet all read their sets from here.

Slurm's base states (https://slurm.schedmd.com/job_state_codes.html) are PENDING, RUNNING,
SUSPENDED and nine that end a job: COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED,
BOOT_FAIL, DEADLINE, OUT_OF_MEMORY. squeue and sacct print a flag instead of the base state when a
flag they know is set (COMPLETING, CONFIGURING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED, STOPPED, ...).

How a finished job counts:

- **failed** (work lost to a failure, of the job or of the system; ``FAILED``): FAILED (non-zero
  exit), TIMEOUT (killed at its time limit: the work was cut short), NODE_FAIL (a node died under
  it), OUT_OF_MEMORY, BOOT_FAIL (its nodes failed to boot), DEADLINE (terminated because it could
  no longer finish by its deadline). The dashboards' failed share, the report's failed columns and
  its failed GPU-hours all use this set.
- **cancelled**: CANCELLED, a decision by the user or an administrator, not a failure.
- **completed**: COMPLETED.
- anything else that ends a job (PREEMPTED: the scheduler's policy, and the job may run again;
  a state a later Slurm adds) is *other*: neither success nor failure.
"""

from __future__ import annotations

COMPLETED = "COMPLETED"
CANCELLED = "CANCELLED"
TIMEOUT = "TIMEOUT"
PENDING = "PENDING"
RUNNING = "RUNNING"

FAILED: tuple[str, ...] = ("FAILED", TIMEOUT, "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
"""The states that count as failed (see above), TIMEOUT among them."""

FINISHED: tuple[str, ...] = (COMPLETED, CANCELLED, "PREEMPTED", *FAILED)
"""Every base state that ends a job (what ``sacct -s`` asks for)."""

REQUEUE: tuple[str, ...] = (PENDING, "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
"""What a jobcomp line says for the end of a run that was requeued: not a finished job."""

NEVER_RAN: tuple[str, ...] = ("BOOT_FAIL", "DEADLINE")
"""Failed states of a job that never started: its nodes did not boot, or its deadline passed while
it was pending."""

RAN = frozenset({RUNNING, "COMPLETING", "SUSPENDED", "STOPPED", COMPLETED, *FAILED}) - set(NEVER_RAN)
"""squeue states that prove a job ran. A job cancelled (or preempted) while pending shows a start
time too (= its end), so those wait for the finished record, whose node list tells."""

ACTIVE = RAN - set(FINISHED)
"""squeue states of a job that started and has not ended: RUNNING, COMPLETING, SUSPENDED, STOPPED.
(squeue lists an ended job a while longer, MinJobAge, in its final state: not among these.)"""


def regex(states: tuple[str, ...]) -> str:
    """A PromQL ``=~`` alternative of these states (they hold no regex characters)."""
    return "|".join(states)
