"""pmi.CRPGibbs: exact label conditionals (enumeration), automatic assignment, errors."""

import itertools

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from tests._helpers import chi2_pooled, mcse_mean


def mixture(X, l_max, alpha=1.2, mu=None):
    with pm.Model() as model:
        m = pm.Normal("mu", 0.0, 3.0, shape=l_max, initval=mu)
        c = pmi.CRP("c", alpha, l_max=l_max, shape=len(X))
        pm.Normal("X", mu=m[c], sigma=1.0, observed=X)
    return model


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # l_max = 3 < N by design
def test_labels_sample_their_exact_conditional():
    """With mu held fixed, sweeps of CRPGibbs visit the labellings with the enumerated
    p(c | mu, X) ∝ CRP(c) prod_n N(x_n; mu_{c_n}, 1) (chi-square over all 3^4 labellings;
    the empty labels' weight alpha / (L_max - K) included)."""
    X = np.array([-1.0, 0.2, 0.4, 2.5])
    mu = np.array([-1.5, 0.5, 2.0])
    model = mixture(X, 3, mu=mu)
    with model:
        step = pmi.CRPGibbs([model["c"]])
    step.rng = np.random.default_rng(1)
    point = model.initial_point()
    vals = np.array(list(itertools.product(range(3), repeat=4)))
    x = pt.lvector("x")
    crp_lp = pm.compile([x], pm.logp(pmi.CRP.dist(1.2, l_max=3, shape=4), x))
    logp = np.array([crp_lp(v) - 0.5 * np.sum((X - mu[v]) ** 2) for v in vals])
    post = np.exp(logp - np.logaddexp.reduce(logp))
    index = {tuple(v): i for i, v in enumerate(vals)}
    counts = np.zeros(len(vals))
    for _ in range(20_000):
        point, stats = step.step(point)
        counts[index[tuple(point["c"])]] += 1
    res = chi2_pooled(counts, post * counts.sum())
    assert res.pvalue > 1e-3, res
    assert stats[0]["ibp_n_categories"] == np.unique(point["c"]).size


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entries_are_attributed_to_their_observations():
    """2-D data with NaN entries (PyMC's X_observed / X_unobserved): CRPGibbs adds each logp
    term to its observation's row; with the imputed entries drawn exactly given the labels
    after every sweep (data augmentation), the labels visit the enumerated p(c | mu, X_obs),
    the missing entries integrated out (chi-square over all 3^4 labellings)."""
    X = np.array([[-1.0, -1.2], [0.2, np.nan], [np.nan, 0.3], [2.5, 1.8]])
    mu = np.array([[-1.5, -1.0], [0.5, 0.2], [2.0, 2.2]])
    with pm.Model() as model:
        m = pm.Normal("mu", 0.0, 3.0, shape=(3, 2), initval=mu)
        c = pmi.CRP("c", 1.2, l_max=3, shape=4)
        pm.Normal("X", mu=m[c], sigma=1.0, observed=X)
        step = pmi.CRPGibbs([c])
    step.rng = np.random.default_rng(2)
    rng = np.random.default_rng(3)
    miss = np.isnan(X)
    point = model.initial_point()
    vals = np.array(list(itertools.product(range(3), repeat=4)))
    x = pt.lvector("x")
    crp_lp = pm.compile([x], pm.logp(pmi.CRP.dist(1.2, l_max=3, shape=4), x))
    logp = np.array([crp_lp(v) - 0.5 * np.nansum((X - mu[v]) ** 2) for v in vals])
    post = np.exp(logp - np.logaddexp.reduce(logp))
    index = {tuple(v): i for i, v in enumerate(vals)}
    counts = np.zeros(len(vals))
    for _ in range(20_000):
        point, _ = step.step(point)
        point["X_unobserved"] = mu[point["c"]][miss] + rng.standard_normal(miss.sum())
        counts[index[tuple(point["c"])]] += 1
    res = chi2_pooled(counts, post * counts.sum())
    assert res.pvalue > 1e-3, res


