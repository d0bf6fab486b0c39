"""IBPGibbs: uncollapsed Gibbs under any likelihood (Doshi-Velez 2009, §3.1)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import special, stats

import pymc_ibp as pmi
from pymc_ibp.inference.k_max import KMaxProbe
from tests._helpers import all_binary_matrices, chi2_pooled, codes

N, K = 3, 3
A_FIXED = np.array([[2.0, -1.0], [-1.5, 2.0], [1.0, 1.0]])
B_FIXED = np.array([-0.5, -0.5])
X_BIN = np.array([[1, 0], [0, 1], [1, 1]])


def all_z():
    return all_binary_matrices(N, K)


def bernoulli_loglik(Z):
    logits = Z @ A_FIXED + B_FIXED
    return float(np.sum(X_BIN * logits - np.logaddexp(0, logits)))


def ibp_bernoulli_problem(alpha):
    """pmi.IBP prior, logistic likelihood with fixed features: the model, its IBPGibbs step, all
    512 labelled matrices and their exact posterior."""
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        pm.Bernoulli("X", logit_p=Z @ A_FIXED + B_FIXED, observed=X_BIN)
        step = pmi.IBPGibbs([Z])
    mats = all_z()
    value = pt.tensor3("v", dtype="int64")
    prior = pytensor.function([value], pm.logp(pmi.IBP.dist(alpha, shape=(N, K)), value))(mats)
    lp = prior + np.array([bernoulli_loglik(z) for z in mats])
    return model, step, mats, np.exp(lp - special.logsumexp(lp))


def run(step, model, n_sweeps, seed, thin):
    step.setup_chain(np.random.default_rng(seed), tune=0, draws=n_sweeps)
    point = model.initial_point()
    out = []
    for it in range(n_sweeps):
        point, _ = step.step(point)
        if it % thin == 0:
            out.append(point["Z"].copy())
    return np.array(out)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 binds by design
@pytest.mark.slow  # 61 s; IBPGibbs with Bernoulli likelihoods: test_likelihoods.py (default)
def test_ibp_bernoulli_likelihood_exact_posterior():
    """pmi.IBP prior, Bernoulli (logistic) likelihood with fixed features: p(Z | X) by
    enumeration of all 512 labelled matrices vs IBPGibbs visit frequencies (χ²)."""
    alpha = 1.5
    model, step, mats, post = ibp_bernoulli_problem(alpha)
    draws = run(step, model, 30000, seed=1, thin=3)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 binds by design
def test_a_sweep_evaluates_the_likelihood_once_per_column():
    """A Gibbs sweep costs K_max + 1 compiled likelihood evaluations (the rows at the current
    Z, then each column flipped in every row), and the log-likelihood it reports is the one
    at the returned Z."""
    model, step, _, _ = ibp_bernoulli_problem(1.5)
    step.split_merge = step.combination_moves = 0
    step.setup_chain(np.random.default_rng(0), tune=0, draws=5)
    compiled, calls = step.rows._fn, []
    step.rows._fn = lambda point: calls.append(1) or compiled(point)
    point = model.initial_point()
    for _ in range(5):
        calls.clear()
        point, stats = step.step(point)
        ll = float(np.sum(compiled(point)))
        assert stats[0]["ibp_log_lik"] == pytest.approx(ll, abs=1e-9)
    assert len(calls) == K + 1


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 may fill up
def test_model_logp_stat_is_the_log_joint_at_the_returned_point():
    """ibp_model_logp: the model's log density (no Jacobians) at the point step() returns."""
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        pm.Bernoulli("X", logit_p=Z @ A_FIXED + B_FIXED, observed=X_BIN)
        step = pmi.IBPGibbs([Z])
        logp = model.compile_logp(jacobian=False)
    step.setup_chain(np.random.default_rng(3), tune=0, draws=5)
    point = model.initial_point()
    for _ in range(5):
        point, [stats] = step.step(point)
        assert stats["ibp_model_logp"] == pytest.approx(float(logp(point)), rel=1e-12)


def test_bernoulli_matrix_exact_posterior():
    """An explicit Bernoulli Z with per-column p (as under IBPStickBreaking)."""
    p = np.array([0.6, 0.3, 0.1])
    with pm.Model() as model:
        Z = pm.Bernoulli("Z", p=p, shape=(N, K))
        pm.Bernoulli("X", logit_p=Z @ A_FIXED + B_FIXED, observed=X_BIN)
        step = pmi.IBPGibbs([Z])
    mats = all_z()
    lp = np.array([np.sum(z * np.log(p) + (1 - z) * np.log1p(-p)) + bernoulli_loglik(z)
                   for z in mats])
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 20000, seed=2, thin=2)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_auto_assignment_for_non_gaussian_likelihood():
    rng = np.random.default_rng(0)
    X = (rng.random((20, 4)) < 0.3).astype(int)
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(20, 5))
        A = pm.Normal("A", 0.0, 2.0, shape=(5, 4))
        # a Poisson likelihood: a logit Bernoulli one would get PolyaGammaGibbs
        pm.Poisson("X", mu=pm.math.exp(Z @ A - 1.0), observed=X)
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
        names = {cls.__name__: [v.name for v in vs] for cls, vs in selected.items()}
        assert names["IBPGibbs"] == ["Z"]
        assert "A" in names["NUTS"]
        idata = pm.sample(20, tune=20, chains=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
    assert idata["sample_stats"]["ibp_n_active"].dims == ("chain", "draw")


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 may fill up
def test_non_factorising_likelihood_gets_entrywise_updates(caplog):
    """A likelihood that does not factorise over the rows of Z: IBPGibbs says so and falls
    back to entry-wise updates with the whole likelihood (exact; enumeration test in
    test_correlated.py); with factorise=True it refuses."""
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(4, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3,))
        # every observation depends on the column sums of Z: no row factorisation
        pm.Normal("X", mu=pt.sum(Z @ A), sigma=1.0, observed=np.zeros(4))
    with model, caplog.at_level("INFO", logger="pymc"):
        step = pmi.IBPGibbs([Z])
    assert step.joint and step.split_merge == 0 and step.combination_moves == 0
    assert "entry-wise updates with the whole likelihood (12 evaluations" in caplog.text
    assert "needs" not in caplog.text  # a description, not an error (it read like one)
    step.rng = np.random.default_rng(0)
    point, stats = step.step(model.initial_point())
    assert point["Z"].shape == (4, 3) and np.isfinite(stats[0]["ibp_log_lik"])
    with model, pytest.raises(pmi.ModelPatternError, match="factorise"):
        pmi.IBPGibbs([Z], factorise=True)


