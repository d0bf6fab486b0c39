"""The formulas of the two-parameter IBP, each written once.

Every caller — the :class:`pymc_ibp.IBP` distribution (its logp and exact draws), the numba
kernels of the samplers, the step methods, their sample stats and the benchmarks — uses these
functions.  Each formula has a numba form (scalar arithmetic, callable from ``@njit`` code and
from Python) and, where the distribution's logp needs it, a symbolic PyTensor form
(``*_symbolic``) differentiable in ``α`` and ``β`` so that NUTS can sample them; the tests
check that the two forms agree.

With ``N`` rows, ``m`` the size of a column and ``K+`` the number of non-empty columns
(Griffiths & Ghahramani 2011, eq. 14–15; the two-parameter form of Ghahramani, Griffiths &
Sollich 2007):

* mass ``α S_N(β)``, ``S_N(β) = Σ_{i=1..N} β/(β+i-1)`` (``S_N(1) = H_N``): the Poisson mean of
  ``K+`` (:func:`ibp_mass`);
* one column's term ``log B(m, N-m+β) = log Γ(m) + log Γ(N-m+β) - log Γ(N+β)``
  (:func:`log_beta_term`);
* the prior log-odds of ``z_nk = 1`` given the other rows, ``log m₋ₙ/(N-1-m₋ₙ+β)`` for
  ``m₋ₙ > 0`` (:func:`prior_logodds`), and the rate ``αβ/(N-1+β)`` of the Poisson number of new
  features of one row (:func:`log_birth_rate`);
* the prior ratio of a column of size ``m`` split into two of sizes ``m1``, ``m2``,
  ``log αβ + log B(m1,·) + log B(m2,·) - log B(m,·)`` (:func:`log_split_prior`);
* the truncation normaliser ``log P(K+ <= K_max) = log PoissonCDF(K_max; α S_N(β))``
  (:func:`log_truncation`);
* the log pmf of :class:`pymc_ibp.IBP` (the IBP restricted to ``K+ <= K_max`` with its columns in
  uniformly random slots; derivation in :mod:`pymc_ibp.distributions.ibp`)
  (:func:`ibp_log_pmf`)::

      log P(Z) = K+ log(αβ) - α S_N(β) + Σ_{k: m_k>0} log B(m_k, N-m_k+β)
                 + log (K_max-K+)! - log K_max! - log P(K+ <= K_max).

References
----------
.. [1] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *Journal of Machine Learning Research* 12, 1185–1224.
.. [2] Ghahramani, Z., Griffiths, T. L. and Sollich, P. (2007). Bayesian nonparametric latent
   feature models. *Bayesian Statistics 8*, 201–226.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytensor.tensor as pt

__all__ = [
    "harmonic_mass",
    "ibp_entry_logodds",
    "ibp_log_pmf",
    "ibp_logp_symbolic",
    "ibp_mass",
    "ibp_mass_symbolic",
    "log_beta_term",
    "log_birth_rate",
    "log_poisson_cdf",
    "log_split_prior",
    "log_truncation",
    "log_truncation_symbolic",
    "prior_logodds",
]


# --------------------------------------------------------------------------------------------
# numba forms
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def harmonic_mass(beta, n):
    """``S_N(β) = Σ_{i=1..N} β/(β+i-1)`` (``H_N`` for ``β = 1``)."""
    s = 0.0
    for i in range(n):
        s += beta / (beta + i)
    return s


@numba.njit(cache=True)
def ibp_mass(alpha, beta, n):
    """``α S_N(β)``: the Poisson mean of the number of non-empty columns ``K+``."""
    return alpha * harmonic_mass(beta, n)


@numba.njit(cache=True)
def log_beta_term(m, n, beta):
    """``log B(m, N-m+β)``: one non-empty column of size ``m`` in the IBP pmf."""
    return math.lgamma(m) + math.lgamma(n - m + beta) - math.lgamma(n + beta)


@numba.njit(cache=True)
def log_split_prior(m1, m2, m, n, alpha, beta):
    """``log π(Z_split)/π(Z_merged)`` for the labelled, truncated :class:`pymc_ibp.IBP`
    (Ghahramani, Griffiths & Sollich 2007) when a column of size ``m`` becomes two of sizes
    ``m1``, ``m2`` in one of the empty slots: ``log αβ + log B(m1, N-m1+β) + log B(m2,
    N-m2+β) - log B(m, N-m+β)``, the ``(K_max - K+)!`` of the slots cancelled by the uniform
    choice of the empty slot (:mod:`pymc_ibp.kernels.split_merge`)."""
    return (math.log(alpha * beta) + log_beta_term(m1, n, beta) + log_beta_term(m2, n, beta)
            - log_beta_term(m, n, beta))


@numba.njit(cache=True)
def prior_logodds(m_other, n, beta):
    """``log P(z_nk=1)/P(z_nk=0)`` given the ``m_other > 0`` other owners of column ``k``:
    ``log m/(N-1-m+β)`` (Griffiths & Ghahramani 2011, eq. 16, two-parameter form)."""
    return math.log(m_other) - math.log(n - 1.0 - m_other + beta)


@numba.njit(cache=True)
def log_birth_rate(alpha, beta, n):
    """``log λ``, ``λ = αβ/(N-1+β)``: the Poisson rate of a row's new (singleton) features."""
    return math.log(alpha * beta / (n - 1.0 + beta))


