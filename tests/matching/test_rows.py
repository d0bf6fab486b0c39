"""RowLikelihood: the model's log-likelihood row by row of a binary matrix or label vector."""

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_ibp as pmi
from pymc_ibp.matching.rows import RowLikelihood


def _model(x, mean_of):
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(x.shape[0], 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, x.shape[1]))
        pm.Normal("X", mu=mean_of(Z, A), sigma=0.5, observed=x)
    return model


def _point(model, seed=0):
    rng = np.random.default_rng(seed)
    point = model.initial_point()
    point["Z"] = rng.integers(0, 2, point["Z"].shape).astype(point["Z"].dtype)
    point["A"] = rng.normal(size=point["A"].shape)
    return point


def test_the_rows_sum_each_rows_terms_and_at_sets_the_value():
    x = np.array([[0.3, -1.0, 2.0], [1.1, 0.4, -0.2], [0.0, 0.5, 0.9], [2.0, 1.0, -1.0]])
    model = _model(x, lambda Z, A: Z @ A)
    point = _point(model)
    rows = RowLikelihood(model, model["Z"], 4, point).compile()
    want = stats.norm.logpdf(x, point["Z"] @ point["A"], 0.5).sum(axis=1)
    np.testing.assert_allclose(rows(point), want, rtol=1e-8)
    Z2 = 1 - point["Z"]
    trial = dict(point)
    got = rows.at(trial, Z2)
    np.testing.assert_allclose(got, stats.norm.logpdf(x, Z2 @ point["A"], 0.5).sum(axis=1),
                               rtol=1e-8)
    assert trial["Z"] is Z2  # the trial point holds the value it was evaluated at
    rows.check_matrix_factorisation(point)  # a row-wise likelihood passes


def test_a_likelihood_that_couples_the_rows_fails_the_factorisation_check():
    x = np.zeros((4, 3))
    # every row's mean depends on the column sums of Z: the rows are coupled
    model = _model(x, lambda Z, A: Z @ A + Z.sum(axis=0)[None, :1])
    rows = RowLikelihood(model, model["Z"], 4, _point(model)).compile()
    with pytest.raises(pmi.ModelPatternError, match="does not factorise"):
        rows.check_matrix_factorisation(_point(model))


def test_missing_entries_are_added_to_their_rows():
    x = np.array([[0.3, np.nan, 2.0], [1.1, 0.4, -0.2], [np.nan, np.nan, 0.9]])
    with pytest.warns(pm.exceptions.ImputationWarning):
        model = _model(x, lambda Z, A: Z @ A)
    point = _point(model)
    point["X_unobserved"] = np.array([0.7, -0.1, 0.2])
    rows = RowLikelihood(model, model["Z"], 3, point).compile()
    assert set(rows.entry_rows) == {"X_observed", "X_unobserved"}
    full = x.copy()
    full[np.isnan(x)] = point["X_unobserved"]
    want = stats.norm.logpdf(full, point["Z"] @ point["A"], 0.5).sum(axis=1)
    np.testing.assert_allclose(rows(point), want, rtol=1e-8)


def test_non_finite_data_are_named_by_their_position():
    x = np.array([[0.3, 1.0], [np.inf, 0.4]])
    model = _model(x, lambda Z, A: Z @ A)
    with pytest.raises(pmi.DataError, match=r"contains inf at \(row 1, column 0\)"):
        RowLikelihood(model, model["Z"], 2, model.initial_point(), who="a step")
