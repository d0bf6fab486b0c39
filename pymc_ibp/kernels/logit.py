r"""The Bernoulli-logit linear model given its Pólya-Gamma variables (numba): a Gaussian model
with one precision per entry, in which ``A`` is integrated out column by column.

Model: ``x_nd ~ Bernoulli(σ(ψ_nd))``, ``ψ = Z A + 1 bᵀ``, ``A_{·d} ~ N(0, σ²_{a,d} I)``.
Given ``ω_nd ~ PG(1, ψ_nd)`` (:mod:`.polya_gamma`) the likelihood of ``ψ`` is that of the
pseudo-observations ``y_nd = κ_nd/ω_nd - b_d`` (``κ = x - 1/2``) with noise precision
``ω_nd`` (Polson, Scott & Windle 2013), so column ``d`` of ``A`` has the Gaussian posterior

.. math:: P_d = \big(Z^\top \Omega_d Z + \sigma_{a,d}^{-2} I\big)^{-1}, \qquad
    \mu_d = P_d Z^\top \Omega_d y_d ,

and row ``n``'s pseudo-observations given the other rows are independent across ``d``:
``y_nd ~ N(z_n μ_{d,-n}, z_n P_{d,-n} z_nᵀ + 1/ω_nd)``.  The sweep below is the accelerated
sampler of Doshi-Velez & Ghahramani (2009) with one posterior per column instead of one
shared by all: for each row, its contribution is removed from every ``(P_d, h_d = Z^\top
\Omega_d y_d)`` by a rank-one (Sherman–Morrison) downdate, its entries are Gibbs-sampled
from the predictive above and the row's prior log-odds (IBP counts with births into the
``K_max`` slots, or one log-odds per entry), and it is added back.  ``P_d`` is recomputed by
Cholesky at the start of each sweep and whenever a downdate loses positive definiteness, so
rounding does not accumulate.  Cost: ``O(N D K²)`` per sweep, memory ``O(D K²)``.

References
----------
F. Doshi-Velez and Z. Ghahramani (2009). Accelerated sampling for the Indian buffet process.
*ICML*, 273-280.

N. G. Polson, J. G. Scott and J. Windle (2013). Bayesian inference for logistic models using
Pólya-Gamma latent variables. *JASA* 108(504), 1339-1349.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_ibp._numba_utils import bernoulli_logodds
from pymc_ibp.distributions.ibp_math import (
    ibp_entry_logodds,
    log_birth_rate,
    prior_logodds,
)
from pymc_ibp.kernels.gaussian import offset_row
from pymc_ibp.kernels.linalg import backward_sub_t, chol_inverse, forward_sub

__all__ = [
    "draw_logit_weights",
    "logit_feature_sweep",
    "logit_collapsed_sweep",
    "logit_linear_predictor",
    "logit_log_lik",
    "logit_offset_slice",
    "logit_precisions",
    "logit_targets",
]

_MIN_DENOM = 1e-10  # a downdate with 1 - ω z P zᵀ below this is recomputed instead


@numba.njit(cache=True)
def _column_cov(Z, W, V, d, skip):
    """``P_d`` with row ``skip`` left out (``skip = -1``: every row); ``V[d]`` the prior
    variances of column ``d``'s coefficients."""
    n, k = Z.shape
    M = np.zeros((k, k))
    for i in range(n):
        w = W[i, d]
        if i == skip or w == 0.0:
            continue
        for a in range(k):
            if Z[i, a] != 0:
                for b in range(k):
                    if Z[i, b] != 0:
                        M[a, b] += w
    for a in range(k):
        M[a, a] += 1.0 / V[d, a]
    P, _ = chol_inverse(M)
    return P


@numba.njit(cache=True)
def logit_precisions(Z, W, Y, V):
    """``(P, h)``: ``P[d] = P_d`` (``D x K x K``) and ``h[d] = Z^\top Ω_d y_d``, ``V`` (``D x
    K``) the prior variances of the coefficients."""
    n, k = Z.shape
    d = W.shape[1]
    P = np.empty((d, k, k))
    h = np.zeros((d, k))
    for j in range(d):
        P[j] = _column_cov(Z, W, V, j, -1)
        for i in range(n):
            if W[i, j] != 0.0:
                for a in range(k):
                    if Z[i, a] != 0:
                        h[j, a] += W[i, j] * Y[i, j]
    return P, h