def test_not_a_binary_matrix_is_an_error():
    with pm.Model():
        x = pm.Normal("x", shape=(3, 2))
        with pytest.raises(pmi.ModelPatternError, match="2-D binary matrix"):
            pmi.IBPGibbs([x])


@pytest.mark.slow  # 86 s; IBPGibbs's exactness with a Gaussian likelihood stays in the
# default suite through the missing-entry enumeration tests below
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_ibpgibbs_with_exact_feature_draws_matches_collapsed_posterior():
    """IBPGibbs on Z alternating with the exact A | Z, X draw (AcceleratedGibbs given only A)
    targets p(Z, A | X): the Z-marginal must match the enumerated collapsed posterior."""
    from tests._helpers import ENUM_X, exact_posterior, lg_model

    k_max, alpha, sx, sa = 3, 1.5, 0.5, 1.0
    mats, post = exact_posterior(ENUM_X, k_max, alpha, sx, sa)
    model = lg_model(ENUM_X, k_max, alpha, sx, sa)
    with model:
        z_step = pmi.IBPGibbs([model["Z"]])
        a_step = pmi.AcceleratedGibbs([model["A"]])
    assert [v.name for v in a_step.vars] == ["A"]
    rng = np.random.default_rng(3)
    z_step.setup_chain(rng, tune=0, draws=1)
    a_step.setup_chain(np.random.default_rng(4), tune=0, draws=1)
    point = model.initial_point()
    out = []
    for it in range(40000):
        point, _ = z_step.step(point)
        point, _ = a_step.step(point)
        if it % 4 == 0:
            out.append(point["Z"].copy())
    counts = np.bincount(codes(np.array(out)), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(out))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_explicit_ibpgibbs_in_a_linear_gaussian_model():
    data = pmi.datasets.block_images(30, seed=0)
    with pm.Model(coords={"obs": range(30), "feature": range(8), "dim": range(36)}):
        Z = pmi.IBP("Z", 1.0, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X, dims=("obs", "dim"))
        idata = pm.sample(10, tune=10, chains=1, step=[pmi.IBPGibbs([Z])], random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
    assert idata["posterior"]["A"].shape == (1, 10, 8, 36)


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_linear_gaussian_chains_start_from_the_start_search(monkeypatch):
    """In a linear-Gaussian model (with NaN entries) a chain from PyMC's default start begins
    at the accelerated step's start search: its first draw has the four glyph features, with A
    drawn given them and no sweep (no flips).  init_z="point" starts at the all-zero Z; a
    user's Z (initvals) is kept and no search runs, unless init_z="prior"."""
    from pymc_ibp.init.search import AnnealedSearch

    data = pmi.datasets.block_images(80, noise=0.3, seed=2)
    X = data.X.copy()
    X[3, 5] = X[40, 0] = np.nan
    searches = []
    search = AnnealedSearch.search
    monkeypatch.setattr(AnnealedSearch, "search",
                        lambda self, *a, **k: searches.append(1) or search(self, *a, **k))
    common = dict(draws=1, tune=0, chains=1, random_seed=4, progressbar=False,
                  compute_convergence_checks=False)
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(80, 8))
        A = pm.Normal("A", 0.0, 1.0, shape=(8, 36))
        pm.Normal("X", mu=Z @ A, sigma=0.3, observed=X)
        auto = pm.sample(step=[pmi.IBPGibbs([Z])], **common)
        assert len(searches) == 1
        point = pm.sample(step=[pmi.IBPGibbs([Z], init_z="point")], **common)
        Z0 = np.zeros((80, 8), dtype="int8")
        Z0[:, 2] = data.Z[:, 0]
        pm.sample(step=[pmi.IBPGibbs([Z])], initvals={"Z": Z0}, **common)
        assert len(searches) == 1
        pm.sample(step=[pmi.IBPGibbs([Z], init_z="prior")], initvals={"Z": Z0}, **common)
        assert len(searches) == 2  # "prior": the search whatever the initial Z
        with pytest.raises(ValueError, match="init_z"):
            pmi.IBPGibbs([Z], init_z="nope")
    z = auto["posterior"]["Z"].values[0, 0]
    a = auto["posterior"]["A"].values[0, 0]
    used = np.flatnonzero(z.sum(axis=0))
    assert len(used) == 4
    match = [int(np.flatnonzero((data.Z == z[:, [k]]).all(axis=0))[0]) for k in used]
    assert sorted(match) == [0, 1, 2, 3]
    assert np.abs(a[used] - data.A[match]).mean() < 0.1
    # scalar stats: the A step (pm.sample's, drawing A only) records none of Z's
    assert auto["sample_stats"]["ibp_flips"].dims == ("chain", "draw")
    assert int(auto["sample_stats"]["ibp_flips"].values[0, 0]) == 0
    assert int(point["sample_stats"]["ibp_n_active"].values[0, 0]) <= 1


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_surrogate_start_finds_the_features_of_binary_data(monkeypatch):
    """A chain from PyMC's default start on binary block images generated from a Bernoulli
    model begins at the surrogate start (init_z="auto"; the model is not linear-Gaussian): its
    first draw has the four glyph features (found on the linear-Gaussian surrogate) and the
    rows of A given them (higher log-odds on each glyph's pixels), with no sweep.
    init_z="point" sweeps from the initial point; a user's Z is kept unless
    init_z="surrogate".  Models without the pattern are told what it needs."""
    from pymc_ibp.step_methods.uncollapsed import IBPGibbs

    data = pmi.datasets.binary_block_images(150, seed=3)
    X = data.X
    common = dict(draws=1, tune=0, chains=1, random_seed=4, progressbar=False,
                  compute_convergence_checks=False)
    starts = []
    start = IBPGibbs._surrogate_start
    monkeypatch.setattr(IBPGibbs, "_surrogate_start",
                        lambda self, p: starts.append(1) or start(self, p))
    with pm.Model():
        Z = pmi.IBP("Z", 2.0, shape=(150, 10))
        A = pm.Normal("A", 0.0, 3.0, shape=(10, 36))
        b = pm.Normal("b", -2.0, 2.0, shape=36)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        # IBPGibbs chosen (pm.sample itself picks PolyaGammaGibbs for this model)
        sur = pm.sample(step=[pmi.IBPGibbs([Z])], **common)
        assert len(starts) == 1
        point = pm.sample(step=[pmi.IBPGibbs([Z], init_z="point")], **common)
        Z0 = np.zeros((150, 10), dtype="int64")
        Z0[:, 0] = 1
        pm.sample(step=[pmi.IBPGibbs([Z])], initvals={"Z": Z0}, **common)
        assert len(starts) == 1  # a user's Z is kept
        pm.sample(step=[pmi.IBPGibbs([Z], init_z="surrogate")], initvals={"Z": Z0}, **common)
        assert len(starts) == 2
        # the start needs A, not the feature moves: with every move off it still applies
        off = dict(split_merge=0, combination_moves=0, feature_moves=0, feature_split_merge=0)
        for init_z in ("auto", "surrogate"):
            step = pmi.IBPGibbs([Z], init_z=init_z, **off)
            assert (step.feature_moves, step.feature_split_merge) == (0, 0)
            pm.sample(step=[step], **common)
        assert len(starts) == 4
    z = sur["posterior"]["Z"].values[0, 0]
    a = sur["posterior"]["A"].values[0, 0]
    for g in range(4):
        agree = [np.mean(z[:, k] == data.Z[:, g]) for k in range(10)]
        k = int(np.argmax(agree))
        assert agree[k] > 0.9, (g, agree)
        on = data.A[g] > 0.5
        assert a[k][on].mean() > a[k][~on].mean() + 2.0, (g, a[k])
    assert int(sur["sample_stats"]["ibp_flips"].values[0, 0]) == 0
    assert int(point["sample_stats"]["ibp_flips"].values[0, 0]) > 0  # a sweep
    with pm.Model():  # no parameter matrix of Z: nothing to set from the surrogate's Z
        Z = pmi.IBP("Z", 2.0, shape=(150, 10))
        w = pm.Normal("w", 0.0, 1.0)
        pm.Poisson("X", mu=pm.math.exp(w * Z.sum(axis=1)), observed=X.sum(axis=1))
        with pytest.raises(pmi.ModelPatternError, match="one parameter matrix A"):
            pmi.IBPGibbs([Z], init_z="surrogate")
    Xm = X.astype(float)
    Xm[2, 3] = np.nan
    with pm.Model():  # missing entries: the surrogate needs the whole matrix
        Z = pmi.IBP("Z", 2.0, shape=(150, 10))
        A = pm.Normal("A", 0.0, 3.0, shape=(10, 36))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=Xm)
        with pytest.raises(pmi.ModelPatternError, match="without missing entries"):
            pmi.IBPGibbs([Z], init_z="surrogate")


