"""The Slurm queue as the analytics need it: pending work, queue wait, finished and requeued jobs."""
