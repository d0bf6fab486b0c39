"""PolyaGammaGibbs: Bernoulli-logit latent feature models by Pólya-Gamma augmentation
(Polson, Scott & Windle 2013), with A integrated out in the Z sweep."""

import pickle

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.step_methods import CompoundStep
from scipy import special

import pymc_ibp as pmi
from pymc_ibp.distributions.ibp import ibp_draw_core
from tests._helpers import (
    all_binary_matrices,
    assert_follows_grid_density,
    chi2_pooled,
    codes,
    geweke_z,
    ibp_logp_fn,
    mcse_mean,
)
from tests.step_methods.test_state import assert_same_state, drive

N, K = 3, 2
X_BIN = np.array([[1, 0], [0, 1], [1, 1]])
SA, B_MEAN, B_SD = 1.5, -0.5, 1.0


def quadrature(mats, X, b_sd, nodes=30, offset=B_MEAN):
    """For every Z in ``mats`` (N x 2) and column j of ``X`` (NaN: missing): the posterior of
    (A_0j, A_1j, b_j) on a Gauss–Hermite grid, A ~ N(0, SA²), b ~ N(offset, b_sd²) (fixed at
    ``offset`` when ``b_sd = 0``).  Returns log p(X_obs | Z) per Z and a function giving
    E[f(a0, a1, b) | Z, X_obs] per Z for column j."""
    g, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    gb, wb = (g, w) if b_sd else (np.zeros(1), np.ones(1))
    a0, a1, bb = (v.ravel() for v in np.meshgrid(g * SA, g * SA, offset + gb * b_sd,
                                                  indexing="ij"))
    weights = (w[:, None, None] * w[None, :, None] * wb[None, None, :]).ravel()
    log_post = np.zeros((len(mats), X.shape[1], a0.size))
    for i, Z in enumerate(mats):
        for j in range(X.shape[1]):
            for r in range(X.shape[0]):
                if np.isnan(X[r, j]):
                    continue
                psi = Z[r, 0] * a0 + Z[r, 1] * a1 + bb
                log_post[i, j] += X[r, j] * psi - np.logaddexp(0.0, psi)
    lml = special.logsumexp(log_post, b=weights, axis=2)
    post_w = np.exp(log_post - lml[:, :, None]) * weights

    def expect(f, j):
        return post_w[:, j] @ f(a0, a1, bb)

    return lml.sum(axis=1), expect


def run(step, model, n_iter, seed, names=("Z",), thin=2):
    step.setup_chain(np.random.default_rng(seed), tune=0, draws=n_iter)
    point = model.initial_point()
    out = {k: [] for k in names}
    for it in range(n_iter):
        point, _ = step.step(point)
        if it % thin == 0:
            for k in names:
                out[k].append(np.copy(point[k]))
    return {k: np.array(v) for k, v in out.items()}


def logit_model(X, alpha=1.5, k_max=K, z=None):
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(X.shape[0], k_max)) if z is None else z()
        A = pm.Normal("A", 0.0, SA, shape=(k_max, X.shape[1]))
        b = pm.Normal("b", B_MEAN, B_SD, shape=X.shape[1])
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
    return model


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # noise data: K_max may bind
@pytest.mark.parametrize("missing", [False, True], ids=["complete", "nan-entries"])
def test_model_logp_stat_is_the_log_joint_at_the_returned_point(missing):
    """ibp_model_logp: the model's log density (no Jacobians) at the point step() returns,
    with the data's term from the step's own kernel and every other term from PyTensor (the
    offset b, imputed entries, another observed variable and a Potential included)."""
    rng = np.random.default_rng(5)
    X = (rng.random((12, 5)) < 0.4).astype(float)
    if missing:
        X[[1, 4, 7], [0, 3, 2]] = np.nan
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(12, 10))
        A = pm.Normal("A", 0.0, SA, shape=(10, 5))
        b = pm.Normal("b", B_MEAN, B_SD, shape=5)
        pm.Bernoulli("X", logit_p=Z @ A + b,
                     observed=np.ma.masked_array(np.nan_to_num(X), mask=np.isnan(X))
                     if missing else X.astype(np.int64))
        pm.Normal("y", alpha, 1.0, observed=[0.5, 1.5])
        pm.Potential("pot", -0.3 * alpha)
        step = pmi.PolyaGammaGibbs()
        logp = model.compile_logp(jacobian=False)
    step.setup_chain(np.random.default_rng(3), tune=0, draws=5)
    point = model.initial_point()
    for it in range(5):
        point["alpha_log__"] = np.asarray(0.2 * it)  # the other terms follow the point
        point, [stats] = step.step(point)
        assert stats["ibp_model_logp"] == pytest.approx(float(logp(point)), rel=1e-10)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
