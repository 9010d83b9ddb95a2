"""BLAS on one thread for the whole process, unless the user chose a thread count.

The matrix products here are small: a query's few hundred stored vectors against a handful of
query vectors, the clean's blocks of neighbours. NumPy's OpenBLAS still splits each product past a
small size over every core, and its idle workers then spin waiting for the next one instead of
sleeping. Profiled per thread on ``benchmarks/bench_scale.py``'s export questions (2 cores), those
workers took 33 ms of CPU a question (0.3 ms on one thread; the question's CPU went from 89 to
58 ms), a core the LanceDB searches and the ONNX embedder needed. ``vault`` gives BLAS one thread
at start, as it sets the garbage collector's thresholds; the clean's dry run at 20,000 notes
(``benchmarks/bench_clean.py``) takes as long either way.
"""

from __future__ import annotations

import os
import sys

# What OpenBLAS (NumPy's wheels) and MKL (conda's NumPy) read at load time; OpenBLAS falls back to
# OpenMP's variable, so a user who set any of them chose, and is left alone.
USER_CHOICE = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread() -> bool:
    """Set BLAS to one thread for this process (and the processes it starts); False if the user chose.

    Before NumPy loads its BLAS the environment is enough and nothing is imported; once loaded,
    threadpoolctl sets the library itself. Call it from the main thread: OpenBLAS keeps the count
    the main thread set over one a worker thread sets later.
    """
    if any(os.environ.get(name) for name in USER_CHOICE):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    if "numpy" in sys.modules:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    return True