@numba.njit(cache=True)
def _gauss_ll(y, s, v):
    return -0.5 * (math.log(v) + (y - s) * (y - s) / v)


@numba.njit(cache=True)
def logit_collapsed_sweep(rng, Z, Y, W, V, m, prior, n_fixed):
    """One Gibbs sweep over every entry of ``Z`` (in place) with ``A`` integrated out given
    the Pólya-Gamma precisions ``W`` (``N x D``, 0 at missing entries) and pseudo-observations
    ``Y``; ``V`` (``D x K``) the prior variances of the coefficients.  The last ``n_fixed``
    columns of ``Z`` are fixed covariates (a column of ones: the offset ``b``, integrated out
    with ``A``) and are not sampled.  ``prior`` (:class:`pymc_ibp.kernels.SweepPrior`): the
    IBP's counts on the other ``K_max`` columns (column counts ``m`` kept up to date, births
    into empty slots at rate ``αβ/(N-1+β)``), or one prior log-odds per entry.
    Returns ``(flips, refreshes, P)``: the entries changed, the downdates recomputed from
    scratch, and the ``D x K x K`` posterior covariances kept by the rank-one updates at the
    end of the sweep (equal to :func:`logit_precisions` of the new ``Z`` up to rounding)."""
    n, k_tot = Z.shape
    k_max = k_tot - n_fixed
    d = W.shape[1]
    alpha, beta, logodds = prior.alpha, prior.beta, prior.logodds
    use_counts = logodds.shape[0] == 0
    P, h = logit_precisions(Z, W, Y, V)
    mu = np.zeros((d, k_tot))
    u = np.zeros((d, k_tot))
    s = np.zeros(d)
    v = np.zeros(d)
    log_lam = log_birth_rate(alpha, beta, n) if use_counts else 0.0
    n_active = 0
    for k in range(k_max):
        if m[k] > 0:
            n_active += 1
    flips = 0
    refreshes = 0
    z = np.zeros(k_tot)
    order = np.arange(k_max)
    for i in range(n):
        for k in range(k_tot):
            z[k] = Z[i, k]
        # ---- remove row i from every column's posterior
        for j in range(d):
            w = W[i, j]
            Pj = P[j]
            if w != 0.0:
                c = 0.0
                for a in range(k_tot):
                    acc = 0.0
                    for b in range(k_tot):
                        if z[b] != 0.0:
                            acc += Pj[a, b]
                    u[j, a] = acc
                    if z[a] != 0.0:
                        c += acc
                denom = 1.0 - w * c
                if denom > _MIN_DENOM:
                    f = w / denom
                    for a in range(k_tot):
                        if u[j, a] != 0.0:
                            fa = f * u[j, a]
                            for b in range(k_tot):
                                Pj[a, b] += fa * u[j, b]
                else:
                    P[j] = _column_cov(Z, W, V, j, i)
                    refreshes += 1
                for a in range(k_tot):
                    if z[a] != 0.0:
                        h[j, a] -= w * Y[i, j]
            Pj = P[j]
            sj = 0.0
            vj = 0.0
            for a in range(k_tot):
                acc = 0.0
                acc_u = 0.0
                for b in range(k_tot):
                    acc += Pj[a, b] * h[j, b]
                    if z[b] != 0.0:
                        acc_u += Pj[a, b]
                mu[j, a] = acc
                u[j, a] = acc_u
                if z[a] != 0.0:
                    sj += acc
                    vj += acc_u
            s[j] = sj
            v[j] = vj
        # ---- Gibbs over the row's entries, in a random order
        for a in range(k_max - 1, 0, -1):
            b = int(rng.random() * (a + 1))
            order[a], order[b] = order[b], order[a]
        for t in range(k_max):
            k = order[t]
            old = int(z[k])
            if use_counts:
                mk = m[k] - old
                others = n_active - (1 if m[k] > 0 else 0)
                lo = ibp_entry_logodds(mk, others, n, k_max, log_lam, beta)
            else:
                lo = logodds[i, k]
            sign = 1.0 - 2.0 * old
            diff = 0.0  # log p(row | z with k flipped) - log p(row | z)
            for j in range(d):
                w = W[i, j]
                if w == 0.0:
                    continue
                s1 = s[j] + sign * mu[j, k]
                v1 = v[j] + sign * 2.0 * u[j, k] + P[j, k, k]
                diff += _gauss_ll(Y[i, j], s1, v1 + 1.0 / w) - _gauss_ll(Y[i, j], s[j],
                                                                          v[j] + 1.0 / w)
            x = lo + diff if old == 0 else lo - diff
            new = bernoulli_logodds(rng, x)
            if new != old:
                flips += 1
                for j in range(d):
                    s[j] += sign * mu[j, k]
                    v[j] += sign * 2.0 * u[j, k] + P[j, k, k]
                    for a in range(k_tot):
                        u[j, a] += sign * P[j, a, k]
                z[k] = new
                Z[i, k] = new
                if use_counts:
                    m[k] = mk + new
                    n_active = others + (1 if m[k] > 0 else 0)
        # ---- add row i back (u[j] = P_{d,-i} z for the row's new z)
        for j in range(d):
            w = W[i, j]
            if w == 0.0:
                continue
            f = w / (1.0 + w * v[j])
            Pj = P[j]
            for a in range(k_tot):
                if u[j, a] != 0.0:
                    fa = f * u[j, a]
                    for b in range(k_tot):
                        Pj[a, b] -= fa * u[j, b]
                if z[a] != 0.0:
                    h[j, a] += w * Y[i, j]
    return flips, refreshes, P


