"""The IBP formulas: numba and symbolic forms agree, and match direct evaluations."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import special, stats

from pymc_ibp.distributions import ibp_math


@pytest.mark.parametrize("alpha,beta,n", [(1.0, 1.0, 1), (2.5, 1.0, 30), (0.7, 3.0, 1000)])
def test_mass_and_truncation_match_scipy_and_symbolic(alpha, beta, n):
    s = np.sum(beta / (beta + np.arange(n)))
    assert ibp_math.harmonic_mass(beta, n) == pytest.approx(s, rel=1e-12)
    assert ibp_math.ibp_mass(alpha, beta, n) == pytest.approx(alpha * s, rel=1e-12)
    a, b = pt.dscalar(), pt.dscalar()
    sym = pytensor.function([a, b], [ibp_math.ibp_mass_symbolic(a, b, n),
                                     ibp_math.log_truncation_symbolic(a, b, n, 4.0)])
    mass_s, trunc_s = sym(alpha, beta)
    assert mass_s == pytest.approx(alpha * s, rel=1e-12)
    for k_max in (0, 4, 20):
        ref = stats.poisson.logcdf(k_max, alpha * s)
        assert ibp_math.log_truncation(alpha, beta, n, k_max) == pytest.approx(ref, rel=1e-10,
                                                                               abs=1e-12)
    assert trunc_s == pytest.approx(stats.poisson.logcdf(4, alpha * s), rel=1e-10, abs=1e-12)


def test_log_pmf_numba_equals_symbolic_logp():
    rng = np.random.default_rng(0)
    n, k_max, alpha, beta = 6, 5, 1.7, 2.0
    v = pt.tensor3(dtype="int64")
    fn = pytensor.function([v], ibp_math.ibp_logp_symbolic(v, alpha, beta, n, k_max))
    Zs = (rng.random((20, n, k_max)) < 0.3).astype(np.int64)
    got = np.array([ibp_math.ibp_log_pmf(Z.sum(axis=0), n, k_max, alpha, beta) for Z in Zs])
    np.testing.assert_allclose(got, fn(Zs), rtol=1e-12)


def test_prior_logodds_and_birth_rate():
    n, beta = 10, 1.5
    for m in (1, 4, 9):
        assert ibp_math.prior_logodds(m, n, beta) == pytest.approx(np.log(m / (n - 1 - m + beta)))
    assert ibp_math.log_birth_rate(2.0, beta, n) == pytest.approx(np.log(2 * beta / (n - 1 + beta)))
    assert ibp_math.log_beta_term(3, n, beta) == pytest.approx(special.betaln(3, n - 3 + beta))


def test_the_truncation_is_finite_in_both_tails():
    """log P(K+ <= K_max) symbolically, with its derivative in alpha, from a mass of 1e-4 to
    one of 1e5: equal to the numba form and to scipy's log cdf (whose upper tail underflowed
    in the log of the incomplete gamma, and the IBP pmf was +inf at alpha ~ 7e4); its
    derivative is -P(K = K_max) / P(K <= K_max) times the harmonic number."""
    a = pt.dscalar()
    trunc = ibp_math.log_truncation_symbolic(a, 1.0, 3, 2.0)
    f = pytensor.function([a], [trunc, pytensor.grad(trunc, a)])
    h = 1.0 + 1 / 2 + 1 / 3
    for alpha in (1e-4, 0.5, 30.0, 700.0, 7e4):
        value, slope = f(alpha)
        ref = ibp_math.log_truncation(alpha, 1.0, 3, 2)
        assert np.isfinite(value) and value == pytest.approx(ref, rel=1e-10, abs=1e-12)
        if alpha < 100:  # scipy's own log cdf underflows beyond
            assert value == pytest.approx(stats.poisson.logcdf(2, alpha * h), rel=1e-10,
                                          abs=1e-12)
        # d/dlam log P(K <= k) = -P(K = k) / P(K <= k)
        exact = -h * np.exp(stats.poisson.logpmf(2, alpha * h) - ref)
        assert slope == pytest.approx(exact, rel=1e-8)
