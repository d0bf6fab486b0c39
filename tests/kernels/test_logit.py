"""Pólya-Gamma draws and the Bernoulli-logit kernels (kernels.polya_gamma, kernels.logit)."""

import math

import numpy as np
import pytest

from pymc_ibp import kernels
from pymc_ibp.distributions.ibp_math import ibp_log_pmf
from tests._helpers import (
    all_binary_matrices,
    assert_follows_grid_density,
    chi2_pooled,
    codes,
)


def pg_variance(c):
    if c == 0.0:
        return 1.0 / 24.0
    return (math.sinh(c) - c) / (4.0 * c**3 * math.cosh(c / 2.0) ** 2)


@pytest.mark.parametrize("c", [0.0, 0.7, 3.0, -12.0, 60.0])
def test_polya_gamma_moments_and_laplace_transform(c):
    """PG(1, c): mean tanh(c/2)/(2c), variance (sinh c - c)/(4 c³ cosh²(c/2)) and Laplace
    transform E exp(-tω) = cosh(c/2)/cosh(√(c²/4 + t/2)) (Polson, Scott & Windle 2013, eq. 5),
    each within 5 standard errors of 10⁵ draws; unobserved entries are 0."""
    rng = np.random.default_rng(int(abs(c) * 10) + 1)
    n = 100_000
    obs = np.ones((n, 2), dtype=bool)
    obs[:, 1] = False
    w = kernels.polya_gamma_matrix(rng, np.full((n, 2), c), obs)
    assert np.all(w[:, 1] == 0.0)
    w = w[:, 0]
    assert np.all(w > 0.0)
    mean, var = kernels.pg_mean(c), pg_variance(abs(c))
    assert abs(w.mean() - mean) < 5.0 * math.sqrt(var / n), (w.mean(), mean)
    se_var = math.sqrt(np.var((w - w.mean()) ** 2) / n)
    assert abs(w.var() - var) < 5.0 * se_var, (w.var(), var)
    for t in (1.0, 10.0):
        f = np.exp(-t * w)
        exact = math.cosh(c / 2.0) / math.cosh(math.sqrt(c * c / 4.0 + t / 2.0))
        assert abs(f.mean() - exact) < 5.0 * f.std() / math.sqrt(n), (t, f.mean(), exact)


def test_logit_sweep_rank_one_updates_do_not_drift():
    """After a whole sweep of 600 rows (each removed and re-added by rank-one updates in every
    column's posterior) the kept covariances equal the ones recomputed from the new Z; the
    column counts follow Z; the fixed last column (the offset's ones) is left as it was."""
    rng = np.random.default_rng(0)
    n, k, d = 600, 12, 5
    Z = (rng.random((n, k + 1)) < 0.3).astype(np.int8)
    Z[:, -4:-1] = 0  # empty slots: births
    Z[:, -1] = 1  # the offset's column
    obs = rng.random((n, d)) > 0.1
    W = kernels.polya_gamma_matrix(rng, rng.normal(0.0, 3.0, (n, d)), obs)
    Y = np.where(obs, rng.normal(size=(n, d)) / np.where(obs, W, 1.0), 0.0)
    V = rng.uniform(0.5, 3.0, (d, k + 1))
    m = Z[:, :k].sum(axis=0).astype(np.int64)
    flips, refreshes, P = kernels.logit_collapsed_sweep(rng, Z, Y, W, V, m,
                                                        kernels.SweepPrior.counts(2.0, 1.0), 1)
    assert flips > 100
    assert np.all(Z[:, -1] == 1)
    np.testing.assert_array_equal(m, Z[:, :k].sum(axis=0))
    P_exact, _ = kernels.logit_precisions(Z, W, Y, V)
    np.testing.assert_allclose(P, P_exact, rtol=0, atol=1e-9 * np.abs(P_exact).max())