def _student_t_block_images(shift, b_initval=None):
    """Block images (N = 60, noise 0.5) plus ``shift`` under a Student-t likelihood with
    mean ``Z @ A`` (``+ b`` per column when ``shift``), its IBPGibbs, and the true point."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=1)
    n, d, k = 60, 36, 10
    with pm.Model() as model:
        Z = pmi.IBP("Z", 2.0, shape=(n, k))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(k, d))
        mu = Z @ A
        if shift:
            mu = mu + pm.Normal("b", 0.0, 5.0, shape=d, initval=b_initval)
        pm.StudentT("X", nu=5, mu=mu, sigma=0.5, observed=data.X + shift)
    step = pmi.IBPGibbs([Z], model=model)
    truth = model.initial_point()
    truth["Z"] = np.zeros((n, k), dtype=np.int8)
    truth["Z"][:, :4] = data.Z
    truth["A"] = np.zeros((k, d))
    truth["A"][:4] = data.A
    if shift:
        truth["b"] = np.full(d, float(shift))
    return model, step, truth


def test_surrogate_start_learns_the_scales_and_offset_of_continuous_data():
    """On continuous data the surrogate start learns its noise and feature scales and, where
    the likelihood's mean has an offset, fits one beside Z: block images (noise 0.5) under a
    Student-t likelihood (IBPGibbs; not linear-Gaussian) start at least as well as the true
    Z and A (row log-likelihood), with and without a per-column offset b on the data plus 3,
    and b starts at the surrogate's offset (near 3).  Measured before: the noise fixed at the
    data's spread kept 2 merged features (about 190 nats below the truth), and without the
    offset b stayed at 0 (134,809 nats below).  A b the user gave is kept; 0/1 data keep
    the fixed scales (no scale step on the surrogate)."""
    for shift in (0.0, 3.0):
        model, step, truth = _student_t_block_images(shift)
        assert step.surrogate.has_offset == bool(shift) and not step.surrogate.binary
        ll_truth = float(np.sum(step.rows(truth)))
        for seed in (0, 1):
            step.setup_chain(np.random.default_rng(seed), 0, 1)
            new, _ = step.step(model.initial_point())
            ll = float(np.sum(step.rows(new)))
            assert ll > ll_truth - 20.0, (shift, seed, ll, ll_truth)
            assert 2 <= int((new["Z"].sum(axis=0) > 0).sum()) <= 9
            if shift:
                assert abs(float(np.mean(new["b"])) - shift) < 0.6, new["b"]
    given = np.full(36, 1.0)
    model, step, _ = _student_t_block_images(3.0, b_initval=given)
    assert step.surrogate.handover is None
    step.setup_chain(np.random.default_rng(0), 0, 1)
    new, _ = step.step(model.initial_point())
    np.testing.assert_array_equal(new["b"], given)
    X = pmi.datasets.binary_block_images(60, seed=3).X
    with pm.Model():
        Z = pmi.IBP("Z", 2.0, shape=(60, 10))
        A = pm.Normal("A", 0.0, 3.0, shape=(10, 36))
        b = pm.Normal("b", -2.0, 2.0, shape=36)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        sur = pmi.IBPGibbs([Z]).surrogate
    assert sur.binary and not sur.has_offset and sur.handover is None


@pytest.mark.parametrize("per_column", [True, False])
def test_surrogate_start_sets_an_offset_per_group(per_column):
    """An offset indexed by the rows' groups (``b[group]``, one row of ``b`` per group, or one
    value per group as ``b[group][:, None]``) starts, group by group, at the surrogate's
    offset: on block images plus 2, 3 or 4 by group under a Student-t likelihood the first
    point is thousands of nats above the start with ``b`` at 0 (what every such model got
    before; a ``b`` the user gives is kept; -1537 against -4786 with one row of ``b`` per
    group, -1513 against -3968 with one value per group, A at its joint mode given Z in
    both), and at least as good as the true Z, A and b."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=1)
    n, d, k = 60, 36, 10
    group = np.arange(n) % 3
    shifts = np.array([2.0, 3.0, 4.0])
    first = {}
    for given in (None, 0.0):
        with pm.Model() as model:
            Z = pmi.IBP("Z", 2.0, shape=(n, k))
            A = pm.Normal("A", 0.0, 2.0, shape=(k, d))
            shape = (3, d) if per_column else 3
            init = None if given is None else np.full(shape, given)
            b = pm.Normal("b", 0.0, 5.0, shape=shape, initval=init)
            offset = b[group] if per_column else b[group][:, None]
            pm.StudentT("X", nu=5, mu=Z @ A + offset, sigma=0.5,
                        observed=data.X + shifts[group][:, None])
            step = pmi.IBPGibbs([Z])
        assert step.surrogate.handover == (None if given is not None else "b")
        step.setup_chain(np.random.default_rng(0), 0, 1)
        new, _ = step.step(model.initial_point())
        first[given] = float(np.sum(step.rows(new)))
        if given is not None:
            np.testing.assert_array_equal(new["b"], init)
            continue
        assert new["b"].shape == np.shape(model.initial_point()["b"])
        # every group's row at the surrogate's one offset, near the mean baseline 3 (up to
        # the mean of a glyph found as its complement, the offset taking it on: the same
        # fit; 3.63 with per_column, where the start keeps the better of two runs)
        assert abs(float(np.mean(new["b"])) - 3.0) < 1.0, new["b"]
        truth = model.initial_point()
        truth["Z"] = np.zeros((n, k), dtype=truth["Z"].dtype)
        truth["Z"][:, :4] = data.Z
        truth["A"] = np.zeros((k, d))
        truth["A"][:4] = data.A
        truth["b"] = shifts[:, None] * np.ones((3, d)) if per_column else shifts.copy()
        assert first[None] > float(np.sum(step.rows(truth))) - 20.0
    assert first[None] > first[0.0] + 2000.0, first


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # noise data, K_max = 6
# spawn (about 30 s) in make test-slow: it failed once, unexplained, in 15 runs (not since,
# also under load, with any hash seed); fork in the default suite
@pytest.mark.parametrize("mp_ctx", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_surrogate_start_of_continuous_data_is_reproducible_across_processes(mp_ctx):
    """The same draws for one seed with cores=1 and cores=2 (fork and spawn) for a Student-t
    model with an offset: the surrogate start with its scale and offset steps uses only the
    chain's rng, and the hand-over of b is part of the chain's first point."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 8)) + 2.0
    with pm.Model() as model:
        Z = pmi.IBP("Z", 2.0, shape=(20, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 8))
        b = pm.Normal("b", 0.0, 5.0, shape=8)
        pm.StudentT("X", nu=5, mu=Z @ A + b, sigma=1.0, observed=X)
    kw = dict(draws=4, tune=4, chains=2, random_seed=7, progressbar=False,
              compute_convergence_checks=False, discard_tuned_samples=False)
    with model:
        surrogate = pmi.IBPGibbs([Z]).surrogate
        assert surrogate.has_offset and not surrogate.binary
        seq = pm.sample(cores=1, **kw)
        par = pm.sample(cores=2, mp_ctx=mp_ctx, **kw)
    for group in ("warmup_posterior", "posterior"):
        for name in ("Z", "A", "b"):
            np.testing.assert_array_equal(seq[group][name].values, par[group][name].values)
    assert not np.array_equal(seq["warmup_posterior"]["Z"].values[0, 0],
                              seq["warmup_posterior"]["Z"].values[1, 0])


# ---------------------------------------------------------------------------------------------
# missing data: NaN in the observed array (PyMC's X_observed + imputed X_unobserved)
# ---------------------------------------------------------------------------------------------
X_GAUSS = np.array([[1.2, -0.3], [np.nan, 0.9], [0.1, 1.1]])
# integer data: mark the missing entry with a mask (NaN in an int array makes NumPy warn on
# the cast)
X_BIN_MISSING = np.ma.masked_array(X_BIN, mask=[[False, False], [True, False], [False, False]])
SIGMA_X = 0.8
MISSING = (1, 0)
# 7,000 kept draws each (every 2nd of 14,000): with the imputed entry counted twice in its
# row's likelihood both tests fail (p of order 1e-107 and 1e-19)
MISSING_DRAWS = 14000


def ibp_prior_logp(mats, alpha):
    value = pt.tensor3("v", dtype="int64")
    return pytensor.function([value], pm.logp(pmi.IBP.dist(alpha, shape=(N, K)), value))(mats)


def sample_z_and_imputed(model, draws, seed, thin):
    """pm.sample with IBPGibbs on Z; X_unobserved gets PyMC's default step (data augmentation)."""
    with model:
        idata = pm.sample(draws, tune=500, chains=1, step=[pmi.IBPGibbs([model["Z"]])],
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
    post = idata["posterior"]
    return post["Z"].values[0, ::thin], post["X_unobserved"].values[0, ::thin, 0]


# 40-50 s: the slow suite; the default suite has the Bernoulli one, and the Gaussian likelihood
# with a missing entry through AcceleratedGibbs (test_linear_gaussian.py)
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entry_gaussian_exact_posterior():
    """Gaussian likelihood, fixed features, X[1, 0] missing.  p(Z | X_obs) by enumeration (the
    missing entry integrated out, i.e. dropped from the likelihood) vs the Z-visits of
    IBPGibbs + NUTS on X_unobserved; and the imputed value given Z must be N((ZA)_10, σ²)."""
    alpha = 1.5
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        pm.Normal("X", mu=Z @ A_FIXED, sigma=SIGMA_X, observed=X_GAUSS)
    mats = all_z()
    obs = ~np.isnan(X_GAUSS)
    mu = mats @ A_FIXED
    loglik = stats.norm.logpdf(X_GAUSS[obs], mu[:, obs], SIGMA_X).sum(axis=1)
    lp = ibp_prior_logp(mats, alpha) + loglik
    post = np.exp(lp - special.logsumexp(lp))
    zs, x_mis = sample_z_and_imputed(model, MISSING_DRAWS, seed=11, thin=2)
    counts = np.bincount(codes(zs), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(zs))
    assert res.pvalue > 1e-3, res
    # imputation: PIT of the missing entry under its conditional given the sampled Z
    u = stats.norm.cdf(x_mis, (zs @ A_FIXED)[:, MISSING[0], MISSING[1]], SIGMA_X)
    res = chi2_pooled(np.bincount((u * 10).astype(int), minlength=10), np.full(10, len(u) / 10))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entry_bernoulli_exact_posterior():
    """Bernoulli likelihood, fixed features, X[1, 0] missing.  The Z-marginal vs p(Z | X_obs)
    (missing entry dropped), and the joint (Z, x_10) visits of IBPGibbs + BinaryGibbsMetropolis
    on X_unobserved vs p(Z, x_10 | X_obs) over all 512 x 2 states."""
    alpha = 1.5
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        pm.Bernoulli("X", logit_p=Z @ A_FIXED + B_FIXED, observed=X_BIN_MISSING)
    mats = all_z()
    obs = ~X_BIN_MISSING.mask
    logits = mats @ A_FIXED + B_FIXED
    ll_entries = X_BIN * logits - np.logaddexp(0, logits)
    lp = ibp_prior_logp(mats, alpha) + ll_entries[:, obs].sum(axis=1)
    post = np.exp(lp - special.logsumexp(lp))
    zs, x_mis = sample_z_and_imputed(model, MISSING_DRAWS, seed=12, thin=2)
    counts = np.bincount(codes(zs), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(zs))
    assert res.pvalue > 1e-3, res
    # joint over (Z, x_10): p(x_10 = 1 | Z) = sigmoid((ZA + b)_10)
    p1 = special.expit(logits[:, MISSING[0], MISSING[1]])
    joint = np.stack([post * (1 - p1), post * p1], axis=1).ravel()
    counts = np.bincount(2 * codes(zs) + x_mis.astype(int), minlength=2 * len(mats))
    counts = counts.reshape(-1, 2)[codes(mats)].ravel()
    res = chi2_pooled(counts, joint * len(zs))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entries_are_attributed_to_their_rows():
    """Row log-likelihoods with missing entries (one in row 1, all of row 3): each observed
    and each imputed entry counts in its own row, nothing is lost or double counted."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 3))
    X[1, 2] = X[3, :] = np.nan
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(4, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 3))
        pm.Normal("X", mu=Z @ A, sigma=0.7, observed=X)
        step = pmi.IBPGibbs([Z])
    np.testing.assert_array_equal(step.rows.entry_rows["X_unobserved"], [1, 3, 3, 3])
    point = model.initial_point()
    point["Z"] = np.array([[1, 0], [1, 1], [0, 1], [1, 1]])
    point["A"] = rng.normal(size=(2, 3))
    point["X_unobserved"] = rng.normal(size=4)
    full = X.copy()
    full[np.isnan(X)] = point["X_unobserved"]
    expected = stats.norm.logpdf(full, point["Z"] @ point["A"], 0.7).sum(axis=1)
    np.testing.assert_allclose(step.rows(point), expected, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
@pytest.mark.parametrize("missing", ["whole row", "one entry"])
def test_missing_entries_of_a_multivariate_likelihood(missing):
    """MvNormal rows: a whole missing row is cut out with a 1-D row mask; one missing entry
    makes PyMC fall back to a PartialObservedRV whose observed part carries the full per-row
    logp (imputed value included) and whose imputed part has no terms of its own."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4, 2))
    if missing == "whole row":
        X[2] = np.nan
    else:
        X[2, 1] = np.nan
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(4, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        pm.MvNormal("X", mu=Z @ A, cov=0.5 * np.eye(2), observed=X)
        step = pmi.IBPGibbs([Z])
    point = model.initial_point()
    point["Z"] = np.array([[1, 0], [1, 1], [0, 1], [1, 1]])
    point["A"] = rng.normal(size=(2, 2))
    point["X_unobserved"] = rng.normal(size=point["X_unobserved"].shape)
    full = X.copy()
    full[np.isnan(X)] = point["X_unobserved"].ravel()
    expected = stats.norm.logpdf(full, point["Z"] @ point["A"], np.sqrt(0.5)).sum(axis=1)
    np.testing.assert_allclose(step.rows(point), expected, rtol=1e-10)


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_infinite_observation_is_an_error():
    X = np.array([[0.3, np.nan, 1.0], [0.2, 0.1, -0.4], [np.inf, 0.5, -np.inf]])
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(3, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 3))
        pm.Normal("X", mu=Z @ A, sigma=1.0, observed=X)
        with pytest.raises(ValueError, match=r"'X' contains inf at \(row 2, column 0\)"):
            pmi.IBPGibbs([Z])


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_uncollapsed_split_merge_move_leaves_posterior_invariant():
    """i.i.d. exact-posterior draws of Z (Bernoulli likelihood, fixed features) pushed through
    IBPGibbs's split–merge proposals alone still follow the exact posterior (χ²)."""
    alpha = 1.5
    model, step, mats, post = ibp_bernoulli_problem(alpha)
    accepted, res = push_exact_draws(step.row_moves.split_merge_move, model, step, mats, post,
                                     alpha, 12000, seed=4)
    assert accepted > 0.05 * 12000
    assert res.pvalue > 1e-3, res


def push_exact_draws(move, model, step, mats, post, alpha, n, seed):
    """Push ``n`` i.i.d. exact-posterior draws through two applications of ``move`` (one of
    IBPGibbs's Metropolis–Hastings moves); returns the accepted count and the pooled χ² test
    of the results against ``post``.  As in ``IBPGibbs.step``, the move is given the rows'
    log-likelihoods at the current ``Z`` (computed for the first application, kept while
    ``Z`` does not change)."""
    step.setup_chain(np.random.default_rng(3), tune=0, draws=1)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(mats), size=n, p=post)
    trial = model.initial_point()
    out = np.empty(n, dtype=np.int64)
    accepted = 0
    for j, i in enumerate(idx):
        Zn = mats[i].copy()
        cur = step.rows.at(trial, Zn.copy())
        for _ in range(2):
            if cur is None:
                cur = step.rows.at(trial, Zn.copy())
            acc, Zn = move(step.rng, Zn, trial, alpha, 1.0, cur)
            accepted += acc
            cur = None if acc else cur
        out[j] = codes(Zn[None])[0]
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    return accepted, chi2_pooled(counts, post * n)


@pytest.mark.parametrize("k_max", [3, 4])
def test_uncollapsed_combination_move_leaves_posterior_invariant(k_max):
    """i.i.d. exact-posterior draws of Z (Bernoulli likelihood, fixed features; A_2 is close to
    A_0 + A_1, a motif) pushed through IBPGibbs's dissolve / compose proposals alone still
    follow the exact posterior (χ² over all 2^(3 K_max) labelled matrices)."""
    alpha = 2.0
    A = np.vstack([A_FIXED, [[1.2, 0.8]]])[:k_max]
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(N, k_max))
        pm.Bernoulli("X", logit_p=Z @ A + B_FIXED, observed=X_BIN)
        step = pmi.IBPGibbs([Z])
    mats = all_binary_matrices(N, k_max)
    value = pt.tensor3("v", dtype="int64")
    prior = pytensor.function(
        [value], pm.logp(pmi.IBP.dist(alpha, shape=(N, k_max)), value))(mats)
    logits = mats @ A + B_FIXED
    lp = prior + np.sum(X_BIN * logits - np.logaddexp(0, logits), axis=(1, 2))
    post = np.exp(lp - special.logsumexp(lp))
    accepted, res = push_exact_draws(step.row_moves.combination_move, model, step, mats, post,
                                     alpha, 30000, seed=5)
    assert accepted > 0.02 * 30000, accepted
    assert res.pvalue > 1e-3, res


