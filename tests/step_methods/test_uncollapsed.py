"""IBPGibbs: uncollapsed Gibbs under any likelihood (issue: samplers §2; spec §4.1)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import special

import pymc_ibp as pmi
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
def test_ibp_bernoulli_likelihood_exact_posterior():
    """pmi.IBP prior, Bernoulli (logistic) likelihood with fixed features: p(Z | X) by
    enumeration of all 512 labelled matrices vs IBPGibbs visit frequencies (χ²)."""
    alpha = 1.5
    with pm.Model() as model:
        Z = pmi.IBP("Z", alpha, shape=(N, K))
        pm.Bernoulli("X", logit_p=Z @ A_FIXED + B_FIXED, observed=X_BIN)
        step = pmi.IBPGibbs([Z])
    mats = all_z()
    value = pt.tensor3("v", dtype="int64")
    prior = pytensor.function([value], pm.logp(pmi.IBP.dist(alpha, shape=(N, K)), value))(mats)
    lp = prior + np.array([bernoulli_loglik(z) for z in mats])
    post = np.exp(lp - special.logsumexp(lp))
    draws = run(step, model, 30000, seed=1, thin=3)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


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
        pm.Bernoulli("X", logit_p=Z @ A - 1.0, observed=X)
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
        names = {cls.__name__: [v.name for v in vs] for cls, vs in selected.items()}
        assert names["IBPGibbs"] == ["Z"]
        assert "A" in names["NUTS"]
        idata = pm.sample(20, tune=20, chains=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
    assert idata["sample_stats"]["ibp_n_active"].dims == ("chain", "draw")


def test_non_factorising_likelihood_is_an_error():
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(4, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3,))
        # every observation depends on the column sums of Z: no row factorisation
        pm.Normal("X", mu=pt.sum(Z @ A), sigma=1.0, observed=np.zeros(4))
    with model, pytest.raises(pmi.ModelPatternError, match="factorise"):
        pmi.IBPGibbs([Z])


def test_not_a_binary_matrix_is_an_error():
    with pm.Model():
        x = pm.Normal("x", shape=(3, 2))
        with pytest.raises(pmi.ModelPatternError, match="2-D binary matrix"):
            pmi.IBPGibbs([x])


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
