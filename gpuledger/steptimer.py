"""Per-step times for ``gpuledger scaling``: one line in a training script, no torch needed.

    from gpuledger.steptimer import steps

    for batch in steps(loader, samples_per_step=len_of_batch, grad_bytes=4 * n_parameters):
        ...  # forward, backward, optimizer step

Under ``gpuledger scaling`` (which sets ``GPULEDGER_SCALING_STEP_DIR``) every rank writes the time
of each step, from one iteration to the next (fetching the batch and the loop's body), to
``rank-<RANK>.json`` in that folder when the loop ends, however it ends. The command drops the
warm-up steps, takes each rank's median and keeps the slowest rank's. Without the variable
``steps`` only passes the items through, so the script runs as before anywhere else.

``no_sync`` (a DDP model's ``model.no_sync``, or any context manager factory that skips the
gradient all-reduce) lets the command measure the all-reduce time the steps do not hide: with
several ranks, the ``K`` steps after the warm-up (``GPULEDGER_SCALING_NO_SYNC`` = ``"W,K"``, set by
the command) run inside it, and the synced steps' time less these steps' is the exposed all-reduce
time. Those K steps accumulate their gradients locally and the next step all-reduces the sum, as
gradient accumulation does: a measurement run, not a production one.

On a GPU the loop runs ahead of the device until the queue fills (then each iteration waits for
the GPU); a step that reads a value back (``loss.item()``) or the optimizer's synchronisation
keeps the steady times honest, and the warm-up steps that are dropped cover the filling.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

STEP_DIR_ENV = "GPULEDGER_SCALING_STEP_DIR"
NO_SYNC_ENV = "GPULEDGER_SCALING_NO_SYNC"

T = TypeVar("T")


def steps(
    iterable: Iterable[T],
    *,
    samples_per_step: int | None = None,
    grad_bytes: int | None = None,
    no_sync: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Iterator[T]:
    """Yield ``iterable``'s items, timing each step when ``gpuledger scaling`` asks for it.

    ``samples_per_step``: this rank's samples per step (its batch); ``grad_bytes``: the bytes of
    gradients a step all-reduces (4 x parameters in float32). Both are optional and only reported.
    ``no_sync``: see the module's text."""
    folder = os.environ.get(STEP_DIR_ENV)
    if not folder:
        yield from iterable
        return
    window = _no_sync_window() if no_sync is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    times: list[float] = []
    started_at = time.time()  # wall clock: the command lines the steps up with the GPUs' energy reads
    last = time.perf_counter()
    try:
        for k, item in enumerate(iterable):
            unsynced = window is not None and window[0] <= k < window[0] + window[1]
            with no_sync() if unsynced and no_sync is not None else nullcontext():
                yield item  # the loop's body runs here, inside the context
            now = time.perf_counter()
            times.append(now - last)
            last = now
    finally:
        _write(Path(folder), times, samples_per_step, grad_bytes, started_at, window)


def _no_sync_window() -> tuple[int, int] | None:
    """(first step, steps) to run without the all-reduce, as the command asks; None: not asked."""
    try:
        first, count = (int(x) for x in os.environ.get(NO_SYNC_ENV, "").split(","))
    except ValueError:
        return None
    return (first, count) if first >= 0 and count > 0 else None


def _write(
    folder: Path,
    times: list[float],
    samples_per_step: int | None,
    grad_bytes: int | None,
    started_at: float,
    window: tuple[int, int] | None,
) -> None:
    rank = int(os.environ.get("RANK", "0"))
    doc = {
        "rank": rank,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "samples_per_step": samples_per_step,
        "grad_bytes": grad_bytes,
        "step_seconds": times,
        "started_at": started_at,
        "no_sync": list(window) if window is not None else None,  # the steps run without the all-reduce
    }
    path = folder / f"rank-{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)  # the command never reads half a file
