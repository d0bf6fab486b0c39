"""Composition: natural PyMC models around an IBP get the fast samplers, or are told why not."""

import logging

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.sampling.mcmc import assign_step_methods

import pymc_ibp as pmi
from pymc_ibp import kernels

N, K, D = 150, 12, 36
DATA = pmi.datasets.block_images(N, noise=0.5, seed=11)
OFFSET = np.linspace(-1.0, 1.0, D)


def assigned(model):
    with model:
        _, sel = assign_step_methods(model)
    return {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}


def sample(model, **kw):
    opts = dict(tune=150, draws=150, chains=1, random_seed=3, progressbar=False,
                compute_convergence_checks=False)
    opts.update(kw)
    with model:
        return pm.sample(**opts)


def true_features_point(model):
    """The model's initial point with Z and A set to the data's true features."""
    Zt = np.zeros((N, K), dtype=np.int64)
    Zt[:, :4] = DATA.Z
    At = np.zeros((K, D))
    At[:4] = DATA.A
    point = model.initial_point()
    point.update(Z=Zt, A=At)
    return point, Zt, At


def lg_model(mean="plain", X=None, offset=False):
    X = DATA.X if X is None else X
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(K, D))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        mu = {"plain": lambda: Z @ A, "dot": lambda: pt.dot(Z, A),
              "mathdot": lambda: pm.math.dot(Z, A)}[mean]()
        if offset:
            b = pm.Normal("b", 0.0, 2.0, shape=D)
            mu = mu + b
        mu = pm.Deterministic("mu", mu)
        pm.Normal("X", mu=mu, sigma=sigma_x, observed=X)
    return model


def assert_recovered(post, z="Z", sigma="sigma_x", truth=0.5, last=30):
    """The answer on the simulated block images: the 4 glyphs as the large features (median over
    the last draws) and the true noise scale inside the 99% posterior interval."""
    Z = post[z].values[0, -last:]
    large = [int((zz.sum(axis=0) > 10).sum()) for zz in Z]
    assert np.median(large) == 4, large
    lo, hi = np.quantile(post[sigma].values.ravel(), [0.005, 0.995])
    assert lo - 0.01 < truth < hi + 0.01, (lo, hi)


@pytest.mark.parametrize("mean", ["plain", "dot", "mathdot"])
def test_deterministic_and_dot_forms_get_the_fast_step(mean):
    model = lg_model(mean)
    got = assigned(model)
    assert got["AcceleratedGibbs"] == ["A", "Z"]
    assert got["IBPScaleSlice"] == ["sigma_a_log__", "sigma_x_log__"]
    assert_recovered(sample(model)["posterior"])


def test_offset_gets_its_exact_gaussian_update_and_is_recovered():
    model = lg_model(X=DATA.X + OFFSET, offset=True)
    got = assigned(model)
    assert got["AcceleratedGibbs"] == ["A", "Z"] and got["IBPOffsetGibbs"] == ["b"]
    idata = sample(model)
    post = idata["posterior"]
    sx = post["sigma_x"].values.ravel()
    assert abs(sx.mean() - 0.5) < 4 * sx.std() + 0.02
    # the offset is identified only up to what the features absorb; the fit is what counts
    Z, A, b = (post[v].values[0, -30:] for v in ("Z", "A", "b"))
    signal = DATA.Z @ DATA.A + OFFSET
    mse = np.mean([np.mean((z @ a + bb - signal) ** 2) for z, a, bb in zip(Z, A, b,
                                                                            strict=True)])
    assert mse < 0.05, mse


def test_offset_conditional_moments():
    """IBPOffsetGibbs draws b from its exact conditional: mean and variance of many draws at a
    fixed (Z, A, sigma_x) match the conjugate normal–normal formula."""
    model = lg_model(X=DATA.X + OFFSET, offset=True)
    with model:
        step = pmi.IBPOffsetGibbs([model["b"]])
    step.setup_chain(np.random.default_rng(0), 0, 10)
    point, Zt, At = true_features_point(model)
    point["sigma_x_log__"] = np.log(0.5)
    draws = np.array([step.step(point)[0]["b"] for _ in range(4000)])
    resid = (DATA.X + OFFSET) - Zt @ At
    prec = 1 / 2.0**2 + N / 0.25
    mean = (resid.sum(axis=0) / 0.25) / prec
    se = np.sqrt(1 / prec / len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 5 * se)
    np.testing.assert_allclose(draws.var(axis=0), 1 / prec, rtol=0.15)


