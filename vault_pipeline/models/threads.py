"""BLAS on one thread for the whole process, unless the user chose a thread count.

The matrix products here are small: a query's few hundred stored vectors against a handful of
query vectors, the clean's blocks of neighbours. NumPy's OpenBLAS still splits each product past a
small size over every core, and its idle workers then spin waiting for the next one instead of
sleeping, on a core the LanceDB searches and the ONNX embedder need. ``vault`` gives BLAS one
thread at start, as it sets the garbage collector's thresholds; the products are as exact and the
clean's larger ones as fast. The measurements: docs/decisions/0008-blas-one-thread.md.
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