@numba.njit(cache=True)
def draw_logit_weights(rng, Z, kappa, W, V, mean):
    """Exact draws of the ``q x D`` coefficients of the columns of ``Z`` (``N x q``: the binary
    matrix, then any fixed columns, as in :func:`logit_collapsed_sweep`: a column of ones for an
    offset ``b``, one indicator column per group for ``b[group]``) given the Pólya-Gamma
    precisions: column ``d`` is Gaussian with precision ``Zᵀ Ω_d Z + diag(1/V[d])`` and mean its
    inverse times ``Zᵀ κ_d + mean[d]/V[d]`` (Polson, Scott & Windle 2013, §3.1), drawn through
    its Cholesky factor.  ``V``, ``mean`` (``D x q``): the coefficients' prior variances and
    means."""
    n, q = Z.shape
    d = W.shape[1]
    C = np.zeros((q, d))
    for j in range(d):
        M = np.zeros((q, q))
        r = np.zeros(q)
        for i in range(n):
            w = W[i, j]
            if w == 0.0:
                continue
            for a in range(q):
                if Z[i, a] == 0:
                    continue
                r[a] += kappa[i, j]
                for c in range(q):
                    if Z[i, c] != 0:
                        M[a, c] += w
        for a in range(q):
            M[a, a] += 1.0 / V[j, a]
            r[a] += mean[j, a] / V[j, a]
        L = np.linalg.cholesky(M)
        # M = L Lᵀ: the draw is L^{-T} (L^{-1} r + e) = M^{-1} r + L^{-T} e
        y = forward_sub(L, r)
        for a in range(q):
            y[a] += rng.standard_normal()
        x = backward_sub_t(L, y)
        for a in range(q):
            C[a, j] = x[a]
    return C


@numba.njit(cache=True)
def _bern_logit_ll(x, psi):
    """``log p(x | ψ)`` of one Bernoulli-logit entry: ``xψ - log(1 + e^ψ)``."""
    if psi > 0.0:
        return (x - 1.0) * psi - math.log1p(math.exp(-psi))
    return x * psi - math.log1p(math.exp(psi))


_SLICE_STEPS = 30  # stepping-out limit of the offset's slice sampler (Neal 2003, Fig. 3)


@numba.njit(cache=True)
def _offset_log_density(x, obs, psi, rows, lo, hi, c_lo, c_hi, delta, mu, var, value):
    """``log p(b = value | ·)`` up to a constant for one entry of the offset, added to columns
    ``c_lo:c_hi`` of the rows ``rows[lo:hi]``, whose linear predictor ``psi`` holds
    ``value - delta``."""
    total = -0.5 * (value - mu) * (value - mu) / var
    for t in range(lo, hi):
        i = rows[t]
        for d in range(c_lo, c_hi):
            if obs[i, d]:
                total += _bern_logit_ll(float(x[i, d]), psi[i, d] + delta)
    return total


