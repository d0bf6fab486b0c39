"""Geweke joint-distribution test of the alpha update with the accelerated Z sweep (spec §12.4-5).

Marginal-conditional simulator: α ~ Gamma(a, b), Z ~ IBP(α) (truncated at K_max), A ~ N(0, σa²),
X ~ N(ZA, σx²).  Successive-conditional simulator: alternate the samplers' own kernels —
Z sweep | X, α (accelerated, A integrated), A | Z, X, α | Z (truncation-corrected MH), and
X | Z, A from the likelihood.  Both leave p(α, Z, A, X) invariant, so the test functions' means
must agree.
"""

import numpy as np
import pytest

from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.step_methods import kernels
from pymc_ibp.step_methods.hyperparameters import alpha_update

N, D, K_MAX = 6, 2, 6
A0, B0 = 2.0, 2.0
SX, SA = 0.8, 1.0


def g(alpha, Z):
    kplus = (Z.sum(axis=0) > 0).sum()
    return np.array([alpha, kplus, Z.sum(), alpha * kplus])


def marginal(rng, n_draws):
    out = np.empty((n_draws, 4))
    for i in range(n_draws):
        alpha = rng.gamma(A0, 1.0 / B0)
        out[i] = g(alpha, ibp_draw_core(rng, alpha, 1.0, N, K_MAX))
    return out


def successive(rng, n_iter, update_alpha=alpha_update):
    s = float(np.sum(1.0 / np.arange(1, N + 1)))
    alpha = rng.gamma(A0, 1.0 / B0)
    Z = ibp_draw_core(rng, alpha, 1.0, N, K_MAX)
    A = rng.normal(0, SA, size=(K_MAX, D))
    X = Z @ A + SX * rng.standard_normal((N, D))
    out = np.empty((n_iter, 4))
    for it in range(n_iter):
        m = Z.sum(axis=0).astype(np.int64)
        kernels.accelerated_sweep(rng, Z, X, m, SX**2, SA**2, alpha, 1.0, 3, False)
        A = kernels.draw_features(rng, Z, X, SX**2, SA**2)
        kplus = int((Z.sum(axis=0) > 0).sum())
        alpha, _ = update_alpha(rng, alpha, kplus, A0, B0, s, K_MAX)
        X = Z @ A + SX * rng.standard_normal((N, D))
        out[it] = g(alpha, Z)
    return out


def geweke_z(mc, sc, n_batches=50):
    """z-scores of the mean differences; the successive chain's variance by batch means."""
    se_mc = mc.std(axis=0, ddof=1) / np.sqrt(len(mc))
    b = sc[: len(sc) // n_batches * n_batches].reshape(n_batches, -1, sc.shape[1]).mean(axis=1)
    se_sc = b.std(axis=0, ddof=1) / np.sqrt(n_batches)
    return (mc.mean(axis=0) - sc.mean(axis=0)) / np.sqrt(se_mc**2 + se_sc**2)


def test_geweke_alpha_and_z_sweep():
    rng = np.random.default_rng(2024)
    mc = marginal(rng, 20000)
    sc = successive(rng, 20000)
    z = geweke_z(mc, sc)
    assert np.all(np.abs(z) < 4.0), z


@pytest.mark.slow
def test_geweke_detects_a_wrong_alpha_rate():
    """The same test flags PyIBP's rate b + N instead of b + H_N (erratum E37)."""
    def wrong(rng, alpha, kplus, a, b, s, k_max):
        return alpha_update(rng, alpha, kplus, a, b, float(N), k_max)

    rng = np.random.default_rng(7)
    z = geweke_z(marginal(rng, 20000), successive(rng, 20000, wrong))
    assert np.max(np.abs(z)) > 4.0, z
