"""Correctness of the collapsed and accelerated samplers (Griffiths & Ghahramani 2011, §5;
Doshi-Velez & Ghahramani 2009)."""


import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from tests._helpers import (
    ENUM_X,
    chi2_pooled,
    codes,
    exact_posterior,
    lg_model,
    mcse_mean,
    readme_model,
    run_chain,
)

# ---------------------------------------------------------------------------------------------
# exact posterior by enumeration
# ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 binds by design
@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
@pytest.mark.parametrize(
    "step_cls,kwargs,alpha",
    [(pmi.AcceleratedGibbs, {}, 1.5),
     pytest.param(pmi.CollapsedGibbs, {}, 1.5, marks=pytest.mark.slow),
     pytest.param(pmi.AcceleratedGibbs, {"window": 2}, 1.5, marks=pytest.mark.slow)],
    ids=["accelerated", "collapsed", "accelerated-W2"],
)
# without a missing entry (24-45 s each): the slow suite; with one, two of the three rows still
# take the complete-data row update, and the default suite runs that for AcceleratedGibbs (the
# window of two rows, 35-54 s, and CollapsedGibbs, 35-46 s, in the slow suite; the default suite
# has CollapsedGibbs in test_exact_posterior_enumeration_column_blocks)
@pytest.mark.parametrize("missing", [pytest.param(False, marks=pytest.mark.slow), True])
def test_exact_posterior_enumeration(step_cls, kwargs, alpha, missing):
    X = ENUM_X.copy()
    if missing:
        X[1, 0] = np.nan
    k_max, sx, sa = 3, 0.5, 1.0
    mats, post = exact_posterior(X, k_max, alpha, sx, sa)
    model = lg_model(X, k_max, alpha, sx, sa)
    with model:
        step = step_cls([model["Z"]], **kwargs)
    n_sweeps, thin = 40000, 4
    draws, _ = run_chain(step, model, n_sweeps, seed=2, thin=thin)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 binds by design
@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
# the default suite has each layout once and each step class once (with a missing entry); the
# other two pairings (24-27 s each) and the runs without missing entries (18-26 s each) are in
# the slow suite
@pytest.mark.parametrize("step_cls,layout", [
    (pmi.AcceleratedGibbs, "per-column-sigma"), (pmi.CollapsedGibbs, "two-observed"),
    pytest.param(pmi.AcceleratedGibbs, "two-observed", marks=pytest.mark.slow),
    pytest.param(pmi.CollapsedGibbs, "per-column-sigma", marks=pytest.mark.slow)],
    ids=["per-column-sigma-accelerated", "two-observed-collapsed", "two-observed-accelerated",
         "per-column-sigma-collapsed"])
@pytest.mark.parametrize("missing", [pytest.param(False, marks=pytest.mark.slow), True])
def test_exact_posterior_enumeration_column_blocks(step_cls, layout, missing):
    """One Z shared by two observed matrices with their own A and scales, or one matrix with a
    noise scale per column: the chain's visit frequencies match the exact posterior (each
    column integrated out with its own scales)."""
    X = ENUM_X.copy()
    if missing:
        X[1, 1] = np.nan
    k_max, alpha = 3, 1.5
    sx, sa = np.array([0.5, 0.9]), np.array([1.0, 0.6])
    mats, post = exact_posterior(X, k_max, alpha, sx, sa)
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(3, k_max))
        if layout == "two-observed":
            A1 = pm.Normal("A1", 0.0, sa[0], shape=(k_max, 1))
            A2 = pm.Normal("A2", 0.0, sa[1], shape=(k_max, 1))
            pm.Normal("X1", mu=Z @ A1, sigma=sx[0], observed=X[:, :1])
            pm.Normal("X2", mu=Z @ A2, sigma=sx[1], observed=X[:, 1:])
        else:
            A = pm.Normal("A", 0.0, sa, shape=(k_max, 2))
            pm.Normal("X", mu=Z @ A, sigma=sx, observed=X)
    with model:  # the sweep alone: the exact MH moves must not mask an error in it
        step = step_cls([model["Z"]], split_merge=0, birth_death=0)
    assert step.vars[0].name == "Z" and len(step.vars) == (4 if layout == "two-observed"
                                                           else 3) + missing - 1
    draws, _ = run_chain(step, model, 40000, seed=4, thin=4)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


