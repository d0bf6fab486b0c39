"""Gibbs updates of one column of a binary matrix given the log-likelihoods of its entries at
0 and 1 (computed by the caller under any likelihood): under the IBP prior (column counts,
the column emptied when unused) and under per-entry prior log-odds."""

from __future__ import annotations

import numba

from pymc_ibp._numba_utils import bernoulli_logodds
from pymc_ibp.distributions.ibp_math import ibp_entry_logodds, log_birth_rate

__all__ = ["bernoulli_column_gibbs", "ibp_column_gibbs"]


@numba.njit(cache=True)
def ibp_column_gibbs(rng, Z, k, ll1, ll0, m, n_active, alpha, beta):
    """Gibbs-sample column ``k`` of ``Z`` row by row under the :class:`pymc_ibp.IBP` prior.

    Prior odds of ``z_nk = 1`` (from the pmf of :class:`pymc_ibp.IBP`, Griffiths & Ghahramani 2011,
    with the fixed-slot truncation derived in :mod:`pymc_ibp.distributions.ibp`):
    ``m/(N-1-m+β)`` if ``m = m₋ₙₖ > 0``; otherwise ``λ/(K_max - K'₋)`` with
    ``λ = αβ/(N-1+β)`` and ``K'₋`` the active columns other than ``k`` — the birth of a new
    feature in an empty slot, with that slot's current parameters.  ``m`` (column sums) and
    the returned active count are kept up to date.  Returns ``(flips, n_active)``.
    """
    n, k_max = Z.shape
    log_lam = log_birth_rate(alpha, beta, n)
    flips = 0
    for i in range(n):
        old = Z[i, k]
        mk = m[k] - old
        others = n_active - (1 if m[k] > 0 else 0)
        lo = ibp_entry_logodds(mk, others, n, k_max, log_lam, beta)
        new = bernoulli_logodds(rng, lo + ll1[i] - ll0[i])
        if new != old:
            flips += 1
            Z[i, k] = new
            m[k] = mk + new
            n_active = others + (1 if m[k] > 0 else 0)
    return flips, n_active


@numba.njit(cache=True)
def bernoulli_column_gibbs(rng, Z, k, ll1, ll0, prior_lo):
    """Gibbs-sample column ``k`` of a Bernoulli matrix with per-entry prior log-odds."""
    flips = 0
    for i in range(Z.shape[0]):
        new = bernoulli_logodds(rng, prior_lo[i] + ll1[i] - ll0[i])
        if new != Z[i, k]:
            flips += 1
            Z[i, k] = new
    return flips