def test_precision_parameterisation_gets_the_fast_z_step():
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        tau = pm.Gamma("tau", 2.0, 0.5)
        pm.Normal("X", mu=Z @ A, tau=tau, observed=DATA.X)
    got = assigned(model)
    assert got["AcceleratedGibbs"] == ["A", "Z"]
    idata = sample(model)
    tau = idata["posterior"]["tau"].values.ravel()
    assert abs(tau.mean() - 4.0) < 0.5  # 1 / 0.5**2


def test_inf_in_the_data_is_a_clear_error_not_a_silent_fallback():
    X = DATA.X.copy()
    X[17, 3] = np.inf
    model = lg_model(X=X)
    with pytest.raises(pmi.DataError, match=r"inf at \(row 17, column 3\)"):
        assigned(model)


def test_fallback_says_why(caplog):
    X = (DATA.X > 0.5).astype("int64")
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        pm.Poisson("X", mu=pm.math.exp(Z @ A), observed=X)
    with caplog.at_level(logging.INFO, logger="pymc"), model:
        pm.sample(tune=2, draws=2, chains=1, progressbar=False, compute_convergence_checks=False,
                  random_seed=1)
    msgs = [r.getMessage() for r in caplog.records if "AcceleratedGibbs does not apply" in
            r.getMessage()]
    assert msgs and "'Z'" in msgs[0] and "No Normal likelihood" in msgs[0]


def test_a_logit_model_gets_the_polya_gamma_step_or_is_told_why_not(caplog):
    """Bernoulli(logit_p = Z @ A + b): PolyaGammaGibbs takes Z, A and b; with A's prior mean
    not zero IBPGibbs takes Z and the log line says why the Pólya-Gamma step does not apply."""
    X = (DATA.X > 0.5).astype("int64")
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", -1.0, 2.0, shape=D)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
    assert assigned(model)["PolyaGammaGibbs"] == ["A", "Z", "b"]
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.5, 1.0, shape=(K, D))
        pm.Bernoulli("X", logit_p=Z @ A, observed=X)
    assert assigned(model)["IBPGibbs"] == ["Z"]
    with caplog.at_level(logging.INFO, logger="pymc"), model:
        pm.sample(tune=2, draws=2, chains=1, progressbar=False, compute_convergence_checks=False,
                  random_seed=1)
    msgs = [r.getMessage() for r in caplog.records if "PolyaGammaGibbs does not apply" in
            r.getMessage()]
    assert msgs and "'A' must have mean 0" in msgs[0]


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_two_ibps_default_assignment_and_per_matrix_stats():
    d2 = pmi.datasets.block_images(100, noise=0.5, seed=12)
    with pm.Model() as model:
        a1 = pm.Gamma("a1", 1.0, 1.0)
        a2 = pm.Gamma("a2", 1.0, 1.0)
        Z1 = pmi.IBP("Z1", a1, shape=(N, 6))
        Z2 = pmi.IBP("Z2", a2, shape=(100, 3))  # too few slots on purpose: K+ differs
        A1 = pm.Normal("A1", 0.0, 1.0, shape=(6, D))
        A2 = pm.Normal("A2", 0.0, 1.0, shape=(3, D))
        pm.Normal("X1", mu=Z1 @ A1, sigma=pm.HalfNormal("s1", 1.0), observed=DATA.X)
        pm.Normal("X2", mu=Z2 @ A2, sigma=pm.HalfNormal("s2", 1.0), observed=d2.X)
    idata = sample(model, tune=60, draws=40)
    ss = idata["sample_stats"]
    for z in ("Z1", "Z2"):
        for stat in ("ibp_n_active", "ibp_log_joint", "ibp_alpha_accept", "ibp_scale_evals"):
            assert f"{stat}__{z}" in ss
    s1 = pmi.summary(idata, z_name="Z1", var_names=["a1"])
    with pytest.warns(pmi.UntrustedChainsWarning, match="K_max = 3 binds: .* of 'Z2'"):
        s2 = pmi.summary(idata, z_name="Z2", var_names=["a2"])
    k1 = float(ss["ibp_n_active__Z1"].mean())
    k2 = float(ss["ibp_n_active__Z2"].mean())
    assert s1.loc["ibp_n_active", "mean"] == pytest.approx(k1, abs=0.01)
    assert s2.loc["ibp_n_active", "mean"] == pytest.approx(k2, abs=0.01)
    assert k2 <= 3 < k1 + 0.5
    assert np.median([int((z.sum(axis=0) > 10).sum())
                      for z in idata["posterior"]["Z1"].values[0, -20:]]) == 4
    rel = pmi.relabel(idata, z_name="Z2", a_name="A2")
    assert rel["posterior"]["Z2"].shape == idata["posterior"]["Z2"].shape