def test_prior_only_reproduces_ibp_moments():
    """σx → ∞ surrogate (X = 0, σx = 1e4): the sampler's Z follows the IBP prior."""
    n, k_max, alpha = 8, 40, 2.0
    X = np.zeros((n, 1))
    model = lg_model(X, k_max, alpha=alpha, sigma_x=1e4, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]])
    draws, _ = run_chain(step, model, 6000, seed=5, thin=3)
    kplus = (draws.sum(axis=1) > 0).sum(axis=1)
    lam = alpha * sum(1.0 / i for i in range(1, n + 1))
    se = mcse_mean(kplus)  # autocorrelated draws
    assert abs(kplus.mean() - lam) < 4 * se, (kplus.mean(), lam, se)
    rowsum = draws.sum(axis=2).mean(axis=1)
    assert abs(rowsum.mean() - alpha) < 4 * mcse_mean(rowsum), (rowsum.mean(), alpha)
    assert abs(kplus.var() - lam) < 0.25 * lam  # Poisson: variance = mean


# ---------------------------------------------------------------------------------------------
# pm.sample integration
# ---------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # small K_max on purpose
def test_auto_assignment_and_stats():
    data = pmi.datasets.block_images(40, seed=0)
    model = readme_model(data.X, sigma_x_initval=0.5)
    with model:
        idata = pm.sample(30, tune=20, chains=1, random_seed=3, progressbar=False,
                          compute_convergence_checks=False)
    ss = idata["sample_stats"]
    for name in ("ibp_n_active", "ibp_log_joint", "ibp_flips", "ibp_births", "ibp_deaths",
                 "ibp_kmax_hit", "ibp_alpha_accept", "ibp_scale_evals",
                 "ibp_split_merge_accepted"):
        assert name in ss, name
        assert ss[name].dims == ("chain", "draw")
    assert ss["ibp_n_active"].dtype == np.int64
    with model:
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
    names = {cls.__name__: [v.name for v in vs] for cls, vs in selected.items()}
    assert names["AcceleratedGibbs"] == ["Z", "A"]
    assert names["IBPAlphaGibbs"] == ["alpha_log__"]
    assert sorted(names["IBPScaleSlice"]) == ["sigma_a_log__", "sigma_x_log__"]
    assert "NUTS" not in names
    # A is consistent with Z: empty slots drawn from the prior, active rows near the data
    Z = idata["posterior"]["Z"].values[0, -1]
    assert Z.sum(axis=0)[Z.sum(axis=0) > 0].min() >= 1


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 6 may bind at N = 30
@pytest.mark.parametrize("mp_ctx", ["fork", "spawn"])
def test_parallel_chains_reproducible(mp_ctx):
    data = pmi.datasets.block_images(30, seed=0)
    model = readme_model(data.X, k_max=6, sigma_x_initval=0.5)
    kw = dict(draws=15, tune=10, chains=2, random_seed=11, progressbar=False,
              compute_convergence_checks=False)
    with model:
        seq = pm.sample(cores=1, **kw)
        par = pm.sample(cores=2, mp_ctx=mp_ctx, **kw)
    np.testing.assert_array_equal(seq["posterior"]["Z"].values, par["posterior"]["Z"].values)
    np.testing.assert_array_equal(seq["posterior"]["A"].values, par["posterior"]["A"].values)
    # chains start from different (prior) states
    assert not np.array_equal(seq["posterior"]["Z"].values[0, 0],
                              seq["posterior"]["Z"].values[1, 0])


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_inf_in_data_is_an_error():
    X = np.ones((4, 2))
    X[0, 0] = np.inf
    model = lg_model(X, 3)
    with model, pytest.raises(pmi.DataError, match=r"contains inf at \(row 0, column 0\)"):
        pmi.AcceleratedGibbs([model["Z"]])