# without the sweep of Z given A (24 s): the slow suite; the default suite has the step's default
@pytest.mark.parametrize("feature_sweeps", [1, pytest.param(0, marks=pytest.mark.slow)])
def test_exact_posterior_with_features_and_offsets_integrated_out(feature_sweeps):
    """pmi.IBP(1.5) prior on a 3 x 2 Z, A ~ N(0, 1.5²), b ~ N(-0.5, 1): p(Z | X) with A and b
    integrated out (Gauss–Hermite quadrature, 27,000 nodes per column) vs the visit
    frequencies of PolyaGammaGibbs (χ² over all 64 labelled matrices), and E[b_0 | X] vs the
    mean of its draws; with and without the sweep of Z given A."""
    model = logit_model(X_BIN)
    with model:
        step = pmi.PolyaGammaGibbs(feature_sweeps=feature_sweeps)
    assert {v.name for v in step.vars} == {"Z", "A", "b"}
    mats = all_binary_matrices(N, K)
    lml, expect = quadrature(mats, X_BIN.astype(float), B_SD)
    lp = ibp_logp_fn(N, K, 1.5)(mats) + lml
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 40000, seed=1, names=("Z", "b"))
    counts = np.bincount(codes(draws["Z"]), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws["Z"]))
    assert res.pvalue > 1e-3, res
    b0 = draws["b"][:, 0]
    exact = post @ expect(lambda a0, a1, b: b, 0)
    assert abs(b0.mean() - exact) < 5.0 * mcse_mean(b0), (b0.mean(), exact)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
def test_an_offset_given_to_another_step_is_left_to_it():
    """pm.sample(step=[pm.Slice([b])]): PolyaGammaGibbs gets Z and A, reads b as a fixed
    offset and leaves it alone (it used to update b too)."""
    model = logit_model(X_BIN)
    with model:
        slice_b = pm.Slice([model["b"]])
        _, selected = pm.sampling.mcmc.assign_step_methods(model, [slice_b])
        pg = pmi.PolyaGammaGibbs([model["Z"], model["A"]])
    assert sorted(v.name for v in selected[pmi.PolyaGammaGibbs]) == ["A", "Z"]
    assert {v.name for v in pg.vars} == {"Z", "A"}
    pg.setup_chain(np.random.default_rng(0), tune=0, draws=1)
    point = {**model.initial_point(), "b": np.array([0.3, -0.7])}
    np.testing.assert_array_equal(pg.step(point)[0]["b"], [0.3, -0.7])


def test_a_feature_matrix_given_to_another_step_is_an_error():
    """pm.sample(step=[pm.NUTS([A])]): PolyaGammaGibbs gets Z and b but not A, which its sweep
    integrates out and must draw; it says so (it used to update A beside the user's step)."""
    model = logit_model(X_BIN)
    with model:
        nuts_a = pm.NUTS([model["A"]])
        steps, selected = pm.sampling.mcmc.assign_step_methods(model, [nuts_a])
        assert sorted(v.name for v in selected[pmi.PolyaGammaGibbs]) == ["Z", "b"]
        with pytest.raises(pmi.ModelPatternError, match=r"not 'A', which another step.*"
                                                        r"pmi\.IBPGibbs\(\[Z\]\)"):
            pm.sampling.mcmc.instantiate_steppers(model, steps, selected)
        with pytest.raises(pmi.ModelPatternError, match="not 'A'"):
            pmi.PolyaGammaGibbs([model["Z"], model["b"]])
        # what the message suggests: b is then left to this step alone
        steps, selected = pm.sampling.mcmc.assign_step_methods(
            model, [nuts_a, pmi.IBPGibbs([model["Z"]])])
        step = pm.sampling.mcmc.instantiate_steppers(model, steps, selected)
    assert [v.name for v in selected[pmi.PolyaGammaGibbs]] == ["b"]
    pg = [s for s in step if isinstance(s, pmi.PolyaGammaGibbs)]
    assert [v.name for v in pg[0].vars] == ["b"]


