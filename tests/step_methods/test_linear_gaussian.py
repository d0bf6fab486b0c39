"""Correctness of the collapsed and accelerated samplers (Griffiths & Ghahramani 2011, §5;
Doshi-Velez & Ghahramani 2009)."""

import copy

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp import kernels
from tests._helpers import (
    ENUM_X,
    chi2_pooled,
    codes,
    exact_posterior,
    lg_model,
    mcse_mean,
    noise_of,
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


def test_truncation_warning_names_the_dim_to_raise():
    """The warning says which length to raise: the slot dim of the matrix (for the category
    matrix of pmi.ibp_ibp that is 'Z_category', of length l_max, not 'feature'), or the last
    entry of shape= without dims."""
    from pymc_ibp.exceptions import warn_slots_in_use
    from pymc_ibp.matching.graph import slot_dim

    with pm.Model(coords={"obs": range(6), "feature": range(3)}) as model:
        pmi.IBP("Z", 1.0, dims=("obs", "feature"))
        pmi.IBP("W", 1.0, shape=(6, 3))
        pmi.ibp_ibp("Y", 1.0, 1.0, l_max=4, dims=("obs", "feature"))
    assert [slot_dim(model, v) for v in ("Z", "W", "Y_C", "Y_M")] == [
        "feature", None, "Y_category", "feature"]
    with pytest.warns(pmi.TruncationWarning,
                      match=r"K_max=4 .* 'Y_C' .*to 8: the length of the 'Y_category' dim\)"):
        warn_slots_in_use("IBPGibbs", "Y_C", 4, slot_dim(model, "Y_C"), stacklevel=2)
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


def test_multi_start_burn_in_schedule_keeps_the_best_segment():
    """init_sweeps=0, init_restarts: R segments of L tuning sweeps from fresh prior draws, then
    the segment end with the highest collapsed log joint; nothing happens outside the first R·L
    sweeps."""
    data = pmi.datasets.block_images(60, seed=3)
    model = lg_model(data.X, 8, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_restarts=4, init_sweeps=0)
    zero = np.zeros((60, 8), dtype=np.int64)  # PyMC's default start: a prior start
    step.setup_chain(np.random.default_rng(0), tune=80, draws=10)
    step._start(zero, step._X, noise_of(step))
    assert (step.restarts, step.segment) == (4, 10)
    step.setup_chain(np.random.default_rng(0), tune=40, draws=10)  # too short for 4 x 10
    step._start(zero, step._X, noise_of(step))
    assert (step.restarts, step.segment) == (2, 10)
    step.setup_chain(np.random.default_rng(0), tune=15, draws=10)
    step._start(zero, step._X, noise_of(step))
    assert step.segment == 0
    step.setup_chain(np.random.default_rng(0), tune=80, draws=10)
    step._start(data.Z[:, [0, 1, 2, 3, 0, 1, 2, 3]], step._X, noise_of(step))  # a user start
    assert (step.restarts, step.segment) == (1, 0)
    step.setup_chain(np.random.default_rng(0), tune=80, draws=10)
    step._start(zero, step._X, noise_of(step))
    hyper = (kernels.noise_blocks(0.25, 1.0, 36),)
    X, trXX = step._X, kernels.block_sq_norms(step._X, hyper[0])
    rng = np.random.default_rng(1)
    segment_ends = [rng.integers(0, 2, size=(60, 8)) for _ in range(4)]
    segment_ends[2] = np.zeros((60, 8), dtype=np.int64)
    segment_ends[2][:, :4] = data.Z  # the truth: by far the best
    scores = [step._log_joint(z, X, trXX, *hyper)[0] for z in segment_ends]
    assert int(np.argmax(scores)) == 2
    Z0 = segment_ends[0]
    for s in range(0, 60):
        step.sweeps = s
        given = segment_ends[s // 10 - 1] if s in (10, 20, 30, 40) else Z0
        out = step._restart(given, X, trXX, *hyper)
        if s in (10, 20, 30):  # a fresh prior draw starts the next segment
            assert not np.array_equal(out, given) and out.shape == given.shape
        elif s == 40:  # the best segment end
            assert np.array_equal(out, segment_ends[2])
        else:
            assert out is given
    assert step.candidates == []


def test_annealed_noise_schedule_within_restart_segments():
    """init_anneal: inside each multi-start segment the Z moves see a noise variance falling
    geometrically from the data's variance to σx² over 60% of the segment, σx² elsewhere."""
    data = pmi.datasets.block_images(60, seed=3)
    model = lg_model(data.X, 8, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_restarts=4, init_sweeps=0)
        flat = pmi.AcceleratedGibbs([model["Z"]], init_restarts=4, init_anneal=False,
                                    init_sweeps=0)
    for st in (step, flat):  # 4 segments of 10 sweeps from a prior start
        st.setup_chain(np.random.default_rng(0), tune=80, draws=10)
        st._start(np.zeros((60, 8), dtype=np.int8), st._X, noise_of(st))
    v0, sx2 = float(np.var(data.X)), 0.01
    noise = kernels.noise_blocks(sx2, 1.0, 36)
    seen = []
    for s in range(60):
        step.sweeps = flat.sweeps = s
        seen.append(step._annealed(noise).sx2[0])
        assert flat._annealed(noise) is noise
    seen = np.array(seen)
    for r in range(4):
        seg = seen[10 * r:10 * r + 10]
        np.testing.assert_allclose(seg[0], v0)
        assert np.all(np.diff(seg[:7]) < 0)  # falls over ceil(0.6 * 10) = 6 steps ...
        np.testing.assert_allclose(seg[6:], sx2)  # ... then σx²
        np.testing.assert_allclose(seg[3], v0 ** 0.5 * sx2 ** 0.5)  # geometric midpoint
    np.testing.assert_allclose(seen[40:], sx2)  # after the restarts: the real σx²


def test_subsample_start_search_for_large_data():
    """init_subsample: the start search of a large data set runs on a random row subset; one
    sweep without births then assigns the other rows to the searched features."""
    data = pmi.datasets.block_images(120, noise=0.3, seed=4)
    model = lg_model(data.X, 8, alpha=1.0, sigma_x=0.3, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_subsample=40, init_sweeps=15,
                                    init_restarts=2)
    step.setup_chain(np.random.default_rng(0), tune=80, draws=10)
    Z, *_ = step._start(np.zeros((120, 8), dtype=np.int8), step._X, noise_of(step, 0.09))
    rows = np.flatnonzero(Z.sum(axis=1) > 0)
    assert rows.size > 40  # one sweep assigned the other rows to the searched features
    assert (Z.sum(axis=0) > 0).sum() >= 3  # the search found the large features
    assert (step.restarts, step.segment) == (1, 0)  # no multi-start segments after a search
    with model:
        plain = pmi.AcceleratedGibbs([model["Z"]], init_sweeps=0, init_restarts=1)
    plain.setup_chain(np.random.default_rng(0), tune=80, draws=10)
    Z2, *_ = plain._start(np.zeros((120, 8), dtype=np.int8), plain._X, noise_of(plain, 0.09))
    assert (Z2.sum(axis=1) > 0).sum() > 40 or Z2.sum() == 0  # a plain prior draw


def test_start_search_finds_the_structure_with_no_tuning():
    """The annealed start search runs before the first sweep, so a tune=0 chain from the prior
    starts near the true features (not in the K+ = 0 or poor-mode traps of a plain prior
    start); it keeps the best of init_restarts searches by collapsed log joint, and is skipped
    for a user's Z."""
    data = pmi.datasets.block_images(150, noise=0.5, seed=2)
    model = lg_model(data.X, 10, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
    noise = kernels.noise_blocks(0.25, 1.0, 36)
    trXX = kernels.block_sq_norms(data.X, noise)
    truth = np.zeros((150, 10), dtype=np.int8)
    truth[:, :4] = data.Z
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_restarts=3, init_sweeps=40)
        off = pmi.AcceleratedGibbs([model["Z"]], init_sweeps=0)
    true_score = step._log_joint(truth, step._X, trXX, noise)[0]
    searches = []
    search = step._anneal
    step._anneal = lambda *a: searches.append(search(*a)) or searches[-1]
    zero = np.zeros((150, 10), dtype=np.int64)
    step.setup_chain(np.random.default_rng(5), tune=0, draws=10)
    Z, *_ = step._start(zero, step._X, noise)
    assert len(searches) == 3
    scores = [step._log_joint(z, step._X, trXX, noise)[0] for z, *_ in searches]
    assert np.array_equal(Z, searches[int(np.argmax(scores))][0])  # the best search
    assert max(scores) > true_score - 30.0  # at the true structure
    off.setup_chain(np.random.default_rng(5), tune=0, draws=10)
    Z0, *_ = off._start(zero, off._X, noise)  # a plain prior draw: far below
    assert off._log_joint(Z0, off._X, trXX, noise)[0] < true_score - 1000.0
    step.setup_chain(np.random.default_rng(5), tune=0, draws=10)
    searches.clear()
    user = truth.astype(np.int64)
    assert step._start(user, step._X, noise)[0] is user and not searches  # a user's Z: kept


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_start_search_fills_missing_entries_from_the_features():
    """With NaN entries (PyMC imputes them) the start search fills them at the column means
    and then with the current features' prediction after every sweep, instead of fitting the
    chain's initial imputed values (zeros): the best of 3 searches on block images with 10%
    of the entries missing is within 100 nats of the true Z, scored on the complete data (the
    zero-filled search ends 140-190 nats below)."""
    data = pmi.datasets.block_images(500, noise=0.5, seed=1)
    mask = pmi.holdout_mask(data.X, n_missing=data.X.size // 10, seed=1)
    model = lg_model(np.where(mask, np.nan, data.X), 10, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_restarts=3)
    step.setup_chain(np.random.default_rng(1), tune=0, draws=1)
    point = model.initial_point()
    noise = step._hyper(point)
    X0, owned = step._complete_data(point, None)
    assert owned  # with the imputed entries: the step's own copy
    assert np.all(X0[mask] == 0.0)  # the chain's initial imputed values
    Z = step._fresh_start(X0, noise, restarts=3)
    trXX = kernels.block_sq_norms(data.X, noise)
    truth = np.zeros((500, 10), dtype=np.int8)
    truth[:, :4] = data.Z
    gap = (step._log_joint(Z, data.X, trXX, noise)[0]
           - step._log_joint(truth, data.X, trXX, noise)[0])
    assert gap > -100.0, gap


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_start_search_at_high_signal_to_noise_with_missing_entries():
    """The accelerated-sampling paper's kind of data (sigma_x = 0.2, sigma_a = 2, D = 10:
    log(v0 / sigma_x^2) = 4.5) with 20% of the entries missing: the search cools over three
    times as many sweeps as at block images' ratio, and four single searches (N = 500) end a
    median of ~57 nats below the true Z by the observed-data log joint (with the fixed
    cooling over 0.6 init_sweeps: ~450 below)."""
    data = pmi.datasets.ibp_linear_gaussian(500, 10, alpha=2.0, sigma_x=0.2, sigma_a=2.0,
                                            seed=500)
    mask = pmi.holdout_mask(data.X, n_missing=data.X.size // 5, seed=500)
    model = lg_model(np.where(mask, np.nan, data.X), 30, alpha=2.0, sigma_x=0.2, sigma_a=2.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_restarts=1)
    point = model.initial_point()
    truth = np.zeros((500, 30), dtype=np.int8)
    truth[:, :data.k] = data.Z
    gaps = []
    for seed in range(4):
        step.setup_chain(np.random.default_rng(seed), tune=0, draws=1)
        noise = step._hyper(point)
        if seed == 0:
            v0 = kernels.block_variances(np.where(mask, 0.0, data.X), noise.cols)
            span, sweeps = step._search_schedule(v0, noise)
            assert 160 < span < 200 and sweeps == span + 40
            assert step._search_schedule(np.full(1, 0.4),
                                         noise._replace(sx2=np.full(1, 0.25))) == (60, 100)
        Z = step._fresh_start(step._complete_data(point, None)[0], noise, restarts=1)
        trXX = kernels.block_sq_norms(data.X, noise)
        gaps.append(step._log_joint(Z, data.X, trXX, noise, M=mask)[0]
                    - step._log_joint(truth, data.X, trXX, noise, M=mask)[0])
    assert np.median(gaps) > -150.0, gaps


def _offset_model(X, k_max=10):
    """The README's model with a per-column offset ``b ~ Normal(0, 5)`` beside ``Z @ A``."""
    n, d = X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(k_max, d))
        b = pm.Normal("b", 0.0, 5.0, shape=d)
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A + b, sigma=sigma_x, observed=X)
    return model


def _holds_glyphs(Z, true_Z, min_rows):
    """Whether every true feature is a column of ``Z`` or its complement (an offset then
    holds that glyph) in at least ``min_rows`` rows."""
    same = (Z[:, None, :] == true_Z[:, :, None]).sum(axis=0)  # true k x slot
    return bool(np.all(np.maximum(same, Z.shape[0] - same).max(axis=1) >= min_rows))


@pytest.mark.parametrize("given", [False, True], ids=["default-b", "users-b"])
def test_start_search_fits_the_offsets_baseline_beside_z(given):
    """Data far from the offset's initial value (block images + 3; ``b ~ Normal(0, 5)``
    starts at 0): the start search fits a per-column baseline beside ``Z`` (an EM update
    after every sweep), so its features are the glyphs, not features in every row that take
    the offset's place; ``b`` starts at its initial value plus that baseline, and the first
    ``A`` follows it, unless the user gave ``b`` (then left as given).  The search also runs
    at alpha's initial value, not at the chain's current alpha, which the alpha step drew
    given PyMC's all-zero Z (0.05 here)."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=1)
    X = data.X + 3.0
    model = _offset_model(X)
    ip = model.initial_point()
    if given:
        ip["b"] = X.mean(axis=0) - 0.2
    with model:
        step = pmi.AcceleratedGibbs([model["Z"], model["A"]], initial_point=ip)
    assert step._baselines == ((0, 36, True, "b", given, None),)
    point = {**ip, "alpha_log__": np.log(0.05)}
    found = 0
    for seed in range(3):
        step.setup_chain(np.random.default_rng(seed), tune=10, draws=10)
        new, _ = step.step(point)
        Z = new["Z"]
        assert Z.sum(axis=0).max() < 60  # no feature in every row
        found += _holds_glyphs(Z, data.Z, 54)
        if given:
            np.testing.assert_array_equal(new["b"], ip["b"])
            continue
        resid = X - Z @ new["A"] - new["b"]  # b moved by the baseline, and A drawn with it
        assert np.abs(resid.mean(axis=0)).max() < 0.3 and resid.std() < 0.7
    assert found == 3


@pytest.mark.parametrize("subsample", [0, 100], ids=["all-rows", "subset"])
@pytest.mark.parametrize("given", [False, True], ids=["default-b", "users-b"])
def test_first_search_shifts_the_chains_own_data_in_place(given, subsample):
    """The chain's first search takes the baseline off the chain's own copy of the data in
    place (no N x D copies at 10^6 rows): the same Z and baseline as the search on a copy
    (the tuning restarts'), the data left minus the baseline except in the columns of an
    offset the user gave (put back after the rows' assignment on a subset search)."""
    data = pmi.datasets.block_images(300, noise=0.5, seed=1)
    model = _offset_model(data.X + 3.0)
    ip = model.initial_point()
    if given:
        ip["b"] = data.X.mean(axis=0) + 2.8
    with model:
        step = pmi.AcceleratedGibbs([model["Z"], model["A"]], initial_point=ip,
                                    init_subsample=subsample, init_sweeps=20)
    noise = step._hyper(ip)
    X, owned = step._complete_data(ip, step._offset(ip))
    assert owned and X is not step._X  # X - b: the step's own array, free to shift
    X_model, owned = step._complete_data(ip, None)
    assert X_model is step._X and not owned  # the model's array: read only
    out = []
    for in_place in (True, False):
        step.setup_chain(np.random.default_rng(4), tune=10, draws=10)
        Xc = X.copy()
        out.append((*step._search(Xc, noise, restarts=2, in_place=in_place)[:2], Xc))
    (Z1, base1, X1), (Z2, base2, X2) = out
    np.testing.assert_array_equal(Z1, Z2)
    base1, base2 = base1.dense(len(X)), base2.dense(len(X))
    np.testing.assert_array_equal(base1, base2)
    np.testing.assert_array_equal(X2, X)  # the copying search leaves its data alone
    assert np.abs(base1).max() > 0.1  # a baseline to take off
    if given:
        np.testing.assert_allclose(X1, X, rtol=0, atol=1e-12)
    else:
        np.testing.assert_array_equal(X1, X - base1)


def test_offset_model_chains_start_at_the_glyphs():
    """pm.sample on the offset model of the test above: every chain holds the glyphs after
    20 tuning iterations, and no feature is in every row."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=1)
    model = _offset_model(data.X + 3.0)
    with model:
        idata = pm.sample(tune=20, draws=5, chains=2, cores=1, random_seed=3,
                          progressbar=False, compute_convergence_checks=False)
    for c in range(2):
        Z = idata.posterior["Z"].values[c, -1]
        assert _holds_glyphs(Z, data.Z, 54) and Z.sum(axis=0).max() < 60


def test_start_search_estimates_a_free_sigma_a():
    """With sigma_a free and started far off (HalfNormal(2): 2.0, four times the glyphs'
    scale), the search re-estimates it from the features' posterior after every sweep (an EM
    update, as sigma_x from the residuals): the default best-of-4 search on the tracking glyphs
    reaches the true Z's collapsed log joint; with sigma_a held at 2.0 it merges glyphs."""
    data = pmi.datasets.markov_glyphs(seed=3)
    on = data.Z.sum(axis=0) > 0
    with pm.Model() as model:
        Z = pmi.IBP("Z", 2.0, shape=(100, 12))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(12, 64))
        pm.Normal("X", Z @ A, sigma_x, observed=data.X)
        step = pmi.AcceleratedGibbs([Z, A])
    assert step._free_sx
    point = model.initial_point()
    noise = step._hyper(point)
    assert np.allclose(noise.sa2, 4.0)
    truth = np.zeros((100, 12), dtype=np.int8)
    truth[:, :on.sum()] = data.Z[:, on]
    ref = kernels.noise_blocks(0.25, 1.0, 64)
    trXX = kernels.block_sq_norms(data.X, ref)
    best = step._log_joint(truth, data.X, trXX, ref)[0]
    # the EM update itself: mean of E||a_k||^2 / D under the posterior given Z
    m = truth.sum(axis=0)
    act = np.flatnonzero(m)
    G, RX = kernels.suff_stats(truth, data.X, act)
    Sig, mu = kernels.posterior_from_stats(G, RX, ref)
    want = ((mu**2).sum() + 64 * np.trace(Sig[0])) / (act.size * 64)
    np.testing.assert_allclose(step._feature_variance(truth, data.X, m, ref), [want])
    gaps = []
    for seed in range(2):  # the default search: the best of 4
        step.setup_chain(np.random.default_rng(seed), tune=0, draws=1)
        Zs = step._fresh_start(data.X, noise, restarts=4)
        gaps.append(step._log_joint(Zs, data.X, trXX, ref)[0] - best)
    assert min(gaps) > -20.0, gaps


def _repair_case():
    """Block images (300 rows, four glyphs in slots 0-3 of K_max = 8) and a step for the start
    search's greedy repair at the true noise."""
    data = pmi.datasets.block_images(300, noise=0.5, seed=6)
    model = lg_model(data.X, 8, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]])
    step.rng = np.random.default_rng(0)
    noise = kernels.noise_blocks(0.25, 1.0, 36)
    trXX = kernels.block_sq_norms(data.X, noise)
    truth = np.zeros((300, 8), dtype=np.int8)
    truth[:, :4] = data.Z
    return data, step, noise, trXX, truth