def test_shape_mismatch_is_an_error():
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(5, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 2))
        pm.Normal("X", mu=Z @ A[:3], sigma=1.0, observed=np.zeros((5, 2)))
    with model, pytest.raises(pmi.ModelPatternError, match="free pm.Normal feature matrix"):
        pmi.AcceleratedGibbs([Z])


def test_non_matching_model_is_an_error():
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(5, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        pm.Poisson("X", mu=pm.math.exp(Z @ A), observed=np.zeros((5, 2)))
    with model, pytest.raises(pmi.ModelPatternError, match="Needed pattern"):
        pmi.AcceleratedGibbs([Z])
    with pm.Model() as model2:
        Z = pmi.IBP("Z", 1.0, shape=(5, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        pm.Normal("X", mu=Z @ A, sigma=np.ones((5, 1)), observed=np.zeros((5, 2)))
    with model2, pytest.raises(pmi.ModelPatternError, match="varies across rows"):
        pmi.AcceleratedGibbs([Z])


def test_truncation_warning_names_kmax():
    data = pmi.datasets.block_images(30, seed=0)
    model = lg_model(data.X, 2, alpha=5.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]])
    with pytest.warns(pmi.TruncationWarning, match="K_max=2"):
        _, st = run_chain(step, model, 5, seed=0)
    assert any(s["ibp_kmax_hit"] for s in st)
    # hits during tuning are recorded in the stat but not warned about (warnings are errors here)
    step.setup_chain(np.random.default_rng(1), tune=5, draws=1)
    point = model.initial_point()
    hits = []
    for _ in range(5):
        point, st = step.step(point)
        hits.append(st[0]["ibp_kmax_hit"])
    assert any(hits)
    with pytest.warns(pmi.TruncationWarning, match="K_max=2"):
        for _ in range(5):
            point, st = step.step(point)


def test_binding_k_max_is_probed_and_the_denied_births_counted():
    """When every slot is in use in a kept draw, the step probes with room for more features:
    on data of 8 planted features with K_max = 3 the warning and the stat suggest at least 8
    slots (and not absurdly many); the sweeps count the births the full slots denied (0 with
    room to spare), and k_max_probe=0 falls back to twice K_max."""
    rng = np.random.default_rng(3)
    Zt = (rng.random((120, 8)) < 0.3).astype(int)
    X = Zt @ rng.normal(0.0, 1.0, (8, 12)) + 0.2 * rng.standard_normal((120, 12))
    model = lg_model(X, 3, alpha=2.0, sigma_x=0.2, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_sweeps=10)
    with pytest.warns(pmi.TruncationWarning, match=r"reached K\+ = \d+ in 30 sweeps") as rec:
        _, st = run_chain(step, model, 4, seed=1)
    suggested = st[-1]["ibp_kmax_suggested"]
    assert 8 <= suggested <= 30 and f"use K_max >= {suggested}" in str(rec[0].message)
    # the first iteration is the start search; probed at the first sweep that filled K_max
    assert st[1]["ibp_kmax_suggested"] == suggested
    assert all(s["ibp_births_denied"] > 0 for s in st[1:])
    roomy = lg_model(X, 30, alpha=2.0, sigma_x=0.2, sigma_a=1.0)
    with roomy:
        step = pmi.AcceleratedGibbs([roomy["Z"]], init_sweeps=10)
    _, st = run_chain(step, roomy, 3, seed=1)
    assert all(s["ibp_births_denied"] == 0 and s["ibp_kmax_suggested"] == 0 for s in st)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_sweeps=10, k_max_probe=0)
    with pytest.warns(pmi.TruncationWarning, match="e.g. to 6"):
        _, st = run_chain(step, model, 2, seed=1)
    assert st[-1]["ibp_kmax_suggested"] == 0
    # the classic collapsed sweep does not count denied births: NaN, not a false 0
    with roomy:
        step = pmi.CollapsedGibbs([roomy["Z"]], init_sweeps=10)
    with warnings.catch_warnings():  # whether its slots fill is not the point here
        warnings.simplefilter("ignore", pmi.TruncationWarning)
        _, st = run_chain(step, roomy, 2, seed=1)
    assert np.isnan(st[-1]["ibp_births_denied"])


