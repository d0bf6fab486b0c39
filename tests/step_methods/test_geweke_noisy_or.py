"""Geweke joint-distribution test of the noisy-or IBP-IBP's failure probability ``q``
(NoisyOrQSlice) together with its structure moves (Geweke 2004).

Marginal-conditional simulator: exact prior draws of ``q ~ Beta(2, 2)``, ``C ~ IBP(1.5)``
(N × L_max), ``M ~ IBP(1.5)`` (L_max × K_max), ``Z ~ Bernoulli(1 - q^(C M))`` and
``X ~ N(Z A, σ²)`` (A, σ fixed).  Successive-conditional simulator: the steps ``pm.sample``
assigns — IBPGibbs for ``C`` (with the flip and turn-on / turn-off block moves of Doshi-Velez
2009 §7.2.3), ``M`` (entry-wise) and ``Z`` (eq. 7.9 prior odds), NoisyOrQSlice for ``q`` —
then ``X`` regenerated given ``Z``.  Both leave the joint invariant, so the means of the test
functions agree.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from tests._helpers import geweke_z

N, L_MAX, K_MAX, D = 4, 2, 3, 2
A_FIXED = np.array([[1.5, -0.5], [-1.0, 1.0], [0.5, 1.5]])
SIGMA = 0.8


def _model():
    with pm.Model() as model:
        q = pm.Beta("q", 2.0, 2.0)
        Z = pmi.noisy_or_ibp_ibp("Z", 1.5, 1.5, q, l_max=L_MAX, shape=(N, K_MAX))
        data = pm.Data("x", np.zeros((N, D)))
        pm.Normal("X", mu=Z @ A_FIXED, sigma=SIGMA, observed=data)
    return model, data


def g(q, C, M, Z):
    s = C.astype(int) @ M
    return np.array([q, C.sum(), M.sum(), Z.sum(), (s > 1).sum(), q * Z.sum(),
                     q * (s > 0).sum(), q**2])


def marginal(n_draws, seed):
    model, _ = _model()
    draws = pm.draw([model[v] for v in ("q", "Z_C", "Z_M", "Z")], draws=n_draws,
                    random_seed=seed)
    return np.array([g(*d) for d in zip(*draws, strict=True)])


def successive(rng, n_iter, break_q=False):
    model, data = _model()
    with model:
        steps = [pmi.IBPGibbs([model["Z_C"]]), pmi.IBPGibbs([model["Z_M"]]),
                 pmi.IBPGibbs([model["Z"]]), pmi.NoisyOrQSlice([model["q"]])]
    assert steps[0].child_moves is not None and steps[0].turn_on_moves == 1
    if break_q:  # the prior of q without the log-odds Jacobian
        steps[3]._prior = lambda point: 0.0
    for i, s in enumerate(steps):
        s.setup_chain(np.random.default_rng(rng.integers(2**32) + i), tune=0, draws=n_iter)
    q0, C0, M0, Z0 = pm.draw([model[v] for v in ("q", "Z_C", "Z_M", "Z")],
                             random_seed=int(rng.integers(2**31)))
    point = {**model.initial_point(), "Z_C": C0, "Z_M": M0, "Z": Z0,
             "q_logodds__": np.log(q0 / (1 - q0))}
    out = np.empty((n_iter, 8))
    for it in range(n_iter):
        data.set_value(point["Z"] @ A_FIXED + SIGMA * rng.standard_normal((N, D)))
        for s in steps:
            point, _ = s.step(point)
        q = 1.0 / (1.0 + np.exp(-float(point["q_logodds__"])))
        out[it] = g(q, point["Z_C"], point["Z_M"], point["Z"])
    return out


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_geweke_noisy_or_q_with_the_structure_moves():
    z = geweke_z(marginal(20000, 11), successive(np.random.default_rng(12), 10000))
    print(np.round(z, 2))
    assert np.all(np.abs(z) < 4.0), z


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_geweke_noisy_or_detects_a_wrong_q_prior():
    z = geweke_z(marginal(20000, 13), successive(np.random.default_rng(14), 10000,
                                                 break_q=True))
    print(np.round(z, 2))
    assert np.max(np.abs(z)) > 4.0, z
