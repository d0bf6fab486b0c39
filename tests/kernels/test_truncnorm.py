"""Truncated-Gaussian draws: exact in the bulk and in the far tails (moments and KS against
scipy), never past the bound, never inf or NaN."""

import numpy as np
import pytest
from scipy import stats

from pymc_ibp.kernels.truncnorm import truncnorm_above, truncnorm_below

N = 20_000


def draws(fn, mu, sd, bound, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([fn(rng, mu, sd, bound) for _ in range(N)])


@pytest.mark.parametrize("a", [-3.0, 0.0, 0.44, 0.46, 2.0, 8.0, 30.0])
def test_above_matches_scipy(a):
    """N(mu, 2²) truncated to x >= 1 with (1 - mu)/2 = a: KS and mean within 4 standard
    errors of scipy's truncnorm (a = 30: the mean 30 sd below the bound)."""
    mu, sd, lo = 1.0 - 2.0 * a, 2.0, 1.0
    x = draws(truncnorm_above, mu, sd, lo, seed=int(abs(a) * 10) % 97)
    assert np.all(np.isfinite(x)) and np.all(x >= lo)
    ref = stats.truncnorm(a, np.inf, loc=mu, scale=sd)
    assert stats.kstest(x, ref.cdf).pvalue > 1e-3
    assert abs(x.mean() - ref.mean()) < 4 * ref.std() / np.sqrt(N)
    assert abs(x.var() / ref.var() - 1) < 0.06


def test_above_far_beyond_scipy():
    """a = 10^4 (scipy's truncnorm warns there): t - a is asymptotically Exp(a), so the
    excess over the bound has mean sd / a and sd / a."""
    a, sd, lo = 1e4, 2.0, 1.0
    x = draws(truncnorm_above, lo - sd * a, sd, lo, seed=3)
    assert np.all(np.isfinite(x)) and np.all(x >= lo)
    excess = x - lo
    assert abs(excess.mean() / (sd / a) - 1) < 0.05
    assert abs(excess.std() / (sd / a) - 1) < 0.08


@pytest.mark.parametrize("a", [-1.0, 0.5, 30.0])
def test_below_is_the_mirror_image(a):
    mu, sd, hi = 3.0 + 0.5 * a, 0.5, 3.0
    x = draws(truncnorm_below, mu, sd, hi, seed=5)
    assert np.all(np.isfinite(x)) and np.all(x <= hi)
    ref = stats.truncnorm(-np.inf, -a, loc=mu, scale=sd)
    assert stats.kstest(x, ref.cdf).pvalue > 1e-3