def _a_given_z(rng, Z, X, sx, sa):
    """A draw of A | Z, X for X ~ Normal(Z @ A, sx), A ~ Normal(0, sa) (every column of A
    Gaussian with precision P = Z'Z / sx² + I / sa²), and the Cholesky factor of P."""
    P = Z.T @ Z / sx**2 + np.eye(Z.shape[1]) / sa**2
    L = np.linalg.cholesky(P)
    mean = np.linalg.solve(P, Z.T @ X / sx**2)
    eps = rng.standard_normal(mean.shape)
    return mean + np.linalg.solve(L.T, eps), mean, L


def push_exact_joint_draws(move, model, step, k_max, X, alpha, sx, sa, n, seed, moves=2):
    """Push ``n`` exact draws of (Z, A) from p(Z, A | X) (linear-Gaussian model; Z from the
    enumerated collapsed posterior, A from its Gaussian conditional) through ``moves``
    applications of ``move`` (one of IBPGibbs's moves on a feature and its parameters).
    Returns the accepted count, the χ² test of Z against the posterior and the KS test of A
    whitened by its exact conditional given the new Z."""
    from tests._helpers import exact_posterior

    mats, post = exact_posterior(X, k_max, alpha, sx, sa)
    step.setup_chain(np.random.default_rng(3), tune=0, draws=1)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(mats), size=n, p=post)
    out = np.empty(n, dtype=np.int64)
    white = []
    accepted = 0
    start = model.initial_point()  # compiled once: a fresh copy per draw below
    for j, i in enumerate(idx):
        Zn = mats[i].astype(np.int8)
        trial = {name: np.copy(value) for name, value in start.items()}
        trial["A"] = _a_given_z(rng, Zn.astype(float), X, sx, sa)[0]
        for _ in range(moves):
            acc, Zn = move(step.rng, Zn, trial, alpha, 1.0)
            accepted += acc
        out[j] = codes(Zn[None])[0]
        _, mean, L = _a_given_z(rng, Zn.astype(float), X, sx, sa)
        white.append((L.T @ (trial["A"] - mean)).ravel())
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    return accepted, chi2_pooled(counts, post * n), stats.kstest(np.concatenate(white), "norm")


