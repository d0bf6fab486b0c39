"""The accelerated sampler in the per-entry log-odds prior mode: Bernoulli Z, e.g. under the
stick-breaking IBP (no births; every slot is a feature)."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp import kernels
from tests._helpers import ENUM_X, chi2_pooled, codes, exact_posterior, run_chain

P = np.array([[0.7, 0.4, 0.15], [0.7, 0.4, 0.15], [0.6, 0.3, 0.9]])  # per-entry probabilities


def bernoulli_model(X, p, sigma_x=0.5, sigma_a=1.0):
    n, d = X.shape
    with pm.Model() as model:
        Z = pm.Bernoulli("Z", p=p, shape=p.shape)
        A = pm.Normal("A", 0.0, sigma_a, shape=(p.shape[1], d))
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)
    return model


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
# complete data (16 s) in the slow suite: with the missing entry two of the three rows still take
# the complete-data update
@pytest.mark.parametrize("missing", [pytest.param(False, marks=pytest.mark.slow), True])
def test_exact_posterior_bernoulli_prior(missing):
    """Visit frequencies of the 512 labelled 3 x 3 matrices match the exact posterior
    ∝ ∏ Bernoulli(z_nk; p_nk) · p(X | Z) (A integrated out), with and without a NaN entry."""
    X = ENUM_X.copy()
    if missing:
        X[1, 0] = np.nan

    def log_prior(mats):
        return np.where(mats == 1, np.log(P), np.log1p(-P)).sum(axis=(1, 2))

    mats, post = exact_posterior(X, 3, None, 0.5, 1.0, log_prior=log_prior)
    model = bernoulli_model(X, P)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]])
    assert not step.mode.counts and step.split_merge == 0
    # seed 4: with the start search's longer schedule, seed 3's stream gave p = 3e-4 (18 seeds
    # 3-20 of the same test: that one, then 0.095-0.96)
    draws, st = run_chain(step, model, 30000, seed=4, thin=3)
    assert all(s["ibp_births"] == 0 and s["ibp_deaths"] == 0 for s in st)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


def test_logodds_sweep_matches_ibp_sweep_conditionals_when_equal():
    """With prior log-odds 0 and p = 1/2 the log-odds mode visits every slot: a sweep from a
    state with an empty column can switch it on (no births needed)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    Z = np.zeros((20, 4), dtype=np.int8)
    m = Z.sum(axis=0)
    lo = np.zeros((20, 4))
    kernels.accelerated_sweep(rng, Z, X, m, kernels.noise_blocks(0.25, 1.0, 3),
                              kernels.SweepPrior.entries(lo), 5)
    assert Z.sum() > 0 and np.array_equal(m, Z.sum(axis=0))


def test_stick_breaking_model_gets_the_fast_step_and_recovers_features():
    """pmi.IBPStickBreaking + Bernoulli Z + linear-Gaussian likelihood: pm.sample assigns
    AcceleratedGibbs to Z and A (not BinaryGibbsMetropolis), NUTS to the sticks, the slice
    step to the scales; the posterior recovers the noise scale and the noise-free signal."""
    data = pmi.datasets.block_images(200, noise=0.5, seed=2)
    k = 8
    coords = {"obs": range(200), "feature": range(k), "dim": range(36)}
    with pm.Model(coords=coords):
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        pi = pmi.IBPStickBreaking("pi", alpha, dims="feature")
        Z = pm.Bernoulli("Z", p=pi, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X, dims=("obs", "dim"))
        idata = pm.sample(tune=150, draws=100, chains=1, random_seed=4, progressbar=False,
                          compute_convergence_checks=False)
    stats_ = idata["sample_stats"]
    assert "ibp_log_joint" in stats_ and "diverging" in stats_  # AcceleratedGibbs + NUTS(pi)
    assert "ibp_scale_evals" in stats_
    sx = idata["posterior"]["sigma_x"].values.ravel()
    assert 0.45 < sx.mean() < 0.56
    # the posterior reconstructs the noise-free signal (noise variance 0.25)
    A_d = idata["posterior"]["A"].values[0, -20:]
    Z_d = idata["posterior"]["Z"].values[0, -20:]
    signal = data.Z @ data.A
    mse = np.mean([np.mean((z @ a - signal) ** 2) for z, a in zip(Z_d, A_d, strict=True)])
    assert mse < 0.05, mse


