"""Per-row kernels of the accelerated sampler, shared by every prior and every sweep (numba).

Given the feature posterior ``(Σ, μ)`` of all rows but one, the row's entries are drawn from
their exact conditionals at ``O(K + D)`` each (Doshi-Velez & Ghahramani 2009, eq. 7–8 and
Alg. 1, with the rank-one updates written out in :func:`row_update`).  The prior enters only
through one log-odds per entry, so the same kernels serve the IBP's counts, a stick-breaking
prior's feature probabilities and any per-entry prior.

References
----------
.. [1] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
.. [2] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and extensions*.
   MSc thesis, University of Cambridge.
"""

from __future__ import annotations

import math

import numba

from pymc_ibp._numba_utils import bernoulli_logodds, categorical_logp, partial_shuffle


@numba.njit(cache=True)
def sig_z(Sig, z, k, v):
    """``v = Σ z`` (first ``k`` entries) and return ``zᵀ Σ z``."""
    q = 0.0
    for a in range(k):
        s = 0.0
        for b in range(k):
            if z[b] != 0.0:
                s += Sig[a, b]
        v[a] = s
        q += z[a] * s
    return q

@numba.njit(cache=True)
def residual(x, z, mu, k, r):
    """``r = x - z μ`` and return ``‖r‖²``."""
    rr = 0.0
    for t in range(x.shape[0]):
        s = x[t]
        for a in range(k):
            if z[a] != 0.0:
                s -= mu[a, t]
        r[t] = s
        rr += s * s
    return rr

@numba.njit(cache=True)
def row_update(Sig, mu, z, x, k, sx2, sign, v, e):
    """Add (``sign=+1``) or remove (``sign=-1``) observation row ``(z, x)`` from the feature
    posterior ``(Σ, μ)`` by a rank-one Sherman–Morrison update:

    remove: ``Σ₋ = Σ + v vᵀ/(σx² - zᵀv)``, ``μ₋ = μ - v (x - zμ)ᵀ/(σx² - zᵀv)``;
    add:    ``Σ = Σ₋ - v vᵀ/(σx² + zᵀv)``, ``μ = μ₋ + v (x - zμ₋)ᵀ/(σx² + zᵀv)``; ``v = Σz``.

    These are the window equations of Doshi-Velez & Ghahramani (2009, §4; Doshi-Velez 2009,
    §4.2) for a window of ``W = 1`` row, in corrected form: the printed window-removal *mean*
    is wrong (and the re-add mean has ``X_i`` for ``X_W``); the printed covariance down-date,
    with its minus sign, is right.  Derivation (``z`` as a column): in information form
    ``P = Σ⁻¹``, ``h = Pμ``, removing the row gives ``P₋ = P - z zᵀ/σx²`` and
    ``h₋ = h - z xᵀ/σx²``.  Sherman–Morrison gives ``Σ₋ = Σ + v vᵀ/c`` with ``c = σx² - zᵀv``;
    since ``vᵀP = zᵀ`` and ``Σ₋z = v σx²/c``, ``μ₋ = Σ₋h₋ = μ + v(zᵀμ)/c - v xᵀ/c``.
    Re-adding the row (``P = P₋ + z zᵀ/σx²``) is the same computation with the opposite sign.
    """
    q = sig_z(Sig, z, k, v)
    c = sx2 + sign * q
    residual(x, z, mu, k, e)
    for a in range(k):
        va = v[a] / c
        for b in range(k):
            Sig[a, b] -= sign * va * v[b]
        for t in range(mu.shape[1]):
            mu[a, t] += sign * va * e[t]

@numba.njit(cache=True)
def gibbs_row_entries(rng, z, k, prior_lo, skip, x, Sig, mu, sx2, r, v, order, greedy):
    """Gibbs-sample ``z[a]`` for ``a < k`` with ``skip[a] == False`` (random order), given the
    posterior ``(Σ, μ)`` of the *other* rows (Doshi-Velez & Ghahramani 2009, eq. 8 with a
    window of ``W = 1`` row):

    ``log P(z_a=1)/P(z_a=0) = prior_lo[a] + log N(x; z¹μ, s²₁ I) - log N(x; z⁰μ, s²₀ I)``,
    ``s² = zΣzᵀ + σx²``.  ``prior_lo`` carries each entry's own prior log-odds (the IBP's
    ``log m/(N-1-m+β)`` here; a per-entry probability for a dependent IBP).  Each test costs
    ``O(D)`` and each flip ``O(K + D)``.  On return ``r = x - zμ``, ``v = Σz``; returns
    ``(‖r‖², s², flips)``.
    """
    d = x.shape[0]
    s2 = sx2 + sig_z(Sig, z, k, v)
    rr = residual(x, z, mu, k, r)
    for a in range(k):
        order[a] = a
    partial_shuffle(rng, order[:k], k)
    flips = 0
    for oi in range(k):
        a = order[oi]
        if skip[a]:
            continue
        delta = 1.0 - 2.0 * z[a]
        s2n = s2 + 2.0 * delta * v[a] + Sig[a, a]
        rmu = 0.0
        mm = 0.0
        for t in range(d):
            rmu += r[t] * mu[a, t]
            mm += mu[a, t] * mu[a, t]
        rrn = rr - 2.0 * delta * rmu + mm
        ll_cur = -0.5 * d * math.log(s2) - 0.5 * rr / s2
        ll_new = -0.5 * d * math.log(s2n) - 0.5 * rrn / s2n
        lo = prior_lo[a] + (ll_cur - ll_new if z[a] != 0.0 else ll_new - ll_cur)
        newz = (1 if lo > 0 else 0) if greedy else bernoulli_logodds(rng, lo)
        if newz != int(z[a]):
            flips += 1
            for t in range(d):
                r[t] -= delta * mu[a, t]
            rr = rrn
            s2 = s2n
            for b in range(k):
                v[b] += delta * Sig[b, a]
            z[a] = float(newz)
    return rr, s2, flips

@numba.njit(cache=True)
def birth_count(rng, navail, log_lam, s2, rr, d, sa2, logpj, greedy):
    """Draw the number ``j`` of row-``n`` singleton features:
    ``p(j) ∝ Poisson(j; λ) N(x; zμ, (s² + jσa²) I)`` over ``j = 0..navail``.

    Eq. 3.7 of Doshi-Velez (2009) (eq. 4 of Doshi-Velez & Ghahramani 2009) with the new
    features' values integrated out (each adds ``σa²`` to the predictive variance and nothing
    to its mean) and ``λ = α/N`` (``αβ/(N-1+β)`` for the two-parameter IBP).  The sum starts at
    ``j = 0``: the thesis text ranges over ``1..k_max``, which would force a new feature on
    every row."""
    for j in range(navail + 1):
        sj = s2 + j * sa2
        logpj[j] = j * log_lam - math.lgamma(j + 1.0) - 0.5 * d * math.log(sj) - 0.5 * rr / sj
    if greedy:
        best = 0
        for j in range(navail + 1):
            if logpj[j] > logpj[best]:
                best = j
        return best
    return categorical_logp(rng, logpj, navail + 1)
