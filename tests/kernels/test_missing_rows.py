"""The accelerated sweep with missing entries: rows updated as blocks (z_n, x_n,mis)."""

import numpy as np
from scipy import stats

from pymc_ibp import kernels
from tests._helpers import chi2_pooled, codes, exact_posterior

X = np.array([[1.2, -0.3], [np.nan, 0.9], [0.1, 1.1], [1.3, np.nan]])
K_MAX, ALPHA, SX, SA = 3, 3.0, 0.5, 1.0


def conditional_moments(Z, X, n, d):
    """Mean and sd of x_nd given Z and the observed entries of column d (A integrated out)."""
    obs = ~np.isnan(X[:, d])
    Zf = Z.astype(float)
    C = SA**2 * Zf @ Zf.T + SX**2 * np.eye(len(X))
    o = np.flatnonzero(obs)
    w = np.linalg.solve(C[np.ix_(o, o)], C[o, n])
    return float(w @ X[o, d]), float(np.sqrt(C[n, n] - w @ C[o, n]))


def test_pushed_exact_draws_keep_the_joint_posterior():
    """Exact draws of (Z, X_mis) from p(Z, X_mis | X_obs) (Z from the enumerated posterior,
    X_mis from its Gaussian conditional) pushed through one sweep keep that law: Z by chi-square
    over all 2^12 matrices, and each missing entry standardised by its exact conditional given
    the NEW Z is N(0, 1) (Kolmogorov-Smirnov).  A sweep that draws z_n with x_n,mis integrated
    out but leaves x_n,mis as it was breaks the second check."""
    mats, post = exact_posterior(X, K_MAX, ALPHA, SX, SA)
    miss = np.isnan(X)
    where = np.argwhere(miss)
    noise = kernels.noise_blocks(SX**2, SA**2, X.shape[1])
    rng = np.random.default_rng(0)
    n_draws = 6000
    idx = rng.choice(len(mats), size=n_draws, p=post)
    out, u = [], []
    for i in idx:
        Z = mats[i].astype(np.int8).copy()
        Xc = X.copy()
        for n, d in where:
            mean, sd = conditional_moments(Z, X, n, d)
            Xc[n, d] = mean + sd * rng.standard_normal()
        # x_mis given Z: the entries of different columns are independent given Z; within a
        # column there is one missing entry here, so the draws above are exact
        m = Z.sum(axis=0).astype(np.int64)
        kernels.accelerated_sweep(rng, Z, Xc, m, noise, kernels.SweepPrior.counts(ALPHA, 1.0),
                                  2, miss=miss)
        out.append(Z.copy())
        for n, d in where:
            mean, sd = conditional_moments(Z, X, n, d)
            u.append((Xc[n, d] - mean) / sd)
    counts = np.bincount(codes(np.array(out)), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * n_draws)
    assert res.pvalue > 1e-3, res
    ks = stats.kstest(u, "norm")
    assert ks.pvalue > 1e-3, ks
