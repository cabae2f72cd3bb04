"""Who holds a GPU: process -> user, Slurm job, Kubernetes pod (cgroups, /proc, the kubelet)."""