@numba.njit(cache=True)
def ibp_entry_logodds(m_other, others, n, k_max, log_lam, beta):
    """Prior log-odds of ``z_nk = 1`` under :class:`pymc_ibp.IBP` truncated to ``K_max``
    slots, given the rest of ``Z``:
    ``m/(N-1-m+β)`` for a column used by ``m = m_other > 0`` other rows, else the birth
    ``λ/(K_max - K'₋)`` in one of the free slots (``λ = exp(log_lam) = αβ/(N-1+β)``, ``K'₋ =
    others`` the active columns other than ``k``)."""
    if m_other > 0:
        return prior_logodds(m_other, n, beta)
    return log_lam - math.log(k_max - others)


@numba.njit(cache=True)
def log_poisson_cdf(k, lam):
    """``log P(K <= k)`` for ``K ~ Poisson(λ)``, by log-sum-exp over the ``k + 1`` terms."""
    if lam <= 0.0:
        return 0.0
    loglam = math.log(lam)
    mx = -np.inf
    for j in range(k + 1):
        t = j * loglam - lam - math.lgamma(j + 1.0)
        if t > mx:
            mx = t
    s = 0.0
    for j in range(k + 1):
        s += math.exp(j * loglam - lam - math.lgamma(j + 1.0) - mx)
    return min(0.0, mx + math.log(s))


@numba.njit(cache=True)
def log_truncation(alpha, beta, n, k_max):
    """``log P(K+ <= K_max)``, the normaliser of the truncated :class:`pymc_ibp.IBP`."""
    return log_poisson_cdf(k_max, ibp_mass(alpha, beta, n))


@numba.njit(cache=True)
def ibp_log_pmf(m, n, k_max, alpha, beta):
    """``log P(Z)`` of :class:`pymc_ibp.IBP` from the column sizes ``m`` (zeros allowed)."""
    kp = 0
    lp = 0.0
    for c in m:
        if c > 0:
            kp += 1
            lp += log_beta_term(c, n, beta)
    lp += kp * math.log(alpha * beta) - ibp_mass(alpha, beta, n)
    lp += math.lgamma(k_max - kp + 1.0) - math.lgamma(k_max + 1.0)
    return lp - log_truncation(alpha, beta, n, k_max)


# --------------------------------------------------------------------------------------------
# symbolic forms (the distribution's logp; differentiable in alpha and beta)
# --------------------------------------------------------------------------------------------
def ibp_mass_symbolic(alpha, beta, n):
    """Symbolic :func:`ibp_mass`.

    Written as a sum rather than ``β(ψ(β+N) - ψ(β))`` because the gradient of the digamma
    form needs trigamma, which has no numba implementation (object-mode fallback).
    """
    alpha, beta = pt.as_tensor_variable(alpha), pt.as_tensor_variable(beta)
    i = pt.arange(pt.cast(n, "int64"), dtype="float64")
    return alpha * (beta / (beta[..., None] + i)).sum(axis=-1)


def log_truncation_symbolic(alpha, beta, n, k_max):
    """Symbolic :func:`log_truncation`: log-sum-exp over the ``K_max + 1`` Poisson terms, finite
    in both tails (the log of the regularised upper incomplete gamma underflows to ``-inf``
    once the mass is a few dozen times ``K_max``, and the pmf then returned ``+inf``)."""
    lam = ibp_mass_symbolic(alpha, beta, n)
    j = pt.arange(pt.cast(k_max, "int64") + 1, dtype="float64")
    log_lam = pt.log(lam)[..., None]
    terms = pt.switch(pt.eq(j, 0.0), 0.0, j * log_lam) - pt.gammaln(j + 1.0)
    return pt.logsumexp(terms, axis=-1) - lam


def ibp_logp_symbolic(value, alpha, beta, n, k_max):
    """Symbolic :func:`ibp_log_pmf` of a batch of binary ``N x K_max`` matrices
    (``-inf`` for non-binary values)."""
    nf = pt.cast(n, "float64")
    kf = pt.cast(k_max, "float64")
    m = value.sum(axis=-2)  # (..., K_max)
    active = pt.gt(m, 0)
    kplus = active.sum(axis=-1)
    safe_m = pt.switch(active, pt.cast(m, "float64"), 1.0)
    lbeta = pt.gammaln(safe_m) + pt.gammaln(nf - safe_m + beta) - pt.gammaln(nf + beta)
    lp = (
        kplus * pt.log(alpha * beta)
        - ibp_mass_symbolic(alpha, beta, n)
        + pt.switch(active, lbeta, 0.0).sum(axis=-1)
        + pt.gammaln(kf - kplus + 1.0)
        - pt.gammaln(kf + 1.0)
        - log_truncation_symbolic(alpha, beta, n, kf)
    )
    binary = pt.all(pt.eq(value, 0) | pt.eq(value, 1), axis=(-2, -1))
    return pt.switch(binary, lp, -np.inf)
