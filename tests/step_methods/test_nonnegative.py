"""pmi.NonNegativeFeatureGibbs: exact posterior of non-negative features (grid integration),
automatic assignment, the far tail, bad wiring."""

import numpy as np
import pymc as pm
import pytest
from pymc.sampling.mcmc import assign_step_methods
from scipy import special

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from tests._helpers import chi2_pooled

Z_FIXED = np.array([[1, 0], [1, 1], [0, 1], [1, 1], [0, 0]])
X_TINY = np.array([0.9, 1.3, 0.2, 1.1, 0.4])
OFFSET = 0.1
SX = 0.5


def tiny_model(prior, transform="log"):
    kw = {} if transform == "log" else {"default_transform": None}
    with pm.Model() as model:
        if prior == "exponential":
            A = pm.Exponential("A", 1.5, shape=(2, 1), **kw)
        else:
            A = pm.HalfNormal("A", 0.8, shape=(2, 1), **kw)
        pm.Normal("X", mu=Z_FIXED @ A + OFFSET, sigma=SX, observed=X_TINY[:, None])
    return model


def grid_posterior(prior, n=400, top=3.0):
    """p(a1, a2 | X) on an n x n grid of cell centres in [0, top]^2."""
    g = (np.arange(n) + 0.5) * top / n
    a1, a2 = np.meshgrid(g, g, indexing="ij")
    mean = Z_FIXED[:, 0, None, None] * a1 + Z_FIXED[:, 1, None, None] * a2 + OFFSET
    lp = -0.5 * (((X_TINY[:, None, None] - mean) / SX) ** 2).sum(axis=0)
    lp += -1.5 * (a1 + a2) if prior == "exponential" else -0.5 * (a1**2 + a2**2) / 0.8**2
    p = np.exp(lp - special.logsumexp(lp))
    return g, p


@pytest.mark.parametrize("transform", ["log", None])
@pytest.mark.parametrize("prior", ["exponential", "halfnormal"])
def test_joint_draws_match_the_grid_posterior(prior, transform):
    """Thinned sweeps against p(a1, a2 | X) integrated on a grid: chi-square over a 6 x 6
    grid of cells at the marginal sextiles (the two elements are correlated a posteriori)."""
    model = tiny_model(prior, transform)
    with model:
        step = pmi.NonNegativeFeatureGibbs([model["A"]])
    step.rng = np.random.default_rng(4)
    g, p = grid_posterior(prior)
    name = step.a_name
    point = model.initial_point()
    draws = []
    for it in range(30_000):
        point, _ = step.step(point)
        if it % 3 == 0:
            a = point[name].ravel()
            draws.append(np.exp(a) if transform == "log" else a)
    draws = np.array(draws)
    edges = []
    for axis in (1, 0):
        cdf = np.cumsum(p.sum(axis=axis))
        edges.append(np.concatenate([[0], g[np.searchsorted(cdf, np.arange(1, 6) / 6)], [np.inf]]))
    cell = np.stack([np.searchsorted(edges[i], g, side="right") - 1 for i in (0, 1)])
    expected = np.zeros((6, 6))
    np.add.at(expected, (cell[0][:, None], cell[1][None, :]), p)
    observed = np.zeros((6, 6))
    i = np.searchsorted(edges[0], draws[:, 0], side="right") - 1
    j = np.searchsorted(edges[1], draws[:, 1], side="right") - 1
    np.add.at(observed, (i, j), 1)
    res = chi2_pooled(observed.ravel(), expected.ravel() * len(draws))
    assert res.pvalue > 1e-3, res


def test_far_tail_is_exact_and_finite():
    """Data 30 posterior standard deviations below the bound: every draw finite, the
    feature's conditional mean is that of the truncated Gaussian (mean*/sd = -30)."""
    X = np.full((25, 1), -30.0 * SX / 5.0 + 1.5 * SX**2 / 25)  # mean* / sd = -30 exactly
    with pm.Model() as model:
        A = pm.Exponential("A", 1.5, shape=(1, 1))
        pm.Normal("X", mu=np.ones((25, 1), dtype=np.int8) @ A, sigma=SX, observed=X)
        step = pmi.NonNegativeFeatureGibbs([A])
    step.rng = np.random.default_rng(0)
    point = model.initial_point()
    a = []
    for _ in range(4000):
        point, _ = step.step(point)
        a.append(np.exp(point["A_log__"][0, 0]))
    a = np.array(a)
    sd = SX / 5.0
    assert np.all(np.isfinite(a)) and np.all(a > 0)
    # E[a] = sd * (phi(30)/Q(30) - 30) ~ sd / 30 (Mills ratio)
    mills = sd * (1.0 / special.erfcx(30 / np.sqrt(2)) * np.sqrt(2 / np.pi) - 30.0)
    assert abs(a.mean() / mills - 1) < 0.1