def test_an_offset_alone_gets_its_slice_update_given_z_and_a():
    """PolyaGammaGibbs([b]) (Z and A with other steps): the draws of b at a fixed Z and A
    follow b's exact conditional N(μ_b, σ_b²) Π p(x | ψ) (mean within 5 MCSE, sd within 5 %
    of a grid's); Z and A untouched; with offset_sweeps=0 it has nothing to do: an error."""
    model = logit_model(X_BIN)
    with model:
        step = pmi.PolyaGammaGibbs([model["b"]])
        with pytest.raises(pmi.ModelPatternError, match="offset_sweeps >= 1"):
            pmi.PolyaGammaGibbs([model["b"]], offset_sweeps=0)
    assert [v.name for v in step.vars] == ["b"]
    Z = np.array([[1, 0], [0, 1], [1, 1]])
    A = np.array([[0.8, -1.2], [-0.4, 0.9]])
    point = {**model.initial_point(), "Z": Z, "A": A}
    step.setup_chain(np.random.default_rng(3), tune=0, draws=1)
    draws = []
    for _ in range(20000):
        point, stats = step.step(point)
        draws.append(point["b"].copy())
    assert stats == [{}]
    np.testing.assert_array_equal(point["Z"], Z)
    np.testing.assert_array_equal(point["A"], A)
    draws = np.array(draws)
    grid = np.linspace(-12.0, 12.0, 24001)
    base = Z @ A
    for j in range(2):
        logp = -0.5 * ((grid - B_MEAN) / B_SD) ** 2
        for i in range(N):
            eta = base[i, j] + grid
            logp += X_BIN[i, j] * eta - np.logaddexp(0.0, eta)
        assert_follows_grid_density(draws[:, j], grid, logp, j)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
def test_an_offset_given_to_another_step_exact_posterior():
    """Z and A by PolyaGammaGibbs with b a fixed offset, b by pm.Slice: the Z-marginal vs
    p(Z | X) (A and b integrated out by quadrature; χ² over the 64 matrices; every 10th of
    60,000 iterations, as b moves slowly under pm.Slice)."""
    model = logit_model(X_BIN)
    with model:
        step = CompoundStep([pmi.PolyaGammaGibbs([model["Z"], model["A"]]),
                             pm.Slice([model["b"]])])
    mats = all_binary_matrices(N, K)
    lml, _ = quadrature(mats, X_BIN.astype(float), B_SD)
    lp = ibp_logp_fn(N, K, 1.5)(mats) + lml
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 60000, seed=6, thin=10)
    counts = np.bincount(codes(draws["Z"]), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws["Z"]))
    assert res.pvalue > 1e-3, res


