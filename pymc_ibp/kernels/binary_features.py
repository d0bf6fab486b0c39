"""The Gibbs scan of a binary feature–dimension matrix on cached counts ``S = Z A``
(Doshi-Velez 2009, App. A.3)."""

from __future__ import annotations

import numba
import numpy as np

from pymc_ibp._numba_utils import bernoulli_logodds, column_rows

__all__ = ["binary_feature_sweep"]


@numba.njit(cache=True)
def binary_feature_sweep(rng, Z, A, S, X, log_p1, log_p0, prior_lo):
    """One Gibbs scan of every element of the binary ``A`` (``K x D``, in place) given ``Z``
    (``N x K``), keeping the counts ``S = Z A`` (``N x D``) up to date.  ``log_p1[s, d]`` and
    ``log_p0[s, d]``: log-probabilities of ``x_nd = 1`` and ``0`` with ``s`` active parents;
    ``prior_lo`` (``K x D``): prior log-odds of ``a_kd = 1``.  Returns the number of flips."""
    n, k_max = Z.shape
    d = A.shape[1]
    rows = np.empty(n, dtype=np.int64)
    flips = 0
    for k in range(k_max):
        m = column_rows(Z, k, rows)
        for j in range(d):
            old = A[k, j]
            delta = 0.0
            for t in range(m):
                i = rows[t]
                s0 = S[i, j] - old
                if X[i, j] != 0:
                    delta += log_p1[s0 + 1, j] - log_p1[s0, j]
                else:
                    delta += log_p0[s0 + 1, j] - log_p0[s0, j]
            new = bernoulli_logodds(rng, prior_lo[k, j] + delta)
            if new != old:
                flips += 1
                A[k, j] = new
                for t in range(m):
                    S[rows[t], j] += new - old
    return flips
