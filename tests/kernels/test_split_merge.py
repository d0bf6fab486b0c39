"""Split–merge Metropolis–Hastings kernels: exact invariance of the posterior."""

import numpy as np
import pytest

from pymc_ibp import kernels
from tests._helpers import ENUM_X, chi2_pooled, codes, exact_posterior

N_DRAWS = 40000


def push_exact_draws(move, X, k_max, seed, alpha=2.0, sx=0.5, sa=1.0):
    """Push ``N_DRAWS`` i.i.d. exact-posterior draws through ``move`` (which updates ``Z`` and
    its column sums ``m`` in place and returns its accepted count); returns the total accepted
    and the pooled χ² test of the results against the exact posterior.  ``sx``, ``sa``: scalars
    or one per column (column blocks of their own scales)."""
    X = np.asarray(X, dtype=float).copy()
    mats, post = exact_posterior(X, k_max, alpha, sx, sa)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(mats), size=N_DRAWS, p=post)
    out = np.empty(N_DRAWS, dtype=np.int64)
    noise = kernels.noise_blocks(np.asarray(sx, dtype=float) ** 2,
                                 np.asarray(sa, dtype=float) ** 2, X.shape[1])
    trXX = kernels.block_sq_norms(X, noise)
    accepted = 0
    for j, i in enumerate(idx):
        Z = mats[i].astype(np.int8)  # the steps' dtype: no int64 compile of the kernels
        m = Z.sum(axis=0).astype(np.int64)
        accepted += move(rng, Z, X, m, noise, alpha, trXX)
        assert np.array_equal(m, Z.sum(axis=0))
        out[j] = codes(Z[None])[0]
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    return accepted, chi2_pooled(counts, post * N_DRAWS)


#: two column blocks with their own noise and feature scales
BLOCK_SX, BLOCK_SA = np.array([0.5, 0.9]), np.array([1.0, 0.6])