def _feature_move_check(move, X, k_max, n, moves, min_rate, alpha=2.0, sx=0.5, sa=1.0):
    """:func:`push_exact_joint_draws` through ``moves`` proposals of the feature move named
    ``move`` of an IBPGibbs of the linear-Gaussian IBP on ``X`` (3 rows); asserts an
    acceptance rate above ``min_rate`` and χ² and KS p-values above 1e-3."""
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(3, k_max))
        A = pm.Normal("A", 0.0, sa, shape=(k_max, 2))
        pm.Normal("X", mu=Z @ A, sigma=sx, observed=X)
        step = pmi.IBPGibbs([Z], feature_params=True)
    accepted, res, ks = push_exact_joint_draws(getattr(step.features, move), model, step,
                                               k_max, X, alpha, sx, sa, n, seed=11,
                                               moves=moves)
    rate = accepted / (moves * n)
    print(move, k_max, rate, res.pvalue, ks.pvalue)
    assert rate > min_rate, rate
    assert res.pvalue > 1e-3, res
    assert ks.pvalue > 1e-3, ks


@pytest.mark.parametrize("k_max,rows", [(2, 1), (3, 1), (3, 3)])
def test_feature_birth_death_leaves_the_joint_posterior_invariant(k_max, rows):
    """Exact draws of (Z, A) from p(Z, A | X) — Z from the enumerated collapsed posterior, A
    from its Gaussian conditional — pushed through two feature birth / death proposals (a
    new feature for one row, or for a group of rows seeded by an anchor row, with its row of A
    from a Laplace approximation, or the reverse)
    still follow it: χ² for Z, and A whitened by its exact conditional given the new Z is
    standard normal (KS)."""
    from tests._helpers import ENUM_X

    alpha, sx, sa = 2.0, 0.5, 1.0
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(3, k_max))
        A = pm.Normal("A", 0.0, sa, shape=(k_max, 2))
        pm.Normal("X", mu=Z @ A, sigma=sx, observed=ENUM_X)
        step = pmi.IBPGibbs([Z], feature_params=True, feature_rows=rows)
    assert step.features.a_name == "A"
    n = 6000
    accepted, res, ks = push_exact_joint_draws(step.features.birth_death, model, step, k_max,
                                               ENUM_X, alpha, sx, sa, n, seed=11)
    print(k_max, rows, accepted / (2 * n), res.pvalue, ks.pvalue)
    assert accepted > 0.1 * 2 * n, accepted
    assert res.pvalue > 1e-3, res
    assert ks.pvalue > 1e-3, ks


