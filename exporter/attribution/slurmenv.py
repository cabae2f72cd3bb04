"""A Slurm job's identity from a process's environment (``/proc/PID/environ``).

slurmstepd sets ``SLURM_JOB_ID``, ``SLURM_JOB_ACCOUNT``, ``SLURM_JOB_PARTITION`` and (where
slurmdbd knows QOS) ``SLURM_JOB_QOS`` in every job's environment. The environment is the job's
own to change, so what it says is a claim: values that are not names Slurm would set (not UTF-8,
a control character, longer than ``MAX_VALUE``) are dropped, never repaired or cut short (two
names cut to the same prefix would share one bill), and the finished job's record (jobcomp or
sacct, written by slurmctld) overrides it where the history has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MAX_ENVIRON = 1 << 20  # bytes read of /proc/PID/environ; Slurm's variables beyond this are not looked for
MAX_VALUE = 128  # characters; a longer value is not an account, partition or QOS name

_NAMES = {
    b"SLURM_JOB_ID": "job_id",
    b"SLURM_JOB_ACCOUNT": "account",
    b"SLURM_JOB_PARTITION": "partition",
    b"SLURM_JOB_QOS": "qos",
}


@dataclass(frozen=True, slots=True)
class SlurmEnv:
    """What a process's environment says of its Slurm job; empty strings where it says nothing usable."""

    job_id: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""


def clean(raw: bytes) -> str:
    """A label value from an environment value, or "" when it is not a plausible Slurm name."""
    if len(raw) > MAX_VALUE * 4:
        return ""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if len(text) > MAX_VALUE or not text.isprintable() or text != text.strip():
        return ""
    return text


def parse(environ: bytes) -> SlurmEnv:
    """Slurm's job variables from NUL-separated ``NAME=value`` items (the first of a name wins,
    as getenv answers)."""
    found: dict[str, str] = {}
    for item in environ.split(b"\0"):
        name, sep, value = item.partition(b"=")
        field = _NAMES.get(name) if sep else None
        if field is not None and field not in found:
            found[field] = clean(value)
    job = found.get("job_id", "")
    return SlurmEnv(
        job_id=job if job.isascii() and job.isdigit() else "",
        account=found.get("account", ""),
        partition=found.get("partition", ""),
        qos=found.get("qos", ""),
    )


def read(path: Path) -> SlurmEnv:
    """Parse the environ file at ``path`` (its first ``MAX_ENVIRON`` bytes); empty when unreadable."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_ENVIRON)
    except OSError:
        return SlurmEnv()
    return parse(data)
