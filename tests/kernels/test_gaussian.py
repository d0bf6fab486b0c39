"""Kernels of the linear-Gaussian likelihood and the per-row updates: conditionals, draws,
rank-one drift."""

import numba
import numpy as np
import pytest
from scipy import stats

from pymc_ibp.step_methods import kernels
from tests._helpers import rand_state


@numba.njit
def state_after_rows(Z, X, rows, sx2, sa2):
    """``(Σ, μ)`` maintained by :func:`kernels.row_update` while each of ``rows`` is removed
    and re-added (``z`` unchanged), with no refresh."""
    k = Z.shape[1]
    d = X.shape[1]
    G, RX = kernels.suff_stats(Z, X, np.arange(k))
    Sig, mu, _ = kernels.posterior_from_stats(G, RX, sx2, sa2)
    v = np.zeros(k)
    e = np.zeros(d)
    z = np.zeros(k)
    for it in range(rows.shape[0]):
        i = rows[it]
        for a in range(k):
            z[a] = float(Z[i, a])
        kernels.row_update(Sig, mu, z, X[i], k, sx2, -1.0, v, e)
        kernels.row_update(Sig, mu, z, X[i], k, sx2, 1.0, v, e)
    return Sig, mu


def test_collapsed_loglik_matches_direct_mvn():
    rng = np.random.default_rng(1)
    Z, X = rand_state(rng, 7, 3, 4)
    sx, sa = 0.6, 1.3
    G, RX = kernels.suff_stats(Z, X, np.arange(3))
    got = kernels.collapsed_loglik(G, RX, float((X**2).sum()), 7, 4, sx**2, sa**2)
    cov = sa**2 * Z @ Z.T + sx**2 * np.eye(7)
    ref = sum(stats.multivariate_normal.logpdf(X[:, j], np.zeros(7), cov) for j in range(4))
    np.testing.assert_allclose(got, ref, rtol=1e-12)

@pytest.mark.parametrize("seed", range(5))
def test_accelerated_and_collapsed_conditionals_agree(seed):
    """log p(X|Z¹) - log p(X|Z⁰) (collapsed) equals the predictive-ratio of row n under the
    rank-one downdated posterior p(A | X₋ₙ, Z₋ₙ) (accelerated, spec §4.4) to 1e-9."""
    rng = np.random.default_rng(seed)
    n, k, d = 9, 4, 3
    Z, X = rand_state(rng, n, k, d)
    sx2, sa2 = 0.5**2, 1.2**2
    trXX = float((X**2).sum())
    # full-data posterior, then remove row i by the corrected E1 rank-one downdate
    G, RX = kernels.suff_stats(Z, X, np.arange(k))
    Sig, mu, _ = kernels.posterior_from_stats(G, RX, sx2, sa2)
    for i in range(n):
        z = Z[i].astype(float)
        v = Sig @ z
        c = sx2 - z @ v
        Sig_m = Sig + np.outer(v, v) / c
        mu_m = mu - np.outer(v, X[i] - z @ mu) / c
        for kk in range(k):
            lls = []
            llc = []
            for val in (0, 1):
                zz = z.copy()
                zz[kk] = val
                s2 = zz @ Sig_m @ zz + sx2
                r = X[i] - zz @ mu_m
                lls.append(-0.5 * d * np.log(2 * np.pi * s2) - r @ r / (2 * s2))
                Z2 = Z.copy()
                Z2[i, kk] = val
                G2, RX2 = kernels.suff_stats(Z2, X, np.arange(k))
                llc.append(kernels.collapsed_loglik(G2, RX2, trXX, n, d, sx2, sa2))
            np.testing.assert_allclose(lls[1] - lls[0], llc[1] - llc[0], rtol=1e-9, atol=1e-9)

def test_feature_draw_moments():
    """A | Z, X draws have the posterior mean and covariance of spec §3.1."""
    rng = np.random.default_rng(0)
    Z, X = rand_state(rng, 50, 5, 3)
    G, RX = kernels.suff_stats(Z, X, np.arange(5))
    Sig, mu, _ = kernels.posterior_from_stats(G, RX, 0.3, 2.0)
    draws = np.array([kernels.draw_active_features(rng, G, RX, 0.3, 2.0) for _ in range(20000)])
    se = np.sqrt(np.diag(Sig))[:, None] / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - mu) < 5 * se)
    for j in range(3):
        np.testing.assert_allclose(np.cov(draws[:, :, j].T), Sig, atol=0.1 * np.abs(Sig).max())

def test_rank_one_drift_ill_conditioned():
    """10^4 rank-one down/up-dates on data whose dimensions' variances differ 100x: the
    maintained posterior matches a from-scratch Cholesky to 1e-8 relative."""
    rng = np.random.default_rng(3)
    n, k, d = 200, 8, 6
    Z = (rng.random((n, k)) < 0.3).astype(np.int64)
    X = rng.normal(size=(n, d)) * np.array([10.0, 10.0, 1.0, 1.0, 0.1, 0.1])
    rows = rng.integers(0, n, size=5000)  # 5000 rows x (remove + add) = 10^4 updates
    Sig, mu = state_after_rows(Z, X, rows, 0.05**2, 1.0)
    G, RX = kernels.suff_stats(Z, X, np.arange(k))
    Sig0, mu0, _ = kernels.posterior_from_stats(G, RX, 0.05**2, 1.0)
    assert np.abs(Sig - Sig0).max() / np.abs(Sig0).max() < 1e-8
    assert np.abs(mu - mu0).max() / np.abs(mu0).max() < 1e-8