GROUP = np.array([0, 0, 1])


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
def test_offset_per_group_exact_posterior():
    """logit_p = Z @ A + b[group] with b ~ N(-0.5, 1) of shape (2, 2), rows 0 and 1 in group 0
    and row 2 in group 1 (a pm.Data vector): pm.sample gives b to PolyaGammaGibbs; p(Z | X)
    with A and b integrated out (Gauss–Hermite quadrature, 14⁴ nodes per column) vs the visit
    frequencies (χ² over all 64 labelled matrices), and E[b_10 | X] vs the mean of its draws;
    the step reads the group vector at every step (its log joint stat too)."""
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.5, shape=(N, K))
        A = pm.Normal("A", 0.0, SA, shape=(K, 2))
        group = pm.Data("group", GROUP)
        b = pm.Normal("b", B_MEAN, B_SD, shape=(2, 2))
        pm.Bernoulli("X", logit_p=Z @ A + b[group], observed=X_BIN)
        _, selected = pm.sampling.mcmc.assign_step_methods(model)
        step = pmi.PolyaGammaGibbs()
    assert sorted(v.name for v in selected[pmi.PolyaGammaGibbs]) == ["A", "Z", "b"]
    assert {v.name for v in step.vars} == {"Z", "A", "b"}
    g, w = np.polynomial.hermite_e.hermegauss(14)
    a0, a1, b0, b1 = (v.ravel() for v in np.meshgrid(g * SA, g * SA, B_MEAN + g * B_SD,
                                                      B_MEAN + g * B_SD, indexing="ij"))
    w = w / w.sum()
    weights = np.einsum("a,b,c,d->abcd", w, w, w, w).ravel()
    mats = all_binary_matrices(N, K)
    log_post = np.zeros((len(mats), 2, a0.size))
    for i, z in enumerate(mats):
        for j in range(2):
            for r in range(N):
                psi = z[r, 0] * a0 + z[r, 1] * a1 + (b0 if GROUP[r] == 0 else b1)
                log_post[i, j] += X_BIN[r, j] * psi - np.logaddexp(0.0, psi)
    lml = special.logsumexp(log_post, b=weights, axis=2)
    lp = ibp_logp_fn(N, K, 1.5)(mats) + lml.sum(axis=1)
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 40000, seed=5, names=("Z", "b"))
    counts = np.bincount(codes(draws["Z"]), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws["Z"]))
    assert res.pvalue > 1e-3, res
    post_w = np.exp(log_post[:, 0] - lml[:, 0, None]) * weights
    exact = post @ (post_w @ b1)
    b10 = draws["b"][:, 1, 0]
    assert abs(b10.mean() - exact) < 5.0 * mcse_mean(b10), (b10.mean(), exact)
    with model:
        pm.set_data({"group": np.array([1, 0, 0])})
        logp = model.compile_logp(jacobian=False)
    point = model.initial_point()
    np.testing.assert_array_equal(step._values(point)[-1], [1, 0, 0])
    for _ in range(3):  # the log joint stat follows the new groups
        point, [stats] = step.step(point)
        assert stats["ibp_model_logp"] == pytest.approx(float(logp(point)), rel=1e-10)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
