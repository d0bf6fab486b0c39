"""The linear-Gaussian likelihood with the features integrated out (numba).

``X = Z A + ε``, ``ε ~ N(0, σx² I)``, ``A ~ N(0, σa² I)`` (Griffiths & Ghahramani 2011, §5;
Doshi-Velez & Ghahramani 2009, eq. 2).  Everything here is a function of the sufficient
statistics ``G = ZᵀZ`` and ``RX = ZᵀX`` over the active columns, which are sums over rows and
therefore add across data shards:

* the feature posterior ``P = G/σx² + I/σa²``, ``Σ = P⁻¹``, ``μ = Σ RX/σx²``;
* the collapsed likelihood ``log p(X | Z)`` and the collapsed log joint
  ``log p(X | Z) + log P(Z)``;
* the exact draw of ``A | Z, X``.

References
----------
.. [1] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *JMLR* 12, 1185–1224.
.. [2] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_ibp.distributions.ibp_math import ibp_log_pmf
from pymc_ibp.step_methods.kernels.linalg import backward_sub_t, chol_inverse, forward_sub

LOG2PI = math.log(2.0 * math.pi)



@numba.njit(cache=True)
def suff_stats(Z, X, act):
    """``G = Z_actᵀ Z_act`` and ``RX = Z_actᵀ X`` (the shard-summable statistics)."""
    n, d = X.shape
    k = act.shape[0]
    G = np.zeros((k, k))
    RX = np.zeros((k, d))
    for i in range(n):
        for a in range(k):
            if Z[i, act[a]] != 0:
                for t in range(d):
                    RX[a, t] += X[i, t]
                for b in range(k):
                    if Z[i, act[b]] != 0:
                        G[a, b] += 1.0
    return G, RX

@numba.njit(cache=True)
def stats_with_row(G, RX, z, x, k, sign):
    """Add (``sign=+1``) or remove (``-1``) one row's terms of ``G = ZᵀZ`` and ``RX = ZᵀX``."""
    for a in range(k):
        if z[a] != 0.0:
            for t in range(x.shape[0]):
                RX[a, t] += sign * x[t]
            for b in range(k):
                if z[b] != 0.0:
                    G[a, b] += sign

@numba.njit(cache=True)
def posterior_from_stats(G, RX, sx2, sa2):
    """Feature posterior ``p(A | Z, X)`` (Doshi-Velez & Ghahramani 2009, eq. 6, in information
    form): ``P = G/σx² + I/σa²``, ``Σ = P⁻¹``, ``μ = Σ RX/σx²``."""
    k = G.shape[0]
    P = G / sx2
    for i in range(k):
        P[i, i] += 1.0 / sa2
    Sig, logdetP = chol_inverse(P)
    mu = (Sig @ RX) / sx2
    return Sig, mu, logdetP

@numba.njit(cache=True)
def collapsed_loglik(G, RX, trXX, n, d, sx2, sa2):
    """``log p(X | Z)`` with ``A`` integrated out (Griffiths & Ghahramani 2011, §5).

    ``-ND/2 log 2π - (N-K)D log σx - KD log σa - D/2 log|ZᵀZ + σx²/σa² I|
    - (‖X‖² - tr(RXᵀ M RX)) / (2σx²)``, ``M = (ZᵀZ + σx²/σa² I)⁻¹``, costing ``O(K³ + K²D)``.

    This is the corrected form of eq. 5 of Doshi-Velez & Ghahramani (2009) (= eq. A.2 of
    Doshi-Velez 2009), whose exponent ``Xᵀ(I - ZMZᵀ)X`` is printed without the trace.
    Derivation: the ``D`` columns of ``X`` are independent ``N(0, σa² ZZᵀ + σx² I_N)``
    vectors and ``(σa² ZZᵀ + σx² I_N)⁻¹ = (I - ZMZᵀ)/σx²`` (Woodbury), so their quadratic
    forms add up to ``tr(Xᵀ(I - ZMZᵀ)X)/σx²``, and
    ``tr(Xᵀ(I - ZMZᵀ)X) = ‖X‖² - tr((ZᵀX)ᵀ M (ZᵀX))``.  Written with the cached ``ZᵀZ`` and
    ``ZᵀX`` the cost does not depend on ``N`` (the papers' ``O(N³)`` refers to the ``N x N``
    form).
    """
    k = G.shape[0]
    ratio = sx2 / sa2
    lp = -0.5 * n * d * LOG2PI - 0.5 * (n - k) * d * math.log(sx2) - 0.5 * k * d * math.log(sa2)
    if k == 0:
        return lp - 0.5 * trXX / sx2
    Mi = G.copy()
    for i in range(k):
        Mi[i, i] += ratio
    M, logdet = chol_inverse(Mi)
    quad = 0.0
    MR = M @ RX
    for a in range(k):
        for t in range(d):
            quad += RX[a, t] * MR[a, t]
    return lp - 0.5 * d * logdet - 0.5 * (trXX - quad) / sx2

