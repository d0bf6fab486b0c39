"""Shared helpers of the statistical tests."""

import itertools

import numpy as np
from scipy import stats


def all_binary_matrices(n, k):
    """Every binary n x k matrix, shape (2**(n*k), n, k)."""
    bits = np.array(list(itertools.product([0, 1], repeat=n * k)), dtype=np.int64)
    return bits.reshape(-1, n, k)


def codes(mats):
    """Integer code of each binary matrix in a batch (row-major bits)."""
    flat = mats.reshape(mats.shape[0], -1)
    return flat @ (1 << np.arange(flat.shape[1])[::-1])


def chi2_pooled(observed, expected, min_expected=5.0):
    """Pearson χ² after pooling cells with expectation < min_expected into one cell."""
    observed = np.asarray(observed, float)
    expected = np.asarray(expected, float)
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return stats.chisquare(obs, exp * obs.sum() / exp.sum())