@pytest.mark.parametrize(
    "kernel,X,k_max,n_props,min_acc,sx,sa",
    [
        ("random", ENUM_X, 3, 1, 0.05, 0.5, 1.0),
        ("sequential", ENUM_X, 3, 1, 0.05, 0.5, 1.0),
        # N = 4, K_max = 3 (4096 states): columns of size 3-4 and one proposal chain of 3 moves
        ("sequential", np.vstack([ENUM_X, [[1.1, 0.8]]]), 3, 3, 0.05, 0.5, 1.0),
        ("sequential", ENUM_X, 3, 1, 0.05, BLOCK_SX, BLOCK_SA),
        # (23 s) the slow suite; the default suite has the column kernel on 4 x 3 and two blocks
        pytest.param("column", ENUM_X, 3, 1, 0.05, 0.5, 1.0, marks=pytest.mark.slow),
        ("column", np.vstack([ENUM_X, [[1.1, 0.8]]]), 3, 3, 0.05, 0.5, 1.0),
        ("column", ENUM_X, 3, 1, 0.05, BLOCK_SX, BLOCK_SA),
    ],
    ids=["random-3x3", "sequential-3x3", "sequential-4x3", "sequential-3x3-two-blocks",
         "column-3x3", "column-4x3", "column-3x3-two-blocks"],
)
def test_split_merge_kernel_leaves_posterior_invariant(kernel, X, k_max, n_props, min_acc, sx,
                                                       sa):
    """i.i.d. exact-posterior draws pushed through split–merge proposals must still follow the
    exact posterior (χ² on independent samples: a direct test of the MH ratio)."""
    fn = {"random": kernels.random_split_merge,
          "sequential": kernels.sequential_split_merge,
          "column": kernels.column_split_merge}[kernel]
    accepted, res = push_exact_draws(
        lambda rng, Z, X, m, noise, alpha, trXX: fn(rng, Z, X, m, noise, alpha, 1.0, n_props,
                                                    trXX), X, k_max, seed=5, sx=sx, sa=sa)
    assert accepted > min_acc * N_DRAWS  # the moves do move
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize(
    "X,k_max,n_rows,n_props,sx,sa",
    [
        (ENUM_X, 3, 2, 1, 0.5, 1.0),  # R = all other rows
        (ENUM_X, 3, 1, 1, 0.5, 1.0),  # R = one random row: larger features' deaths refused
        (np.vstack([ENUM_X, [[1.1, 0.8]]]), 3, 2, 3, 0.5, 1.0),  # N = 4, chains of 3 moves
        (ENUM_X, 3, 2, 1, BLOCK_SX, BLOCK_SA),
    ],
    ids=["3x3-all-rows", "3x3-one-row", "4x3-two-rows", "3x3-two-blocks"],
)
def test_birth_death_kernel_leaves_posterior_invariant(X, k_max, n_rows, n_props, sx, sa):
    """Exact-posterior draws pushed through data-driven birth/death proposals must still
    follow the exact posterior (χ² on independent samples)."""
    accepted, res = push_exact_draws(
        lambda rng, Z, X, m, noise, alpha, trXX: kernels.sequential_birth_death(
            rng, Z, X, m, noise, alpha, 1.0, n_props, n_rows, trXX), X, k_max, seed=11,
        sx=sx, sa=sa)
    assert accepted > 0.05 * N_DRAWS  # the moves do move
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize(
    "X,k_max,n_props,sx,sa",
    [
        (ENUM_X, 3, 1, 0.5, 1.0),
        (np.vstack([ENUM_X, [[1.1, 0.8]]]), 3, 3, 0.5, 1.0),  # N = 4, chains of 3 moves
        (ENUM_X, 3, 1, BLOCK_SX, BLOCK_SA),
    ],
    ids=["3x3", "4x3-three-moves", "3x3-two-blocks"],
)
def test_pair_pattern_swaps_leave_posterior_invariant(X, k_max, n_props, sx, sa):
    """Exact-posterior draws pushed through pattern swaps of feature pairs must still follow
    the exact posterior (χ² on independent samples)."""
    accepted, res = push_exact_draws(
        lambda rng, Z, X, m, noise, alpha, trXX: kernels.pair_pattern_swaps(
            rng, Z, X, m, noise, alpha, 1.0, n_props, trXX), X, k_max, seed=13, sx=sx, sa=sa)
    assert accepted > 0.05 * N_DRAWS  # the moves do move
    assert res.pvalue > 1e-3, res


#: rows owning both of two features, the first alone and the second alone: the posterior
#: puts mass on the pair and on its merged triple (the sum, and a correction on each side)
PAIR_X = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize(
    "X,k_max,n_props,sx,sa",
    [
        (PAIR_X, 3, 2, 0.5, 1.0),
        (PAIR_X, 4, 3, 0.5, 1.0),
        (np.vstack([PAIR_X, [[1.1, 0.9]]]), 3, 3, 0.5, 1.0),  # N = 4, chains of 3 moves
        (PAIR_X, 3, 2, BLOCK_SX, BLOCK_SA),
    ],
    ids=["3x3", "3x4-three-moves", "4x3-three-moves", "3x3-two-blocks"],
)
def test_pair_triple_moves_leave_posterior_invariant(X, k_max, n_props, sx, sa):
    """Exact-posterior draws pushed through the moves between a pair of overlapping features
    and its merged triple must still follow the exact posterior (χ² on independent
    samples)."""
    accepted, res = push_exact_draws(
        lambda rng, Z, X, m, noise, alpha, trXX: kernels.pair_triple_moves(
            rng, Z, X, m, noise, alpha, 1.0, n_props, trXX), X, k_max, seed=17, sx=sx, sa=sa)
    print(accepted / N_DRAWS, res.pvalue)
    assert accepted > 0.01 * N_DRAWS  # the moves do move
    assert res.pvalue > 1e-3, res