@numba.njit(cache=True)
def logit_offset_slice(rng, x, obs, psi, B, rows, starts, mu, var):
    """One slice-sampling update (Neal 2003: stepping out, then shrinkage) of every entry of
    the offset ``B`` (in place) from its conditional given ``Z``, ``A`` and the other entries
    under the exact Bernoulli-logit likelihood, no Pólya-Gamma variables:
    ``p(b_gc | ·) ∝ N(b_gc; μ_gc, var_gc) Π p(x_nd | ψ_nd)`` over the rows ``n`` of group
    ``g``, ``rows[starts[g]:starts[g+1]]`` (one group of all rows for an offset per column),
    and the columns ``d`` the entry is added to: column ``c`` when ``B`` is ``G x D``, every
    column when ``B`` is ``G x 1`` (one value per group for all columns, ``b[group][:, None]``,
    or a scalar ``b``).  The bracket's width, ``2 / sqrt(n_gc/4 + 1/var_gc)`` (``n_gc`` the
    observed entries; twice a lower bound of the conditional's standard deviation), does not
    depend on the current value, so each update leaves the conditional invariant.  ``psi``
    follows in place."""
    n_groups, n_cols = B.shape
    tied = n_cols == 1  # one value for all columns
    for g in range(n_groups):
        lo, hi = starts[g], starts[g + 1]
        for c in range(n_cols):
            c_lo, c_hi = (0, x.shape[1]) if tied else (c, c + 1)
            m, v, b0 = mu[g, c], var[g, c], B[g, c]
            n_obs = 0
            for t in range(lo, hi):
                for d in range(c_lo, c_hi):
                    if obs[rows[t], d]:
                        n_obs += 1
            w = 2.0 / math.sqrt(0.25 * n_obs + 1.0 / v)
            level = (_offset_log_density(x, obs, psi, rows, lo, hi, c_lo, c_hi, 0.0, m, v, b0)
                     + math.log(1.0 - rng.random()))  # minus an Exp(1) draw
            if not math.isfinite(level):  # NaN: no point would enter the slice
                raise FloatingPointError(
                    "logit_offset_slice: the offset's log density at its current value is "
                    "not finite (NaN or inf in an offset, A or the offset's prior)")
            left = b0 - w * rng.random()
            right = left + w
            j = int(_SLICE_STEPS * rng.random())
            k = _SLICE_STEPS - 1 - j
            while j > 0 and _offset_log_density(x, obs, psi, rows, lo, hi, c_lo, c_hi,
                                                left - b0, m, v, left) > level:
                left -= w
                j -= 1
            while k > 0 and _offset_log_density(x, obs, psi, rows, lo, hi, c_lo, c_hi,
                                                right - b0, m, v, right) > level:
                right += w
                k -= 1
            while True:
                b1 = left + rng.random() * (right - left)
                if _offset_log_density(x, obs, psi, rows, lo, hi, c_lo, c_hi, b1 - b0, m, v,
                                       b1) > level:
                    break
                if b1 < b0:
                    left = b1
                else:
                    right = b1
            for t in range(lo, hi):  # every row: ψ of the missing entries too
                for d in range(c_lo, c_hi):
                    psi[rows[t], d] += b1 - b0
            B[g, c] = b1


# The N x D arrays of a Pólya-Gamma step, one pass each, written into a buffer the caller
# owns: ``x`` the data as 0/1 (int8, read where ``obs``), ``off`` the fixed offset as
# ``1 x D`` (one row for all), ``N x D`` or one row per group (``offset_row``).  No N x D
# temporaries: at 10^6 rows each such array is 8 bytes x N x D.

