"""Attribution as the sampler uses it: owners of GPU processes (each round, cached) and the
kubelet's GPU-to-pod map (refreshed from the slow lane)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from exporter.attribution.kubelet import PodDevice, PodResourcesClient, PodResourcesError
from exporter.attribution.procfs import Owner, ProcReader, Users

log = logging.getLogger(__name__)


class Attribution:
    def __init__(
        self,
        proc_root: str | Path = "/proc",
        passwd_file: str | Path | None = None,
        kubelet_socket: str | None = None,
        pods_interval: float = 30.0,
        scheduler: Callable[[], Mapping[str, tuple[str, ...]]] | None = None,
    ) -> None:
        """``scheduler``: the scheduler's record of the jobs it knows, job id -> (user, account,
        partition, qos), "" where it does not know (the Slurm watcher's, on the node that runs it)."""
        self.procs = ProcReader(proc_root, Users(passwd_file))
        self.scheduler = scheduler
        self.kubelet = PodResourcesClient(kubelet_socket) if kubelet_socket else None
        self.pods_interval = pods_interval
        self.kubelet_up: bool | None = None if self.kubelet is None else False
        self._pods: dict[str, PodDevice] = {}
        self._pods_at = float("-inf")
        self._warned = False

    def owners(self, pids: list[int]) -> dict[int, Owner | None]:
        if self.scheduler is not None:
            self.procs.scheduled = self.scheduler()
        return {pid: self.procs.owner(pid) for pid in pids}

    def conflicts(self) -> dict[str, int]:
        """Processes whose environment's claim of their Slurm job was not believed, by claim."""
        return self.procs.conflicts()

    def pod_of(self, uuid: str) -> PodDevice | None:
        return self._pods.get(uuid)

    def refresh_pods(self) -> None:
        """Ask the kubelet which pod holds which GPU, at most every ``pods_interval`` seconds."""
        if self.kubelet is None or time.monotonic() - self._pods_at < self.pods_interval:
            return
        self._pods_at = time.monotonic()
        try:
            self._pods = self.kubelet.list()
            self.kubelet_up = True
            self._warned = False
        except PodResourcesError as e:
            self.kubelet_up = False
            if not self._warned:
                log.warning("kubelet pod-resources unavailable (%s); pods are named by UID", e)
                self._warned = True

    def close(self) -> None:
        if self.kubelet is not None:
            self.kubelet.close()


def kubelet_socket(setting: str | None, default: str) -> str | None:
    """'auto' (the default socket if it exists), a path, or '' / None for off."""
    if setting == "auto":
        return default if os.path.exists(default) else None
    return setting or None