# (23-26 s each) the slow suite; the default suite has test_offset_per_group_exact_posterior
@pytest.mark.slow
@pytest.mark.parametrize("tied", ["per-group", "scalar"])
def test_offset_with_one_value_for_all_columns_exact_posterior(tied):
    """logit_p = Z @ A + b[group][:, None] (b of shape (2,), rows 0 and 1 in group 0) or
    + b (a scalar): one value for all columns, which ties them; pm.sample gives b to
    PolyaGammaGibbs (held fixed in the sweep and the draw of A, then its slice update).
    p(Z | X) with A and b integrated out (Gauss–Hermite quadrature: 14 nodes per value of b,
    for each 14² per column's A) vs the visit frequencies (χ² over the 64 matrices), and
    E[b_0 | X] vs the mean of its draws; with offset_sweeps=0 nothing would move b: an
    error."""
    group = GROUP if tied == "per-group" else np.zeros(N, dtype=int)
    n_b = 2 if tied == "per-group" else 1
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.5, shape=(N, K))
        A = pm.Normal("A", 0.0, SA, shape=(K, 2))
        if tied == "per-group":
            b = pm.Normal("b", B_MEAN, B_SD, shape=2)
            pm.Bernoulli("X", logit_p=Z @ A + b[GROUP][:, None], observed=X_BIN)
        else:
            b = pm.Normal("b", B_MEAN, B_SD)
            pm.Bernoulli("X", logit_p=Z @ A + b, observed=X_BIN)
        _, selected = pm.sampling.mcmc.assign_step_methods(model)
        step = pmi.PolyaGammaGibbs()
        with pytest.raises(pmi.ModelPatternError, match="slice update alone.*offset_sweeps"):
            pmi.PolyaGammaGibbs(offset_sweeps=0)
    assert sorted(v.name for v in selected[pmi.PolyaGammaGibbs]) == ["A", "Z", "b"]
    assert {v.name for v in step.vars} == {"Z", "A", "b"}
    g, w = np.polynomial.hermite_e.hermegauss(14)
    w = w / w.sum()
    a0, a1 = (v.ravel() for v in np.meshgrid(g * SA, g * SA, indexing="ij"))
    wa = np.outer(w, w).ravel()
    bvals = np.stack([v.ravel() for v in np.meshgrid(*[B_MEAN + g * B_SD] * n_b,
                                                     indexing="ij")], axis=1)
    wb = np.prod(np.stack(np.meshgrid(*[w] * n_b, indexing="ij"), axis=-1), axis=-1).ravel()
    mats = all_binary_matrices(N, K)
    lik = np.zeros((len(mats), len(bvals)))  # log p(X | Z, b), A integrated out
    for i, z in enumerate(mats):
        for j in range(2):
            ll = np.zeros((len(bvals), a0.size))
            for r in range(N):
                psi = z[r, 0] * a0 + z[r, 1] * a1 + bvals[:, group[r], None]
                ll += X_BIN[r, j] * psi - np.logaddexp(0.0, psi)
            lik[i] += special.logsumexp(ll, b=wa, axis=1)
    joint = ibp_logp_fn(N, K, 1.5)(mats)[:, None] + lik + np.log(wb)
    joint = np.exp(joint - special.logsumexp(joint))
    post = joint.sum(axis=1)
    draws = run(step, model, 40000, seed=8, names=("Z", "b"))
    counts = np.bincount(codes(draws["Z"]), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws["Z"]))
    assert res.pvalue > 1e-3, res
    exact = joint.sum(axis=0) @ bvals[:, 0]
    b0 = draws["b"].reshape(len(draws["b"]), -1)[:, 0]
    assert abs(b0.mean() - exact) < 5.0 * mcse_mean(b0), (b0.mean(), exact)


def test_an_offset_per_row_is_read_along_the_rows():
    """b of shape (N,) added as b[:, None] with N = D: one value per row, which the step reads
    as a fixed offset along the rows (b keeps NUTS); dropping the broadcast read it as one
    value per column and drew it with A."""
    X = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]])
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.5, shape=(3, K))
        A = pm.Normal("A", 0.0, SA, shape=(K, 3))
        b = pm.Normal("b", B_MEAN, B_SD, shape=3)
        pm.Bernoulli("X", logit_p=Z @ A + b[:, None], observed=X)
        _, selected = pm.sampling.mcmc.assign_step_methods(model)
        step = pmi.PolyaGammaGibbs()
    assert sorted(v.name for v in selected[pmi.PolyaGammaGibbs]) == ["A", "Z"]
    assert [v.name for v in selected[pm.NUTS]] == ["b"]
    point = {**model.initial_point(), "b": np.array([1.0, 2.0, 3.0])}
    np.testing.assert_array_equal(step._values(point)[3], np.repeat([[1.0], [2.0], [3.0]], 3,
                                                                    axis=1))


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_missing_entry_exact_posterior():
    """X[1, 0] missing (NaN; PyMC imputes it as X_unobserved, which pm.sample gives to this
    step too): the Z-marginal vs p(Z | X_obs) (the missing entry dropped), and the joint
    (Z, x_10) visits vs p(Z | X_obs) E[σ(z_1 A_0 + b_0) | Z, X_obs] over all 64 x 2 states."""
    X = X_BIN.astype(float)
    X[1, 0] = np.nan
    model = logit_model(np.ma.masked_array(X_BIN, mask=np.isnan(X)))
    with model:
        step = pmi.PolyaGammaGibbs()
    assert {v.name for v in step.vars} == {"Z", "A", "b", "X_unobserved"}
    mats = all_binary_matrices(N, K)
    lml, expect = quadrature(mats, X, B_SD)
    lp = ibp_logp_fn(N, K, 1.5)(mats) + lml
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 40000, seed=2, names=("Z", "X_unobserved"))
    zs, x_mis = draws["Z"], draws["X_unobserved"][:, 0]
    counts = np.bincount(codes(zs), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(zs))
    assert res.pvalue > 1e-3, res
    p1 = np.array([expect(lambda a0, a1, b, z=z: special.expit(z[1, 0] * a0 + z[1, 1] * a1
                                                               + b), 0)[i]
                   for i, z in enumerate(mats)])
    joint = np.stack([post * (1 - p1), post * p1], axis=1).ravel()
    counts = np.bincount(2 * codes(zs) + x_mis.astype(int), minlength=2 * len(mats))
    counts = counts.reshape(-1, 2)[codes(mats)].ravel()
    res = chi2_pooled(counts, joint * len(zs))
    assert res.pvalue > 1e-3, res