def test_observed_ibp_learns_alpha_and_features():
    Zk = np.zeros((N, K), dtype=np.int64)
    Zk[:, :4] = DATA.Z
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(N, K), observed=Zk)
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=DATA.X)
    got = assigned(model)
    assert got == {"IBPAlphaGibbs": ["alpha_log__"], "AcceleratedGibbs": ["A"]}
    idata = sample(model, tune=50, draws=200)
    A_mean = idata["posterior"]["A"].mean(("chain", "draw")).values
    assert np.abs(A_mean[:4] - DATA.A).mean() < 0.1
    # K+ = 4 with H_150 ≈ 5.6: alpha | Z ~ Gamma(1 + 4, 1 + 5.6) (truncation negligible)
    al = idata["posterior"]["alpha"].values.ravel()
    assert abs(al.mean() - 5 / 6.6) < 0.15


@pytest.mark.parametrize("bad", [0.5, 2, -1])
def test_observed_ibp_rejects_non_binary_values(bad):
    Zk = np.zeros((5, 3))
    Zk[2, 1] = bad
    with pm.Model(), pytest.raises(pmi.DataError, match=r"binary.*\(2, 1\)"):
        pmi.IBP("Z", 1.0, shape=(5, 3), observed=Zk)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto:UserWarning")  # 120 draws
def test_loo_works_on_the_readme_model_without_initvals():
    model = lg_model()
    idata = sample(model, tune=60, draws=60, chains=2, cores=1)
    with model:
        pm.compute_log_likelihood(idata, progressbar=False)
    assert idata["log_likelihood"]["X"].shape == (2, 60, N, D)  # per entry
    loo = az.loo(idata, var_name="X")
    assert np.isfinite(loo.elpd)


def test_interrupt_returns_the_partial_trace(monkeypatch):
    """A KeyboardInterrupt inside the IBP step (as Ctrl-C delivers it) ends sampling with the
    draws so far, as PyMC does for its own steps (cores=1)."""
    model = lg_model()
    calls = {"n": 0}
    original = pmi.AcceleratedGibbs._sweep

    def sweep(self, *args):
        calls["n"] += 1
        if calls["n"] == 40:
            raise KeyboardInterrupt
        return original(self, *args)

    monkeypatch.setattr(pmi.AcceleratedGibbs, "_sweep", sweep)
    idata = sample(model, tune=10, draws=100, chains=1, cores=1)
    assert 0 < idata["posterior"].sizes["draw"] < 100


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto:UserWarning")
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # 50 iterations only
def test_loo_works_on_a_bernoulli_model():
    X = (DATA.X > 0.5).astype("int64")
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, 6))
        A = pm.Normal("A", 0.0, 2.0, shape=(6, D))
        b = pm.Normal("b", 0.0, 2.0, shape=D)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
    # the offset b: without it a row whose Z stays empty has the same log-likelihood
    # (D log 1/2) in every draw, and the Pareto fit of its importance ratios fails ("All tail
    # values are the same")
    idata = sample(model, tune=60, draws=60, chains=2, cores=1)
    with model:
        pm.compute_log_likelihood(idata, progressbar=False)
    assert np.isfinite(az.loo(idata, var_name="X").elpd)


@pytest.mark.parametrize("shape", [(), (N, 1)])
def test_offset_shapes_scalar_and_per_row(shape):
    """A scalar or per-row offset: the conditional mean of b at the true (Z, A) recovers it."""
    rng = np.random.default_rng(5)
    true_b = rng.normal(0.0, 1.0, size=shape)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 0.0, 2.0, shape=shape)
        pm.Normal("X", mu=Z @ A + b, sigma=0.5, observed=DATA.X + true_b)
    assert assigned(model)["IBPOffsetGibbs"] == ["b"]
    with model:
        step = pmi.IBPOffsetGibbs([model["b"]])
    step.setup_chain(np.random.default_rng(0), 0, 10)
    point, _, _ = true_features_point(model)
    draws = np.array([step.step(point)[0]["b"] for _ in range(200)])
    per_entry = 0.5 / np.sqrt(D if shape else N * D)  # posterior sd of b
    assert np.abs(draws.mean(axis=0) - true_b).max() < 5 * per_entry + 0.01