def test_truncation_warning_names_the_dim_to_raise():
    """The warning says what to raise: the slot dim of the matrix, the last entry of shape=
    without dims, and for the category matrix of pmi.ibp_ibp / noisy_or_ibp_ibp its l_max=
    (with dims: the length of 'Y_category', not 'feature'; without: l_max=, not shape=)."""
    from pymc_ibp.exceptions import warn_slots_in_use
    from pymc_ibp.matching.graph import slot_knob

    with pm.Model(coords={"obs": range(6), "feature": range(3)}) as model:
        pmi.IBP("Z", 1.0, dims=("obs", "feature"))
        pmi.IBP("W", 1.0, shape=(6, 3))
        pmi.ibp_ibp("Y", 1.0, 1.0, l_max=4, dims=("obs", "feature"))
        pmi.noisy_or_ibp_ibp("V", 1.0, 1.0, 0.2, l_max=5, shape=(6, 3))
    assert [slot_knob(model, v) for v in ("Z", "W", "Y_C", "Y_M", "V_C", "V_M")] == [
        "the length of the 'feature' dim", "the last entry of shape=",
        "l_max= of pmi.ibp_ibp, the length of the 'Y_category' dim",
        "the length of the 'feature' dim", "l_max= of pmi.noisy_or_ibp_ibp",
        "the last entry of shape="]
    with pytest.warns(pmi.TruncationWarning,
                      match=r"K_max=4 .* 'Y_C' .*to 8: l_max= of pmi.ibp_ibp, the "
                            r"length of the 'Y_category' dim\)"):
        warn_slots_in_use("IBPGibbs", "Y_C", 4, slot_knob(model, "Y_C"), stacklevel=2)
    with pytest.warns(pmi.TruncationWarning, match=r"to 10: l_max= of pmi.noisy_or_ibp_ibp\)"):
        warn_slots_in_use("IBPGibbs", "V_C", 5, slot_knob(model, "V_C"), stacklevel=2)
    with pytest.warns(pmi.TruncationWarning, match=r"to 6: the last entry of shape=\)"):
        warn_slots_in_use("IBPGibbs", "W", 3, None, stacklevel=2)


# ---------------------------------------------------------------------------------------------
# split-merge moves
# ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_two_parameter_ibp_with_free_beta():
    """beta ~ Gamma is sampled by NUTS through pmi.IBP's differentiable logp; alpha's exact step
    reads the current beta."""
    data = pmi.datasets.block_images(30, seed=0)
    with pm.Model(coords={"obs": range(30), "feature": range(8), "dim": range(36)}) as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        beta = pm.Gamma("beta", 2.0, 2.0)
        Z = pmi.IBP("Z", alpha, beta, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X, dims=("obs", "dim"))
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
        names = {cls.__name__: [v.name for v in vs] for cls, vs in selected.items()}
        assert names["NUTS"] == ["beta_log__"] and names["IBPAlphaGibbs"] == ["alpha_log__"]
        idata = pm.sample(20, tune=20, chains=1, random_seed=4, progressbar=False,
                          compute_convergence_checks=False)
    assert np.isfinite(idata["posterior"]["beta"].values).all()
    assert np.isfinite(idata["sample_stats"]["ibp_log_joint"].values).all()