@pytest.mark.parametrize("k_max", [3, 4])
def test_feature_split_merge_leaves_the_joint_posterior_invariant(k_max):
    """Exact draws of (Z, A) from p(Z, A | X) pushed through four split / merge proposals of a
    feature with its parameters (two anchor rows seed the split features, the other rows
    allocated by their likelihood under the seeds, both rows of A drawn from Laplace
    approximations; or the union with parameters fitted to it) still follow it: χ² for Z, KS
    for A whitened by its exact conditional given the new Z.  The data has two rows that
    share a pattern and one that holds the sum of two, so both splits and merges are
    accepted."""
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    _feature_move_check("split_merge", X, k_max, n=3000, moves=4, min_rate=0.05)


@pytest.mark.parametrize("k_max", [3, 4])
def test_feature_fold_leaves_the_joint_posterior_invariant(k_max):
    """Exact draws of (Z, A) from p(Z, A | X) pushed through four fold / unfold proposals (two
    columns with the same owners folded into one with the sum of their parameters, or a
    column copied into an empty slot with its parameters shared out) still follow it: χ² for
    Z, KS for A whitened by its exact conditional given the new Z.  Two rows with one
    pattern and a third with none give the posterior mass on duplicated columns."""
    X = np.array([[1.5, 0.5], [1.5, 0.5], [0.0, 0.0]])
    _feature_move_check("fold", X, k_max, n=8000, moves=4, min_rate=0.05)