KINDS = ["scalar", "per-column", "per-row", "per-group", "one-per-group", "group-plus-column"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_offset_is_read_as_one_row_or_one_row_per_group(kind, monkeypatch):
    """At 10^6 rows an N x D copy of an offset costs as much as the data at every step: the
    linear-Gaussian steps read an offset that is the same for every row as 1 x D, b[group]
    (b of shape (G, D), or (G,) as b[group][:, None]) as its G rows and every row's group,
    and only other offsets (per row, b[group] + c) as N x D, with the same values."""
    rng = np.random.default_rng(2)
    group = rng.integers(0, 3, N)
    shape = {"scalar": (), "per-column": (D,), "per-row": (N, 1), "per-group": (3, D),
             "one-per-group": (3,), "group-plus-column": (3, D)}[kind]
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 0.0, 2.0, shape=shape)
        c = pm.Normal("c", 0.0, 2.0, shape=D)
        offset = {"per-group": lambda: b[group], "one-per-group": lambda: b[group][:, None],
                  "group-plus-column": lambda: b[group] + c}.get(kind, lambda: b)()
        pm.Normal("X", mu=Z @ A + offset, sigma=0.5, observed=DATA.X)
    spec = pmi.matching.linear_gaussian.find_linear_gaussian(model, model["Z"])
    point = model.initial_point()
    point["b"], point["c"] = rng.normal(size=shape), rng.normal(size=D)
    off = spec.compile_offset(model)(point)
    # tables are expanded in chunks of rows: chunks of 7 rows here, a last one of 3
    monkeypatch.setattr(pmi.kernels.offsets, "_OFFSET_CHUNK", 7)
    value = {"per-group": lambda v: v[group], "one-per-group": lambda v: v[group][:, None],
             "group-plus-column": lambda v: v[group] + point["c"]}.get(kind, lambda v: v)(
        point["b"])
    full = np.broadcast_to(value, (N, D))
    if kind in ("per-group", "one-per-group"):
        assert off.table.shape == (3, D)
        np.testing.assert_array_equal(off.rows, group)
    else:
        assert off.rows is None
        assert off.table.shape == ((1, D) if kind in ("scalar", "per-column") else (N, D))
    np.testing.assert_array_equal(off.dense(N), full)
    np.testing.assert_array_equal(off.subtract_from(DATA.X), DATA.X - full)
    np.testing.assert_array_equal(off.columns(5, 9) + np.zeros((N, 4)), full[:, 5:9])
    base = rng.normal(size=(N, D))
    RowOffset = pmi.kernels.offsets.RowOffset
    np.testing.assert_allclose(off.plus(RowOffset(base.copy())).dense(N), base + full,
                               rtol=1e-15)
    np.testing.assert_allclose(off.plus(RowOffset(base[:1])).dense(N), base[:1] + full,
                               rtol=1e-15)
    # a baseline read through groups of its own (the start search's, 4 of them): added by
    # pairs of rows, without an N x D array
    mine, table = rng.integers(0, 4, N), rng.normal(size=(4, D))
    both = off.plus(RowOffset(table.copy(), mine))
    np.testing.assert_allclose(both.dense(N), table[mine] + full, rtol=1e-15)
    assert both.rows is not None or kind in ("per-row", "group-plus-column")
    assert both.table.shape[0] <= (N if both.rows is None else 12)
    with_cols = RowOffset(table, mine).add_to(np.zeros((N, D)), 5, 9)
    np.testing.assert_array_equal(with_cols[:, 5:9], table[mine][:, 5:9])
    assert not with_cols[:, :5].any() and not with_cols[:, 9:].any()
    # IBPScaleSlice's residual sum of squares reads the table by group
    Zt, At = true_features_point(model)[1:]
    ss = np.sum((DATA.X - full - Zt @ At) ** 2)
    np.testing.assert_allclose(
        kernels.residual_sq_sum(DATA.X, 0, Zt.astype(np.int8), At,
                                np.ascontiguousarray(off.table), 0,
                                kernels.NO_ROWS if off.rows is None else off.rows),
        ss, rtol=1e-12)


@pytest.mark.parametrize("kind", ["per-column", "per-group"])
def test_noise_scale_step_reads_the_offset(kind):
    """IBPScaleSlice's sufficient statistic ``‖X - Z A - b‖²`` (from the compiled offset: one
    row for b per column, the table and every row's group for b[group]) against numpy."""
    rng = np.random.default_rng(4)
    group = rng.integers(0, 3, N)
    shape = (3, D) if kind == "per-group" else (D,)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 0.0, 2.0, shape=shape)
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A + (b[group] if kind == "per-group" else b), sigma=sigma_x,
                  observed=DATA.X)
        step = pmi.IBPScaleSlice([sigma_x])
    point, Zt, At = true_features_point(model)
    point["b"] = rng.normal(size=shape)
    count, ss = step._suff(step.entries[0], point)
    b_rows = point["b"][group] if kind == "per-group" else point["b"]
    assert count == N * D
    np.testing.assert_allclose(ss, np.sum((DATA.X - Zt @ At - b_rows) ** 2), rtol=1e-12)