def test_logit_weight_draws_match_their_gaussian_conditional():
    """The coefficients of the columns of [Z F] given ω (F: one indicator column per group of
    rows, as for an offset b[group]; a column of ones is the one-group case): 20,000 draws vs
    the exact mean and covariance of N(M⁻¹ r, M⁻¹), M = [Z F]ᵀ Ω_d [Z F] + diag(1/V_d),
    r = [Z F]ᵀ κ_d + μ_d/V_d; an unobserved entry (ω = 0) contributes nothing."""
    rng = np.random.default_rng(1)
    n, k, d, g = 25, 3, 2, 2
    Z = (rng.random((n, k)) < 0.4).astype(np.int8)
    F = np.zeros((n, g), dtype=np.int8)
    F[np.arange(n), rng.integers(0, g, size=n)] = 1
    design = np.hstack([Z, F])
    W = rng.gamma(2.0, 0.2, size=(n, d))
    W[3, 1] = 0.0
    kappa = np.where(W > 0, rng.integers(0, 2, size=(n, d)) - 0.5, 0.0)
    V = np.array([[1.5] * k + [2.0, 1.0], [0.7] * k + [0.5, 3.0]])
    mean = np.array([[0.0] * k + [-1.0, 0.3], [0.0] * k + [0.5, -0.2]])
    draws = np.array([kernels.draw_logit_weights(rng, design, kappa, W, V, mean)
                      for _ in range(20000)])
    for j in range(d):
        M = design.T @ (W[:, j, None] * design) + np.diag(1.0 / V[j])
        r = design.T @ kappa[:, j] + mean[j] / V[j]
        cov = np.linalg.inv(M)
        x = draws[:, :, j]
        se = np.sqrt(np.diag(cov) / len(x))
        assert np.all(np.abs(x.mean(axis=0) - cov @ r) < 5.0 * se), (x.mean(axis=0), cov @ r)
        np.testing.assert_allclose(np.cov(x.T), cov, atol=0.05 * np.abs(cov).max())
    assert kernels.draw_logit_weights(rng, Z, kappa, W, V[:, :k], mean[:, :k]).shape == (k, d)


def test_logit_offset_slice_samples_each_entrys_conditional():
    """A chain of slice updates of a 2 x 3 offset b[group] (rows 0-5 in group 0, 6-7 in
    group 1; one missing entry; column 2 all zeros, the case where Pólya-Gamma draws move
    slowly) given a fixed ψ without b: the mean and variance of every entry against its exact
    conditional N(μ, var) Π p(x | ψ + b) on a grid; ψ follows the draws."""
    rng = np.random.default_rng(4)
    n, d = 8, 3
    x = (rng.random((n, d)) < 0.5).astype(np.int8)
    x[:, 2] = 0
    obs = np.ones((n, d), dtype=bool)
    obs[1, 0] = False
    base = rng.normal(0.0, 1.0, size=(n, d))
    group = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    mu, var = np.array([[-1.0, 0.5, 0.0], [0.3, -0.2, 1.0]]), np.array([[2.0, 1.0, 4.0],
                                                                         [0.5, 3.0, 1.5]])
    B = np.zeros((2, d))
    rows, starts = np.argsort(group, kind="stable"), np.array([0, 6, 8])
    psi = base.copy()
    draws = []
    for _ in range(20000):
        kernels.logit_offset_slice(rng, x, obs, psi, B, rows, starts, mu, var)
        draws.append(B.copy())
    np.testing.assert_allclose(psi, base + B[group], atol=1e-9)
    draws = np.array(draws)
    grid = np.linspace(-15.0, 15.0, 30001)
    for g in range(2):
        for j in range(d):
            logp = -0.5 * (grid - mu[g, j]) ** 2 / var[g, j]
            for i in np.nonzero((group == g) & obs[:, j])[0]:
                eta = base[i, j] + grid
                logp += x[i, j] * eta - np.logaddexp(0.0, eta)
            assert_follows_grid_density(draws[:, g, j], grid, logp, (g, j))


def test_logit_offset_slice_with_one_value_for_all_columns():
    """An offset with one value per group for all columns (``B`` of shape G x 1, as
    ``b[group][:, None]``): each entry's draws against its exact conditional
    N(μ, var) Π over its rows and every column of p(x | ψ + b) on a grid; ψ follows."""
    rng = np.random.default_rng(5)
    n, d = 7, 3
    x = (rng.random((n, d)) < 0.4).astype(np.int8)
    obs = np.ones((n, d), dtype=bool)
    obs[2, 1] = False
    base = rng.normal(0.0, 1.0, size=(n, d))
    group = np.array([1, 0, 1, 0, 0, 1, 1])
    mu, var = np.array([[-0.5], [0.8]]), np.array([[2.0], [0.7]])
    B = np.zeros((2, 1))
    rows = np.argsort(group, kind="stable")
    starts = np.array([0, 3, 7])
    psi = base.copy()
    draws = []
    for _ in range(20000):
        kernels.logit_offset_slice(rng, x, obs, psi, B, rows, starts, mu, var)
        draws.append(B[:, 0].copy())
    np.testing.assert_allclose(psi, base + B[group], atol=1e-9)
    draws = np.array(draws)
    grid = np.linspace(-15.0, 15.0, 30001)
    for g in range(2):
        logp = -0.5 * (grid - mu[g, 0]) ** 2 / var[g, 0]
        for i in np.nonzero(group == g)[0]:
            for j in np.nonzero(obs[i])[0]:
                eta = base[i, j] + grid
                logp += x[i, j] * eta - np.logaddexp(0.0, eta)
        assert_follows_grid_density(draws[:, g], grid, logp, g)


