"""The Monte Carlo standard error that the statistical tests' tolerances rest on."""

import numpy as np
from scipy import signal

from tests._helpers import geweke_z, mcse_mean


def ar1(rng, phi, n):
    """A stationary AR(1) chain x_t = phi x_{t-1} + e_t, e_t ~ N(0, 1)."""
    x0 = rng.normal() / np.sqrt(1.0 - phi**2)
    return signal.lfilter([1.0], [1.0, -phi], rng.normal(size=n), zi=[phi * x0])[0]


def test_mcse_mean_holds_on_a_slowly_mixing_chain():
    """AR(1) with phi = 0.995 (integrated autocorrelation time 399): sd of the mean
    sqrt((1 + phi) / (1 - phi) / (1 - phi²) / n).  Fifty batches of 400 draws underestimate
    it by about a quarter; mcse_mean must not."""
    phi, n = 0.995, 20_000
    exact = np.sqrt((1 + phi) / (1 - phi) / (1 - phi**2) / n)
    ratios = [mcse_mean(ar1(np.random.default_rng(s), phi, n)) / exact for s in range(20)]
    assert 0.85 < np.mean(ratios) < 1.2, np.mean(ratios)


def test_geweke_z_is_standard_normal_for_equal_means():
    """Independent marginal draws against a correlated chain with the same mean: the
    z-scores' spread is about 1 (it is not inflated by the chain's autocorrelation)."""
    zs = []
    for s in range(40):
        rng = np.random.default_rng(100 + s)
        mc = rng.normal(size=(5000, 1)) / np.sqrt(1.0 - 0.99**2)
        zs.append(geweke_z(mc, ar1(rng, 0.99, 20_000)[:, None])[0])
    assert 0.7 < np.std(zs) < 1.3, np.std(zs)