def test_offset_per_row_as_a_column_with_as_many_rows_as_columns():
    """b of shape (N,) added as b[:, None] (one value per row) with N = D, where dropping the
    broadcast would read it as one value per column (it did): the collapsed sampler's offset
    and IBPOffsetGibbs's conditional (mean within 5 MCSE, variance within 20 %) are per row."""
    n = D
    true_b = np.random.default_rng(6).normal(0.0, 1.0, size=n)
    Zt = np.zeros((n, K), dtype=np.int64)
    Zt[:, :4] = DATA.Z[:n]
    At = np.zeros((K, D))
    At[:4] = DATA.A
    X = DATA.X[:n] + true_b[:, None]
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(n, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 0.0, 2.0, shape=n)
        pm.Normal("X", mu=Z @ A + b[:, None], sigma=0.5, observed=X)
    assert assigned(model)["IBPOffsetGibbs"] == ["b"]
    point = {**model.initial_point(), "Z": Zt, "A": At, "b": true_b}
    spec = pmi.matching.linear_gaussian.find_linear_gaussian(model, model["Z"])
    np.testing.assert_allclose(spec.compile_offset(model)(point).dense(n),
                               np.broadcast_to(true_b[:, None], (n, D)))
    with model:
        step = pmi.IBPOffsetGibbs([model["b"]])
    step.setup_chain(np.random.default_rng(0), 0, 10)
    draws = np.array([step.step(point)[0]["b"] for _ in range(2000)])
    prec = 1 / 4.0 + D / 0.25
    mean = (X - Zt @ At).sum(axis=1) / 0.25 / prec
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 5 * np.sqrt(1 / prec / len(draws)))
    np.testing.assert_allclose(draws.var(axis=0), 1 / prec, rtol=0.2)


@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("as_data", [False, True])
def test_offset_per_group_gets_its_exact_gaussian_update(per_column, as_data):
    """An offset per group of rows, Z @ A + b[group] (b of shape (G, D), or (G,) as
    b[group][:, None]; group a constant or pm.Data): IBPOffsetGibbs is assigned and draws b
    from its conjugate conditional, each group's entries from that group's rows alone; a
    pm.Data group vector is read at every step."""
    G, s0 = 3, 2.0
    rng = np.random.default_rng(8)
    group = rng.integers(0, G, size=N)
    true_b = rng.normal(0.0, 1.0, size=(G, D) if per_column else (G,))
    shift = true_b[group] if per_column else true_b[group][:, None]
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        g = pm.Data("g", group) if as_data else group
        b = pm.Normal("b", 0.0, s0, shape=true_b.shape)
        pm.Normal("X", mu=Z @ A + (b[g] if per_column else b[g][:, None]), sigma=0.5,
                  observed=DATA.X + shift)
    assert assigned(model)["IBPOffsetGibbs"] == ["b"]
    with model:
        step = pmi.IBPOffsetGibbs([model["b"]])
    step.setup_chain(np.random.default_rng(0), 0, 10)
    point, Zt, At = true_features_point(model)

    def check(group):
        draws = np.array([step.step(point)[0]["b"] for _ in range(2000)])
        resid = (DATA.X + shift) - Zt @ At
        sums = np.stack([resid[group == k].sum(axis=0) for k in range(G)])
        rows = np.bincount(group, minlength=G)[:, None] * np.ones((1, D))
        if not per_column:
            sums, rows = sums.sum(axis=1), rows.sum(axis=1)
        prec = 1 / s0**2 + rows / 0.25
        mean = sums / 0.25 / prec
        assert np.all(np.abs(draws.mean(axis=0) - mean) < 5 * np.sqrt(1 / prec / len(draws)))
        np.testing.assert_allclose(draws.var(axis=0), 1 / prec, rtol=0.2)

    check(group)
    if as_data:  # new labels, same data: the step follows them
        group = rng.permutation(group)
        with model:
            pm.set_data({"g": group})
        check(group)