def test_start_search_dissolves_combination_and_noise_features():
    """The start search's greedy repair: a feature standing for "glyph 0 + glyph 1" on the rows
    having both is moved back to the two glyph features, and a feature fitting noise on a
    random third of the rows is deleted; each change raises the collapsed log joint."""
    data, step, noise, trXX, truth = _repair_case()
    Z = truth.copy()
    both = (data.Z[:, 0] == 1) & (data.Z[:, 1] == 1)
    Z[both, 0] = Z[both, 1] = 0
    Z[both, 5] = 1  # the combination feature
    Z[np.random.default_rng(1).random(300) < 0.3, 6] = 1  # a noise feature
    before = step._log_joint(Z, step._X, trXX, noise)[0]
    step._dissolve_combinations(Z, step._X, trXX, noise)
    assert np.array_equal(Z, truth)
    assert step._log_joint(Z, step._X, trXX, noise)[0] > before


def test_tuning_repairs_at_the_middle_and_the_end_of_tuning_only():
    """The greedy repair runs on all rows at tuning iterations T // 2 and T - 1 (so that a
    split the first full sweeps make after a subset search is undone before the kept draws),
    never during the kept draws, never with ``tune < 10`` or ``tuning_repairs=False``; when
    it runs, the step's ``Z`` and its counts come out repaired."""
    data, _, noise, trXX, truth = _repair_case()
    planted = truth.copy()
    rows0 = np.flatnonzero(data.Z[:, 0] == 1)[:40]
    planted[rows0, 0], planted[rows0, 5] = 0, 1  # a copy of glyph 0's feature on 40 rows

    def calls(tune, draws, **kw):
        model = lg_model(data.X, 8, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
        with model:
            step = pmi.AcceleratedGibbs([model["Z"]], init_z="point", split_merge=0,
                                        pair_swaps=0, birth_death=0, **kw)
        seen = []

        def spy(Z, *a, **k):
            seen.append(step.sweeps)
            Z[:] = truth  # what the repair finds here
            return None

        step._dissolve_combinations = spy
        step.setup_chain(np.random.default_rng(0), tune=tune, draws=draws)
        point = {**model.initial_point(), "Z": planted.astype(np.int8)}
        for _ in range(tune + draws):
            point, st = step.step(point)
            if step.sweeps - 1 == tune // 2 and seen:
                assert st[0]["ibp_n_active"] == 4 and np.array_equal(point["Z"], truth)
        return seen

    assert calls(20, 15) == [10, 19]
    assert calls(9, 5) == []
    assert calls(0, 20) == []
    assert calls(20, 5, tuning_repairs=False) == []


def test_start_search_dissolves_difference_features():
    """The repair also undoes a *difference* mode (seen on the accelerated-sampling paper's
    synthetic data, where it kept every chain 30-180 nats below the true Z): glyph 1's rows
    without glyph 0 explained by glyph 0 plus a feature c ≈ A_1 - A_0.  c is dissolved into
    "glyph 1 on, glyph 0 off" on its rows, which raises the collapsed log joint."""
    data, step, noise, trXX, truth = _repair_case()
    Z = truth.copy()
    only1 = (data.Z[:, 1] == 1) & (data.Z[:, 0] == 0)
    Z[only1, 1], Z[only1, 0], Z[only1, 5] = 0, 1, 1  # c = slot 5 stands for A_1 - A_0
    before = step._log_joint(Z, step._X, trXX, noise)[0]
    step._dissolve_combinations(Z, step._X, trXX, noise)
    assert np.array_equal(Z, truth)
    assert step._log_joint(Z, step._X, trXX, noise)[0] > before


def test_start_search_scores_each_restart_at_its_own_noise_estimate():
    """With a free sigma_x the restarts of the start search are compared at the noise each
    one ended with, not at the chain's initial sigma_x: at a far-off initial sigma_x (3, the
    data's is 0.5) the collapsed log joint prefers a start that merges features, and the
    search must not pick it over the true structure (markov_glyphs chains then started 480-520
    nats below the true Z in 12 of 12 seeds)."""
    data = pmi.datasets.block_images(100, noise=0.5, seed=2)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(100, 8))
        sigma_x = pm.HalfNormal("sigma_x", 1.0, initval=3.0)
        A = pm.Normal("A", 0.0, 1.0, shape=(8, 36))
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X)
        step = pmi.AcceleratedGibbs([Z, A])
    step.setup_chain(np.random.default_rng(0), tune=0, draws=1)
    noise = step._hyper(model.initial_point())
    assert np.allclose(noise.sx2, 9.0)
    truth = np.zeros((100, 8), dtype=np.int8)
    truth[:, :4] = data.Z
    merged = truth.copy()  # features 2 and 3 as one ("2 or 3"), feature 3 removed
    merged[:, 2] = truth[:, 2] | truth[:, 3]
    merged[:, 3] = 0
    X = step._X
    trXX = kernels.block_sq_norms(X, noise)
    assert step._log_joint(merged, X, trXX, noise)[0] > step._log_joint(truth, X, trXX, noise)[0]

    def ends_at(Z):
        m = Z.sum(axis=0)
        return noise._replace(sx2=step._residual_variance(Z, X, m, noise,
                                                          kernels.block_variances(X, noise.cols)))

    searches = iter([merged, truth, merged])
    step._anneal = lambda X_, noise_, trXX_, M=None, groups=None: (
        Z_ := next(searches), X_, ends_at(Z_), None)
    start = step._fresh_start(X, noise, restarts=3)
    assert np.array_equal(start, truth)


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
    read = [steps[0]._X, steps[0].spec.X, *(e["X"] for e in steps[1].entries)]
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


