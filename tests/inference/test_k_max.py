"""probe_k_max: the linear-Gaussian kernels given room for more features from a truncated
state (pymc_ibp/inference/k_max.py)."""

import numpy as np
import pytest

from pymc_ibp import kernels
from pymc_ibp.inference.k_max import probe_k_max

N, D, K_TRUE = 300, 24, 10


@pytest.fixture(scope="module")
def planted():
    rng = np.random.default_rng(0)
    Z = (rng.random((N, K_TRUE)) < 0.3).astype(np.int8)
    X = Z @ rng.normal(0.0, 1.0, (K_TRUE, D)) + 0.3 * rng.standard_normal((N, D))
    return Z, X


def _noise(sx, sa):
    return kernels.noise_blocks(np.full(D, sx**2), np.full(D, sa**2), D)


@pytest.mark.parametrize("k_max", [3, 6])
def test_probe_from_a_truncated_state_reaches_the_planted_count(planted, k_max):
    """From the planted features' first k_max columns at the true scales, the probe settles at
    the 10 planted features (with at most a few small ones of the IBP prior) and suggests
    half as much again."""
    Z, X = planted
    for seed in range(3):
        probe = probe_k_max(np.random.default_rng(seed), Z[:, :k_max], X, _noise(0.3, 1.0),
                            alpha=1.0, beta=1.0)
        assert K_TRUE <= probe.reached <= K_TRUE + 3, probe.k_plus
        assert probe.suggested == int(np.ceil(1.5 * probe.reached))
        assert not probe.growing
        assert probe.k_plus.size == 30 and probe.width >= 2 * k_max


def test_probe_widens_and_re_estimates_free_scales(planted):
    """With the noise scale re-estimated from a far too large start (the scale a truncated
    chain settles at), the probe widens past twice K_max when it needs to and still ends
    at least at the planted count; kept scales of that size find fewer features."""
    Z, X = planted
    v0 = np.array([X.var()])

    def estimate(Zp, Xp, m, noise):
        act = np.flatnonzero(m > 0)
        G, RX = kernels.suff_stats(Zp, Xp, act)
        _, mu = kernels.posterior_from_stats(G, RX, noise)
        r = Xp - Zp[:, act].astype(float) @ mu
        return noise._replace(sx2=np.maximum([np.mean(r**2)], 1e-4 * v0))

    free = probe_k_max(np.random.default_rng(1), Z[:, :2], X, _noise(1.2, 1.0), alpha=2.0,
                       beta=1.0, estimate_noise=estimate, free_alpha=True)
    assert free.reached >= K_TRUE and free.width > 4
    kept = probe_k_max(np.random.default_rng(1), Z[:, :2], X, _noise(1.2, 1.0), alpha=2.0,
                       beta=1.0)
    assert kept.reached < K_TRUE
    assert "use K_max >=" in free.advice()
