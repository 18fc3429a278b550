"""Settings for every test folder. Under pytest-xdist (``-n``), each worker takes its share of the CPU
cores for torch and OpenMP, so the workers do not fight over them."""

from __future__ import annotations

import os


def pytest_configure(config):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // int(workers))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(threads)
