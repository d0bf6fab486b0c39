"""Tests for ``pymc_ibp.datasets`` (ground truth of the generators; IBP moments of Griffiths &
Ghahramani 2011, §4).

Statistical checks use z-tests with ``|z| < 4`` or scipy tests with ``p > 1e-3`` at fixed
seeds, so they are deterministic yet would flag a wrong generator.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

import pymc_ibp as pmi
from pymc_ibp.datasets import IBPData, block_images, ibp_linear_gaussian

Z_MAX = 4.0
P_MIN = 1e-3


def _chi2_z(sum_sq_standardised: float, dof: int) -> float:
    """z-score of a χ²(dof) statistic (normal approximation, dof large)."""
    return (sum_sq_standardised - dof) / np.sqrt(2.0 * dof)


# --------------------------------------------------------------------------------------------
# API
# --------------------------------------------------------------------------------------------
def test_public_api():
    assert pmi.datasets.block_images is block_images
    assert pmi.datasets.ibp_linear_gaussian is ibp_linear_gaussian
    assert pmi.datasets.IBPData is IBPData
    assert "ground truth" in pmi.datasets.__doc__


def test_ibpdata_is_frozen():
    data = block_images(3, seed=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.X = np.zeros((3, 36))
    assert (data.n, data.d, data.k) == (3, 36, 4)


# --------------------------------------------------------------------------------------------
# block images
# --------------------------------------------------------------------------------------------
def test_block_images_shapes_and_dtypes():
    data = block_images(7, noise=0.3, seed=1, p=0.4)
    assert isinstance(data, IBPData)
    assert data.X.shape == (7, 36) and data.X.dtype == np.float64
    assert data.Z.shape == (7, 4) and data.Z.dtype == np.int64
    assert data.A.shape == (4, 36) and data.A.dtype == np.float64
    assert data.sigma_x == 0.3 and isinstance(data.sigma_x, float)
    assert data.image_shape == (6, 6)
    assert data.sigma_a is None and data.alpha is None
    assert set(np.unique(data.Z)) <= {0, 1}


def test_block_images_deterministic_per_seed():
    a, b = block_images(20, seed=123), block_images(20, seed=123)
    for field in ("X", "Z", "A"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    c = block_images(20, seed=124)
    assert not np.array_equal(a.X, c.X)
    assert not np.array_equal(a.Z, c.Z)
    # the features are fixed glyphs, the same for every seed
    np.testing.assert_array_equal(a.A, c.A)


def test_block_glyphs_are_distinct_nonempty_binary_images():
    A = block_images(1, seed=0).A
    assert set(np.unique(A)) == {0.0, 1.0}
    assert np.all(A.sum(axis=1) >= 3)  # every glyph is a visible, non-trivial shape
    glyphs = A.reshape(4, 6, 6)
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(glyphs[i], glyphs[j])
    # identifiable: linearly independent features
    assert np.linalg.matrix_rank(A) == 4
    np.testing.assert_array_equal(A, pmi.datasets.BLOCK_GLYPHS)


def test_block_images_noise_free_is_exact():
    data = block_images(50, noise=0.0, seed=3)
    np.testing.assert_array_equal(data.X, data.Z @ data.A)


@pytest.mark.parametrize("noise", [0.5, 0.1, 2.0])
def test_block_images_residual_std_matches_noise(noise):
    data = block_images(2000, noise=noise, seed=11)
    resid = data.X - data.Z @ data.A
    # Σ r² / σ² ~ χ²(N·D)
    z = _chi2_z(float(np.sum(resid**2)) / noise**2, resid.size)
    assert abs(z) < Z_MAX, z
    assert abs(resid.mean()) < Z_MAX * noise / np.sqrt(resid.size)


@pytest.mark.parametrize("p", [0.5, 0.2, 0.85])
def test_block_images_glyph_frequency_and_independence(p):
    n = 4000
    Z = block_images(n, seed=5, p=p).Z
    for k in range(4):
        assert stats.binomtest(int(Z[:, k].sum()), n, p).pvalue > P_MIN, k
    # glyphs are present independently: pairwise co-occurrence has probability p²
    for i in range(4):
        for j in range(i + 1, 4):
            both = int(np.sum(Z[:, i] * Z[:, j]))
            assert stats.binomtest(both, n, p * p).pvalue > P_MIN, (i, j)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_block_images_degenerate_p(p):
    Z = block_images(10, seed=0, p=p).Z
    np.testing.assert_array_equal(Z, np.full((10, 4), int(p)))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0},
        {"n": -3},
        {"n": 2.5},
        {"n": "10"},
        {"n": True},
        {"n": 5, "noise": -0.1},
        {"n": 5, "noise": float("nan")},
        {"n": 5, "noise": float("inf")},
        {"n": 5, "p": -0.01},
        {"n": 5, "p": 1.01},
        {"n": 5, "p": float("nan")},
    ],
)
def test_block_images_bad_inputs(kwargs):
    with pytest.raises(ValueError):
        block_images(**kwargs)


def test_block_images_accepts_numpy_int():
    assert block_images(np.int64(4), seed=0).X.shape == (4, 36)


# --------------------------------------------------------------------------------------------
# linear-Gaussian IBP data
# --------------------------------------------------------------------------------------------
def test_ibp_linear_gaussian_shapes_and_dtypes():
    data = ibp_linear_gaussian(12, 5, alpha=3.0, sigma_x=0.2, sigma_a=1.5, seed=2)
    k = data.Z.shape[1]
    assert k > 0
    assert data.X.shape == (12, 5) and data.X.dtype == np.float64
    assert data.Z.shape == (12, k) and data.Z.dtype == np.int64
    assert data.A.shape == (k, 5) and data.A.dtype == np.float64
    assert (data.sigma_x, data.sigma_a, data.alpha, data.beta) == (0.2, 1.5, 3.0, 1.0)
    assert data.image_shape is None
    assert set(np.unique(data.Z)) <= {0, 1}
    # K = K+: every column is used, and columns are in order of first appearance
    assert np.all(data.Z.sum(axis=0) > 0)
    first = np.argmax(data.Z == 1, axis=0)
    assert np.all(np.diff(first) >= 0)


def test_ibp_linear_gaussian_deterministic_per_seed():
    kw = dict(n=15, d=4, alpha=2.5, sigma_x=0.3, sigma_a=1.0)
    a, b = ibp_linear_gaussian(**kw, seed=9), ibp_linear_gaussian(**kw, seed=9)
    for field in ("X", "Z", "A"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    c = ibp_linear_gaussian(**kw, seed=10)
    assert not np.array_equal(a.X, c.X)
    assert a.Z.shape != c.Z.shape or not np.array_equal(a.Z, c.Z)


def test_ibp_linear_gaussian_empty_features():
    data = ibp_linear_gaussian(6, 3, alpha=1e-12, sigma_x=0.5, sigma_a=1.0, seed=0)
    assert data.Z.shape == (6, 0) and data.Z.dtype == np.int64
    assert data.A.shape == (0, 3) and data.A.dtype == np.float64
    assert data.X.shape == (6, 3) and np.all(np.isfinite(data.X))
    assert np.all(data.X != 0.0)  # pure noise


def _draw_many(n, alpha, beta, reps, seed):
    ss = np.random.SeedSequence(seed)
    return [
        ibp_linear_gaussian(n, 1, alpha, 0.1, 1.0, seed=child, beta=beta).Z
        for child in ss.spawn(reps)
    ]


@pytest.mark.parametrize(
    ("n", "alpha", "beta"), [(5, 2.0, 1.0), (8, 1.5, 1.0), (6, 2.0, 3.0), (6, 3.0, 0.4)]
)
def test_ibp_restaurant_feature_counts(n, alpha, beta):
    """E[K+] = α Σ β/(β+i-1) (α H_N if β=1), K+ Poisson, rows Poisson(α) (Griffiths & Ghahramani
    2011, §4; Ghahramani, Griffiths & Sollich 2007)."""
    reps = 2000
    Zs = _draw_many(n, alpha, beta, reps, seed=2024)
    kplus = np.array([Z.shape[1] for Z in Zs])
    mean_k = alpha * np.sum(beta / (beta + np.arange(n)))
    if beta == 1.0:
        assert np.isclose(mean_k, alpha * np.sum(1.0 / np.arange(1, n + 1)))

    # K+ ~ Poisson(mean_k): z-test on the mean and chi-square goodness of fit
    z = (kplus.mean() - mean_k) / np.sqrt(mean_k / reps)
    assert abs(z) < Z_MAX, z
    edges = np.arange(int(stats.poisson.ppf(0.995, mean_k)) + 1)
    observed = np.array([np.sum(kplus == e) for e in edges[:-1]] + [np.sum(kplus >= edges[-1])])
    expected = np.append(
        stats.poisson.pmf(edges[:-1], mean_k), stats.poisson.sf(edges[-1] - 1, mean_k)
    )
    assert stats.chisquare(observed, expected * reps).pvalue > P_MIN

    # every row i has Poisson(α) features, for the first and the later customers alike
    rows = np.array([Z.sum(axis=1) for Z in Zs])  # reps × n
    for i in range(n):
        z = (rows[:, i].mean() - alpha) / np.sqrt(alpha / reps)
        assert abs(z) < Z_MAX, (i, z)
    # total ones = α N
    z = (rows.sum(axis=1).mean() - alpha * n) / (rows.sum(axis=1).std(ddof=1) / np.sqrt(reps))
    assert abs(z) < Z_MAX, z


def test_ibp_restaurant_second_customer_shares_dishes():
    """P(customer 2 takes a given dish of customer 1) = 1/(β+1) (the two-parameter buffet of
    Ghahramani, Griffiths & Sollich 2007)."""
    beta, alpha, reps = 2.0, 2.0, 2000
    shared = trials = 0
    for Z in _draw_many(2, alpha, beta, reps, seed=77):
        first = Z[0] == 1
        trials += int(first.sum())
        shared += int(Z[1, first].sum())
    assert stats.binomtest(shared, trials, 1.0 / (beta + 1.0)).pvalue > P_MIN


def test_ibp_linear_gaussian_residual_and_feature_variance():
    sigma_x, sigma_a = 0.3, 2.0
    data = ibp_linear_gaussian(60, 40, alpha=5.0, sigma_x=sigma_x, sigma_a=sigma_a, seed=31)
    resid = data.X - data.Z @ data.A
    z = _chi2_z(float(np.sum(resid**2)) / sigma_x**2, resid.size)
    assert abs(z) < Z_MAX, z
    assert data.A.size > 500
    z = _chi2_z(float(np.sum(data.A**2)) / sigma_a**2, data.A.size)
    assert abs(z) < Z_MAX, z
    assert abs(data.A.mean()) < Z_MAX * sigma_a / np.sqrt(data.A.size)


def test_ibp_linear_gaussian_noise_free():
    data = ibp_linear_gaussian(10, 3, alpha=2.0, sigma_x=0.0, sigma_a=1.0, seed=4)
    np.testing.assert_array_equal(data.X, data.Z @ data.A)


_GOOD = dict(n=5, d=3, alpha=1.0, sigma_x=0.5, sigma_a=1.0)


@pytest.mark.parametrize(
    "override",
    [
        {"n": 0},
        {"n": 3.0},
        {"n": False},
        {"d": 0},
        {"d": "3"},
        {"alpha": 0.0},
        {"alpha": -1.0},
        {"alpha": float("inf")},
        {"alpha": None},
        {"sigma_x": -0.5},
        {"sigma_x": float("nan")},
        {"sigma_a": 0.0},
        {"sigma_a": -1.0},
        {"beta": 0.0},
        {"beta": -2.0},
        {"beta": float("nan")},
    ],
)
def test_ibp_linear_gaussian_bad_inputs(override):
    with pytest.raises(ValueError):
        ibp_linear_gaussian(**{**_GOOD, **override})


def test_block_combinations_rows_follow_their_category():
    data = pmi.datasets.block_combinations(900, noise=0.0, seed=1)
    assert data.X.shape == (900, 36) and data.M.shape == (9, 4)
    np.testing.assert_array_equal(data.Z, data.M[data.labels])
    np.testing.assert_allclose(data.X, data.Z @ data.A)
    counts = np.bincount(data.labels, minlength=9)
    assert counts.min() > 60  # uniform over the nine combinations
    assert len({tuple(r) for r in data.Z}) == 9
    with pytest.raises(ValueError):
        pmi.datasets.block_combinations(0)


def test_binary_block_images_follow_the_logistic_model(monkeypatch):
    """Binary images from the glyphs through a logistic link: the pixel frequencies off and on
    the glyphs present match sigmoid(offset) and sigmoid(weight + offset) (binomial z-tests),
    the glyphs appear with probability p, the same seed gives the same data."""
    data = pmi.datasets.binary_block_images(4000, weight=3.0, offset=-1.5, seed=5, p=0.3)
    assert data.X.shape == (4000, 36) and data.X.dtype == np.int8  # one byte per pixel
    assert set(np.unique(data.X)) == {0, 1}
    assert data.Z.shape == (4000, 4) and data.offset == -1.5 and data.sigma_x is None
    np.testing.assert_array_equal(data.A, 3.0 * pmi.datasets.BLOCK_GLYPHS)
    covered = (data.Z @ pmi.datasets.BLOCK_GLYPHS) > 0
    for mask, p in ((~covered, 1.0 / (1.0 + np.exp(1.5))), (covered, 1.0 / (1.0 + np.exp(-1.5)))):
        n = mask.sum()
        z = (data.X[mask].mean() - p) / np.sqrt(p * (1.0 - p) / n)
        assert abs(z) < Z_MAX, (p, z)
    n = data.Z.size
    assert abs((data.Z.mean() - 0.3) / np.sqrt(0.21 / n)) < Z_MAX
    again = pmi.datasets.binary_block_images(4000, weight=3.0, offset=-1.5, seed=5, p=0.3)
    np.testing.assert_array_equal(again.X, data.X)
    # generated in row blocks (no N x D float temporaries): the blocks do not change the data
    from pymc_ibp.datasets import synthetic

    monkeypatch.setattr(synthetic, "_CHUNK_ROWS", 7)
    blocks = pmi.datasets.binary_block_images(4000, weight=3.0, offset=-1.5, seed=5, p=0.3)
    np.testing.assert_array_equal(blocks.X, data.X)
    for bad in (dict(n=0), dict(weight=np.inf), dict(offset=np.nan), dict(p=1.5)):
        with pytest.raises(ValueError):
            pmi.datasets.binary_block_images(**{"n": 5, **bad})
