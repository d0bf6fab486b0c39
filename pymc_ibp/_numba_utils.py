"""Small numba helpers shared by the samplers and the prior's random draws.

All randomness comes from the numpy ``Generator`` passed in, so results are reproducible
for a seed and independent across chains.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def bernoulli_logodds(rng, logodds):
    """Draw ``1`` with probability ``sigmoid(logodds)``, stable for large |logodds|."""
    u = rng.random()
    if logodds >= 0:
        return 1 if u * (1.0 + math.exp(-logodds)) < 1.0 else 0
    e = math.exp(logodds)
    return 1 if u * (1.0 + e) < e else 0


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