def test_subsample_search_scores_its_rows_as_an_ibp_of_that_size():
    """The start search of a large data set runs on ``init_subsample`` rows, so it compares
    its candidates (restarts, greedy repairs) by the collapsed log joint of an IBP over those
    rows.  Scored as an IBP over all N rows, a feature cost far too much and the searches at
    N = 10^6 ended with 2-5 features for the 4 glyphs, about 2,800 nats below the truth on the
    1,000 rows; the chain then stayed at 17 features, 2 x 10^6 nats below."""
    data = pmi.datasets.block_images(20_000, noise=0.5, seed=2)
    model = lg_model(data.X, 12, alpha=1.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_subsample=300)
    noise = noise_of(step, 0.25)
    rows = np.arange(300)
    Zt = np.zeros((300, 12), dtype=np.int8)
    Zt[:, :4] = data.Z[rows]
    Xs = np.ascontiguousarray(data.X[rows])
    joint = step._log_joint(Zt, Xs, kernels.block_sq_norms(Xs, noise), noise)[0]
    assert joint == pytest.approx(kernels.log_joint_of(Zt, Xs, 0.25, 1.0, 1.0)[0], rel=1e-12)
    step.setup_chain(np.random.default_rng(1), tune=0, draws=10)
    step._assign_rows = lambda *args: None  # the search's own result (rows of the subset)
    for _ in range(2):
        # the search's rows: its first draw from the step's generator
        sub = np.sort(copy.deepcopy(step.rng).choice(20_000, size=300, replace=False))
        Z = step._fresh_start(step._X, noise, restarts=step.init_restarts)
        assert np.array_equal(np.flatnonzero(Z.sum(axis=1) > 0),
                              sub[Z[sub].sum(axis=1) > 0])
        assert (Z.sum(axis=0) > 0).sum() == 4
        Zs, Zts, Xs = Z[sub], np.zeros_like(Z[sub]), np.ascontiguousarray(data.X[sub])
        Zts[:, :4] = data.Z[sub]
        gap = (kernels.log_joint_of(Zs, Xs, 0.25, 1.0, 1.0)[0]
               - kernels.log_joint_of(Zts, Xs, 0.25, 1.0, 1.0)[0])
        assert gap > -30.0, gap


def test_baseline_per_group_is_each_groups_mean():
    """_baseline with per-group offsets (labels with gaps, one block per column or one value
    for all its columns) against a loop over the groups; a plain offset beside them."""
    from pymc_ibp.step_methods.linear_gaussian import _baseline

    rng = np.random.default_rng(3)
    R = rng.normal(size=(40, 7))
    g1, g2 = rng.choice([0, 2, 5], size=40), rng.choice([1, 3], size=40)
    baselines = ((0, 3, True, "b1", False, "g1"), (3, 5, False, "b2", False, "g2"),
                 (5, 7, True, "b3", False, None))
    c = _baseline(R, baselines, [g1, g2, None])
    for k in np.unique(g1):
        np.testing.assert_allclose(c[g1 == k, 0:3], np.broadcast_to(
            R[g1 == k, 0:3].mean(axis=0), ((g1 == k).sum(), 3)))
    for k in np.unique(g2):
        np.testing.assert_allclose(c[g2 == k, 3:5], R[g2 == k, 3:5].mean())
    np.testing.assert_allclose(c[:, 5:7], np.broadcast_to(R[:, 5:7].mean(axis=0), (40, 2)))
