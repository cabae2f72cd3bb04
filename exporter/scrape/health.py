"""Whether the exporter is ready to be scraped, as /healthz and /readyz answer it.

Ready means the figures it serves are true and current: a snapshot younger than ``stale_after``,
the reader open (on an NVML node: NVML up; a node whose NVML is down serves no GPU at all) and
the last ``FAILING_AFTER`` sampling rounds not all failed. Liveness (/livez, answered by
``daemonkit.http``) asks only that the process serves: restarting it does not fix a driver.
"""

from __future__ import annotations

import time

from exporter.readers import source_name
from exporter.snapshot import Snapshot


def readiness(s: Snapshot, stale_after: float, failure: str | None = None) -> tuple[bool, dict[str, object]]:
    """(ready, the JSON body): ``status`` ok, stale, reader_down or failing, and when not ok a
    ``reason``, one plain sentence a person can act on."""
    age = time.monotonic() - s.taken_monotonic if s.seq else None
    status, reason = "ok", None
    if age is None or age > stale_after:
        status = "stale"
        reason = (
            "no sampling round has finished yet"
            if age is None
            else f"the last sampling round ended {age:.1f} s ago, more than stale_after ({stale_after:g} s)"
        )
    elif not s.nvml_up:
        status = "nvml_down" if s.nvml_state is not None else "reader_down"
        reason = f"{source_name(s.reader)} is down ({s.reader_down or 'not opened'}): no GPU is sampled"
    elif failure is not None:
        status, reason = "failing", failure
    body: dict[str, object] = {
        "status": status,
        **({"reason": reason} if reason is not None else {}),
        "reader": s.reader,
        **({"nvml_up": s.nvml_state} if s.nvml_state is not None else {}),
        "last_sample_age_seconds": None if age is None else round(age, 3),
        "stale_after_seconds": stale_after,
        "gpus": len(s.gpus),
        "gpus_up": sum(g.up for g in s.gpus),
    }
    return status == "ok", body