@pytest.mark.parametrize("shared", [True, False], ids=["one-group-vector", "two-group-vectors"])
def test_a_subset_searchs_per_group_baseline_covers_every_row(shared):
    """A start search on a subset of the rows fits each per-group offset's baseline for the
    groups the subset holds; for all rows it is 0 in a group the subset misses and the group's
    value at every other row, held as one row per combination of the offsets' groups (not
    N x D: 275 MB at 10^6 rows, D = 36): one row per group when they share one vector."""
    G = 4
    rng = np.random.default_rng(3)
    g1 = rng.integers(0, G, size=N)
    g2 = g1 if shared else rng.permutation(g1)
    X1, X2, _, _ = two_block_data()
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A1 = pm.Normal("A1", 0.0, 1.0, shape=(K, 18))
        A2 = pm.Normal("A2", 0.0, 1.0, shape=(K, 18))
        b1 = pm.Normal("b1", 0.0, 3.0, shape=(G, 18))
        b2 = pm.Normal("b2", 0.0, 3.0, shape=(G, 18))
        pm.Normal("X1", mu=Z @ A1 + b1[g1], sigma=0.5, observed=X1)
        pm.Normal("X2", mu=Z @ A2 + b2[g2], sigma=0.25, observed=X2)
        step = pmi.AcceleratedGibbs([Z, A1, A2])
    step.search.groups = [g1, g2]  # what step() reads at the point
    rows = np.flatnonzero((g1 != 2) & (g2 != 1))[::2]  # no row of g1's group 2 or g2's 1
    t1, t2 = rng.normal(size=(G, 18)), rng.normal(size=(G, 18))
    base = np.hstack([t1[g1[rows]], t2[g2[rows]]])  # a per-group baseline on the subset
    full = step.search.full_baseline(base, rows)
    expected = np.hstack([np.where(np.isin(g, g[rows])[:, None], t[g], 0.0)
                          for g, t in ((g1, t1), (g2, t2))])
    assert not expected[g1 == 2, :18].any() and not expected[g2 == 1, 18:].any()
    np.testing.assert_array_equal(full.dense(N), expected)
    n_rows = G if shared else np.unique(g1 * G + g2).size  # pairs of groups
    assert n_rows < N and full.table.shape == (n_rows, 36)


@pytest.mark.parametrize("per_column, subsample", [(True, None), (False, None), (True, 60)],
                         ids=["per-column", "one-per-group", "search-on-60-rows"])
def test_start_search_fits_a_baseline_per_group(per_column, subsample):
    """Z @ A + b[group] with group offsets far from b's initial value (b of shape (G, D) or
    (G,)): the start search fits each group's baseline beside Z and b starts there, so the
    first Z holds the 4 glyphs and no feature that marks a group (without the per-group
    baseline the search gave each of two groups a feature of its own, which the chains
    kept for hundreds of iterations beside b)."""
    G = 3
    rng = np.random.default_rng(0)
    group = rng.integers(0, G, size=N)
    true_b = rng.normal(0.0, 2.0, size=(G, D) if per_column else G)
    shift = true_b[group] if per_column else true_b[group][:, None]
    # with a subset, half the rows give their group counted from the end (g - G): the same
    # groups, which the step reads as such
    index = group if subsample is None else np.where(rng.random(N) < 0.5, group - G, group)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(K, D))
        b = pm.Normal("b", 0.0, 3.0, shape=true_b.shape)
        pm.Normal("X", mu=Z @ A + (b[index] if per_column else b[index][:, None]),
                  sigma=0.5, observed=DATA.X + shift)
    with model:  # a search on a subset of the rows (init_subsample), the rest then assigned
        step = None if subsample is None else [pmi.AcceleratedGibbs([Z],
                                                                    init_subsample=subsample)]
    idata = sample(model, tune=0, draws=1, var_names=["Z", "b"], step=step)
    if step is not None:
        np.testing.assert_array_equal(step[0].search.groups[0], group)
    z = idata["posterior"]["Z"].values[0, 0]
    z = z[:, z.sum(axis=0) > 0]
    glyph = np.abs(np.corrcoef(z.T, DATA.Z.T)[: z.shape[1], z.shape[1]:])
    marks = np.abs(np.corrcoef(z.T, np.eye(G)[group].T)[: z.shape[1], z.shape[1]:])
    assert z.shape[1] == 4 and np.all(glyph.max(axis=0) > 0.85), glyph
    assert marks.max() < 0.5, marks
    # b starts at the groups' baselines (the first draw of b then moves with A)
    b0 = idata["posterior"]["b"].values[0, 0]
    assert np.corrcoef(b0.ravel(), true_b.ravel())[0, 1] > 0.9, (b0, true_b)


