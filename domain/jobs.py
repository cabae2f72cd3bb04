"""Who holds a GPU: the key of a job, whatever ran it (a Slurm job, a Kubernetes container, a
user's own process), as both daemons name it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    job_id: str = ""  # Slurm job id
    user: str = ""
    pod: str = ""  # pod name, or its UID when the kubelet cannot name it
    namespace: str = ""
    container: str = ""  # container name, or the first 12 digits of its id
    # what the Slurm job's environment says of it: descriptions, not identity (a job is the same
    # job whatever they say), so not compared, hashed or ordered; "" where unknown
    account: str = field(default="", compare=False)
    partition: str = field(default="", compare=False)
    qos: str = field(default="", compare=False)

    def labels(self) -> tuple[str, str, str, str, str]:
        return (self.job_id, self.user, self.pod, self.namespace, self.container)

    def slurm(self) -> tuple[str, str, str]:
        """(account, partition, qos)."""
        return (self.account, self.partition, self.qos)


CLUSTER_SEP = ":"  # a job row's key over several clusters: cluster:job; no Slurm job id, pod or namespace holds one
