"""Kernels of the dependent IBP (Williamson, Orbanz & Ghahramani 2010): Metropolis updates of
the sticks in ``η = Φ⁻¹(b)``, the auxiliary Gaussians' sums, conditional draws of a GP given
noisy copies (Matheron's rule; Wilson et al. 2020), elliptical slice sampling (Murray, Adams &
MacKay 2010), and a feature's likelihood with its column of ``Z`` summed out.  The
derivations are in :mod:`pymc_ibp.step_methods.dependent_ibp`."""

from __future__ import annotations

import math

import numba
import numpy as np
import scipy.linalg
from scipy.special import log_ndtr as sp_log_ndtr

from pymc_ibp.distributions.normal_math import log_ndtr, ndtr, ndtri
from pymc_ibp.kernels.truncnorm import truncnorm_above, truncnorm_below

__all__ = ["draw_h_sums", "elliptical_slice", "gp_conditional_draw", "gp_cholesky",
           "marginal_z_loglik", "stick_sweep"]


@numba.njit(cache=True)
def _stick_loglik(eta, sd, g, rho, n1, n_loc):
    total = 0.0
    for loc in range(g.shape[0]):
        if n_loc[loc] == 0:
            continue
        u = (sd[loc] * eta - g[loc]) / rho
        if n1[loc] > 0:
            total += n1[loc] * log_ndtr(u)
        if n_loc[loc] > n1[loc]:
            total += (n_loc[loc] - n1[loc]) * log_ndtr(-u)
    return total


@numba.njit(cache=True)
def stick_sweep(rng, b, g, g_var, rho, n1, n_loc, alpha, log_step, accepted):
    """One Metropolis update of each stick (in place) in ``η = Φ⁻¹(b)`` (module docstring);
    ``accepted[k]`` is set to 1 where stick ``k`` moved."""
    k_max = b.shape[0]
    sd = np.empty(g.shape[1])
    for k in range(k_max):
        for loc in range(g.shape[1]):
            sd[loc] = math.sqrt(g_var[k, loc] + rho * rho)
        eta = ndtri(b[k])
        eta_new = eta + math.exp(log_step[k]) * rng.standard_normal()
        b_new = ndtr(eta_new)
        hi = b[k - 1] if k > 0 else 1.0
        lo = b[k + 1] if k + 1 < k_max else 0.0
        accepted[k] = 0
        if not (b_new > 0.0 and lo <= b_new <= hi):
            continue
        power = (alpha - 1.0) if k == k_max - 1 else -1.0  # b_K^α / b_k
        log_r = (power * (math.log(b_new) - math.log(b[k]))
                 - 0.5 * (eta_new * eta_new - eta * eta)
                 + _stick_loglik(eta_new, sd, g[k], rho, n1[k], n_loc)
                 - _stick_loglik(eta, sd, g[k], rho, n1[k], n_loc))
        if math.log(rng.random()) < log_r:
            b[k] = b_new
            accepted[k] = 1


@numba.njit(cache=True)
def draw_h_sums(rng, Z, g, thr, rho, index, h_out, keep):
    """Draw ``h_nk`` for every entry from its truncated Gaussian and return the sums
    ``S[k, l] = Σ_{n: l_n = l} h_nk``; ``h_out`` receives the draws when ``keep``."""
    n, k_max = Z.shape
    sums = np.zeros(g.shape)
    for i in range(n):
        loc = index[i]
        for k in range(k_max):
            if Z[i, k] != 0:
                h = truncnorm_below(rng, g[k, loc], rho, thr[k, loc])
            else:
                h = truncnorm_above(rng, g[k, loc], rho, thr[k, loc])
            sums[k, loc] += h
            if keep:
                h_out[i, k] = h
    return sums


def gp_cholesky(matrix, what):
    try:
        return scipy.linalg.cholesky(matrix, lower=True, check_finite=False)
    except np.linalg.LinAlgError as err:
        raise np.linalg.LinAlgError(
            f"DependentIBPGibbs: the {what} is not numerically positive definite. Add jitter to "
            "the GP covariance (pmi.dependent_ibp(..., jitter=1e-5)) or use a shorter length "
            "scale prior.") from err


def gp_conditional_draw(rng, mu, cov, h_sum, n_loc, rho):
    r"""One draw of a GP ``g ~ N(mu, cov)`` (``T`` locations) given ``N_l`` noisy copies
    ``h ~ N(g(l), ρ²)`` at each location with sum ``h_sum[l]`` (Matheron's rule; module
    docstring).  Exact for any ``N_l >= 0``."""
    T = mu.shape[0]
    f = mu + gp_cholesky(cov, "GP covariance") @ rng.standard_normal(T)
    obs = np.flatnonzero(n_loc > 0)
    if obs.size == 0:
        return f
    noise_var = rho**2 / n_loc[obs]
    y = h_sum[obs] / n_loc[obs]
    resid = y - f[obs] - np.sqrt(noise_var) * rng.standard_normal(obs.size)
    c = cov[np.ix_(obs, obs)] + np.diag(noise_var)
    chol = gp_cholesky(c, "GP covariance plus item noise")
    w = scipy.linalg.cho_solve((chol, True), resid, check_finite=False)
    return f + cov[:, obs] @ w


def elliptical_slice(rng, f, nu, loglik, cur_ll):
    """One elliptical slice sampling update (Murray, Adams & MacKay 2010) of a zero-mean
    Gaussian state ``f`` with prior draw ``nu`` (same covariance) under ``loglik``; returns
    ``(f_new, loglik(f_new), evaluations)``.  The bracket shrinks towards ``f`` itself, so the
    loop ends (``loglik`` must be finite at ``f``: ``FloatingPointError`` otherwise)."""
    if not math.isfinite(cur_ll):
        raise FloatingPointError(
            f"elliptical slice sampling: the log-likelihood at the current state is {cur_ll} "
            "(NaN or inf in the data, an offset or another variable's value).")
    log_y = cur_ll + math.log(rng.random())
    theta = rng.uniform(0.0, 2.0 * math.pi)
    lo, hi = theta - 2.0 * math.pi, theta
    for evals in range(1, 10_001):
        prop = f * math.cos(theta) + nu * math.sin(theta)
        ll = loglik(prop)
        if ll > log_y:
            return prop, ll, evals
        if theta < 0.0:
            lo = theta
        else:
            hi = theta
        theta = rng.uniform(lo, hi)
    raise RuntimeError("elliptical slice sampling did not find a point on the slice in 10,000 "
                       "shrinks; the log-likelihood is not continuous at the current state.")


def marginal_z_loglik(delta, thr_rows, g_rows, rho):
    """``Σ_n log(Φ(u_n) e^{Δ_n} + Φ(-u_n))`` with ``u = (thr - g)/ρ``: the likelihood of one
    feature's process with its column of ``Z`` summed out (up to a constant), ``Δ_n`` the
    row log-likelihood ratio of ``z_nk = 1`` to ``z_nk = 0``; rows with ``Δ = ±∞`` keep only
    the possible value."""
    u = (thr_rows - g_rows) / rho
    l1, l0 = sp_log_ndtr(u), sp_log_ndtr(-u)
    with np.errstate(invalid="ignore"):
        terms = np.logaddexp(delta + l1, l0)
    terms = np.where(delta == np.inf, l1, terms)
    return float(terms.sum())
