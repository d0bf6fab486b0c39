"""Geweke joint-distribution tests of the hyperparameter updates with the accelerated Z sweep
(Geweke 2004).

Marginal-conditional simulator: α ~ Gamma(2, 2), σx, σa ~ HalfNormal(1), Z ~ IBP(α) truncated
at K_max, A ~ N(0, σa²), X ~ N(ZA, σx²).  Successive-conditional simulator: alternate the
samplers' own kernels — Z sweep | X, α, σ (accelerated, A integrated), A | Z, X, the scales
(IBPScaleSlice, exact slice sampling), α | Z (truncation-corrected MH) — and regenerate
X | Z, A, σx.  Both leave p(α, σ, Z, A, X) invariant, so the test functions' means agree.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp import kernels
from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.step_methods.hyperparameters import alpha_update
from tests._helpers import geweke_z

N, D, K_MAX = 6, 2, 6
A0, B0 = 2.0, 2.0
H_N = float(np.sum(1.0 / np.arange(1, N + 1)))


def g(alpha, sx, sa, Z):
    kplus = (Z.sum(axis=0) > 0).sum()
    return np.array([alpha, kplus, Z.sum(), alpha * kplus, sx, sa, sx * kplus])


def marginal(rng, n_draws):
    out = np.empty((n_draws, 7))
    for i in range(n_draws):
        alpha = rng.gamma(A0, 1.0 / B0)
        sx, sa = abs(rng.normal()), abs(rng.normal())
        out[i] = g(alpha, sx, sa, ibp_draw_core(rng, alpha, 1.0, N, K_MAX))
    return out


def scale_step():
    """IBPScaleSlice on a model with the simulator's priors (its data are replaced below)."""
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", A0, B0)
        Z = pmi.IBP("Z", alpha, shape=(N, K_MAX))
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(K_MAX, D))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=np.zeros((N, D)))
        step = pmi.IBPScaleSlice([sigma_x, sigma_a])
    return model, step


def successive(rng, n_iter, update_alpha=alpha_update):
    model, step = scale_step()
    step.setup_chain(rng, tune=0, draws=n_iter)
    alpha = rng.gamma(A0, 1.0 / B0)
    sx, sa = abs(rng.normal()), abs(rng.normal())
    Z = ibp_draw_core(rng, alpha, 1.0, N, K_MAX)
    A = rng.normal(0, sa, size=(K_MAX, D))
    X = Z @ A + sx * rng.standard_normal((N, D))
    point = model.initial_point()
    out = np.empty((n_iter, 7))
    for it in range(n_iter):
        m = Z.sum(axis=0).astype(np.int64)
        kernels.accelerated_sweep(rng, Z, X, m, kernels.noise_blocks(sx**2, sa**2, D),
                                  kernels.SweepPrior.counts(alpha, 1.0), 3)
        A = kernels.draw_features(rng, Z, X, sx**2, sa**2)
        point.update(Z=Z, A=A, sigma_x_log__=np.log(sx), sigma_a_log__=np.log(sa))
        for e in step.entries:
            e["X"] = X  # the data change every iteration of this simulator
        point, _ = step.step(point)
        sx, sa = float(np.exp(point["sigma_x_log__"])), float(np.exp(point["sigma_a_log__"]))
        kplus = int((Z.sum(axis=0) > 0).sum())
        alpha, _ = update_alpha(rng, alpha, kplus, A0, B0, H_N, K_MAX)
        X = Z @ A + sx * rng.standard_normal((N, D))
        out[it] = g(alpha, sx, sa, Z)
    return out


def test_geweke_alpha_scales_and_z_sweep():
    rng = np.random.default_rng(2024)
    z = geweke_z(marginal(rng, 20000), successive(rng, 20000))
    assert np.all(np.abs(z) < 4.0), z


@pytest.mark.slow
def test_geweke_detects_a_wrong_alpha_rate():
    """The same test flags PyIBP's rate b + N instead of b + H_N (erratum E37)."""
    def wrong(rng, alpha, kplus, a, b, s, k_max):
        return alpha_update(rng, alpha, kplus, a, b, float(N), k_max)

    rng = np.random.default_rng(7)
    z = geweke_z(marginal(rng, 20000), successive(rng, 20000, wrong))
    assert np.max(np.abs(z)) > 4.0, z


@pytest.mark.slow
def test_geweke_detects_a_wrong_scale_conditional(monkeypatch):
    """…and a σx conditional with the variance's exponent (-ND/2 log σ instead of -ND log σ)."""
    from pymc_ibp.step_methods import scales

    orig = scales.IBPScaleSlice._suff

    def wrong(self, e, point):
        count, ss = orig(self, e, point)
        return (count // 2 if e["role"] == "sigma_x" else count), ss

    monkeypatch.setattr(scales.IBPScaleSlice, "_suff", wrong)
    rng = np.random.default_rng(8)
    z = geweke_z(marginal(rng, 20000), successive(rng, 20000))
    assert np.max(np.abs(z)) > 4.0, z
