"""Bad input stops the chain with an error naming it. A term that is not finite (NaN or inf in
an offset, a log density that is NaN): no slice sampler waits forever for a point on a NaN
slice. Data the steps cannot use (no observed entry, residuals exactly 0 under a free noise,
data of another shape than their mean) and bad step options; constant data do sample."""

import math

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp import kernels
from pymc_ibp.kernels.gp import elliptical_slice
from pymc_ibp.kernels.slice import slice_sample
from tests._helpers import readme_model


def _offset_model(likelihood, offset, n=12, d=4, k_max=4):
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, d))
        if likelihood == "normal":
            sx = pm.HalfNormal("sx", 1.0)
            pm.Normal("X", mu=Z @ A + offset, sigma=sx, observed=rng.normal(size=(n, d)))
        else:
            pm.Bernoulli("X", logit_p=Z @ A + offset,
                         observed=(rng.random((n, d)) < 0.5).astype("int64"))
    return model


@pytest.mark.parametrize("likelihood", ["normal", "bernoulli"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("row", [None, 5])
def test_non_finite_offset_is_an_error(likelihood, bad, row):
    """pm.sample's own steps (AcceleratedGibbs + IBPScaleSlice; PolyaGammaGibbs) name the
    offset's bad entry at the first iteration (before: the scale's slice sampler looped
    forever on a NaN log density); for an offset the same for every row (``row=None``) and
    one of a row per data row."""
    offset = np.zeros(4) if row is None else np.zeros((12, 4))
    offset[(2,) if row is None else (row, 2)] = bad
    with _offset_model(likelihood, offset), pytest.raises(
            pmi.DataError, match=rf"offset .* is {bad} at \(row {row or 0}, column 2\)"):
        pm.sample(tune=2, draws=2, chains=1, cores=1, random_seed=1, progressbar=False,
                  compute_convergence_checks=False)


def test_slice_sample_rejects_a_non_finite_log_density():
    rng = np.random.default_rng(0)
    for value in (np.nan, -np.inf, np.inf):
        with pytest.raises(FloatingPointError, match=rf"'sx' .* is {value} at its current"):
            slice_sample(rng, lambda _u, v=value: v, 0.3, 1.0, name="'sx'")
    # NaN away from the current value is outside the slice: the update still ends
    x1, _ = slice_sample(rng, lambda u: -0.5 * u * u if abs(u) < 1.0 else math.nan, 0.3, 1.0)
    assert abs(x1) < 1.0


def test_elliptical_slice_rejects_a_non_finite_log_likelihood():
    rng = np.random.default_rng(0)
    with pytest.raises(FloatingPointError, match="log-likelihood at the current state is nan"):
        elliptical_slice(rng, np.zeros(3), np.ones(3), lambda f: 0.0, math.nan)


def test_logit_offset_slice_rejects_a_non_finite_state():
    rng = np.random.default_rng(0)
    x = np.ones((3, 2), dtype=np.int8)
    obs = np.ones((3, 2), dtype=bool)
    psi = np.zeros((3, 2))
    psi[1, 0] = np.nan
    B = np.zeros((1, 2))
    rows, starts = np.arange(3), np.array([0, 3])
    with pytest.raises(FloatingPointError, match="not finite"):
        kernels.logit_offset_slice(rng, x, obs, psi, B, rows, starts, np.zeros((1, 2)),
                                   np.ones((1, 2)))


def test_polya_gamma_draw_rejects_a_non_finite_argument():
    rng = np.random.default_rng(0)
    for c in (math.nan, math.inf):
        with pytest.raises(FloatingPointError, match="not finite"):
            kernels.polya_gamma(rng, c)


def test_a_non_finite_column_scale_is_named():
    """A per-column noise sigma with a NaN: AcceleratedGibbs names the variable's role, the
    observed matrix and the column (before: "The noise and feature variances must be
    positive and finite")."""
    sigma = np.ones(4)
    sigma[3] = np.nan
    rng = np.random.default_rng(0)
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(12, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 4))
        pm.Normal("X", mu=Z @ A, sigma=sigma, observed=rng.normal(size=(12, 4)))
        with pytest.raises(pmi.DataError, match=r"noise sigma of 'X' is nan at column 3"):
            pm.sample(tune=1, draws=1, chains=1, cores=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False)


def test_a_non_finite_prior_mean_of_the_offset_is_named():
    rng = np.random.default_rng(0)
    mu = np.zeros(4)
    mu[1] = np.nan
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(12, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 4))
        b = pm.Normal("b", mu, 1.0, shape=4)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=(rng.random((12, 4)) < 0.5).astype(int))
        with pytest.raises(pmi.DataError, match=r"prior mean of the offset 'b' is nan at "
                                                r"\(row 0, column 1\)"):
            pm.sample(tune=1, draws=1, chains=1, cores=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False, step=[pmi.PolyaGammaGibbs([Z, A, b])])