def test_pm_sample_assigns_it_and_finds_the_clusters():
    """A Dirichlet-process mixture in plain PyMC syntax: pm.sample picks CRPGibbs for the
    labels (NUTS for the means), and the chain finds the three clusters."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(m, 0.5, 20) for m in (-6.0, 0.0, 6.0)])
    with pm.Model():
        alpha = pm.Gamma("alpha", 2.0, 2.0)
        mu = pm.Normal("mu", 0.0, 10.0, shape=8)
        c = pmi.CRP("c", alpha, l_max=8, shape=60)
        pm.Normal("X", mu=mu[c], sigma=0.5, observed=X)
        idata = pm.sample(tune=200, draws=100, chains=1, cores=1, random_seed=3,
                          progressbar=False, compute_convergence_checks=False)
    k = idata["sample_stats"]["ibp_n_categories"].values[0]
    # the posterior puts ~0.6 on K = 3 and ~0.3 on K = 4 (an extra small cluster; 2 x 1500
    # draws with and without the split-merge moves agree); 100 draws of one chain hold
    # either as the most visited (K = 4 on another machine's floating point, seed 3: 31 %
    # K = 3, 42 % K = 4), so the test asks for most of the draws on the two
    assert k.min() >= 3 and np.mean(k <= 4) >= 0.5, np.bincount(k)
    # each row's most frequent label over the last 50 draws (a draw's extra small clusters
    # take a row or two for a while; the three clusters keep their slots)
    last = idata["posterior"]["c"].values[0, -50:]
    labels = np.array([np.bincount(col).argmax() for col in last.T])
    main = [np.bincount(labels[i * 20:(i + 1) * 20]).argmax() for i in range(3)]
    assert len(set(main)) == 3
    assert all(np.sum(labels[i * 20:(i + 1) * 20] == main[i]) >= 18 for i in range(3))


def test_refuses_models_it_cannot_handle():
    with pm.Model() as model:
        pmi.CRP("c", 1.0, l_max=3, shape=5)
    with model, pytest.raises(ModelPatternError, match="nothing to condition on"):
        pmi.CRPGibbs([model["c"]])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0, shape=3)
        c = pmi.CRP("c", 1.0, l_max=3, shape=5)
        pm.Normal("X", mu=mu[c].sum(), sigma=1.0, observed=np.zeros(5))
    with model, pytest.raises(ModelPatternError, match="does not factorise"):
        pmi.CRPGibbs([model["c"]])


@pytest.mark.parametrize("mu", [[-0.8, 0.3, 0.1], [-1.0, 0.3, 1.5]])
def test_split_merge_moves_leave_the_label_posterior_invariant(mu):
    """Exact draws of c from p(c | mu, X) (enumerated over all 3^5 labellings) pushed
    through split-merge proposals alone stay exactly distributed (chi-square), and the moves
    are accepted often enough to matter."""
    from pymc_ibp.kernels.crp import crp_split_merge

    X = np.array([-1.0, -0.6, 0.2, 0.4, 1.9])
    mu = np.array(mu)  # two nearly equal means (frequent moves), or three distinct ones
    alpha = 1.3
    vals = np.array(list(itertools.product(range(3), repeat=5)))
    x = pt.lvector("x")
    crp_lp = pm.compile([x], pm.logp(pmi.CRP.dist(alpha, l_max=3, shape=5), x))
    ll = -0.5 * (X[None, :] - mu[:, None]) ** 2
    logp = np.array([crp_lp(v) + ll[v, np.arange(5)].sum() for v in vals])
    post = np.exp(logp - np.logaddexp.reduce(logp))
    index = {tuple(v): i for i, v in enumerate(vals)}
    rng = np.random.default_rng(7)
    start = rng.choice(len(vals), size=30_000, p=post)
    counts = np.zeros(len(vals))
    accepted = 0
    for s in start:
        c = vals[s].copy()
        accepted += crp_split_merge(rng, c, ll, alpha, 3)
        counts[index[tuple(c)]] += 1
    res = chi2_pooled(counts, post * counts.sum())
    assert res.pvalue > 1e-3, res
    assert accepted > 0.03 * 3 * len(start), accepted


def test_all_labels_occupied_warns_with_the_fix():
    X = np.array([-6.0, -3.0, 0.0, 3.0, 6.0, 9.0])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0, shape=3, initval=np.array([-6.0, 0.0, 6.0]))
        c = pmi.CRP("c", 5.0, l_max=3, shape=6, initval=np.array([0, 0, 1, 1, 2, 2]))
        pm.Normal("X", mu=mu[c], sigma=0.3, observed=X)
        step = pmi.CRPGibbs([c])
    step.setup_chain(np.random.default_rng(0), tune=0, draws=1)
    with pytest.warns(pmi.TruncationWarning, match=r"l_max=3 .*Raise l_max \(e.g. to 6\)"):
        _, stats = step.step(model.initial_point())
    assert stats[0]["ibp_lmax_hit"]


@pytest.mark.parametrize("l_max", [3, 6])
def test_crp_alpha_update_keeps_the_gamma_prior(l_max):
    """Successive-conditional Geweke test of CRPAlphaGibbs (Escobar & West's auxiliary
    variable, with the truncation correction when L_max < N): alternating exact CRP draws of
    the labels given alpha with the step, alpha stays Gamma(2, rate 1.5) (KS and mean)."""
    from scipy import special, stats

    from pymc_ibp.distributions.crp import _log_s, crp_draw_core

    n, a, b = 6, 2.0, 1.5
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", a, b)
        pmi.CRP("c", alpha, l_max=l_max, shape=n)
        step = pmi.CRPAlphaGibbs([alpha])
    assert (step._log_trunc is None) == (l_max >= n)
    step.setup_chain(np.random.default_rng(7), tune=0, draws=1)
    rng = np.random.default_rng(8)
    point = model.initial_point()
    log_s = _log_s(n, l_max)
    draws = np.empty(60_000)
    for it in range(draws.size):
        value = float(step._bwd(point["alpha_log__"]))
        point["c"] = crp_draw_core(rng, value, n, l_max, log_s)
        point, _ = step.step(point)
        draws[it] = float(step._bwd(point["alpha_log__"]))
    thinned = draws[::10]
    ks = stats.kstest(thinned, stats.gamma(a, scale=1.0 / b).cdf)
    assert ks.pvalue > 1e-3, ks
    for f, exact in ((lambda x: x, a / b), (np.log, special.digamma(a) - np.log(b))):
        z = (f(draws).mean() - exact) / mcse_mean(f(draws))  # correlated draws
        assert abs(z) < 4.0, z


def test_crp_alpha_is_assigned_automatically():
    from pymc.sampling.mcmc import assign_step_methods

    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        pmi.CRP("c", alpha, l_max=4, shape=10)
        _, sel = assign_step_methods(model)
    assert {k.__name__: [v.name for v in vs] for k, vs in sel.items()}["CRPAlphaGibbs"] \
        == ["alpha_log__"]
    with pm.Model(), pytest.raises(ModelPatternError, match="only as the alpha of one pmi.CRP"):
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        pm.Normal("x", alpha, 1.0)
        pmi.CRPAlphaGibbs([alpha])
