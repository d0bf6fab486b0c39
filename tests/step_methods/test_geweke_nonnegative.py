"""Geweke joint-distribution test of the exponential-Gaussian feature updates (Geweke 2004):
NonNegativeFeatureGibbs for A and ExponentialRateGibbs for its rate λ.

Marginal-conditional simulator: λ ~ Gamma(6, 3), A ~ Exp(λ) (K x D), X ~ N(Z A, σx²) with a
fixed Z (one unused column).  Successive-conditional simulator: the two steps, then
X | Z, A regenerated.  Both leave p(λ, A, X) invariant, so the test functions' means agree.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from tests._helpers import geweke_z

Z = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 1, 0]], dtype=np.int8)
K, D, SX = 3, 2, 0.7
A0, B0 = 6.0, 3.0  # a > 4: the test functions (up to A^2) have finite variance


def g(lam, A):
    return np.array([lam, A[0].mean(), A[1].mean(), A[2].mean(), (A**2).mean(),
                     lam * A.sum(), A[0, 0] * A[1, 0]])


def marginal(rng, n):
    out = np.empty((n, 7))
    for i in range(n):
        lam = rng.gamma(A0, 1.0 / B0)
        out[i] = g(lam, rng.exponential(1.0 / lam, size=(K, D)))
    return out


def successive(rng, n, broken=False):
    with pm.Model() as model:
        lam = pm.Gamma("lam", A0, B0)
        A = pm.Exponential("A", lam, shape=(K, D))
        pm.Normal("X", mu=Z @ A, sigma=SX, observed=np.zeros((len(Z), D)))
        a_step = pmi.NonNegativeFeatureGibbs([A])
        l_step = pmi.ExponentialRateGibbs([lam])
    if broken:
        l_step.count -= 1
    a_step.rng = l_step.rng = rng
    lam0 = rng.gamma(A0, 1.0 / B0)
    A0_ = rng.exponential(1.0 / lam0, size=(K, D))
    point = {**model.initial_point(), "lam_log__": np.log(lam0), "A_log__": np.log(A0_)}
    out = np.empty((n, 7))
    for it in range(n):
        A_ = np.exp(point["A_log__"])
        X = Z @ A_ + SX * rng.standard_normal((len(Z), D))  # regenerate X | Z, A
        a_step._data = lambda point, X=X: X  # the data the step reads at each point
        point, _ = a_step.step(point)
        point, _ = l_step.step(point)
        out[it] = g(float(np.exp(point["lam_log__"])), np.exp(point["A_log__"]))
    return out


def run(broken=False, n=20_000, seed=0):
    rng = np.random.default_rng(seed)
    return geweke_z(marginal(rng, n), successive(rng, n, broken))


def test_geweke_exponential_features_and_rate():
    z = run()
    assert np.all(np.abs(z) < 4.5), z


@pytest.mark.slow
def test_geweke_detects_a_wrong_rate_count():
    z = run(broken=True)
    assert np.max(np.abs(z)) > 4.5, z
