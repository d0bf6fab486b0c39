"""The benchmarks of pymc_ibp, run as modules from the repository root (see README.md here).

    python -m benchmarks.run_all [--quick]      # make bench / make bench-quick
    python -m benchmarks.scaling [--quick]      # one script

Nothing here is a test and nothing asserts on timings.

Importing the package sets the environment every script runs in, before the script imports
numpy: BLAS / OpenMP limited to one thread (``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS``,
unless already set), so that timings are single-core.  :func:`quiet` silences the warnings and
PyMC's log messages, which are not what the benchmarks measure.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def quiet() -> None:
    """Ignore warnings (truncation, imputation, ...: not timing concerns) and PyMC's log
    messages below ERROR (step assignment, sampling progress)."""
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