def test_per_entry_prior_and_a_constant_offset_exact_posterior():
    """Z = pm.Bernoulli(p=P) with a fixed 3 x 2 matrix P (the per-entry prior log-odds mode of
    the stick-breaking IBP, no births) and a constant offset -0.5 (no b): p(Z | X) with A
    integrated out vs visit frequencies."""
    P = np.array([[0.3, 0.6], [0.5, 0.2], [0.7, 0.4]])
    with pm.Model() as model:
        Z = pm.Bernoulli("Z", p=P, shape=(N, K))
        A = pm.Normal("A", 0.0, SA, shape=(K, 2))
        pm.Bernoulli("X", logit_p=Z @ A - 0.5, observed=X_BIN)
    with model:
        step = pmi.PolyaGammaGibbs()
    assert {v.name for v in step.vars} == {"Z", "A"}
    mats = all_binary_matrices(N, K)
    lml, _ = quadrature(mats, X_BIN.astype(float), 0.0)
    lp = np.where(mats == 1, np.log(P), np.log1p(-P)).sum(axis=(1, 2)) + lml
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 30000, seed=3)
    counts = np.bincount(codes(draws["Z"]), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws["Z"]))
    assert res.pvalue > 1e-3, res


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_features_and_offsets_beside_ibpgibbs_exact_posterior():
    """Z by IBPGibbs (uncollapsed, with its feature moves), A and b by PolyaGammaGibbs (what
    pm.sample assigns them next to an explicit IBPGibbs): the Z-marginal vs p(Z | X)."""
    model = logit_model(X_BIN)
    with model:
        step = CompoundStep([pmi.IBPGibbs([model["Z"]]),
                             pmi.PolyaGammaGibbs([model["A"], model["b"]])])
    mats = all_binary_matrices(N, K)
    lml, _ = quadrature(mats, X_BIN.astype(float), B_SD)
    lp = ibp_logp_fn(N, K, 1.5)(mats) + lml
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 20000, seed=4)
    counts = np.bincount(codes(draws["Z"]), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws["Z"]))
    assert res.pvalue > 1e-3, res


GN, GD, GK, G_ALPHA = 8, 3, 5, 1.5