@numba.njit(cache=True)
def logit_linear_predictor(Z, A, b, off, rows, out):
    """``out = Z A + 1 bᵀ + off`` (``Z`` binary ``N x K``, ``A`` ``K x D``; ``off`` ``N x D``,
    one row for all rows, or one row per group with ``rows`` every row's group, read by
    :func:`~pymc_ibp.kernels.gaussian.offset_row`); returns ``out``."""
    n, k = Z.shape
    d = A.shape[1]
    for i in range(n):
        oi = offset_row(off, rows, i)
        for j in range(d):
            out[i, j] = b[j] + off[oi, j]
        for a in range(k):
            if Z[i, a] != 0:
                for j in range(d):
                    out[i, j] += A[a, j]
    return out


@numba.njit(cache=True)
def logit_targets(x, obs, W, shift, off, rows, pseudo, out):
    """Where observed (0 elsewhere), with ``κ = x - 1/2``: ``pseudo = True``, the Gaussian
    pseudo-observations ``y_nd = κ_nd/ω_nd - shift_d - off_nd`` of the collapsed sweep;
    ``pseudo = False``, ``κ_nd - ω_nd (shift_d + off_nd)``, what the draw of ``A``
    (:func:`draw_logit_weights`) regresses on when ``shift + off`` is held fixed (``off``
    read as in :func:`logit_linear_predictor`).  Returns ``out``."""
    n, d = x.shape
    for i in range(n):
        oi = offset_row(off, rows, i)
        for j in range(d):
            if not obs[i, j]:
                out[i, j] = 0.0
            elif pseudo:
                out[i, j] = (x[i, j] - 0.5) / W[i, j] - shift[j] - off[oi, j]
            else:
                out[i, j] = (x[i, j] - 0.5) - W[i, j] * (shift[j] + off[oi, j])
    return out


@numba.njit(cache=True)
def logit_log_lik(x, obs, psi):
    """``Σ log p(x_nd | ψ_nd)`` over the observed entries (Bernoulli-logit)."""
    n, d = x.shape
    total = 0.0
    for i in range(n):
        for j in range(d):
            if obs[i, j]:
                total += _bern_logit_ll(float(x[i, j]), psi[i, j])
    return total


@numba.njit(cache=True)
def logit_feature_sweep(rng, Z, X, obs, psi, A, m, prior):
    """One Gibbs sweep over the entries of ``Z`` given the feature matrix ``A`` under the exact
    Bernoulli-logit likelihood (no augmentation): ``z_nk`` flips with log-odds prior log-odds
    ``+ Σ_d [log p(x_nd | ψ_nd ± A_kd) - log p(x_nd | ψ_nd)]`` over the observed entries
    (``obs``), the linear predictor ``psi`` (``N x D``) kept up to date.  With the IBP prior
    (``prior`` from :meth:`pymc_ibp.kernels.SweepPrior.counts`) only entries whose column has
    other owners are visited (the column stays non-empty either way, so the set visited does
    not depend on the entry); with a per-entry prior (:meth:`~pymc_ibp.kernels.SweepPrior.entries`)
    every entry.  ``O(N K D)``.  Returns the number of flips."""
    n, k_max = Z.shape
    beta, logodds = prior.beta, prior.logodds
    use_counts = logodds.shape[0] == 0
    d = X.shape[1]
    flips = 0
    order = np.arange(k_max)
    for i in range(n):
        for a in range(k_max - 1, 0, -1):
            b = int(rng.random() * (a + 1))
            order[a], order[b] = order[b], order[a]
        for t in range(k_max):
            k = order[t]
            old = Z[i, k]
            if use_counts:
                mk = m[k] - old
                if mk == 0:
                    continue
                lo = prior_logodds(mk, n, beta)
            else:
                lo = logodds[i, k]
            sign = 1.0 - 2.0 * old  # +1: switch on, -1: switch off
            diff = 0.0  # log p(row | z_nk flipped) - log p(row | z)
            for j in range(d):
                if obs[i, j]:
                    p0 = psi[i, j]
                    diff += _bern_logit_ll(X[i, j], p0 + sign * A[k, j]) - _bern_logit_ll(
                        X[i, j], p0)
            x = lo + diff if old == 0 else lo - diff
            new = bernoulli_logodds(rng, x)
            if new != old:
                flips += 1
                Z[i, k] = new
                for j in range(d):
                    psi[i, j] += sign * A[k, j]
                if use_counts:
                    m[k] = mk + new
    return flips
