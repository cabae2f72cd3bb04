"""GPU sampling: the sampler thread, its fast and slow lanes, per-GPU state, and the rows of the GPU and job metrics."""
