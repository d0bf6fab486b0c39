"""Triangular solves and Cholesky inverses (numba).

Every inverse of a positive-definite matrix goes through its Cholesky factor; no explicit
inverse of an ill-conditioned matrix is formed.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def chol_inverse(P):
    """``(P^{-1}, log|P|)`` of a symmetric positive-definite matrix by Cholesky."""
    k = P.shape[0]
    if k == 0:
        return np.zeros((0, 0)), 0.0
    L = np.linalg.cholesky(P)
    logdet = 0.0
    for i in range(k):
        logdet += 2.0 * math.log(L[i, i])
    Linv = np.zeros((k, k))
    for i in range(k):  # forward substitution for L^{-1}
        Linv[i, i] = 1.0 / L[i, i]
        for j in range(i):
            s = 0.0
            for t in range(j, i):
                s += L[i, t] * Linv[t, j]
            Linv[i, j] = -s / L[i, i]
    S = Linv.T @ Linv
    return 0.5 * (S + S.T), logdet

@numba.njit(cache=True)
def forward_sub(L, B):
    """Solve ``L Y = B`` for lower-triangular ``L`` (columns of ``B`` at once)."""
    k = L.shape[0]
    Y = B.copy()
    for i in range(k):
        for j in range(i):
            Y[i] -= L[i, j] * Y[j]
        Y[i] /= L[i, i]
    return Y

@numba.njit(cache=True)
def backward_sub_t(L, B):
    """Solve ``Lᵀ Y = B`` for lower-triangular ``L``."""
    k = L.shape[0]
    Y = B.copy()
    for i in range(k - 1, -1, -1):
        for j in range(i + 1, k):
            Y[i] -= L[j, i] * Y[j]
        Y[i] /= L[i, i]
    return Y