@pytest.mark.parametrize("prior", ["sticks", "small"])
def test_prior_started_chain_searches_for_the_structure(prior):
    """A stick-breaking chain without a given Z starts from the annealed start search (run
    with the IBP's counts and births at the mass the sticks imply), not from a prior draw:
    on 200 block images its start explains the data as well as the true Z does, features in
    decreasing order of use.  The search scores its candidates under the IBP prior, not the
    model's current per-entry probabilities ("small": p = 0.002, as the dependent IBP's
    starting processes give, which would make the search's greedy repair delete every
    feature)."""
    data = pmi.datasets.block_images(200, noise=0.5, seed=4)
    with pm.Model() as model:
        pi = (pmi.IBPStickBreaking("pi", 3.0, shape=(8,)) if prior == "sticks"
              else np.full(8, 0.002))
        Z = pm.Bernoulli("Z", p=pi, shape=(200, 8))
        A = pm.Normal("A", 0.0, 1.0, shape=(8, 36))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X)
        step = pmi.AcceleratedGibbs([Z, A])
    point = model.initial_point()
    step.setup_chain(np.random.default_rng(2), 0, 10)
    step.update.noise(point)
    noise = kernels.noise_blocks(0.25, 1.0, 36)
    assert step.search.will_search(point["Z"])
    start, *_ = step.search.start(step.rng, point["Z"].astype(np.int8), data.X, noise,
                                  n_tune=step.update.n_tune)

    def loglik(Z):
        act = np.flatnonzero(Z.sum(axis=0) > 0)
        G, RX = kernels.suff_stats(Z.astype(np.int8), data.X, act)
        return kernels.collapsed_loglik(G, RX, kernels.block_sq_norms(data.X, noise), 200,
                                        noise)

    truth = loglik(np.hstack([data.Z, np.zeros((200, 4), dtype=np.int64)]))
    assert loglik(start) > truth - 20.0, (loglik(start), truth)
    assert np.all(np.diff(start.sum(axis=0)) <= 0)
    draw = step.mode.draw(np.random.default_rng(3))  # what the chain started from before
    assert loglik(draw) < truth - 1000.0


def test_default_z_still_counts_as_prior_start_after_the_probabilities_moved():
    """PyMC's default Z of a per-entry prior is the support point at the *initial*
    probabilities (``1[p >= 1/2]``).  Another step may move them before Z's first update (the
    dependent IBP's DependentIBPGibbs updates the sticks and processes first in the sweep);
    that Z is then no longer the support point at the current probabilities but the chain
    still starts from the prior and runs the start search (it did not: dIBP chains then
    started from a single feature)."""
    with pm.Model() as model:
        pi = pmi.IBPStickBreaking("pi", 3.0, shape=(6,))
        Z = pm.Bernoulli("Z", p=pi, shape=(40, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 5))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=np.zeros((40, 5)))
        step = pmi.AcceleratedGibbs([Z, A])
    point = model.initial_point()
    z0 = point["Z"].astype(np.int8)
    step.update.noise(point)
    assert step.mode.is_support_point(z0) and step.search.will_search(z0)
    moved = dict(point)
    moved[model.rvs_to_values[pi].name] = model.rvs_to_transforms[pi].forward(
        np.linspace(0.99, 0.95, 6)).eval()  # every stick above 1/2: the support point is all ones
    step.update.noise(moved)
    assert not step.mode.is_support_point(z0)
    assert step.search.will_search(z0)
    # the support point at the current probabilities (PyMC's start of Z when the user gave
    # the sticks' start and not Z's) is a prior start too
    assert step.search.will_search(np.ones_like(z0))
    other = z0.copy()
    other[0, 0] = 1 - other[0, 0]  # any other Z is the user's: kept
    assert not step.search.will_search(other)


def test_start_search_never_breaks_a_hard_zero_of_the_prior():
    """A per-entry prior with probabilities exactly 0 (e.g. a noisy-or feature without an
    active cause): a start search (run under the IBP's counts, blind to them) whose result
    puts a one where the prior forbids it is dropped and the chain keeps its Z."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=4)
    p = np.zeros((60, 6))
    p[:, 0] = 0.5  # one free column; the data have four features
    with pm.Model() as model:
        Z = pm.Bernoulli("Z", p=p, shape=(60, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 36))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X)
        step = pmi.AcceleratedGibbs([Z, A])
    point = model.initial_point()
    step.setup_chain(np.random.default_rng(2), 0, 10)
    noise = step.update.noise(point)
    z0 = point["Z"].astype(np.int8)
    assert step.search.will_search(z0)
    start, *_ = step.search.start(step.rng, z0, data.X, noise, n_tune=step.update.n_tune)
    assert np.isfinite(step.mode.log_prior(start))
    np.testing.assert_array_equal(start, z0)