@numba.njit(cache=True)
def draw_active_features(rng, G, RX, sx2, sa2):
    """``A_act ~ N(μ, Σ)`` column-wise (Doshi-Velez & Ghahramani 2009, eq. 6): one Cholesky
    ``P = L Lᵀ`` of ``P = G/σx² + I/σa²``; ``μ = L⁻ᵀ L⁻¹ RX/σx²``, ``A = μ + L⁻ᵀ ε``."""
    k, d = RX.shape
    P = G / sx2
    for i in range(k):
        P[i, i] += 1.0 / sa2
    L = np.linalg.cholesky(P)
    eps = np.empty((k, d))
    for i in range(k):
        for t in range(d):
            eps[i, t] = rng.standard_normal()
    return backward_sub_t(L, forward_sub(L, RX / sx2) + eps)

def draw_features(rng, Z, X, sx2, sa2):
    """``A | Z, X`` for all ``K_max`` slots: active rows from :func:`draw_active_features`,
    empty slots from the prior ``N(0, σa²)``."""
    k_max = Z.shape[1]
    A = rng.normal(0.0, math.sqrt(sa2), size=(k_max, X.shape[1]))
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    if act.size:
        G, RX = suff_stats(Z, X, act)
        A[act] = draw_active_features(rng, G, RX, sx2, sa2)
    return A


@numba.njit(cache=True)
def collapsed_log_joint(G, RX, m_act, trXX, n, d, sx2, sa2, alpha, beta, k_max):
    """``(log p(X | Z) + log P(Z), log p(X | Z))`` under :class:`pymc_ibp.IBP`: the collapsed
    likelihood (:func:`collapsed_loglik`) plus the truncated IBP pmf
    (:func:`pymc_ibp.distributions.ibp_math.ibp_log_pmf`) of the active column sizes
    ``m_act``.  The ``ibp_log_joint`` sample stat, the multi-start selection and the
    benchmarks all use this function."""
    loglik = collapsed_loglik(G, RX, trXX, n, d, sx2, sa2)
    return loglik + ibp_log_pmf(m_act, n, k_max, alpha, beta), loglik


def log_joint_of(Z, X, sx2, sa2, alpha, beta=1.0, trXX=None):
    """:func:`collapsed_log_joint` of a whole ``N x K_max`` matrix ``Z`` (Python entry point:
    the statistics are computed from ``Z`` at ``O(N K (K + D))``)."""
    Z = np.asarray(Z, dtype=np.int64)
    n, d = X.shape
    m = Z.sum(axis=0)
    act = np.flatnonzero(m > 0)
    G, RX = suff_stats(Z, X, act)
    trXX = float(np.sum(X * X)) if trXX is None else float(trXX)
    return collapsed_log_joint(G, RX, m[act].astype(np.int64), trXX, n, d, float(sx2),
                               float(sa2), float(alpha), float(beta), Z.shape[1])
