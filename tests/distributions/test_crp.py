"""pmi.CRP: a proper pmf over all labellings, exact draws, E[K], gradient in alpha, errors."""

import itertools
import math

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_ibp as pmi
from pymc_ibp.distributions.crp import crp_expected_tables, log_stirling1
from tests._helpers import chi2_pooled


def logp_fn(n, l_max, alpha):
    x = pt.lvector("x")
    return pm.compile([x], pm.logp(pmi.CRP.dist(alpha, l_max=l_max, shape=n), x))


def labellings(n, l_max):
    return np.array(list(itertools.product(range(l_max), repeat=n)), dtype=np.int64)


def test_stirling_numbers_of_the_first_kind():
    # |s(6, k)|, k = 0..6: 0 120 274 225 85 15 1
    np.testing.assert_allclose(np.exp(log_stirling1(6, 6)), [0, 120, 274, 225, 85, 15, 1],
                               rtol=1e-12)
    # truncated row, and large n stays finite: sum_k |s(n, k)| = n!
    row = log_stirling1(200, 200)
    assert np.isclose(np.logaddexp.reduce(row[1:]), math.lgamma(201.0))
    np.testing.assert_allclose(log_stirling1(200, 5), row[:6])


@pytest.mark.parametrize("n,l_max,alpha", [(4, 3, 0.7), (4, 4, 2.5), (3, 5, 1.3), (5, 2, 0.4),
                                           (5, 3, 3.0)])
def test_pmf_sums_to_one_over_all_labellings(n, l_max, alpha):
    f = logp_fn(n, l_max, alpha)
    lp = np.array([f(c) for c in labellings(n, l_max)])
    assert np.isclose(np.exp(lp).sum(), 1.0, atol=1e-10)
    # exchangeable in the observations and the labels: a function of the block sizes only
    c = np.array([0, 0, 1] + [2] * (n - 3))[:n] % l_max
    perm = np.random.default_rng(0).permutation(n)
    assert np.isclose(f(c), f(c[perm]))
    relabel = np.random.default_rng(1).permutation(l_max)
    assert np.isclose(f(c), f(relabel[c]))


@pytest.mark.parametrize("n,l_max,alpha", [(4, 3, 0.7), (5, 2, 2.0), (4, 6, 1.5)])
def test_draws_match_the_pmf(n, l_max, alpha):
    """pm.draw of pmi.CRP against the enumerated pmf (chi-square over all labellings),
    truncated (L_max < N: the Stirling-conditioned sampler) and not."""
    vals = labellings(n, l_max)
    f = logp_fn(n, l_max, alpha)
    probs = np.exp([f(c) for c in vals])
    draws = pm.draw(pmi.CRP.dist(alpha, l_max=l_max, shape=(30_000, n)), random_seed=3)
    assert draws.dtype == np.int64
    index = {tuple(v): i for i, v in enumerate(vals)}
    counts = np.bincount([index[tuple(d)] for d in draws], minlength=len(vals))
    res = chi2_pooled(counts, probs * len(draws))
    assert res.pvalue > 1e-3, res


def test_expected_number_of_tables():
    """Untruncated (L_max = N, the default): E[K] = sum_i alpha / (alpha + i - 1); the sample
    mean of 4000 draws is within 4 standard errors."""
    for alpha, n in [(0.5, 50), (3.0, 200)]:
        draws = pm.draw(pmi.CRP.dist(alpha, shape=(4000, n)), random_seed=7)
        K = np.array([np.unique(d).size for d in draws])
        assert abs(K.mean() - crp_expected_tables(alpha, n)) < 4 * K.std() / np.sqrt(K.size)
    # truncated: at most L_max occupied labels, all in range
    draws = pm.draw(pmi.CRP.dist(5.0, l_max=4, shape=(200, 100)), random_seed=8)
    assert draws.min() >= 0 and draws.max() < 4
    assert max(np.unique(d).size for d in draws) <= 4


def test_gradient_in_alpha():
    """d logp / d alpha by PyTensor equals a finite difference, truncated and not."""
    a = pt.dscalar("a")
    c = np.array([0, 0, 3, 1, 1, 1, 3, 0])
    for l_max in (4, 8, 20):
        lp = pm.logp(pmi.CRP.dist(a, l_max=l_max, shape=8), c)
        f = pytensor.function([a], [lp, pt.grad(lp, a)])
        for alpha in (0.3, 2.0):
            v, g = f(alpha)
            h = 1e-6
            fd = (f(alpha + h)[0] - f(alpha - h)[0]) / (2 * h)
            assert np.isfinite(v) and np.isclose(g, fd, rtol=1e-5), (l_max, alpha, g, fd)


def test_out_of_range_labels_and_bad_parameters():
    f = logp_fn(4, 3, 1.0)
    assert f(np.array([0, 1, 2, 3])) == -np.inf
    assert f(np.array([0, -1, 2, 2])) == -np.inf
    with pytest.raises(ValueError, match="alpha > 0"):
        pmi.CRP.dist(-1.0, shape=4)
    with pytest.raises(ValueError, match="l_max >= 1"):
        pmi.CRP.dist(1.0, l_max=0, shape=4)
    with pytest.raises(ValueError, match="shape=N"):
        pmi.CRP.dist(1.0)
    with pytest.raises(ValueError, match="the last"):
        pmi.CRP.dist(1.0, shape=())
    # batched labels: each row is one labelling (one-hot counts path)
    x = pt.lmatrix("x")
    f2 = pm.compile([x], pm.logp(pmi.CRP.dist(1.0, l_max=3, shape=(2, 4)), x))
    rows = np.array([[0, 0, 1, 2], [1, 1, 1, 1]])
    np.testing.assert_allclose(f2(rows), [f(rows[0]), f(rows[1])])


def test_in_a_model_with_dims_and_a_free_alpha():
    """dims give N; the support point (one table) has a finite logp; prior predictive draws
    are labellings; alpha ~ Gamma is differentiable through the CRP's logp."""
    with pm.Model(coords={"obs": range(7)}) as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        c = pmi.CRP("c", alpha, l_max=5, dims="obs")
    assert c.type.shape == (7,) or model["c"].eval().shape == (7,)
    ip = model.initial_point()
    np.testing.assert_array_equal(ip["c"], np.zeros(7))
    assert np.isfinite(model.compile_logp()(ip))
    dlogp = model.compile_dlogp(vars=[model["alpha"]])
    assert np.all(np.isfinite(dlogp(ip)))
    with model:
        prior = pm.sample_prior_predictive(draws=50, random_seed=1)
    labels = prior["prior"]["c"].values
    assert labels.shape == (1, 50, 7) and labels.min() >= 0 and labels.max() < 5