def g(Z, A, b):
    kplus = (Z.sum(axis=0) > 0).sum()
    psi = Z @ A + b
    return np.array([kplus, Z.sum(), b[0], b[0] ** 2, np.mean(A**2), psi[0, 0], psi[0, 0] ** 2])


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 5 may fill up
def test_geweke_polya_gamma_augmentation_and_collapsed_sweep():
    """Geweke (2004) joint-distribution test of the whole step (ω ~ PG(1, ψ), Z with A
    integrated out, (A, b) | Z, ω): prior draws of (Z, A, b) vs a chain alternating the step
    with X | Z, A, b ~ Bernoulli(σ(ZA + b)); 7 test functions (K+, ΣZ, b_0, b_0², mean A²,
    ψ_00, ψ_00²), |z| < 4."""
    rng = np.random.default_rng(11)
    n_draws = 20000
    mc = np.empty((n_draws, 7))
    for i in range(n_draws):
        Z = ibp_draw_core(rng, G_ALPHA, 1.0, GN, GK)
        mc[i] = g(Z, rng.normal(0.0, SA, (GK, GD)), rng.normal(B_MEAN, B_SD, GD))
    model = logit_model(np.zeros((GN, GD), dtype="int64"), alpha=G_ALPHA, k_max=GK)
    with model:
        step = pmi.PolyaGammaGibbs(init_z="point")  # the chain starts at a prior draw
    step.setup_chain(rng, tune=0, draws=n_draws)
    point = model.initial_point()
    point.update(Z=ibp_draw_core(rng, G_ALPHA, 1.0, GN, GK).astype(point["Z"].dtype),
                 A=rng.normal(0.0, SA, (GK, GD)), b=rng.normal(B_MEAN, B_SD, GD))
    sc = np.empty((n_draws, 7))
    for it in range(n_draws):
        psi = point["Z"] @ point["A"] + point["b"]
        # the data change every iteration of this simulator
        step._x = (rng.random(psi.shape) < special.expit(psi)).astype(np.int8)
        point, _ = step.step(point)
        sc[it] = g(point["Z"], point["A"], point["b"])
    z = geweke_z(mc, sc)
    assert np.all(np.abs(z) < 4.0), z


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_checkpoint_and_resume_gives_the_same_draws():
    """40 iterations equal 15, a pickled (point, sampling_state), a fresh step and 25 more."""
    rng = np.random.default_rng(0)
    X = (rng.random((30, 6)) < 0.4).astype("int64")
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(30, 5))
        A = pm.Normal("A", 0.0, 2.0, shape=(5, 6))
        b = pm.Normal("b", -1.0, 2.0, shape=6)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)

    def build():
        with model:
            return CompoundStep([pmi.PolyaGammaGibbs([Z]), pmi.IBPAlphaGibbs([alpha])])

    full = build()
    full.setup_chain(np.random.default_rng(7), 10, 30)
    _, ref = drive(full, model.initial_point(), 0, 40, 10)
    first = build()
    first.setup_chain(np.random.default_rng(7), 10, 30)
    point, part1 = drive(first, model.initial_point(), 0, 15, 10)
    blob = pickle.dumps((point, first.sampling_state))
    resumed = build()
    point, state = pickle.loads(blob)
    resumed.sampling_state = state
    assert_same_state(first, resumed)
    _, part2 = drive(resumed, point, 15, 40, 10)
    for a, b_ in zip(ref, part1 + part2, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b_[k], err_msg=k)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # noise data, K_max = 6
