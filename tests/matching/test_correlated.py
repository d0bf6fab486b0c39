"""match_correlated: the correlated models seen from their category-feature matrix M, built by
the builders or by hand, under a Gaussian or a log-linked likelihood."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.matching.correlated import match_correlated

X = np.random.default_rng(0).poisson(2.0, size=(12, 3)).astype(float)


def _likelihood(Z, link):
    A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
    if link == "identity":
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
    else:
        b = pm.Normal("b", 0.0, 1.0)
        pm.Poisson("X", mu=pm.math.exp(Z @ A + b), observed=X)


@pytest.mark.parametrize("link", ["identity", "exp"])
@pytest.mark.parametrize("kind", ["dp_ibp", "ibp_ibp", "noisy_or"])
def test_builders_are_matched_from_m(kind, link):
    with pm.Model() as model:
        if kind == "dp_ibp":
            Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=5, shape=(12, 4))
        elif kind == "ibp_ibp":
            Z = pmi.ibp_ibp("Z", 1.0, 1.0, l_max=5, shape=(12, 4))
        else:
            Z = pmi.noisy_or_ibp_ibp("Z", 1.0, 1.0, 0.2, l_max=5, shape=(12, 4))
        _likelihood(Z, link)
    match = match_correlated(model, model["Z_M"])
    assert match.kind == kind
    assert match.labels is model["Z_c" if kind == "dp_ibp" else "Z_C"]
    assert match.child is model["X"] and match.a_rv is model["A"]
    assert (match.z_rv is model["Z"]) == (kind == "noisy_or")
    # the labels and the plain IBP are not a category-feature matrix
    assert match_correlated(model, model["Z_c" if kind == "dp_ibp" else "Z_C"]) is None


def test_hand_written_models_are_matched():
    with pm.Model() as model:
        c = pmi.CRP("c", 1.0, l_max=5, shape=12)
        M = pmi.IBP("M", 1.0, shape=(5, 4))
        _likelihood(M[c], "identity")
    assert match_correlated(model, model["M"]).kind == "dp_ibp"
    with pm.Model() as model:
        C = pmi.IBP("C", 1.0, shape=(12, 5))
        M = pmi.IBP("M", 1.0, shape=(5, 4))
        _likelihood(pm.math.gt(pm.math.dot(C, M), 0), "identity")
    assert match_correlated(model, model["M"]).kind == "ibp_ibp"


def test_fixed_labels_or_a_plain_ibp_are_not_matched():
    with pm.Model() as model:
        M = pmi.IBP("M", 1.0, shape=(5, 4))
        _likelihood(M[np.arange(12) % 5], "identity")
    assert match_correlated(model, model["M"]) is None
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(12, 4))
        _likelihood(Z, "exp")
    assert match_correlated(model, model["Z"]) is None