@pytest.mark.parametrize("k_max", [3, 4])
def test_feature_pair_triple_leaves_the_joint_posterior_invariant(k_max):
    """Exact draws of (Z, A) from p(Z, A | X) pushed through eight merge / unmerge proposals
    between a pair of overlapping features and the merged triple that fits the same (their
    union with the sum of their parameters and two correction features, the parameters mapped
    with unit Jacobian) still follow it: χ² for Z, KS for A whitened by its exact conditional
    given the new Z.  Two rows with one pattern each and a third with their sum give the
    posterior mass on both forms (about 1% of the proposals accepted; with the selection
    ratio E / (K+ + 1) left out, χ² p = 7e-9 at K_max = 3)."""
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    _feature_move_check("pair_triple", X, k_max, n=6000, moves=8, min_rate=0.005, alpha=3.0,
                        sx=0.3)


def test_feature_fold_counts_only_the_rows_the_likelihood_sees():
    """Z = M[c] with fixed labels c = (0, 0, 1): rows 2 and 3 of M are seen by no
    observation, so two columns are one feature whenever they agree on rows 0 and 1.  Exact
    draws of (M, A) from p(M, A | X) (M enumerated over its 2^(4 K_max) values, A from its
    Gaussian conditional given M[c]) pushed through four fold / unfold proposals still follow
    it (χ² for M, KS for A whitened), and folds of columns that differ on the unseen rows are
    accepted."""
    from tests._helpers import ibp_logp_fn

    alpha, sx, sa, k_max = 2.0, 0.5, 1.0, 3
    X = np.array([[1.5, 0.5], [1.5, 0.5], [0.0, 0.0]])
    labels = np.array([0, 0, 1])
    with pm.Model() as model:
        M = pmi.IBP("M", alpha, shape=(4, k_max))
        A = pm.Normal("A", 0.0, sa, shape=(k_max, 2))
        pm.Normal("X", mu=M[labels] @ A, sigma=sx, observed=X)
        step = pmi.IBPGibbs([M], feature_params=True)
    mats = all_binary_matrices(4, k_max)
    lp = ibp_logp_fn(4, k_max, alpha, 1.0)(mats)
    for i, Mi in enumerate(mats):
        Zo = Mi[labels].astype(float)
        cov = sa**2 * Zo @ Zo.T + sx**2 * np.eye(3)
        lp[i] += sum(stats.multivariate_normal.logpdf(X[:, j], np.zeros(3), cov)
                     for j in range(2))
    post = np.exp(lp - special.logsumexp(lp))
    step.setup_chain(np.random.default_rng(3), tune=0, draws=1)
    rng = np.random.default_rng(11)
    n, moves = 8000, 4
    idx = rng.choice(len(mats), size=n, p=post)
    out = np.empty(n, dtype=np.int64)
    white, accepted, unseen_folds = [], 0, 0
    start = model.initial_point()
    for j, i in enumerate(idx):
        Mn = mats[i].astype(np.int8)
        trial = {name: np.copy(value) for name, value in start.items()}
        trial["A"] = _a_given_z(rng, Mn[labels].astype(float), X, sx, sa)[0]
        for _ in range(moves):
            before = Mn
            acc, Mn = step.features.fold(step.rng, Mn, trial, alpha, 1.0,
                                         step.rows.rows_seen(trial))
            accepted += acc
            if acc and Mn.sum() < before.sum():
                gone = int(np.flatnonzero(before.sum(0) != Mn.sum(0))[0])
                unseen_folds += any(not np.array_equal(before[2:, gone], before[2:, k])
                                    for k in np.flatnonzero(Mn.sum(0)))
        out[j] = codes(Mn[None])[0]
        _, mean, L = _a_given_z(rng, Mn[labels].astype(float), X, sx, sa)
        white.append((L.T @ (trial["A"] - mean)).ravel())
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * n)
    ks = stats.kstest(np.concatenate(white), "norm")
    print(accepted / (moves * n), unseen_folds, res.pvalue, ks.pvalue)
    assert accepted > 0.05 * moves * n, accepted
    assert unseen_folds > 100, unseen_folds
    assert res.pvalue > 1e-3, res
    assert ks.pvalue > 1e-3, ks


