"""NoisyOrQSlice: slice sampling of the noisy-or IBP-IBP's failure probability q
(Doshi-Velez 2009, §7.2.3) from its exact conditional given C, M and Z."""

import numpy as np
import pymc as pm
import pytest
import scipy.stats
from pymc.sampling.mcmc import assign_step_methods

import pymc_ibp as pmi


def _model(n=20, k=6, a=2.0, b=3.0, alpha=3.0):
    with pm.Model() as model:
        q = pm.Beta("q", a, b)
        pmi.noisy_or_ibp_ibp("Z", alpha, alpha, q, l_max=4, shape=(n, k))
    return model


@pytest.mark.parametrize("alpha", [1.5, 3.0])
def test_pushed_prior_draws_keep_the_prior_of_q(alpha):
    """Exact prior draws of (C, M, Z, q) moved three times by the step keep q ~ Beta(2, 3)
    (the step leaves p(q | C, M, Z) invariant, so the joint stays the prior): KS test.  The
    larger masses give rows with several parents of a feature (s > 1)."""
    model = _model(alpha=alpha)
    step = pmi.NoisyOrQSlice([model["q"]], model=model)
    step.setup_chain(np.random.default_rng(1), tune=0, draws=1)
    draws = pm.draw([model[v] for v in ("Z_C", "Z_M", "Z", "q")], draws=1500, random_seed=3)
    point = model.initial_point()
    out = np.empty(1500)
    for i, (C, M, Z, q) in enumerate(zip(*draws, strict=True)):
        pt_ = {**point, "Z_C": C, "Z_M": M, "Z": Z, "q_logodds__": np.log(q / (1 - q))}
        for _ in range(3):
            pt_, _ = step.step(pt_)
        out[i] = 1.0 / (1.0 + np.exp(-pt_["q_logodds__"]))
    res = scipy.stats.kstest(out, scipy.stats.beta(2.0, 3.0).cdf)
    assert res.pvalue > 1e-3, res
    # and the chain moved
    assert np.mean(np.abs(out - draws[3])) > 0.05


def test_chain_matches_the_numerical_conditional():
    """A long chain of q for one fixed (C, M, Z) against the conditional normalised by
    quadrature (KS on the CDF), with a prior other than uniform."""
    model = _model(n=10, k=5, a=1.5, b=1.2)
    rng = np.random.default_rng(4)
    C = (rng.random((10, 4)) < 0.5).astype(np.int8)
    M = (rng.random((4, 5)) < 0.5).astype(np.int8)
    s = C.astype(int) @ M
    Z = (rng.random(s.shape) < 1 - 0.35 ** s).astype(np.int64)
    step = pmi.NoisyOrQSlice([model["q"]], model=model)
    step.setup_chain(np.random.default_rng(5), tune=0, draws=1)
    point = {**model.initial_point(), "Z_C": C, "Z_M": M, "Z": Z}
    draws = np.empty(6000)
    for i in range(draws.size):
        point, stats = step.step(point)
        draws[i] = 1.0 / (1.0 + np.exp(-point["q_logodds__"]))
    # the conditional on a grid, written independently of the step: Beta prior times the
    # Bernoulli(1 - q^s) pmf of every entry
    grid = np.linspace(1e-5, 1 - 1e-5, 20001)
    logd = scipy.stats.beta(1.5, 1.2).logpdf(grid) + np.array(
        [scipy.stats.bernoulli.logpmf(Z, 1.0 - g ** s).sum() for g in grid])
    dens = np.exp(logd - logd.max())
    cum = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(grid))])
    cum /= cum[-1]

    def cdf(x):
        return np.interp(x, grid, cum)

    thin = draws[::6]  # the chain is nearly independent after a few steps
    res = scipy.stats.kstest(thin, cdf)
    assert res.pvalue > 1e-3, res


def test_assigned_by_pm_sample_and_bad_patterns_named():
    model = _model(n=8, k=4)
    with model:
        _, sel = assign_step_methods(model)
    got = {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}
    assert got["NoisyOrQSlice"] == ["q_logodds__"]
    assert got["IBPGibbs"] == ["Z", "Z_C", "Z_M"]  # not BinaryGibbsMetropolis for Z
    with pm.Model() as bad:
        q = pm.Beta("q", 1.0, 1.0)
        pmi.noisy_or_ibp_ibp("Z", 1.0, 1.0, q, l_max=3, shape=(8, 4))
        pm.Normal("y", q, 1.0, observed=0.3)  # q used elsewhere too
        _, sel = assign_step_methods(bad)
    assert "NoisyOrQSlice" not in {k.__name__ for k in sel}
    with pytest.raises(pmi.ModelPatternError, match="is used by 'y'"):
        pmi.NoisyOrQSlice([bad["q"]], model=bad)
    with pm.Model() as other:
        q = pm.Beta("q", 1.0, 1.0)
        pm.Bernoulli("Z", p=q, shape=(4, 3))  # p = q, not 1 - q^S
    with pytest.raises(pmi.ModelPatternError, match=r"not 1 - q \*\* S"):
        pmi.NoisyOrQSlice([other["q"]], model=other)


def test_checkpoint_and_resume_gives_the_same_draws():
    """The adapted slice width is step state: a step restored from a checkpoint taken during
    tuning continues exactly as the original."""
    model = _model(n=8, k=4)
    rng = np.random.default_rng(6)
    point = {**model.initial_point(), "Z_C": (rng.random((8, 4)) < 0.5).astype(np.int8),
             "Z_M": (rng.random((4, 4)) < 0.5).astype(np.int8)}
    s = point["Z_C"].astype(int) @ point["Z_M"]
    point["Z"] = (rng.random(s.shape) < 1 - 0.4**s).astype(np.int64)
    first = pmi.NoisyOrQSlice([model["q"]], model=model)
    first.setup_chain(np.random.default_rng(7), tune=20, draws=10)
    for _ in range(5):
        point, _ = first.step(point)
    state = first.sampling_state
    resumed = pmi.NoisyOrQSlice([model["q"]], model=model)
    resumed.sampling_state = state
    assert resumed.width == first.width and resumed.n_tuned == 5 and resumed.tune
    p1 = p2 = point
    for i in range(10):
        if i == 3:
            first.stop_tuning()
            resumed.stop_tuning()
        p1, _ = first.step(p1)
        p2, _ = resumed.step(p2)
        assert p1["q_logodds__"] == p2["q_logodds__"]
