"""One match of each pattern per model state (:mod:`pymc_ibp.matching.cache`), consulted by
every ``competence`` call."""

import numpy as np
import pymc as pm
from pymc.step_methods.compound import Competence

import pymc_ibp as pmi
from pymc_ibp.matching import binary_features as bf
from pymc_ibp.matching.linear_gaussian import matched_models


def _model(X):
    with pm.Model() as model:
        data = pm.Data("data", X)
        Z = pmi.IBP("Z", 1.0, shape=(X.shape[0], 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, X.shape[1]))
        pm.Normal("X", Z @ A, 0.5, observed=data)
    return model


def test_a_model_is_matched_once_until_its_data_or_variables_change():
    X = np.random.default_rng(0).normal(size=(20, 4))
    model = _model(X)
    first = matched_models(model)
    assert matched_models(model) is first and len(first) == 1
    np.testing.assert_array_equal(first[0].X, X)
    with model:
        pm.set_data({"data": X + 1.0})  # new data: matched again
    again = matched_models(model)
    assert again is not first
    np.testing.assert_array_equal(again[0].X, X + 1.0)
    with model:
        pm.HalfNormal("extra", 1.0)  # a new variable: matched again
    assert matched_models(model) is not again


def test_competence_builds_the_binary_feature_likelihood_once(monkeypatch):
    """pm.sample asks for competence per variable and step; the numerical check of the
    binary-feature pattern (three compiled functions) runs once per model."""
    built = []
    init = bf.BinaryFeatureLikelihood.__init__
    monkeypatch.setattr(bf.BinaryFeatureLikelihood, "__init__",
                        lambda self, *a, **k: built.append(1) or init(self, *a, **k))
    data = pmi.datasets.binary_block_images(30, seed=1)
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(30, 4))
        A = pm.Bernoulli("A", 0.3, shape=(4, 36))
        pm.Bernoulli("X", p=pmi.likelihoods.leaky_noisy_or(Z, A, 0.05, 0.9), observed=data.X)
        for _ in range(3):
            assert pmi.BinaryFeatureGibbs.competence(A, False) == Competence.IDEAL
    assert len(built) == 1