@pytest.mark.parametrize("offset", [False, True], ids=["Z@A", "Z@A+b"])
def test_steps_read_the_models_data_without_copying_it(offset):
    """At 10^6 rows each copy of X costs as much as the data (275 MB at D = 36): the
    linear-Gaussian steps read PyMC's own array of the observed data (no copy when nothing is
    imputed) and never write into it."""
    data = pmi.datasets.block_images(150, seed=3)
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(150, 12))
        sa = pm.HalfNormal("sigma_a", 2.0)
        sx = pm.HalfNormal("sigma_x", 1.0)
        A = pm.Normal("A", 0.0, sa, shape=(12, 36))
        mu = Z @ A
        if offset:
            b = pm.Normal("b", 0.0, 1.0, shape=36)
            mu = mu + b
        pm.Normal("X", mu, sx, observed=data.X)
        steps = [pmi.AcceleratedGibbs([Z, A]), pmi.IBPScaleSlice([sx, sa])]
        if offset:
            steps.append(pmi.IBPOffsetGibbs([b]))
    held = model.rvs_to_values[model["X"]].data
    before = held.copy()
    with model:
        pm.sample(tune=4, draws=4, chains=1, cores=1, step=steps, random_seed=1,
                  progressbar=False, compute_convergence_checks=False)
    assert np.array_equal(held, before)
    read = [steps[0].update.data.X, steps[0].spec.X, *(e["X"] for e in steps[1].entries)]
    read += [steps[2]._X] if offset else []
    assert all(np.shares_memory(x, held) for x in read)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 8 may bind
def test_scales_declared_before_z_do_not_collapse():
    """The scales declared before Z put IBPScaleSlice before AcceleratedGibbs in pm.sample's
    compound step.  It leaves the scales at their starts while A is at PyMC's all-zero start:
    an update there conditioned on A = 0, σa fell to about 1e-5 and stayed there, the
    features vanished (K+ = 0) and σx stayed at the data's spread (5 of 6 chains, found by a
    user who wrote the model in that order)."""
    data = pmi.datasets.block_images(100, noise=0.5, seed=1)
    for seed in (1, 2):
        with pm.Model():
            alpha = pm.Gamma("alpha", 1.0, 1.0)
            sigma_a = pm.HalfNormal("sigma_a", 2.0)
            sigma_x = pm.HalfNormal("sigma_x", 1.0)
            Z = pmi.IBP("Z", alpha, shape=(100, 8))
            A = pm.Normal("A", 0.0, sigma_a, shape=(8, 36))
            pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X)
            idata = pm.sample(tune=20, draws=20, chains=2, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
        post = idata["posterior"]
        assert np.all(post["sigma_a"].values[:, -1] > 0.2), post["sigma_a"].values[:, -1]
        assert np.all(post["sigma_x"].values[:, -1] < 0.6), post["sigma_x"].values[:, -1]
        assert np.all(idata["sample_stats"]["ibp_n_active"].values[:, -1] >= 4)


def test_scales_start_where_the_searched_z_and_a_put_them():
    """In the README's order (Z, then the scales) the first iteration draws A after the start
    search, then updates the scales given it.  A was drawn at the initial scales (the empty
    slots at PyMC's sigma_a of about 2) and the slice update started from the data's spread:
    sigma_a ended the first iteration at 0.8-9.3 and sigma_x at 0.35-1.0 (posterior: 0.40,
    0.50).  Now A is drawn at the search's estimates of the scales and each scale's first
    update starts at its likelihood term's maximiser given Z and A."""
    data = pmi.datasets.block_images(200, noise=0.5, seed=1)
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(200, 12))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(12, 36))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X)
        idata = pm.sample(tune=4, draws=4, chains=4, cores=1, random_seed=3,
                          progressbar=False, compute_convergence_checks=False,
                          discard_tuned_samples=False)
    first = idata["warmup_posterior"].isel(draw=0)
    sa, sx = first["sigma_a"].values, first["sigma_x"].values
    assert np.all(np.abs(sa - 0.40) < 0.06), sa
    assert np.all(np.abs(sx - 0.50) < 0.03), sx


