"""GPLengthScaleHMC: the exact 1-D posterior of a length scale, step-size adaptation, stats
beside NUTS and PyMC's binary steps, reproducible parallel chains, and checkpoint / resume of
a whole dependent-IBP run (every step's state)."""

import pickle

import numpy as np
import pymc as pm
import pytest
from pymc.step_methods import CompoundStep
from scipy import integrate, stats

import pymc_ibp as pmi
from tests.step_methods.test_state import assert_same_state, drive

T = np.array([0.0, 1.5, 3.0, 5.0])  # few points: a wide posterior, where the Jacobian matters
G_OBS = np.sin(T) + 0.3 * np.cos(2.3 * T)


def _cov(ls):
    return np.exp(-(T[:, None] - T[None, :]) ** 2 / ls**2) + 1e-6 * np.eye(T.size)


def test_samples_the_exact_posterior_of_a_length_scale():
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.5, 0.6)
        cov = pm.math.exp(-((T[:, None] - T[None, :]) ** 2) / ls**2) + 1e-6 * np.eye(T.size)
        pm.MvNormal("g", 0.0, cov=cov, observed=G_OBS)
        step = pmi.GPLengthScaleHMC([ls])
    grid = np.linspace(0.05, 15.0, 6000)
    logp = np.array([stats.lognorm(0.6, scale=np.exp(0.5)).logpdf(x)
                     + stats.multivariate_normal(np.zeros(T.size), _cov(x)).logpdf(G_OBS)
                     for x in grid])
    dens = np.exp(logp - logp.max())
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0.0)
    cdf /= cdf[-1]
    step.setup_chain(np.random.default_rng(0), tune=300, draws=3000)
    point = model.initial_point()
    draws, accept = [], []
    for it in range(3300):
        if it == 300:
            step.stop_tuning()
        point, st = step.step(point)
        if it >= 300:
            draws.append(float(np.exp(point["ls_log__"])))
            accept.append(st[0]["ibp_hmc_accept"])
    thinned = np.array(draws[::5])
    p = stats.kstest(thinned, lambda x: np.interp(x, grid, cdf)).pvalue
    assert p > 1e-3, p
    assert 0.45 < np.mean(accept) < 0.9, np.mean(accept)  # dual averaging towards 0.65


def dibp_model(seed=0):
    rng = np.random.default_rng(seed)
    t = np.repeat(np.arange(6.0), 3)
    X = rng.normal(size=(18, 2))
    with pm.Model(coords={"obs": range(18), "feature": range(3)}) as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        mod = pmi.dependent_ibp("Z", t, alpha=alpha, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        pm.Normal("X", mod.Z @ A, 0.5, observed=X)
        w = pm.Normal("w", 0.0, 1.0)  # NUTS
        pm.Normal("y", w, 1.0, observed=[0.3, -0.1])
        c = pm.Bernoulli("c", 0.4, shape=2)  # PyMC's binary step
        pm.Normal("v", c.sum(), 1.0, observed=1.2)
    return model, mod


def test_assigned_beside_nuts_and_binary_steps_with_its_own_stats():
    model, mod = dibp_model()
    with model:
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
        names = {cls.__name__: sorted(v.name for v in vs) for cls, vs in selected.items()}
        assert names["GPLengthScaleHMC"] == ["Z_ls_log__"]
        assert names["NUTS"] == ["w"]
        assert names["DependentIBPGibbs"] == ["Z_g", "Z_sticks_stickbreaking__"]
        idata = pm.sample(draws=40, tune=60, chains=1, random_seed=3, progressbar=False,
                          compute_convergence_checks=False)
    st = idata.sample_stats
    for name in ("ibp_hmc_accept", "ibp_hmc_step_size", "ibp_hmc_n_steps",
                 "ibp_hmc_energy_error", "ibp_hmc_diverging", "diverging", "step_size"):
        assert name in st, name
        assert st[name].dims == ("chain", "draw")
    assert st["ibp_hmc_n_steps"].dtype == np.int64


def test_parallel_chains_reproducible():
    model, _ = dibp_model(1)
    kw = dict(draws=8, tune=8, chains=2, random_seed=5, progressbar=False,
              compute_convergence_checks=False)
    with model:
        seq = pm.sample(cores=1, **kw)
        par = pm.sample(cores=2, mp_ctx="fork", **kw)
    for name in ("Z", "Z_ls", "Z_g", "Z_sticks", "alpha"):
        np.testing.assert_array_equal(seq.posterior[name].values, par.posterior[name].values)


def test_checkpoint_and_resume_of_a_dependent_ibp_run():
    model, mod = dibp_model(2)

    def build():
        with model:
            return CompoundStep([
                pmi.DependentIBPGibbs([mod.sticks, mod.g]),
                pmi.AcceleratedGibbs([mod.Z, model["A"]]),
                pmi.IBPAlphaGibbs([model["alpha"]]),
                pmi.GPLengthScaleHMC([mod.length_scale]),
            ])

    tune, total, split = 40, 60, 30  # the split falls inside a mass-matrix window
    full = build()
    full.setup_chain(np.random.default_rng(9), tune, total - tune)
    _, ref = drive(full, model.initial_point(), 0, total, tune)
    first = build()
    first.setup_chain(np.random.default_rng(9), tune, total - tune)
    point, part1 = drive(first, model.initial_point(), 0, split, tune)
    assert first.methods[3].window_n > 0
    blob = pickle.dumps((point, first.sampling_state))
    resumed = build()
    point, state = pickle.loads(blob)
    resumed.sampling_state = state
    assert_same_state(first, resumed)
    _, part2 = drive(resumed, point, split, total, tune)
    for a, b in zip(ref, part1 + part2, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_variables_it_cannot_handle_are_explained():
    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0)
        pm.Normal("y", x, 1.0, observed=0.0)
        assert pmi.GPLengthScaleHMC.competence(x, True) == pm.step_methods.compound \
            .Competence.INCOMPATIBLE
        with pytest.raises(pmi.ModelPatternError, match="through the covariance"):
            from pymc_ibp.step_methods.gp_length_scales import gp_hyperparameter_users

            gp_hyperparameter_users(pm.modelcontext(None), x)
