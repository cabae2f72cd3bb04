"""Parse what Slurm's commands and files say about jobs.

- ``squeue --json`` (22.05+; times plain integers, or ``{"set", "number"}`` objects from 23.02)
- ``squeue -h -t all -o FORMAT`` for older Slurm (``TEXT_FORMAT``, fields split on ``|``), checked
  against a listing of the job ids alone (``IDS_FORMAT``): a newline in a job name or account
  splits a record there, and what it splits off must not pass for another job
- the ``jobcomp/filetxt`` file: one ``Key=Value ...`` line per finished job; values such as the
  job name may hold spaces, so a field runs until the next known key
- ``sacct -P`` with a separator no job name contains (``SACCT_FIELDS``)

Times in the text formats are the controller's local time.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from domain import states
from exporter.slurm.records import FinishedJob


@dataclass(frozen=True)
class QueueJob:
    job_id: str
    name: str
    user: str
    partition: str
    state: str  # PENDING, RUNNING, ... (domain.states)
    reason: str
    submit: float | None
    eligible: float | None
    start: float | None  # None until the job starts
    gpus: int
    restarts: int
    account: str = ""  # "" where Slurm has none (no --account and no default)
    qos: str = ""  # "" where Slurm has none (22.05 without slurmdbd ignores --qos)


def local_time(text: str) -> float | None:
    """'2026-11-30T03:05:50' (local) -> epoch seconds; None for Unknown, N/A, None or empty."""
    text = text.strip()
    if not text or text in ("Unknown", "N/A", "None", "(null)", "0"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_GPU_GRES = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")


def gpus_requested(tres_req: str = "", per_job: str = "", per_node: str = "", nodes: int = 1) -> int:
    """GPUs a job asks for, from its TRES strings (gres/gpu=N) or gres (gpu[:type]:N)."""
    if m := _GPU_GRES.search(per_job or ""):
        return int(m.group(1))
    if m := _GPU_GRES.search(per_node or ""):
        return int(m.group(1)) * max(1, nodes)
    if m := _GPU_TRES.search(tres_req or ""):
        return int(m.group(1))
    return 0


def _num(v: Any) -> float | None:
    """A squeue JSON time: an int (22.05) or {"set": bool, "number": int} (23.02+); 0 = unset."""
    if isinstance(v, dict):
        v = v.get("number") if v.get("set", True) and not v.get("infinite") else None
    if v in (None, 0, ""):
        return None
    return float(v)


def _state(v: Any) -> str:
    return str(v[0] if isinstance(v, list) and v else v or "")


def squeue_json(text: str) -> list[QueueJob]:
    data = json.loads(text)
    out = []
    for j in data.get("jobs", []):
        nodes = j.get("node_count")
        nodes = int(_num(nodes) or 1)
        out.append(
            QueueJob(
                job_id=str(j.get("job_id", "")),
                name=str(j.get("name", "")),
                user=str(j.get("user_name") or j.get("user_id", "")),
                partition=str(j.get("partition", "")),
                state=_state(j.get("job_state")),
                reason=str(j.get("state_reason", "")),
                submit=_num(j.get("submit_time")),
                eligible=_num(j.get("eligible_time")),
                start=_num(j.get("start_time")),
                gpus=gpus_requested(
                    str(j.get("tres_req_str") or ""),
                    str(j.get("tres_per_job") or ""),
                    str(j.get("tres_per_node") or ""),
                    nodes,
                ),
                restarts=int(_num(j.get("restart_cnt")) or 0),
                account=str(j.get("account") or ""),
                qos=str(j.get("qos") or ""),
            )
        )
    return out


TEXT_FORMAT = "%A|%P|%T|%r|%V|%S|%u|%b|%D|%a|%q|%j|%A"
"""job id, partition, state, reason, submit, start, user, gres per node, nodes, account, QOS, name
(may hold |), and the job id again: a line is a whole record only when it ends with its own id.
``%A`` is a job's own id (an array task's too, as ``--json`` and the finished records give it;
``%i`` would say ``1_0``)."""

IDS_FORMAT = "%A"
"""The same listing, job ids alone: an id holds no newline, so this one line per job is sure."""

_LEGACY_FIELDS = 10  # %i|%P|%T|%r|%V|%S|%u|%b|%D|%j, the format before account and QOS
_WHOLE_FIELDS = TEXT_FORMAT.count("|") + 1
_NULL = "(null)"  # what squeue prints for an account or QOS it has none of


def _text_job(parts: list[str], name: str, account: str = "", qos: str = "") -> QueueJob:
    job_id, partition, state, reason, submit, start, user, gres, nodes = parts[:9]
    return QueueJob(
        job_id=job_id.strip(),
        name=name,
        user=user,
        partition=partition,
        state=state,
        reason=reason,
        submit=local_time(submit),
        eligible=None,
        start=local_time(start),
        gpus=gpus_requested(per_node=gres, nodes=int(nodes) if nodes.strip().isdigit() else 1),
        restarts=0,
        account="" if account == _NULL else account,
        qos="" if qos == _NULL else qos,
    )


def _whole(line: str) -> QueueJob | None:
    """A line of ``TEXT_FORMAT`` that starts and ends with the same job id, else None."""
    parts = line.split("|")
    if len(parts) < _WHOLE_FIELDS or parts[0] != parts[-1] or not parts[0]:
        return None
    return _text_job(parts, "|".join(parts[11:-1]), parts[9], parts[10])


def squeue_text(text: str) -> list[QueueJob]:
    """Lines of ``TEXT_FORMAT``, or of the older 10-field format (name last), unchecked: for output
    known to be whole. The watcher reads squeue through ``squeue_checked``."""
    out = []
    for line in text.splitlines():
        job = _whole(line)
        if job is None:
            parts = line.split("|", _LEGACY_FIELDS - 1)
            if len(parts) < _LEGACY_FIELDS:
                continue
            job = _text_job(parts, parts[9])
        out.append(job)
    return out


def squeue_checked(text: str, ids: str) -> tuple[list[QueueJob], set[str]]:
    """The records of ``TEXT_FORMAT`` output that are surely Slurm's, and the job ids dropped.

    ``ids`` is the ``IDS_FORMAT`` listing, taken after ``text``. squeue prints a name or account as
    it is, newlines too, so a job can make lines that look like records of other jobs (or of
    itself, with values of its choosing). A record is kept when its line is whole, its id is listed
    once in ``ids`` and no other line claims that id; a line that is not whole drops the job its
    first field names (a split record starts with its real id). A forged whole line either names a
    job not listed (dropped) or one listed, whose real record then makes two (both dropped).
    """
    listed: dict[str, int] = {}
    for i in ids.split():
        listed[i] = listed.get(i, 0) + 1
    whole: dict[str, list[QueueJob]] = {}
    split: set[str] = set()
    for line in text.rstrip("\n").split("\n"):  # squeue ends a record with \n only
        job = _whole(line)
        if job is None:
            split.add(line.split("|", 1)[0].strip())
        else:
            whole.setdefault(job.job_id, []).append(job)
    kept = [js[0] for i, js in whole.items() if len(js) == 1 and listed.get(i) == 1 and i not in split]
    dropped = (set(whole) | (split & set(listed))) - {j.job_id for j in kept}
    return kept, dropped


JOBCOMP_KEYS = (
    "JobId",
    "UserId",
    "GroupId",
    "Name",
    "JobState",
    "Partition",
    "TimeLimit",
    "StartTime",
    "EndTime",
    "NodeList",
    "NodeCnt",
    "ProcCnt",
    "WorkDir",
    "ReservationName",
    "Tres",
    "Account",
    "QOS",
    "WcKey",
    "Cluster",
    "SubmitTime",
    "EligibleTime",
    "ArrayJobId",
    "ArrayTaskId",
    "DerivedExitCode",
    "ExitCode",
)
_KEY = re.compile(r"(?:^| )(" + "|".join(JOBCOMP_KEYS) + r")=")


_HEAD = frozenset(JOBCOMP_KEYS[:4])
"""The keys slurmctld writes before the job name: a name that spells one out comes after them."""


def jobcomp_fields(line: str) -> dict[str, str]:
    """Split one jobcomp/filetxt line. A value runs until the next known key; when a key repeats
    (a job name that spells one out) the real one wins: the first of JobId, UserId, GroupId and
    Name (written before the name), the last of the others (written after it)."""
    marks = list(_KEY.finditer(line.rstrip("\n")))
    out: dict[str, str] = {}
    for m, nxt in zip(marks, [*marks[1:], None], strict=False):
        if m.group(1) not in _HEAD or m.group(1) not in out:
            out[m.group(1)] = line[m.end() : nxt.start() if nxt else len(line.rstrip("\n"))].rstrip(" ")
    return out


MAX_RECORD_LINES = 64
"""Lines one jobcomp record may span (a job name with newlines splits it)."""


def jobcomp_records(data: bytes) -> tuple[list[str], int]:
    """The whole records in the jobcomp file's ``data`` and the bytes they take.

    slurmctld writes a record in one line, its job name raw: a newline in the name splits it. A
    line that starts a record (``JobId=``) but has no ``EndTime`` is such a head; the lines after it
    that start no record, up to the one that completes it, are the rest of its name and its real
    fields, joined back (``Name=a\nb`` keeps its record). A line that starts with ``JobId=`` always
    starts a record of its own: it may be a name's forgery (``-J $'x\nJobId=2002 UserId=bob...'``),
    which no text can tell from a real record; squeue's listing decides (``exporter.slurm.verify``),
    and the head it cut off, incomplete, parses to nothing. A head whose end is not in ``data`` yet
    is left for the next read (slurmctld may be writing it); after ``MAX_RECORD_LINES`` lines it is
    given up. A line that fits no record (a fragment) is passed on and parses to nothing."""
    lines = data.split(b"\n")[:-1]  # slurmctld ends a record with \n only; the last piece is not whole
    out: list[str] = []
    used = i = 0
    while i < len(lines):
        record, n = lines[i].decode("utf-8", errors="replace"), 1
        if record.startswith("JobId=") and "EndTime" not in jobcomp_fields(record):
            while n < MAX_RECORD_LINES and "EndTime" not in jobcomp_fields(record):
                if i + n == len(lines):
                    return out, used  # its end is not written yet
                if lines[i + n].startswith(b"JobId="):
                    break
                record += "\n" + lines[i + n].decode("utf-8", errors="replace")
                n += 1
        out.append(record)
        used += sum(len(x) + 1 for x in lines[i : i + n])
        i += n
    return out, used


def _user(v: str) -> str:
    return v.split("(", 1)[0] if "(" in v else v


def jobcomp_line(line: str) -> FinishedJob | None:
    f = jobcomp_fields(line)
    end = local_time(f.get("EndTime", ""))
    if "JobId" not in f or end is None:
        return None
    start = local_time(f.get("StartTime", ""))
    state = f.get("JobState", "").split(" ", 1)[0]
    if f.get("NodeList", "") in ("(null)", "", "None assigned"):
        start = None  # cancelled while pending: Slurm writes StartTime = EndTime, it never ran
    return FinishedJob(
        cluster=f.get("Cluster", "") if f.get("Cluster") != "unknown" else "",
        job_id=f["JobId"],
        name=f.get("Name", ""),
        user=_user(f.get("UserId", "")),
        partition=f.get("Partition", ""),
        state=state,
        submit=local_time(f.get("SubmitTime", "")),
        eligible=local_time(f.get("EligibleTime", "")),
        start=start,
        end=end,
        gpus=gpus_requested(f.get("Tres", "")),
        exit_code=f.get("ExitCode", ""),
        restarts=0,
        account=f.get("Account", ""),
        qos=f.get("QOS", ""),
    )


SACCT_SEP = "\x1f"  # ASCII unit separator: no job name has one
SACCT_FIELDS = (
    "JobIDRaw,Cluster,User,Partition,State,Submit,Eligible,Start,End,AllocTRES,ExitCode,Restarts,Account,QOS,JobName"
)


def sacct(text: str) -> list[FinishedJob]:
    out = []
    for line in text.splitlines():
        parts = line.split(SACCT_SEP)
        if len(parts) != SACCT_FIELDS.count(",") + 1:
            continue
        job_id, cluster, user, partition, state, submit, eligible, start, end, tres, exit_code, restarts, *rest = parts
        account, qos, name = rest
        end_t = local_time(end)
        if end_t is None or "." in job_id:
            continue  # still running, or a step
        start_t = local_time(start)
        state = state.split(" ", 1)[0]
        if state == states.CANCELLED and start_t is not None and start_t >= end_t and not tres:
            start_t = None  # cancelled while pending
        out.append(
            FinishedJob(
                cluster=cluster,
                job_id=job_id,
                name=name,
                user=user,
                partition=partition,
                state=state,
                submit=local_time(submit),
                eligible=local_time(eligible),
                start=start_t,
                end=end_t,
                gpus=gpus_requested(tres),
                exit_code=exit_code,
                restarts=int(restarts) if restarts.isdigit() else 0,
                account=account,
                qos=qos,
            )
        )
    return out
