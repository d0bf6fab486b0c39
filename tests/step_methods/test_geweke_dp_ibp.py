"""Geweke joint-distribution test of the DP-IBP's hyperparameter updates together with its
structure moves (Geweke 2004).

Marginal-conditional simulator: α_C ~ Gamma(2, 1), α_M ~ Gamma(2, 2), labels c ~ CRP(α_C)
with L_max tables, M ~ IBP(α_M) (L_max × K_max), X ~ N(M[c] A, σ²) with A and σ fixed.
Successive-conditional simulator: the steps ``pm.sample`` assigns — CRPGibbs for c (with its
split–merge moves), IBPGibbs for M (column Gibbs, split–merge, dissolve / compose),
CRPAlphaGibbs for α_C, IBPAlphaGibbs for α_M — then X regenerated given (c, M).  Both leave
p(α_C, α_M, c, M, X) invariant, so the means of the test functions agree.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.distributions.crp import _log_s, crp_draw_core
from pymc_ibp.distributions.ibp import ibp_draw_core
from tests._helpers import geweke_z

N, L_MAX, K_MAX, D = 5, 3, 3, 2
AC, BC, AM, BM = 2.0, 1.0, 2.0, 2.0
A_FIXED = np.array([[1.5, -0.5], [-1.0, 1.0], [0.5, 1.5]])
SIGMA = 0.8


def g(alpha_c, alpha_m, c, M):
    n_cat = np.unique(c).size
    kplus = int((M.sum(axis=0) > 0).sum())
    z_on = M[c].sum()
    return np.array([alpha_c, alpha_m, n_cat, kplus, M.sum(), z_on, alpha_c * n_cat,
                     alpha_m * kplus])


def marginal(rng, n_draws):
    log_s = _log_s(N, L_MAX)
    out = np.empty((n_draws, 8))
    for i in range(n_draws):
        alpha_c, alpha_m = rng.gamma(AC, 1.0 / BC), rng.gamma(AM, 1.0 / BM)
        c = crp_draw_core(rng, alpha_c, N, L_MAX, log_s)
        M = ibp_draw_core(rng, alpha_m, 1.0, L_MAX, K_MAX)
        out[i] = g(alpha_c, alpha_m, c, M)
    return out


def successive(rng, n_iter, wrong_crp_alpha=False):
    with pm.Model() as model:
        alpha_c = pm.Gamma("alpha_c", AC, BC)
        alpha_m = pm.Gamma("alpha_m", AM, BM)
        Z = pmi.dp_ibp("Z", alpha_c, alpha_m, l_max=L_MAX, shape=(N, K_MAX))
        data = pm.Data("x", np.zeros((N, D)))
        pm.Normal("X", mu=Z @ A_FIXED, sigma=SIGMA, observed=data)
        steps = [pmi.CRPGibbs([model["Z_c"]]), pmi.IBPGibbs([model["Z_M"]]),
                 pmi.CRPAlphaGibbs([alpha_c]), pmi.IBPAlphaGibbs([alpha_m])]
    if wrong_crp_alpha:  # the untruncated Escobar-West update, L_max < N ignored
        steps[2]._log_trunc = None
    for i, s in enumerate(steps):
        s.setup_chain(np.random.default_rng(rng.integers(2**32) + i), tune=0, draws=n_iter)
    point = model.initial_point()
    ac, am = rng.gamma(AC, 1.0 / BC), rng.gamma(AM, 1.0 / BM)
    point["alpha_c_log__"], point["alpha_m_log__"] = np.log(ac), np.log(am)
    point["Z_c"] = crp_draw_core(rng, ac, N, L_MAX, _log_s(N, L_MAX))
    point["Z_M"] = ibp_draw_core(rng, am, 1.0, L_MAX, K_MAX).astype(point["Z_M"].dtype)
    out = np.empty((n_iter, 8))
    for it in range(n_iter):
        Zv = point["Z_M"][point["Z_c"]]
        data.set_value(Zv @ A_FIXED + SIGMA * rng.standard_normal((N, D)))
        for s in steps:
            point, _ = s.step(point)
        out[it] = g(float(np.exp(point["alpha_c_log__"])), float(np.exp(point["alpha_m_log__"])),
                    point["Z_c"], point["Z_M"])
    return out


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_geweke_dp_ibp_hyperparameters_with_the_structure_moves():
    rng = np.random.default_rng(2026)
    z = geweke_z(marginal(rng, 20000), successive(rng, 8000))
    print(np.round(z, 2))
    assert np.all(np.abs(z) < 4.0), z


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_geweke_detects_an_uncorrected_crp_alpha():
    rng = np.random.default_rng(2027)
    z = geweke_z(marginal(rng, 20000), successive(rng, 8000, wrong_crp_alpha=True))
    print(np.round(z, 2))
    assert np.max(np.abs(z)) > 4.0, z