@pytest.mark.parametrize("per_column", [True, False], ids=["b-GxD", "b-G"])
def test_start_offsets_give_each_group_its_own_row_of_the_searched_baseline(per_column):
    """After the start search, an offset ``b[group]`` that the user gave no initial value
    starts at its initial value plus its group's row of the search's baseline table (one row
    per group present, read through the rows' groups), and the data and the offset the first
    ``A`` draw sees follow it."""
    from pymc_ibp.kernels.offsets import RowOffset, joint_groups

    G = 5
    rng = np.random.default_rng(4)
    group = rng.permutation(np.arange(N) % (G - 1))  # group G - 1 has no row
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 1.0, 3.0, shape=(G, D) if per_column else G)
        pm.Normal("X", mu=Z @ A + (b[group] if per_column else b[group][:, None]), sigma=0.5,
                  observed=DATA.X)
        step = pmi.AcceleratedGibbs([Z])
    point = model.initial_point()
    step.search.groups = [group]
    first, index = joint_groups(group)
    table = rng.normal(size=(first.size, D))
    if not per_column:  # one value per group, in every column
        table[:] = table[:, :1]
    X, offset, moved = step.search.start_offsets(RowOffset(table.copy(), index), DATA.X,
                                           step.update.offset(point), point, shifted=False)
    shift = moved["b"] - point["b"]
    row = table[index] if per_column else table[index, 0]
    np.testing.assert_allclose(shift[group], row)
    np.testing.assert_array_equal(shift[G - 1], 0.0)
    b_rows = moved["b"][group] if per_column else moved["b"][group][:, None]
    np.testing.assert_allclose(offset.dense(N), np.broadcast_to(b_rows, (N, D)))
    np.testing.assert_allclose(X, DATA.X - table[index])


def test_a_start_search_on_one_row_gives_only_that_rows_group_its_baseline():
    """A per-group baseline fitted on a subset of one row (one row, like the baseline of a
    model without groups) is still a table read through the rows' groups: that row's group
    gets the baseline, every other group 0."""
    G = 3
    group = np.arange(N) % G
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 0.0, 3.0, shape=(G, D))
        pm.Normal("X", mu=Z @ A + b[group], sigma=0.5, observed=DATA.X)
        step = pmi.AcceleratedGibbs([Z])
    step.search.groups = [group]
    base = np.arange(1.0, D + 1.0)[None, :]  # fitted on row 4 alone (group 1)
    full = step.search.full_baseline(base, np.array([4]))
    assert full.rows is not None
    dense = full.dense(N)
    np.testing.assert_allclose(dense[group == 1], np.broadcast_to(base, ((group == 1).sum(), D)))
    np.testing.assert_array_equal(dense[group != 1], 0.0)
    point = model.initial_point()
    _, _, moved = step.search.start_offsets(full, DATA.X, step.update.offset(point), point,
                                            shifted=False)
    np.testing.assert_allclose(moved["b"][1], base[0])
    np.testing.assert_array_equal(moved["b"][[0, 2]], 0.0)


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
@pytest.mark.parametrize("per_group", [False, True], ids=["per-column", "per-group"])
def test_first_imputation_after_the_start_search_sees_the_offsets_start(per_group):
    """Missing entries and an offset whose initial value (b's prior mean, 3) is far from the
    data's (about 8 above it): the start search fits the baseline, b starts at its initial
    value plus the baseline, and the first draw of the missing entries is made around
    Z A + that offset (not around the initial value minus the baseline)."""
    G = 3
    rng = np.random.default_rng(1)
    group = rng.integers(0, G, size=N)
    true_b = 8.0 + rng.normal(0.0, 1.0, size=(G, D) if per_group else D)
    truth = DATA.X + (true_b[group] if per_group else true_b)
    miss = rng.random((N, D)) < 0.05
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        b = pm.Normal("b", 3.0, 3.0, shape=true_b.shape)
        pm.Normal("X", mu=Z @ A + (b[group] if per_group else b), sigma=0.5,
                  observed=np.where(miss, np.nan, truth))
    idata = sample(model, tune=0, draws=1, var_names=["X_unobserved"])
    drawn = idata["posterior"]["X_unobserved"].values[0, 0]
    assert np.mean(np.abs(drawn - truth[miss])) < 1.5


def two_block_data(seed=21):
    """One Z (the block images' 4 glyphs) explaining two observed matrices with their own
    features and noise scales: X1 the glyphs' first 18 pixels at σ = 0.5, X2 the other 18
    pixels, doubled, at σ = 0.25."""
    rng = np.random.default_rng(seed)
    A1, A2 = DATA.A[:, :18], 2.0 * DATA.A[:, 18:]
    X1 = DATA.Z @ A1 + 0.5 * rng.standard_normal((N, 18))
    X2 = DATA.Z @ A2 + 0.25 * rng.standard_normal((N, 18))
    return X1, X2, A1, A2