@pytest.mark.parametrize("mp_ctx", ["fork", "spawn"])
def test_pm_sample_assigns_it_and_parallel_chains_are_reproducible(mp_ctx):
    """pm.sample gives Z, A and b to PolyaGammaGibbs (alpha to IBPAlphaGibbs); the same draws
    for one seed with cores=1 and cores=2 (fork and spawn), the surrogate start included."""
    rng = np.random.default_rng(0)
    X = (rng.random((20, 8)) < 0.3).astype("int64")
    with pm.Model():
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(20, 6))
        A = pm.Normal("A", 0.0, 2.0, shape=(6, 8))
        b = pm.Normal("b", -1.0, 2.0, shape=8)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        kw = dict(draws=10, tune=10, chains=2, random_seed=5, progressbar=False,
                  compute_convergence_checks=False)
        seq = pm.sample(cores=1, **kw)
        par = pm.sample(cores=2, mp_ctx=mp_ctx, **kw)
    for name in ("Z", "A", "b", "alpha"):
        np.testing.assert_array_equal(seq["posterior"][name].values,
                                      par["posterior"][name].values)
    ss = seq["sample_stats"]
    assert {"ibp_n_active", "ibp_model_logp", "ibp_log_lik", "ibp_alpha_accept"} <= set(ss)
    assert int(ss["ibp_flips"].sum()) > 0


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # the empty start fills K_max
def test_chains_find_the_features_of_binary_data(monkeypatch):
    """Binary block images from a Bernoulli-logit model (four glyphs): from the surrogate start
    (init_z="auto" when the user gives no Z) the chain holds each glyph's feature after 30
    iterations, with its rows of A (higher log-odds on the glyph's pixels).  A user's Z is
    kept (no surrogate start); init_z="point" sweeps from PyMC's empty start."""
    from pymc_ibp.init.surrogate import SurrogateStart

    data = pmi.datasets.binary_block_images(150, seed=3)
    X = data.X
    starts = []
    start = SurrogateStart.draw
    monkeypatch.setattr(SurrogateStart, "draw",
                        lambda *a: starts.append(1) or start(*a))
    common = dict(tune=0, chains=1, random_seed=4, progressbar=False,
                  compute_convergence_checks=False)
    with pm.Model():
        Z = pmi.IBP("Z", 2.0, shape=(150, 16))
        A = pm.Normal("A", 0.0, 3.0, shape=(16, 36))
        b = pm.Normal("b", -2.0, 2.0, shape=36)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        idata = pm.sample(draws=30, **common)
        assert len(starts) == 1
        Z0 = np.zeros((150, 16), dtype="int64")
        Z0[:, 0] = 1
        pm.sample(draws=1, initvals={"Z": Z0}, **common)
        point = pm.sample(draws=1, step=[pmi.PolyaGammaGibbs([Z], init_z="point")], **common)
        assert len(starts) == 1
    assert int(point["sample_stats"]["ibp_flips"].values[0, 0]) > 0
    z = idata["posterior"]["Z"].values[0, -1]
    a = idata["posterior"]["A"].values[0, -1]
    for glyph in range(4):
        agree = [np.mean(z[:, k] == data.Z[:, glyph]) for k in range(16)]
        k = int(np.argmax(agree))
        assert agree[k] > 0.9, (glyph, agree)
        on = data.A[glyph] > 0.5
        assert a[k][on].mean() > a[k][~on].mean() + 2.0, (glyph, a[k])


def test_truncation_is_reported():
    rng = np.random.default_rng(1)
    X = (rng.random((40, 5)) < 0.5).astype("int64")
    X[:20] = 1
    with pm.Model():
        Z = pmi.IBP("Z", 3.0, shape=(40, 1))
        A = pm.Normal("A", 0.0, 3.0, shape=(1, 5))
        pm.Bernoulli("X", logit_p=Z @ A - 1.0, observed=X)
        with pytest.warns(pmi.TruncationWarning, match="K_max=1"):
            pm.sample(tune=5, draws=5, chains=1, random_seed=1, progressbar=False,
                      compute_convergence_checks=False)


def test_models_it_cannot_take_are_told_what_it_needs():
    rng = np.random.default_rng(2)
    X = (rng.random((10, 3)) < 0.5).astype("int64")
    with pm.Model():  # A with a non-zero mean
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        A = pm.Normal("A", 1.0, 1.0, shape=(4, 3))
        pm.Bernoulli("X", logit_p=Z @ A, observed=X)
        with pytest.raises(pmi.ModelPatternError, match="'A' must have mean 0"):
            pmi.PolyaGammaGibbs([Z])
    with pm.Model():  # a probit link
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        pm.Bernoulli("X", p=pt.sigmoid(Z @ A) * 0.5, observed=X)
        with pytest.raises(pmi.ModelPatternError, match="No Bernoulli likelihood with logit_p"):
            pmi.PolyaGammaGibbs([Z])
    bad = X.copy()
    bad[4, 2] = 2
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        pm.Bernoulli("X", logit_p=Z @ A, observed=bad)
        with pytest.raises(pmi.DataError, match=r"2.0 at \(row 4, column 2\)"):
            pmi.PolyaGammaGibbs([Z])
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        pm.Bernoulli("X", logit_p=Z @ A, observed=X)
        with pytest.raises(ValueError, match="feature_sweeps must be an integer >= 0"):
            pmi.PolyaGammaGibbs([Z], feature_sweeps=-1)
