"""Numerical core of the mean-field variational IBP (:mod:`pymc_ibp.inference.variational`).

All functions take per-column variances ``sx2[d]``, ``sa2[d]`` (a scalar model repeats one
value), so several observed matrices sharing ``Z`` and per-dimension scales need no special
case.  The likelihood's expectation uses the residual ``R = X - ν φ`` kept current by every
update, so one pass over the assignments costs ``O(NKD)`` (Doshi-Velez et al. [1]_, §4).

Notation: ``ν`` (N x K) the Bernoulli means of ``Z``; ``φ`` (K x D) and ``Φ`` (K x D) the means and
variances of ``A``; ``τ`` (K x 2) the Beta parameters of the sticks ``v_k`` (infinite
variant) or of ``π_k`` (finite variant).

References
----------
.. [1] Doshi-Velez, F., Miller, K. T., Van Gael, J. and Teh, Y. W. (2009). Variational
   inference for the Indian buffet process. *AISTATS 2009*, JMLR W&CP 5, 137–144.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy.special import betaln, digamma, gammaln, logsumexp, polygamma, zeta

__all__ = [
    "beta_entropy",
    "beta_log_moments",
    "expected_sq_error",
    "feature_update",
    "log1m_prod_multinomial",
    "log1m_prod_taylor",
    "multinomial_q",
    "nu_update",
    "stick_objective",
    "stick_update_multinomial",
]


@numba.njit(cache=True)
def feature_update(X, R, nu, phi, Phi, sx2, sa2, M):
    """Exact coordinate update of ``q(A_k) = N(φ_k, diag Φ_k)`` for every ``k`` in turn:
    ``Φ_kd = (1/σa_d² + Σ_n M_nd ν_nk / σx_d²)^{-1}``,
    ``φ_kd = Φ_kd Σ_n M_nd ν_nk (x_nd - Σ_{l≠k} ν_nl φ_ld) / σx_d²``, with ``M`` the 0/1 mask of
    observed entries (missing entries are marginalised: they leave the likelihood); ``R`` is
    kept equal to ``M ⊙ (X - ν φ)``."""
    n, k_max = nu.shape
    d = X.shape[1]
    for k in range(k_max):
        s = np.zeros(d)
        acc = np.zeros(d)
        for i in range(n):
            w = nu[i, k]
            if w != 0.0:
                for j in range(d):
                    s[j] += w * M[i, j]
                    acc[j] += w * (R[i, j] + w * M[i, j] * phi[k, j])
        for j in range(d):
            Phi[k, j] = 1.0 / (1.0 / sa2[j] + s[j] / sx2[j])
            new = Phi[k, j] * acc[j] / sx2[j]
            delta = new - phi[k, j]
            phi[k, j] = new
            if delta != 0.0:
                for i in range(n):
                    if nu[i, k] != 0.0:
                        R[i, j] -= nu[i, k] * M[i, j] * delta


@numba.njit(cache=True)
def nu_update(R, nu, phi, Phi, sx2, prior_logit, M):
    """Exact coordinate update of every ``ν_nk`` (row by row, features in order):
    ``ν_nk = σ(ϑ_nk)``, ``ϑ_nk = prior_logit_k - Σ_d M_nd (Φ_kd + φ_kd²) / (2σx_d²)
    + Σ_d M_nd φ_kd (x_nd - Σ_{l≠k} ν_nl φ_ld) / σx_d²``.  ``prior_logit_k`` is the stick term
    (``Σ_{m≤k} E log v_m - E log(1 - Π_{m≤k} v_m)`` or ``E log π_k - E log(1 - π_k)``)."""
    n, k_max = nu.shape
    d = R.shape[1]
    for i in range(n):
        for k in range(k_max):
            old = nu[i, k]
            lin = 0.0
            quad = 0.0
            for j in range(d):
                if M[i, j] != 0.0:
                    lin += phi[k, j] * (R[i, j] + old * phi[k, j]) / sx2[j]
                    quad += (Phi[k, j] + phi[k, j] * phi[k, j]) / (2.0 * sx2[j])
            t = prior_logit[k] - quad + lin
            new = 1.0 / (1.0 + math.exp(-t)) if t > -700.0 else 0.0
            if new != old:
                delta = new - old
                for j in range(d):
                    R[i, j] -= delta * M[i, j] * phi[k, j]
                nu[i, k] = new


@numba.njit(cache=True)
def expected_sq_error(R, nu, phi, Phi, M):
    """``Σ_n M_nd E[(x_nd - z_n A_d)²]`` per column ``d`` (observed entries only):
    ``Σ_n M_nd [R_nd² + Σ_k (ν_nk (Φ_kd + φ_kd²) - ν_nk² φ_kd²)]`` (the cross terms of distinct
    features factorise, so only the diagonal variance enters)."""
    n, k_max = nu.shape
    d = R.shape[1]
    out = np.zeros(d)
    for i in range(n):
        for j in range(d):
            out[j] += R[i, j] * R[i, j]
        for k in range(k_max):
            w = nu[i, k]
            if w != 0.0:
                for j in range(d):
                    out[j] += M[i, j] * (w * (Phi[k, j] + phi[k, j] * phi[k, j])
                                         - w * w * phi[k, j] ** 2)
    return out


# ---------------------------------------------------------------------------------------------
# bounds on E log(1 - prod_{m<=k} v_m) (Doshi-Velez et al. 2009, §4.1; Doshi-Velez 2009, §6.2)
# ---------------------------------------------------------------------------------------------
def beta_log_moments(tau):
    """``(E log v, E log(1 - v))`` under ``Beta(τ1, τ2)``."""
    s = digamma(tau[:, 0] + tau[:, 1])
    return digamma(tau[:, 0]) - s, digamma(tau[:, 1]) - s


def multinomial_q(tau):
    """The optimal ``q_k(y)``, ``y ≤ k``, of the multinomial bound and the bound itself:
    ``a_ky = E log(1 - v_y) + Σ_{m<y} E log v_m`` (only sticks ``y ≤ k`` enter),
    ``q_ky ∝ exp(a_ky)``, bound ``= logsumexp_y a_ky``.  Returns ``(q, bound)`` with ``q``
    a ``K x K`` lower-triangular array."""
    elv, el1v = beta_log_moments(tau)
    k_max = tau.shape[0]
    a = el1v[None, :] + np.concatenate([[0.0], np.cumsum(elv)[:-1]])[None, :]
    a = np.where(np.tri(k_max, dtype=bool), np.broadcast_to(a, (k_max, k_max)), -np.inf)
    bound = logsumexp(a, axis=1)
    return np.exp(a - bound[:, None]), bound


def log1m_prod_multinomial(tau):
    """Multinomial lower bound on ``E log(1 - Π_{m≤k} v_m)`` for every ``k``."""
    return multinomial_q(tau)[1]


def log1m_prod_taylor(tau, terms=50):
    """Lower bound on ``E log(1 - Π_{m≤k} v_m)`` for every ``k`` from the Taylor series
    ``-Σ_{n≥1} (1/n) Π_{m≤k} (τ_m1)_n / (τ_m1 + τ_m2)_n`` (rising factorials): the first
    ``terms`` terms, minus a bound on the rest, ``Π_m (τ_m1)_{⌊τ_m2⌋} ζ(1 + Σ_m ⌊τ_m2⌋,
    terms + 1)`` (Doshi-Velez 2009, §6.2.1), and never below the multinomial bound (the larger
    of two lower bounds is one; the tail bound is infinite when every ``τ_m2 < 1``)."""
    t1, t2 = tau[:, 0], tau[:, 1]
    n = np.arange(1, terms + 1, dtype=float)
    # log (τ1)_n / (τ1+τ2)_n per stick and n, summed over m ≤ k
    lr = (gammaln(t1[:, None] + n) - gammaln(t1)[:, None]
          - gammaln((t1 + t2)[:, None] + n) + gammaln(t1 + t2)[:, None])
    lr = np.cumsum(lr, axis=0)
    head = -np.exp(logsumexp(lr - np.log(n)[None, :], axis=1))
    fl = np.floor(t2)
    s = np.cumsum(fl)
    log_c = np.cumsum(gammaln(t1 + fl) - gammaln(t1))
    with np.errstate(divide="ignore", over="ignore"):
        log_tail = np.where(s > 0, log_c + np.log(zeta(1.0 + np.maximum(s, 1.0), terms + 1.0)),
                            np.inf)
        taylor = head - np.exp(np.minimum(log_tail, 700.0))
    return np.maximum(taylor, log1m_prod_multinomial(tau))


def stick_update_multinomial(tau, alpha, m_nu, n):
    """Closed-form update of every ``τ_k`` for the multinomial bound with ``q`` at its optimum
    for the current ``τ`` (Doshi-Velez et al. 2009, §4.2):
    ``τ_k1 = α + Σ_{m≥k} Σ_n ν_nm + Σ_{m>k} (N - Σ_n ν_nm) Σ_{i=k+1}^{m} q_mi``,
    ``τ_k2 = 1 + Σ_{m≥k} (N - Σ_n ν_nm) q_mk``.  ``m_nu`` = ``Σ_n ν_nk`` per ``k``."""
    q, _ = multinomial_q(tau)
    k_max = tau.shape[0]
    off = n - m_nu  # expected zeros of each column
    new = np.empty_like(tau)
    # S[m, k] = Σ_{i=k+1}^{m} q_mi  (0 for k >= m)
    cum = np.cumsum(q[:, ::-1], axis=1)[:, ::-1]  # cum[m, k] = Σ_{i≥k} q_mi
    for k in range(k_max):
        s_on = m_nu[k:].sum()
        tail = cum[k + 1:, k + 1] if k + 1 < k_max else np.zeros(0)
        new[k, 0] = alpha + s_on + (off[k + 1:] * tail).sum()
        new[k, 1] = 1.0 + (off[k:] * q[k:, k]).sum()
    return new


def beta_entropy(tau):
    """Entropy of ``Beta(τ1, τ2)`` per row of ``tau``."""
    a, b = tau[:, 0], tau[:, 1]
    return (betaln(a, b) - (a - 1) * digamma(a) - (b - 1) * digamma(b)
            + (a + b - 2) * digamma(a + b))


def stick_objective(tau, alpha, m_nu, n, bound="multinomial", terms=50):
    """The ELBO's terms that depend on the sticks of the ``infinite`` model, and their gradient
    in ``τ`` (``K x 2``):

    ``f(τ) = Σ_k (α - 1) E log v_k + Σ_k [m_k Σ_{m≤k} E log v_m + (N - m_k) B_k(τ)]
    + Σ_k H[Beta(τ_k)]``,

    ``B_k`` the chosen lower bound on ``E log(1 - Π_{m≤k} v_m)`` (for ``"taylor"`` the larger of
    the series bound and the multinomial one, as in :func:`log1m_prod_taylor`; the tail term's
    ``⌊τ_m2⌋`` is piecewise constant, so its derivative in ``τ_m2`` is 0).  ``m_nu`` =
    ``Σ_n ν_nk``."""
    k_max = tau.shape[0]
    t1, t2 = tau[:, 0], tau[:, 1]
    ts = t1 + t2
    elv, _ = beta_log_moments(tau)
    tg1, tg2, tgs = polygamma(1, t1), polygamma(1, t2), polygamma(1, ts)
    d_elv = np.column_stack([tg1 - tgs, -tgs])  # ∂ E log v_k / ∂ τ_k
    d_el1v = np.column_stack([-tgs, tg2 - tgs])  # ∂ E log(1 - v_k) / ∂ τ_k
    off = n - m_nu
    # multinomial bound and its gradient: B_k = logsumexp_y a_ky, ∂B_k = Σ_y q_ky ∂a_ky
    q, mult = multinomial_q(tau)
    # ∂a_ky/∂τ_m: E log(1-v_y) part at m = y, E log v_m part for m < y
    w_after = np.cumsum(q[:, ::-1], axis=1)[:, ::-1]  # Σ_{y≥m} q_ky
    g_mult = np.zeros((k_max, k_max, 2))  # [k, m, :] = ∂B_k/∂τ_m
    for k in range(k_max):
        g_mult[k, :, :] = q[k][:, None] * d_el1v
        g_mult[k, :-1, :] += w_after[k, 1:][:, None] * d_elv[:-1]
    B, gB = mult, g_mult
    if bound == "taylor":
        nn = np.arange(1, terms + 1, dtype=float)
        lr1 = (gammaln(t1[:, None] + nn) - gammaln(t1)[:, None]
               - gammaln(ts[:, None] + nn) + gammaln(ts)[:, None])
        dl1 = (digamma(t1[:, None] + nn) - digamma(t1)[:, None]
               - digamma(ts[:, None] + nn) + digamma(ts)[:, None])  # ∂lr/∂τ_m1
        dl2 = -digamma(ts[:, None] + nn) + digamma(ts)[:, None]  # ∂lr/∂τ_m2
        lr = np.cumsum(lr1, axis=0)
        wts = np.exp(lr - np.log(nn)[None, :])  # (1/n) Π_{m≤k} ratio, per k and n
        head = -wts.sum(axis=1)
        fl = np.floor(t2)
        s = np.cumsum(fl)
        log_c = np.cumsum(gammaln(t1 + fl) - gammaln(t1))
        with np.errstate(divide="ignore", over="ignore"):
            log_tail = np.where(s > 0, log_c + np.log(zeta(1.0 + np.maximum(s, 1.0),
                                                           terms + 1.0)), np.inf)
            tail = np.exp(np.minimum(log_tail, 700.0))
        taylor = head - tail
        use = taylor > mult
        B = np.where(use, taylor, mult)
        d_tail1 = digamma(t1 + fl) - digamma(t1)
        for k in np.flatnonzero(use):
            gB[k] = 0.0
            gB[k, :k + 1, 0] = -(wts[k][None, :] * dl1[:k + 1]).sum(axis=1) \
                - tail[k] * d_tail1[:k + 1]
            gB[k, :k + 1, 1] = -(wts[k][None, :] * dl2[:k + 1]).sum(axis=1)
    a, b = t1, t2
    h = beta_entropy(tau)
    dh = np.column_stack([-(a - 1) * tg1 + (a + b - 2) * tgs, -(b - 1) * tg2 + (a + b - 2) * tgs])
    f = ((alpha - 1.0) * elv).sum() + (m_nu * np.cumsum(elv)).sum() + (off * B).sum() + h.sum()
    # Σ_k m_k Σ_{m≤k} E log v_m: stick m gets Σ_{k≥m} m_k
    m_after = np.cumsum(m_nu[::-1])[::-1]
    grad = ((alpha - 1.0) + m_after)[:, None] * d_elv + dh + np.einsum("k,kmj->mj", off, gB)
    return f, grad
