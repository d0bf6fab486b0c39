"""Split–merge Metropolis–Hastings kernels: exact invariance of the posterior."""

import numpy as np
import pytest

from pymc_ibp.step_methods import kernels
from tests._helpers import ENUM_X, chi2_pooled, codes, exact_posterior



@pytest.mark.parametrize(
    "kernel,X,k_max,n_props,min_acc",
    [
        ("random", ENUM_X, 3, 1, 0.05),
        ("sequential", ENUM_X, 3, 1, 0.05),
        # N = 4, K_max = 3 (4096 states): columns of size 3-4 and one proposal chain of 3 moves
        ("sequential", np.vstack([ENUM_X, [[1.1, 0.8]]]), 3, 3, 0.05),
    ],
    ids=["random-3x3", "sequential-3x3", "sequential-4x3"],
)
def test_split_merge_kernel_leaves_posterior_invariant(kernel, X, k_max, n_props, min_acc):
    """i.i.d. exact-posterior draws pushed through split–merge proposals must still follow the
    exact posterior (χ² on independent samples: a direct test of the MH ratio)."""
    fn = {"random": kernels.random_split_merge,
          "sequential": kernels.sequential_split_merge}[kernel]
    X = np.asarray(X, dtype=float).copy()
    alpha, sx, sa = 2.0, 0.5, 1.0
    mats, post = exact_posterior(X, k_max, alpha, sx, sa)
    rng = np.random.default_rng(5)
    n = 40000
    idx = rng.choice(len(mats), size=n, p=post)
    out = np.empty(n, dtype=np.int64)
    trXX = float((X**2).sum())
    accepted = 0
    for j, i in enumerate(idx):
        Z = mats[i].copy()
        m = Z.sum(axis=0).astype(np.int64)
        accepted += fn(rng, Z, X, m, sx**2, sa**2, alpha, 1.0, n_props, trXX)
        assert np.array_equal(m, Z.sum(axis=0))
        out[j] = codes(Z[None])[0]
    assert accepted > min_acc * n  # the moves do move
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * n)
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize(
    "X,k_max,n_rows,n_props",
    [
        (ENUM_X, 3, 2, 1),  # R = all other rows
        (ENUM_X, 3, 1, 1),  # R = one random row: deaths of larger features must be refused
        (np.vstack([ENUM_X, [[1.1, 0.8]]]), 3, 2, 3),  # N = 4 (4096 states), chains of 3 moves
    ],
    ids=["3x3-all-rows", "3x3-one-row", "4x3-two-rows"],
)
def test_birth_death_kernel_leaves_posterior_invariant(X, k_max, n_rows, n_props):
    """Exact-posterior draws pushed through data-driven birth/death proposals must still
    follow the exact posterior (χ² on independent samples)."""
    X = np.asarray(X, dtype=float).copy()
    alpha, sx, sa = 2.0, 0.5, 1.0
    mats, post = exact_posterior(X, k_max, alpha, sx, sa)
    rng = np.random.default_rng(11)
    n = 40000
    idx = rng.choice(len(mats), size=n, p=post)
    out = np.empty(n, dtype=np.int64)
    trXX = float((X**2).sum())
    accepted = 0
    for j, i in enumerate(idx):
        Z = mats[i].copy()
        m = Z.sum(axis=0).astype(np.int64)
        accepted += kernels.sequential_birth_death(rng, Z, X, m, sx**2, sa**2, alpha, 1.0,
                                                   n_props, n_rows, trXX)
        assert np.array_equal(m, Z.sum(axis=0))
        out[j] = codes(Z[None])[0]
    assert accepted > 0.05 * n  # the moves do move
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * n)
    assert res.pvalue > 1e-3, res