def test_assigned_for_exponential_and_halfnormal_features_with_any_binary_matrix():
    rng = np.random.default_rng(1)
    X = rng.exponential(size=(12, 3))
    for dist in (pm.Exponential, pm.HalfNormal):
        with pm.Model() as model:
            Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=4, shape=(12, 3))
            A = dist("A", 1.0, shape=(3, 3))
            s = pm.HalfNormal("s", 1.0)
            pm.Normal("X", mu=Z @ A, sigma=s, observed=X)
            _, sel = assign_step_methods(model)
        got = {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}
        assert got["NonNegativeFeatureGibbs"] == ["A_log__"]
        assert got["NUTS"] == ["s_log__"]
    with pm.Model() as model:  # A also used elsewhere: not this step's pattern
        Z = pmi.IBP("Z", 1.0, shape=(12, 3))
        A = pm.Exponential("A", 1.0, shape=(3, 3))
        pm.Normal("X", mu=Z @ A, sigma=1.0, observed=X)
        pm.Normal("Y", mu=A.sum(), sigma=1.0, observed=0.0)
        _, sel = assign_step_methods(model)
        assert "NonNegativeFeatureGibbs" not in {k.__name__ for k in sel}
        with pytest.raises(ModelPatternError, match="other than through a Normal mean"):
            pmi.NonNegativeFeatureGibbs([A])


def test_unused_features_are_drawn_from_the_prior_and_stats_are_reported():
    rng = np.random.default_rng(2)
    Z = np.zeros((10, 2), dtype=np.int8)
    Z[:, 0] = 1
    with pm.Model() as model:
        A = pm.Exponential("A", 2.0, shape=(2, 2))
        pm.Normal("X", mu=Z @ A, sigma=1.0, observed=rng.normal(1.0, 1.0, size=(10, 2)))
        step = pmi.NonNegativeFeatureGibbs([A])
    step.rng = np.random.default_rng(5)
    point = model.initial_point()
    unused = []
    for _ in range(5000):
        point, stats = step.step(point)
        unused.append(np.exp(point["A_log__"][1]))
    unused = np.array(unused)
    assert abs(unused.mean() - 0.5) < 0.03 and abs(unused.std() - 0.5) < 0.03
    assert set(stats[0]) == {"ibp_features_at_zero"}


def test_exponential_rate_is_assigned_its_conjugate_update():
    X = np.random.default_rng(3).exponential(size=(8, 2))
    with pm.Model() as model:
        lam = pm.Gamma("lam", 2.0, 1.0)
        Z = pmi.IBP("Z", 1.0, shape=(8, 3))
        A = pm.Exponential("A", lam, shape=(3, 2))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
        _, sel = assign_step_methods(model)
        step = pmi.ExponentialRateGibbs([lam])
    got = {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}
    assert got["ExponentialRateGibbs"] == ["lam_log__"]
    assert step.count == 6 and (step.a, step.b) == (2.0, 1.0)
    with pm.Model():  # lam also used elsewhere: not conjugate
        lam = pm.Gamma("lam", 2.0, 1.0)
        pm.Exponential("A", lam, shape=(3, 2))
        pm.Normal("Y", lam, 1.0, observed=0.3)
        with pytest.raises(ModelPatternError, match="only as the rate"):
            pmi.ExponentialRateGibbs([lam])


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_pm_sample_records_the_stats_of_steps_after_a_stat_free_step():
    """A step without stats still fills its (empty) stats slot: the steps after it keep
    their stats (regression: ExponentialRateGibbs returned no slot, shifting the others)."""
    X = np.abs(np.random.default_rng(0).normal(size=(20, 4)))
    with pm.Model():
        lam = pm.Gamma("lam", 1.0, 1.0)
        Z = pmi.IBP("Z", 1.0, shape=(20, 4))
        A = pm.Exponential("A", lam, shape=(4, 4))
        pm.Normal("X", Z @ A, 1.0, observed=X)
        steps = [pmi.ExponentialRateGibbs([lam]), pmi.NonNegativeFeatureGibbs([A]),
                 pmi.IBPGibbs([Z])]
        idata = pm.sample(step=steps, tune=2, draws=3, chains=1, progressbar=False,
                          compute_convergence_checks=False)
    assert {"ibp_features_at_zero", "ibp_n_active"} <= set(idata.sample_stats)
