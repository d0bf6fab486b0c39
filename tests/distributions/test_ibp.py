"""Tests of the IBP priors (Griffiths & Ghahramani 2011, §4; Teh, Görür & Ghahramani 2007)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import special, stats

import pymc_ibp as pmi
from pymc_ibp.distributions.ibp import IBPRV
from tests._helpers import all_binary_matrices, chi2_pooled, codes


def batched_logp_fn(n, k, alpha, beta):
    """Compiled logp of pmi.IBP evaluated on a batch of matrices."""
    value = pt.tensor3("value", dtype="int64")
    a = pt.dscalar("a")
    b = pt.dscalar("b")
    rv = pmi.IBP.dist(a, b, shape=(n, k))
    lp = pm.logp(rv, value)
    fn = pytensor.function([value, a, b], lp)
    return lambda mats: fn(mats, alpha, beta)


CASES = [(1, 3, 1.5, 1.0), (2, 2, 2.0, 1.0), (3, 2, 0.7, 1.0), (2, 3, 3.0, 0.5), (3, 3, 1.2, 2.5),
         (4, 2, 5.0, 1.0)]


@pytest.mark.parametrize("n,k,alpha,beta", CASES)
def test_pmf_sums_to_one(n, k, alpha, beta):
    mats = all_binary_matrices(n, k)
    lp = batched_logp_fn(n, k, alpha, beta)(mats)
    assert np.all(np.isfinite(lp))
    assert abs(np.exp(special.logsumexp(lp)) - 1.0) < 1e-10


def test_logp_closed_form_and_exchangeability():
    """Hand-computed value for one matrix; permuting columns or rows leaves logp unchanged."""
    n, k, alpha = 3, 4, 1.3
    z = np.array([[1, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    hn = 1 + 1 / 2 + 1 / 3
    lam = alpha * hn
    # P([Z]) for histories (110), (101): K_h = 1 each; m = 2, 2
    lof = 2 * np.log(alpha) - lam + 2 * (special.gammaln(2) + special.gammaln(2)
                                         - special.gammaln(4))
    expected = (lof + special.gammaln(k - 2 + 1) - special.gammaln(k + 1)
                - stats.poisson.logcdf(k, lam))
    f = batched_logp_fn(n, k, alpha, 1.0)
    got = f(np.stack([z, z[:, [3, 2, 0, 1]], z[[2, 0, 1]]]))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_non_binary_value_has_zero_mass():
    f = batched_logp_fn(2, 2, 1.0, 1.0)
    assert np.isneginf(f(np.array([[[2, 0], [0, 0]]])))[0]


def test_logp_differentiable_in_alpha_beta():
    a, b = pt.dscalar("a"), pt.dscalar("b")
    rv = pmi.IBP.dist(a, b, shape=(4, 3))
    z = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]])
    lp = pm.logp(rv, z)
    f = pytensor.function([a, b], [lp, *pytensor.grad(lp, [a, b])])
    val, ga, gb = f(1.7, 0.8)
    eps = 1e-6
    np.testing.assert_allclose(ga, (f(1.7 + eps, 0.8)[0] - f(1.7 - eps, 0.8)[0]) / (2 * eps),
                               rtol=1e-5)
    np.testing.assert_allclose(gb, (f(1.7, 0.8 + eps)[0] - f(1.7, 0.8 - eps)[0]) / (2 * eps),
                               rtol=1e-5)


@pytest.mark.parametrize("n,k,alpha,beta", [(2, 2, 2.0, 1.0), (3, 2, 1.0, 1.0), (2, 3, 1.5, 2.0)])
@pytest.mark.parametrize("path", ["numba", "python"])
def test_draws_match_pmf(n, k, alpha, beta, path):
    """χ² of draw frequencies over every labelled matrix against the enumerated pmf."""
    n_draws = 20000
    if path == "numba":
        draws = pm.draw(pmi.IBP.dist(alpha, beta, shape=(n, k)), draws=n_draws, random_seed=11)
    else:
        draws = IBPRV.rng_fn(np.random.default_rng(11), alpha, beta, n, k, size=(n_draws,))
    mats = all_binary_matrices(n, k)
    pmf = np.exp(batched_logp_fn(n, k, alpha, beta)(mats))
    counts = np.bincount(codes(draws), minlength=len(mats))
    res = chi2_pooled(counts[codes(mats)], n_draws * pmf)
    assert res.pvalue > 1e-3, res


def test_prior_moments_untruncated():
    """E[K+] = α H_N, K+ ~ Poisson(α H_N), row sums ~ Poisson(α) when K_max is not binding."""
    n, alpha, k_max = 10, 2.0, 60
    draws = pm.draw(pmi.IBP.dist(alpha, shape=(n, k_max)), draws=4000, random_seed=3)
    kplus = (draws.sum(axis=1) > 0).sum(axis=1)
    lam = alpha * sum(1 / i for i in range(1, n + 1))
    z = (kplus.mean() - lam) / np.sqrt(lam / len(kplus))
    assert abs(z) < 4
    vals = np.arange(kplus.max() + 1)
    res = chi2_pooled(np.bincount(kplus), len(kplus) * stats.poisson.pmf(vals, lam))
    assert res.pvalue > 1e-3
    rows = draws.sum(axis=2)[:, 0]  # one row per draw (rows within a draw are dependent)
    vals = np.arange(rows.max() + 1)
    res = chi2_pooled(np.bincount(rows), len(rows) * stats.poisson.pmf(vals, alpha))
    assert res.pvalue > 1e-3
    assert abs(draws.sum(axis=(1, 2)).mean() / n - alpha) < 4 * np.sqrt(alpha / n / len(draws)) * 3


def test_truncated_kplus_law():
    """With a binding K_max, K+ follows the Poisson(α H_N) law truncated to 0..K_max."""
    n, alpha, k_max = 10, 2.0, 4
    draws = pm.draw(pmi.IBP.dist(alpha, shape=(n, k_max)), draws=6000, random_seed=5)
    kplus = (draws.sum(axis=1) > 0).sum(axis=1)
    lam = alpha * sum(1 / i for i in range(1, n + 1))
    pmf = stats.poisson.pmf(np.arange(k_max + 1), lam)
    pmf /= pmf.sum()
    res = chi2_pooled(np.bincount(kplus, minlength=k_max + 1), len(kplus) * pmf)
    assert res.pvalue > 1e-3


def test_batched_alpha_and_support_point():
    d = pm.draw(pmi.IBP.dist(np.array([0.1, 8.0]), shape=(2, 30, 20)), draws=200, random_seed=2)
    assert d.shape == (200, 2, 30, 20)
    ones = d.sum(axis=(2, 3)).mean(axis=0)
    assert ones[0] < ones[1]
    with pm.Model(coords={"obs": range(4), "feature": range(3)}) as m:
        pmi.IBP("Z", 2.0, dims=("obs", "feature"))
    ip = m.initial_point()
    assert ip["Z"].shape == (4, 3) and not ip["Z"].any()
    assert m["Z"].dtype == "int8" and ip["Z"].dtype == np.int8  # one byte per entry


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(alpha=2.0, shape=(5,)), "N x K_max"),
        (dict(alpha=2.0, shape=(5, 0)), "K_max >= 1"),
        (dict(alpha=-1.0, shape=(5, 3)), "alpha > 0"),
        (dict(alpha=1.0, beta=0.0, shape=(5, 3)), "beta > 0"),
        (dict(alpha=np.nan, shape=(5, 3)), "alpha > 0"),
        (dict(alpha=1.0), "shape"),
        (dict(alpha=1.0, shape=(4.5, 3)), "integer N"),
        (dict(alpha=1.0, shape=(4, 3.7)), "integer K_max"),
        (dict(alpha=1.0, shape=(True, 3)), "integer N"),
        (dict(alpha=np.array([1.0, 2.0]), shape=(150, 10)), "alpha is one number for the "
                                                               "whole N x K_max matrix"),
        (dict(alpha=1.0, beta=np.ones(3), shape=(2, 5, 4)), "beta is one number"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pmi.IBP.dist(**kwargs)


@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (4, 2), (4, 5)])
def test_logp_of_a_value_of_another_shape_is_an_error(shape):
    """The logp reads N and K_max from the distribution: a value of another shape is an error
    (it was a finite number or +inf)."""
    d = pmi.IBP.dist(1.0, shape=(4, 3))
    for value in (np.zeros(shape, dtype=np.int8), np.ones(shape, dtype=np.int8)):
        with pytest.raises(Exception, match=r"shape \(N, K_max\)"):
            pm.logp(d, value).eval()


def test_batched_logp_is_the_logp_of_each_matrix():
    """Batched matrices (their draws are tested above) have a logp per matrix, in a model too."""
    rng = np.random.default_rng(3)
    v = (rng.random((2, 4, 3)) < 0.4).astype(np.int8)
    lp = pm.logp(pmi.IBP.dist(np.array([1.0, 2.0]), shape=(2, 4, 3)), v).eval()
    one = [pm.logp(pmi.IBP.dist(a, shape=(4, 3)), v[i]).eval() for i, a in enumerate([1.0, 2.0])]
    np.testing.assert_allclose(lp, one)
    with pm.Model() as m:
        pmi.IBP("Z", 1.5, shape=(2, 4, 3))
    total = m.compile_logp()({"Z": v})
    np.testing.assert_allclose(
        total, sum(pm.logp(pmi.IBP.dist(1.5, shape=(4, 3)), v[i]).eval() for i in range(2)))


@pytest.mark.parametrize("where", ["observed", "initval"])
def test_an_observed_or_initial_value_of_another_shape_is_refused(where):
    with pm.Model():
        with pytest.raises(pmi.DataError, match=r"has shape \(30, 7\); the variable has shape"):
            pmi.IBP("Z", 1.0, shape=(30, 6), **{where: np.ones((30, 7))})


def test_symbolic_invalid_alpha_follows_pymc_convention():
    a = pt.dscalar("a")
    lp = pm.logp(pmi.IBP.dist(a, shape=(2, 2)), np.zeros((2, 2), dtype=np.int64))
    f = pytensor.function([a], lp)
    with pytest.raises(Exception, match="alpha > 0"):
        f(-1.0)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 4 may bind
def test_model_prior_predictive_and_sample():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    with pm.Model(coords={"obs": range(12), "feature": range(4), "dim": range(3)}):
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("X", Z @ A, sigma, observed=X, dims=("obs", "dim"))
        prior = pm.sample_prior_predictive(30, random_seed=1)
        assert prior["prior"]["Z"].shape == (1, 30, 12, 4)
        assert set(np.unique(prior["prior"]["Z"].values)) <= {0, 1}
        idata = pm.sample(
            draws=30, tune=30, chains=1, random_seed=1, progressbar=False,
            compute_convergence_checks=False,
        )
    assert idata["posterior"]["Z"].shape == (1, 30, 12, 4)


# ---------------------------------------------------------------------------------------------
# stick-breaking
# ---------------------------------------------------------------------------------------------
def test_stick_breaking_logp_change_of_variables():
    """logp(π) = Σ log Beta(v_k; α, 1) - log|∂π/∂v| with v_k = π_k/π_{k-1}."""
    alpha, k = 1.7, 5
    rv = pmi.IBPStickBreaking.dist(alpha, shape=(k,))
    rng = np.random.default_rng(4)
    for _ in range(5):
        v = rng.beta(alpha, 1.0, size=k)
        pi = np.cumprod(v)
        prev = np.concatenate([[1.0], pi[:-1]])
        expected = stats.beta.logpdf(v, alpha, 1.0).sum() - np.log(prev).sum()
        np.testing.assert_allclose(pm.logp(rv, pi).eval(), expected, rtol=1e-10)
    assert np.isneginf(pm.logp(rv, np.array([0.5, 0.6, 0.1, 0.05, 0.01])).eval())


def test_stick_breaking_transform_roundtrip_and_jacobian():
    from pymc_ibp.distributions.stick_breaking import stick_breaking_transform as tr

    y = pt.dvector("y")
    back = tr.backward(y)
    jac = pytensor.gradient.jacobian(back, y)
    f = pytensor.function([y], [back, tr.forward(back), tr.log_jac_det(y), jac])
    y0 = np.random.default_rng(0).normal(size=4)
    pi, y1, ljd, J = f(y0)
    assert np.all(np.diff(pi) <= 0) and np.all((pi > 0) & (pi < 1))
    np.testing.assert_allclose(y1, y0, atol=1e-10)
    np.testing.assert_allclose(ljd, np.log(abs(np.linalg.det(J))), rtol=1e-10)


def test_stick_breaking_draws_mean():
    alpha, k = 2.0, 4
    d = pm.draw(pmi.IBPStickBreaking.dist(alpha, shape=(k,)), draws=20000, random_seed=1)
    assert np.all(np.diff(d, axis=1) <= 0)
    target = (alpha / (1 + alpha)) ** np.arange(1, k + 1)
    se = d.std(axis=0) / np.sqrt(len(d))
    assert np.all(np.abs(d.mean(axis=0) - target) < 4 * se)


def test_stick_breaking_nuts_recovers_prior_mean():
    alpha, k = 2.0, 4
    with pm.Model():
        pmi.IBPStickBreaking("pi", alpha, shape=(k,))
        idata = pm.sample(
            draws=1500, tune=500, chains=2, random_seed=7, progressbar=False,
            compute_convergence_checks=False,
        )
    import arviz as az

    post = idata["posterior"]["pi"]
    mean = post.mean(("chain", "draw")).values
    mcse = az.mcse(idata, var_names=["pi"])["pi"].values
    target = (alpha / (1 + alpha)) ** np.arange(1, k + 1)
    assert np.all(np.abs(mean - target) < 4 * mcse + 1e-3), (mean, target, mcse)


def test_stick_breaking_bernoulli_model():
    with pm.Model(coords={"obs": range(8), "feature": range(5)}):
        pi = pmi.IBPStickBreaking("pi", 2.0, dims="feature")
        pm.Bernoulli("Z", p=pi, dims=("obs", "feature"))
        prior = pm.sample_prior_predictive(10, random_seed=1)
    assert prior["prior"]["Z"].shape == (1, 10, 8, 5)


def test_stick_breaking_bad_input():
    with pytest.raises(ValueError, match="alpha > 0"):
        pmi.IBPStickBreaking.dist(-1.0, shape=(3,))
    with pytest.raises(ValueError, match="K"):
        pmi.IBPStickBreaking.dist(1.0)


def test_initval_of_any_integer_dtype_becomes_int8():
    """A user's binary start of any dtype is stored as the variable's int8 (PyTensor would
    refuse an int64 array for an int8 variable); a non-binary one is refused, naming it."""
    from pymc_ibp.exceptions import DataError

    start = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.int64)
    with pm.Model() as m:
        pmi.IBP("Z", 1.0, shape=(3, 2), initval=start)
    ip = m.initial_point()
    assert ip["Z"].dtype == np.int8
    np.testing.assert_array_equal(ip["Z"], start)
    with pm.Model(), pytest.raises(DataError, match="initial value .* binary"):
        pmi.IBP("Z", 1.0, shape=(3, 2), initval=start * 2)