def test_a_non_finite_offset_of_a_second_matrix_is_named_with_its_value():
    """Two observed matrices of one Z: the bad entry of the second one's offset is named by
    that matrix, its own column and its value (before: the value printed was read at the
    block's column in the first matrix)."""
    rng = np.random.default_rng(0)
    off2 = np.zeros(3)
    off2[1] = np.inf
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        A1 = pm.Normal("A1", 0.0, 1.0, shape=(4, 2))
        A2 = pm.Normal("A2", 0.0, 1.0, shape=(4, 3))
        pm.Normal("X1", mu=Z @ A1 + np.full(2, 7.0), sigma=0.5, observed=rng.normal(size=(10, 2)))
        pm.Normal("X2", mu=Z @ A2 + off2, sigma=0.5, observed=rng.normal(size=(10, 3)))
        with pytest.raises(pmi.DataError,
                           match=r"mean of 'X2' .* is inf at \(row 0, column 1\)"):
            pm.sample(tune=2, draws=2, chains=1, cores=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False)


def test_non_finite_entry_finds_the_first_and_ignores_an_overflowing_sum():
    from pymc_ibp.kernels.offsets import non_finite_entry

    table = np.zeros((4, 3))
    assert non_finite_entry(table) is None
    assert non_finite_entry(np.full((4, 3), 1e308)) is None  # finite entries, sum inf
    table[2, 1], table[3, 0] = np.inf, -np.inf
    assert non_finite_entry(table) == ((2, 1), 2)
    table[0, 2] = np.nan
    assert non_finite_entry(table) == ((0, 2), 3)


def _lg_model(X, free_sigma=True):
    return readme_model(X, k_max=6, sigma_x=None if free_sigma else 0.5)


def _sample(model):
    with model:
        return pm.sample(tune=3, draws=3, chains=1, cores=1, random_seed=1, progressbar=False,
                         compute_convergence_checks=False)


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_data_without_an_observed_entry_is_an_error():
    with pytest.raises(pmi.DataError, match="Every entry of the observed data .* is missing"):
        _sample(_lg_model(np.full((20, 5), np.nan)))


def test_constant_data_start_and_sample():
    """Data constant in every column (spread 0 about the column means): the start search
    (noise annealed from the data's variance, 0 here) runs, with a free or a fixed noise
    (before: division by zero, or a failed Cholesky factorisation)."""
    for free in (True, False):
        idata = _sample(_lg_model(np.full((20, 5), 3.0), free_sigma=free))
        assert np.all(np.isfinite(idata["sample_stats"]["ibp_log_joint"].values))
    idata = _sample(_lg_model(np.zeros((20, 5)), free_sigma=False))
    assert np.all(np.isfinite(idata["sample_stats"]["ibp_log_joint"].values))


def test_residuals_exactly_zero_make_the_noise_scale_an_error():
    """All-zero data fit exactly by Z = 0: sigma_x's conditional is improper (it piles up at
    0); the scale step says so instead of dividing by zero."""
    with pytest.raises(pmi.DataError, match="conditional of 'sigma_x' is then improper"):
        _sample(_lg_model(np.zeros((20, 5))))


def test_data_of_another_shape_than_its_mean_is_named_by_ibpgibbs():
    """X of 5 columns for Z @ A of 4 (dims that PyMC does not check against the data):
    IBPGibbs says the likelihood cannot be evaluated and why, instead of PyTensor's bare
    shape error (and does not fall back to whole-likelihood updates as for a likelihood that
    does not factorise over the rows)."""
    X = np.random.default_rng(0).normal(size=(12, 5))
    with pm.Model(coords={"obs": range(12), "feature": range(3), "dim": range(4)}):
        Z = pmi.IBP("Z", 1.0, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Poisson("X", mu=pm.math.exp(Z @ A), observed=np.abs(X).astype("int64"),
                   dims=("obs", "dim"))
        with pytest.raises(pmi.DataError, match="cannot be evaluated at the initial point"):
            pmi.IBPGibbs([Z])


@pytest.mark.parametrize("window", [0, 1.5, True])
def test_window_must_be_a_positive_integer(window):
    with _lg_model(np.random.default_rng(0).normal(size=(10, 3))) as model, pytest.raises(
            ValueError, match="integer window >= 1"):
        pmi.AcceleratedGibbs([model["Z"], model["A"]], window=window)
