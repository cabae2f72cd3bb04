"""torch.distributed benchmarks: all-reduce sweep, 1-vs-N training, GEMM, memory copies.

Torch-free here and in plan, results, report, launch, runner, state, scheduler and cli; the
workloads (context, allreduce, train, device, worker) import torch and run only in child processes.
"""