@pytest.mark.parametrize("prior", ["ibp", "per-entry"])
def test_logit_feature_sweep_leaves_its_conditional_invariant(prior):
    """i.i.d. draws of the exact p(Z | A, b, X) (the IBP pmf, or independent per-entry
    log-odds, times the Bernoulli-logit likelihood; one entry missing) pushed through one
    sweep must still follow it (χ²); the linear predictor is kept up to date."""
    n, k, d, alpha = 3, 3, 3, 2.0
    rng = np.random.default_rng(7)
    A = rng.normal(0.0, 1.5, (k, d))
    b = np.array([-0.5, 0.3, 0.0])
    X = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=float)
    obs = np.ones((n, d), dtype=bool)
    obs[2, 1] = False
    logodds = rng.normal(0.0, 1.0, (n, k))
    mats = all_binary_matrices(n, k)
    logp = np.empty(len(mats))
    for t, Z in enumerate(mats):
        psi = Z @ A + b
        ll = np.sum(np.where(obs, X * psi - np.logaddexp(0.0, psi), 0.0))
        lp = (ibp_log_pmf(Z.sum(axis=0), n, k, alpha, 1.0) if prior == "ibp"
              else np.sum(Z * logodds - np.logaddexp(0.0, logodds)))
        logp[t] = ll + lp
    post = np.exp(logp - logp.max())
    post /= post.sum()
    n_draws = 30000
    out = np.empty(n_draws, dtype=np.int64)
    flips = 0
    for t, i in enumerate(rng.choice(len(mats), size=n_draws, p=post)):
        Z = mats[i].astype(np.int8)
        m = mats[i].sum(axis=0).astype(np.int64)
        psi = Z @ A + b
        flips += kernels.logit_feature_sweep(
            rng, Z, X, obs, psi, A, m,
            kernels.SweepPrior.counts(1.0, 1.0) if prior == "ibp"
            else kernels.SweepPrior.entries(logodds))
        np.testing.assert_allclose(psi, Z @ A + b, atol=1e-12)
        if prior == "ibp":  # the counts are kept with the IBP prior only
            np.testing.assert_array_equal(m, Z.sum(axis=0))
        out[t] = codes(Z[None].astype(np.int64))[0]
    assert flips > 0.2 * n_draws
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * n_draws)
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize("full_offset", [False, True])
def test_logit_data_arrays_match_their_formulas(full_offset):
    """The step's one-pass N x D kernels against numpy: ψ = Z A + b + off, the pseudo-
    observations κ/ω - shift - off and κ - ω (shift + off) where observed (0 elsewhere), and
    the Bernoulli-logit log-likelihood of the observed entries; offset 1 x D or N x D."""
    rng = np.random.default_rng(4)
    n, k, d = 9, 3, 5
    Z = (rng.random((n, k)) < 0.5).astype(np.int8)
    A, b = rng.normal(size=(k, d)), rng.normal(size=d)
    off = rng.normal(size=(n if full_offset else 1, d))
    x = (rng.random((n, d)) < 0.4).astype(np.int8)
    obs = rng.random((n, d)) < 0.8
    W = rng.gamma(1.0, 0.3, size=(n, d))
    shift = rng.normal(size=d)
    psi = Z @ A + b + off
    none = kernels.NO_ROWS
    np.testing.assert_allclose(
        kernels.logit_linear_predictor(Z, A, b, off, none, np.empty((n, d))), psi, rtol=1e-13)
    kappa = x - 0.5
    np.testing.assert_allclose(
        kernels.logit_targets(x, obs, W, shift, off, none, True, np.empty((n, d))),
        np.where(obs, kappa / W - shift - off, 0.0), rtol=1e-13)
    np.testing.assert_allclose(
        kernels.logit_targets(x, obs, W, shift, off, none, False, np.empty((n, d))),
        np.where(obs, kappa - W * (shift + off), 0.0), rtol=1e-13)
    # an offset of one row per group (b[group]), read at every row's group
    group = rng.integers(0, 3, n)
    table = rng.normal(size=(3, d))
    np.testing.assert_allclose(
        kernels.logit_linear_predictor(Z, A, b, table, group, np.empty((n, d))),
        Z @ A + b + table[group], rtol=1e-13)
    np.testing.assert_allclose(
        kernels.logit_targets(x, obs, W, shift, table, group, True, np.empty((n, d))),
        np.where(obs, kappa / W - shift - table[group], 0.0), rtol=1e-13)
    np.testing.assert_allclose(
        kernels.logit_targets(x, obs, W, shift, table, group, False, np.empty((n, d))),
        np.where(obs, kappa - W * (shift + table[group]), 0.0), rtol=1e-13)
    psi[0, 0] = 800.0  # the log-likelihood stays finite far in the tails
    expected = np.sum(np.where(obs, x * psi - np.logaddexp(0.0, psi), 0.0))
    assert math.isclose(kernels.logit_log_lik(x, obs, psi), expected, rel_tol=1e-12)
