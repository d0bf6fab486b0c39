"""Small numba helpers shared by the samplers and the prior's random draws.

All randomness comes from the numpy ``Generator`` passed in, so results are reproducible
for a seed and independent across chains.

Passing a ``Generator`` to a jitted function is not safe against Ctrl-C: numba unboxes it by
running Python attribute lookups (``rng.bit_generator.ctypes``), and a ``KeyboardInterrupt``
raised inside them crashes the interpreter (a segmentation fault, or a ``SystemError``), which
also loses PyMC's partial trace.  :func:`interrupt_safe` defers a SIGINT that arrives during a
call until the call has returned.
"""

from __future__ import annotations

import functools
import hashlib
import math
import signal
import threading

import numba
import numpy as np


def source_cache_key(*files) -> int:
    """An integer key for PyTensor's numba cache of a random variable's core function, that
    changes with the source files of its numba kernels.

    PyTensor caches a compiled random-variable graph by the key ``numba_core_rv_funcify``
    returns, not by the source of the kernels it calls ("if the function changed but the key
    is the same, numba will still use the old cache"), so a constant key would keep serving
    the previous version of ``ibp_draw_core`` after an upgrade or an edit.  The key is the first
    60 bits of the SHA-256 of the files' bytes (this module included)."""
    h = hashlib.sha256()
    for f in (__file__, *files):
        with open(f, "rb") as fh:
            h.update(fh.read())
    return int(h.hexdigest()[:15], 16)


def interrupt_safe(fn):
    """Decorator: a SIGINT (Ctrl-C) arriving while ``fn`` runs is recorded and delivered to the
    previous handler (by default: ``KeyboardInterrupt``) as soon as ``fn`` returns, so that it
    never interrupts numba's unboxing of a ``Generator`` argument.  Outside the main thread
    (where Python delivers signals) ``fn`` runs unchanged."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        pending = []
        try:
            previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(frame))
        except (ValueError, TypeError):  # e.g. a sub-interpreter: signals are not ours to set
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)
            if pending:
                if callable(previous):
                    previous(signal.SIGINT, pending[0])
                elif previous == signal.SIG_DFL:
                    raise KeyboardInterrupt

    return wrapper


@numba.njit(cache=True)
def bernoulli_logodds(rng, logodds):
    """Draw ``1`` with probability ``sigmoid(logodds)``, stable for large |logodds|."""
    u = rng.random()
    if logodds >= 0:
        return 1 if u * (1.0 + math.exp(-logodds)) < 1.0 else 0
    e = math.exp(logodds)
    return 1 if u * (1.0 + e) < e else 0


@numba.njit(cache=True)
def column_rows(Z, k, rows):
    """Write the rows ``i`` with ``Z[i, k] != 0`` into ``rows[:m]`` and return ``m`` (the
    owners of feature ``k``, for element-wise updates of its parameters)."""
    m = 0
    for i in range(Z.shape[0]):
        if Z[i, k] != 0:
            rows[m] = i
            m += 1
    return m


@numba.njit(cache=True)
def categorical_logp(rng, logp, n):
    """Draw an index in ``0..n-1`` with probabilities ``∝ exp(logp[:n])`` (log-sum-exp safe)."""
    mx = -np.inf
    for i in range(n):
        if logp[i] > mx:
            mx = logp[i]
    tot = 0.0
    for i in range(n):
        tot += math.exp(logp[i] - mx)
    u = rng.random() * tot
    acc = 0.0
    for i in range(n):
        acc += math.exp(logp[i] - mx)
        if u < acc:
            return i
    return n - 1


@numba.njit(cache=True)
def partial_shuffle(rng, arr, count):
    """Move a uniformly random ordered ``count``-subset of ``arr`` to ``arr[:count]`` in place
    (the first ``count`` steps of Fisher–Yates)."""
    size = arr.shape[0]
    for i in range(count):
        j = i + int(rng.random() * (size - i))
        if j >= size:
            j = size - 1
        arr[i], arr[j] = arr[j], arr[i]


@numba.njit(cache=True)
def ordered_pair(rng, n):
    """Two distinct indices below ``n``, the ordered pair uniform among the ``n (n - 1)``
    (Python callers use ``ordered_pair.py_func``: the same draws from the same generator)."""
    i = int(rng.random() * n)
    j = int(rng.random() * (n - 1))
    return i, j + (j >= i)


@numba.njit(cache=True)
def ordered_triple(rng, n):
    """Three distinct indices below ``n``, the ordered triple uniform among the
    ``n (n - 1) (n - 2)``: an :func:`ordered_pair` and a third index skipping both."""
    i, j = ordered_pair(rng, n)
    t = int(rng.random() * (n - 2))
    t += t >= min(i, j)
    t += t >= max(i, j)
    return i, j, t
