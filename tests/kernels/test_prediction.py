"""New rows given one draw of a fitted IBP model (:mod:`pymc_ibp.kernels.prediction`) against
enumeration: the predictive of a new row is the (N + 1)-row truncated IBP given the fitted
rows; the fold-in of an observed row adds its Gaussian likelihood."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from scipy import special, stats

import pymc_ibp as pmi
from pymc_ibp.kernels.prediction import FittedDraw, fold_in_rows, predictive_rows
from tests._helpers import all_binary_matrices, chi2_pooled, codes

Z_FIT = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=np.int64)  # N = 3, K_max = 3
ALPHA, BETA = 1.3, 0.8
A = np.array([[1.0, -0.5], [0.2, 1.1], [-0.8, 0.7]])
B = np.array([0.3, -0.2])
SX = 0.7


def _new_row_log_prior():
    """log P(z | Z_FIT) for each of the 8 new rows z, from the 4-row IBP pmf."""
    rows = all_binary_matrices(1, 3)
    value = pt.tensor3("v", dtype="int64")
    logp = pytensor.function([value], pm.logp(pmi.IBP.dist(ALPHA, BETA, shape=(4, 3)), value))
    full = np.array([np.vstack([Z_FIT, r]) for r in rows])
    return rows[:, 0], logp(full)


def test_a_new_row_from_the_predictive_is_the_next_row_of_the_truncated_ibp():
    rows, lp = _new_row_log_prior()
    post = np.exp(lp - special.logsumexp(lp))
    rng = np.random.default_rng(1)
    draws = np.concatenate([predictive_rows(rng, Z_FIT.sum(axis=0), 3, ALPHA, BETA, 1)
                            for _ in range(6000)])
    counts = np.bincount(codes(draws[:, None, :]), minlength=8)[codes(rows[:, None, :])]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


def test_several_new_rows_follow_the_ibp_one_after_the_other():
    """Two new rows: their joint frequencies are the 5-row IBP pmf given the fitted rows."""
    pairs = all_binary_matrices(2, 3)
    value = pt.tensor3("v", dtype="int64")
    logp = pytensor.function([value], pm.logp(pmi.IBP.dist(ALPHA, BETA, shape=(5, 3)), value))
    lp = logp(np.array([np.vstack([Z_FIT, p]) for p in pairs]))
    post = np.exp(lp - special.logsumexp(lp))
    rng = np.random.default_rng(2)
    draws = np.array([predictive_rows(rng, Z_FIT.sum(axis=0), 3, ALPHA, BETA, 2)
                      for _ in range(8000)])
    counts = np.bincount(codes(draws), minlength=64)[codes(pairs)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


def test_fold_in_draws_the_features_of_an_observed_row():
    """One observed row x (a missing second entry in a second case): the frequencies of its
    features over independent copies against p(z | x, A, b, σx, Z_FIT) by enumeration."""
    rows, lp = _new_row_log_prior()
    for x, w in ((np.array([0.9, 0.6]), np.array([1.0, 1.0])),
                 (np.array([0.9, np.nan]), np.array([1.0, 0.0]))):
        obs = w > 0
        loglik = np.array([stats.norm.logpdf(x[obs], (r @ A + B)[obs], SX).sum() for r in rows])
        post = np.exp(lp + loglik - special.logsumexp(lp + loglik))
        R = 5000
        X = np.tile(x, (R, 1))
        W = np.tile(w / SX**2, (R, 1))
        fit = FittedDraw(A, B, Z_FIT.sum(axis=0), 3, ALPHA, BETA)
        draws = fold_in_rows(np.random.default_rng(3), X, W, fit, sweeps=15)
        counts = np.bincount(codes(draws[:, None, :]), minlength=8)[codes(rows[:, None, :])]
        res = chi2_pooled(counts, post * R)
        assert res.pvalue > 1e-3, (x, res)


def test_the_density_of_a_held_out_row_sums_its_features_exactly():
    """log p(x | draw) of two rows: the sum over the new row's features under the (N + 1)-row
    truncated IBP given the fitted rows (K_max = 3 and, with two more free slots, 5), each
    new feature's row of A integrated out (a Normal(0, sa²) per column, so the variance grows
    by sa² per new feature)."""
    from pymc_ibp.kernels.prediction import row_log_predictive

    X = np.array([[1.4, 0.2], [-2.5, 3.0]])
    sa = 1.7
    for k_max in (3, 5):
        Zf = np.hstack([Z_FIT, np.zeros((3, k_max - 3), dtype=np.int64)])
        Af = np.vstack([A, np.full((k_max - 3, 2), 99.0)])  # free slots: never read
        rows = all_binary_matrices(1, k_max)[:, 0]
        value = pt.tensor3("v", dtype="int64")
        logp = pytensor.function(
            [value], pm.logp(pmi.IBP.dist(ALPHA, BETA, shape=(4, k_max)), value))
        lp = logp(np.array([np.vstack([Zf, r]) for r in rows]))
        lp -= special.logsumexp(lp)
        used = Zf.sum(axis=0) > 0
        exact = []
        for x in X:
            terms = [lp[i] + stats.norm.logpdf(x, r[used] @ A[used[:3]] + B,
                                               np.sqrt(SX**2 + r[~used].sum() * sa**2)).sum()
                     for i, r in enumerate(rows)]
            exact.append(special.logsumexp(terms))
        fit = FittedDraw(Af, B, Zf.sum(axis=0), 3, ALPHA, BETA)
        np.testing.assert_allclose(row_log_predictive(X, fit, SX**2, sa**2), exact, rtol=1e-10)


def test_subset_log_probs_are_minus_inf_not_nan_where_a_feature_is_certain():
    """p = 1 (a feature every fitted row owns, at beta -> 0) and p = 0: the subsets that
    contradict them are -inf (the old matrix product gave 0 x -inf = NaN), the others sum to
    one."""
    from pymc_ibp.kernels.prediction import subset_bits, subset_log_probs

    bits = subset_bits(3)
    lp = subset_log_probs(bits, np.array([1.0, 0.3, 0.0]))
    assert not np.any(np.isnan(lp))
    possible = (bits[:, 0] == 1) & (bits[:, 2] == 0)
    assert np.all(np.isneginf(lp[~possible]))
    np.testing.assert_allclose(np.exp(lp[possible]).sum(), 1.0)