def test_one_z_shared_by_two_observed_matrices_gets_the_fast_step_and_is_recovered():
    X1, X2, A1, A2 = two_block_data()
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        sa1 = pm.HalfNormal("sigma_a1", 2.0)
        sa2 = pm.HalfNormal("sigma_a2", 4.0)
        A1_ = pm.Normal("A1", 0.0, sa1, shape=(K, 18))
        A2_ = pm.Normal("A2", 0.0, sa2, shape=(K, 18))
        sx1 = pm.HalfNormal("sigma_x1", 1.0)
        sx2 = pm.HalfNormal("sigma_x2", 1.0)
        pm.Normal("X1", mu=Z @ A1_, sigma=sx1, observed=X1)
        pm.Normal("X2", mu=pm.Deterministic("mu2", Z @ A2_), sigma=sx2, observed=X2)
    got = assigned(model)
    assert got["AcceleratedGibbs"] == ["A1", "A2", "Z"]
    assert got["IBPScaleSlice"] == ["sigma_a1_log__", "sigma_a2_log__", "sigma_x1_log__",
                                    "sigma_x2_log__"]
    post = sample(model)["posterior"]
    for name, truth in (("sigma_x1", 0.5), ("sigma_x2", 0.25)):
        lo, hi = np.quantile(post[name].values.ravel(), [0.005, 0.995])
        assert lo - 0.01 < truth < hi + 0.01, (name, lo, hi)
    Z, B1, B2 = (post[v].values[0, -30:] for v in ("Z", "A1", "A2"))
    large = [int(((z.sum(axis=0) > 10)).sum()) for z in Z]
    assert np.median(large) == 4, large
    fit = np.mean([np.mean((z @ b1 - DATA.Z @ A1) ** 2) + np.mean((z @ b2 - DATA.Z @ A2) ** 2)
                   for z, b1, b2 in zip(Z, B1, B2, strict=True)])
    assert fit < 0.05, fit


def test_per_dimension_noise_scales_get_the_fast_z_step_and_are_recovered():
    rng = np.random.default_rng(8)
    true_sx = np.linspace(0.2, 0.8, D)
    X = DATA.Z @ DATA.A + true_sx * rng.standard_normal((N, D))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        sigma_x = pm.HalfNormal("sigma_x", 1.0, shape=D)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)
    got = assigned(model)
    assert got["AcceleratedGibbs"] == ["A", "Z"] and got["NUTS"] == ["sigma_x_log__"]
    post = sample(model)["posterior"]
    sx = post["sigma_x"].values[0].mean(axis=0)
    assert np.abs(sx - true_sx).max() < 0.15, sx
    assert np.corrcoef(sx, true_sx)[0, 1] > 0.95
    Z = post["Z"].values[0, -30:]
    assert np.median([int(((z.sum(axis=0) > 10)).sum()) for z in Z]) == 4


def test_noise_varying_across_rows_is_refused_with_the_reason():
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        s = pm.HalfNormal("s", 1.0, shape=(N, 1))
        pm.Normal("X", mu=Z @ A, sigma=s, observed=DATA.X)
    with pytest.raises(pmi.ModelPatternError, match="varies across rows"):
        pmi.matching.linear_gaussian.find_linear_gaussian(model, model["Z"])


def test_covariates_times_weights_beside_z_at_a_are_an_offset():
    """Z @ A + W @ beta (covariates W with their own weights): the product whose left factor
    is Z is the feature term, the other one an offset whose weights keep PyMC's step; for a
    Normal likelihood AcceleratedGibbs, for a logistic Bernoulli one PolyaGammaGibbs.  The
    covariate effect is recovered in the linear-Gaussian case."""
    rng = np.random.default_rng(5)
    W = rng.normal(size=(N, 2))
    beta_true = np.array([[1.0] * D, [-0.5] * D])
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        beta = pm.Normal("beta", 0.0, 2.0, shape=(2, D))
        pm.Normal("X", mu=Z @ A + W @ beta, sigma=0.5, observed=DATA.X + W @ beta_true)
    got = assigned(model)
    assert got["AcceleratedGibbs"] == ["A", "Z"] and got["NUTS"] == ["beta"]
    post = sample(model, tune=100, draws=100)["posterior"]
    est = post["beta"].values[0].mean(axis=0)
    assert np.abs(est - beta_true).mean() < 0.15, est
    X = (DATA.X > 0.5).astype("int64")
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, D))
        beta = pm.Normal("beta", 0.0, 1.0, shape=(2, D))
        pm.Bernoulli("X", logit_p=Z @ A + W @ beta, observed=X)
    got = assigned(model)
    assert got["PolyaGammaGibbs"] == ["A", "Z"] and got["NUTS"] == ["beta"]