@pytest.mark.parametrize("bad,where", [(2, "row 1, column 0"), (-1, "row 2, column 1")])
def test_non_binary_data_under_a_bernoulli_likelihood_is_an_error(bad, where):
    """Counts or negative values observed through pm.Bernoulli (e.g. the noisy-detection or
    leaky noisy-or likelihoods) are named at their position, not turned into a -inf logp."""
    X = np.array([[1, 0], [0, 1], [1, 1]])
    r, c = (int(x) for x in where.replace("row ", "").replace("column ", "").split(", "))
    X[r, c] = bad
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(3, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        f = pm.Beta("f", 1.0, 20.0)
        m = pm.Beta("m", 1.0, 20.0)
        pm.Bernoulli("X", p=pmi.likelihoods.noisy_detection(Z, pm.math.abs(A), f, m),
                     observed=X)
        with pytest.raises(pmi.DataError, match=rf"contains {bad} at \({where}\).*0 and 1"):
            pmi.IBPGibbs([Z])


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 6 binds at once
def test_parallel_chains_reproducible_beside_nuts():
    """IBPGibbs (with its feature birth / death moves, which change A) beside NUTS: the same
    draws for one seed with cores=1 and cores=2."""
    rng = np.random.default_rng(0)
    X = (rng.random((20, 8)) < 0.3).astype("int64")
    with pm.Model():
        Z = pmi.IBP("Z", 1.5, shape=(20, 6))
        A = pm.Normal("A", 0.0, 2.0, shape=(6, 8))
        b = pm.Normal("b", -1.0, 2.0, shape=8)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        kw = dict(draws=8, tune=8, chains=2, random_seed=5, progressbar=False,
                  compute_convergence_checks=False)
        seq = pm.sample(cores=1, step=[pmi.IBPGibbs([Z]), pm.NUTS([A, b])], **kw)
        par = pm.sample(cores=2, step=[pmi.IBPGibbs([Z]), pm.NUTS([A, b])], **kw)
    for name in ("Z", "A", "b"):
        np.testing.assert_array_equal(seq["posterior"][name].values,
                                      par["posterior"][name].values)
    assert int(seq["sample_stats"]["ibp_feature_move_accepted"].sum()) > 0
    assert int(seq["sample_stats"]["ibp_feature_split_merge_accepted"].sum()) > 0


def test_a_binding_k_max_is_told_how_large_it_should_be():
    """Poisson counts of 4 planted glyphs with K_max = 2: the truncation warning carries the
    surrogate's K_max probe (K+ of about 4 with room for more features: K_max >= 6 or so),
    the stat ibp_kmax_suggested holds it from then on, and the chain's own draws are the same
    as with the probe left out (it draws from a spawned generator)."""
    rng = np.random.default_rng(4)
    glyphs = np.asarray(pmi.datasets.BLOCK_GLYPHS, dtype=float)
    Z0 = (rng.random((120, 4)) < 0.4).astype(int)
    Y = rng.poisson(np.exp(Z0 @ (1.5 * glyphs)))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(120, 2))
        A = pm.Normal("A", 0.0, 2.0, shape=(2, 36))
        pm.Poisson("Y", pm.math.exp(Z @ A), observed=Y)
        step = pmi.IBPGibbs([Z], feature_moves=0, feature_split_merge=0)

    def chain(probe):
        if not probe:
            step.surrogate.probe_k_max = lambda *a, **k: KMaxProbe(np.array([3]), 3, False, 7)
        step.setup_chain(np.random.default_rng(1), tune=0, draws=4)
        point, zs, stats = model.initial_point(), [], []
        for _ in range(4):
            point, st = step.step(point)
            zs.append(point["Z"].copy())
            stats.append(st[0]["ibp_kmax_suggested"])
        return np.array(zs), stats

    with pytest.warns(pmi.TruncationWarning, match=r"reached K\+ = \d+ in 30 sweeps.*use "
                      r"K_max >= (\d+)") as caught:
        zs, stats = chain(True)
    suggested = int(str(caught[0].message).split("K_max >= ")[1].split(":")[0])
    assert suggested >= 5 and stats[-1] == suggested and stats[0] == 0
    with pytest.warns(pmi.TruncationWarning, match="use K_max >= 7"):
        zs2, _ = chain(False)
    np.testing.assert_array_equal(zs, zs2)
