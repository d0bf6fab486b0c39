"""The DP-IBP (pmi.dp_ibp): CRPGibbs for the labels and IBPGibbs for the category-feature
matrix M through Z = M[c] sample the exact joint posterior; the builder and a hand-written
model get the same samplers; bad wiring is a clear error."""

import numpy as np
import pymc as pm
import pytest
from pymc.sampling.mcmc import assign_step_methods
from pymc.step_methods import CompoundStep

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from tests._helpers import all_binary_matrices, chi2_pooled, codes

X3 = np.array([[1.1, -0.2], [0.9, 1.0], [-0.1, 1.2]])
A_FIXED = np.array([[1.0, 0.0], [0.0, 1.0]])


def tiny_dp_ibp(likelihood="normal", missing=False):
    """3 observations, L_max = 3 categories, K_max = 2 features, fixed A."""
    X = X3.copy()
    if missing:
        X[1, 0] = np.nan
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", alpha_c=1.2, alpha_m=1.5, l_max=3, shape=(3, 2))
        if likelihood == "normal":
            pm.Normal("X", mu=Z @ A_FIXED, sigma=0.6, observed=X)
        else:
            pm.Bernoulli("X", logit_p=3.0 * (Z @ A_FIXED) - 1.5, observed=(X > 0.5) * 1.0)
    return model


def exact_joint(model):
    """p(c, M | X) for every labelling c (3^3) and matrix M (2^6), from the model's logp."""
    logp = model.compile_logp()
    point = model.initial_point()
    labels = np.array(np.meshgrid(*[range(3)] * 3, indexing="ij")).reshape(3, -1).T
    mats = all_binary_matrices(3, 2).astype(np.int8)
    lp = np.array([[logp({**point, "Z_c": c, "Z_M": M}) for M in mats] for c in labels])
    post = np.exp(lp - lp.max())
    return labels, mats, post / post.sum()


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
# the Gaussian likelihood (35 s): the slow suite; the default suite has the Bernoulli one, and the
# Gaussian DP-IBP's steps in test_geweke_dp_ibp.py
@pytest.mark.parametrize("likelihood", [pytest.param("normal", marks=pytest.mark.slow),
                                        "bernoulli"])
def test_labels_and_category_features_sample_the_exact_posterior(likelihood):
    """Visit frequencies of (c, M) over all 27 x 64 states against the enumerated posterior
    (chi-square), the CRPGibbs + IBPGibbs sweep with IBPGibbs's split-merge moves on M."""
    model = tiny_dp_ibp(likelihood)
    labels, mats, post = exact_joint(model)
    with model:
        step = CompoundStep([pmi.CRPGibbs([model["Z_c"]]), pmi.IBPGibbs([model["Z_M"]])])
    for i, s in enumerate(step.methods):
        s.setup_chain(np.random.default_rng(10 + i), tune=0, draws=1)
    point = model.initial_point()
    c_index = {tuple(c): i for i, c in enumerate(labels)}
    m_code = codes(mats)
    m_index = dict(zip(m_code.tolist(), range(len(mats)), strict=True))
    counts = np.zeros(post.shape)
    for it in range(24_000):
        point, _ = step.step(point)
        if it % 2 == 0:
            counts[c_index[tuple(point["Z_c"])], m_index[int(codes(point["Z_M"][None])[0])]] += 1
    res = chi2_pooled(counts.ravel(), post.ravel() * counts.sum())
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entry_through_the_labels():
    """With a NaN in X the imputed entry is attributed to its observation's category: the
    row log-likelihood of M sums observed and imputed terms by label."""
    model = tiny_dp_ibp(missing=True)
    with model:
        step = pmi.IBPGibbs([model["Z_M"]])
    point = model.initial_point()
    point["Z_c"] = np.array([2, 0, 2])
    point["Z_M"] = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.int8)
    point["X_unobserved"] = np.array([0.3])
    ll = np.asarray(step.rows(point))
    Z = point["Z_M"][point["Z_c"]] @ A_FIXED
    X = X3.copy()
    X[1, 0] = 0.3
    per_obs = (-0.5 * ((X - Z) / 0.6) ** 2 - np.log(0.6 * np.sqrt(2 * np.pi))).sum(axis=1)
    np.testing.assert_allclose(ll, [per_obs[1], 0.0, per_obs[0] + per_obs[2]])


def test_builder_and_hand_written_model_get_the_same_steps():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    coords = {"obs": range(10), "feature": range(4), "dim": range(3)}
    with pm.Model(coords=coords) as built:
        Z = pmi.dp_ibp("Z", alpha_c=1.0, alpha_m=2.0, l_max=5, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X, dims=("obs", "dim"))
    assert built.named_vars_to_dims["Z_M"] == ("Z_category", "feature")
    assert built.named_vars_to_dims["Z_c"] == ("obs",)
    with pm.Model() as by_hand:
        c = pmi.CRP("c", 1.0, l_max=5, shape=10)
        M = pmi.IBP("M", 2.0, shape=(5, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        pm.Normal("X", mu=M[c] @ A, sigma=0.5, observed=X)
    for model, names in ((built, ("Z_c", "Z_M")), (by_hand, ("c", "M"))):
        with model:
            _, sel = assign_step_methods(model)
        got = {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}
        assert got["CRPGibbs"] == [names[0]]
        assert got["IBPGibbs"] == [names[1]]
        assert got["GaussianFeatureGibbs"] == ["A"]


def test_prior_draws_share_rows_within_a_category():
    with pm.Model():
        Z = pmi.dp_ibp("Z", alpha_c=2.0, alpha_m=3.0, l_max=6, shape=(40, 8))
        draws = pm.draw([Z, Z.owner.inputs[0].owner.inputs[0], Z.owner.inputs[0].owner.inputs[1]],
                        draws=20, random_seed=1)
    for z, M, c in zip(*draws, strict=True):
        np.testing.assert_array_equal(z, M[c])
        assert z.dtype == np.int8


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_sample_runs_and_reports_categories():
    rng = np.random.default_rng(3)
    M_true = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0]])
    c_true = rng.integers(0, 3, size=30)
    A_true = rng.normal(0.0, 2.0, size=(3, 4))
    X = M_true[c_true] @ A_true + rng.normal(0.0, 0.3, size=(30, 4))
    with pm.Model():
        Z = pmi.dp_ibp("Z", alpha_c=1.0, alpha_m=1.0, l_max=8, shape=(30, 6))
        A = pm.Normal("A", 0.0, 2.0, shape=(6, 4))
        pm.Normal("X", mu=Z @ A, sigma=0.3, observed=X)
        idata = pm.sample(tune=100, draws=50, chains=1, cores=1, random_seed=2,
                          progressbar=False, compute_convergence_checks=False)
    stats = idata.sample_stats
    assert "ibp_n_categories" in stats and "ibp_n_active" in stats
    assert idata.posterior["Z"].dtype == np.int8
    np.testing.assert_array_equal(
        idata.posterior["Z"].values[0, -1],
        idata.posterior["Z_M"].values[0, -1][idata.posterior["Z_c"].values[0, -1]])


def test_bad_builder_arguments_and_wiring_are_errors():
    with pm.Model(), pytest.raises(ValueError, match="l_max"):
        pmi.dp_ibp("Z", 1.0, 1.0, l_max=0, shape=(5, 3))
    with pm.Model(), pytest.raises(ValueError, match="exactly one of"):
        pmi.dp_ibp("Z", 1.0, 1.0, l_max=3)
    with pm.Model(coords={"obs": range(5)}), pytest.raises(ValueError, match="no coords"):
        pmi.dp_ibp("Z", 1.0, 1.0, l_max=3, dims=("obs", "feature"))
    # M with fewer rows than the labels can take
    with pm.Model() as model:
        c = pmi.CRP("c", 1.0, l_max=4, shape=6, initval=np.array([0, 1, 2, 3, 3, 0]))
        M = pmi.IBP("M", 1.0, shape=(3, 2))
        pm.Normal("X", mu=M[c].sum(axis=1), sigma=1.0, observed=np.zeros(6))
    with model, pytest.raises(ModelPatternError, match="one row per possible label"):
        pmi.IBPGibbs([M])


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 binds by design
def test_k_plus_counts_the_features_of_the_observations_categories():
    """ibp_n_active is the K+ of Z = M[c], the matrix the likelihood uses: the features of the
    categories that hold an observation, not those of M's empty categories (it counted M's
    columns: 3.45 against 2.98 on block combinations)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 2))
    with pm.Model():
        Z = pmi.dp_ibp("Z", alpha_c=1.0, alpha_m=3.0, l_max=6, shape=(12, 3))
        pm.Normal("X", mu=Z @ A_FIXED[[0, 1, 0]], sigma=0.6, observed=X)
        idata = pm.sample(tune=0, draws=60, chains=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    post = idata["posterior"]
    M, c = post["Z_M"].values[0], post["Z_c"].values[0]
    k_plus = np.array([int((m[labels].sum(axis=0) > 0).sum())
                       for m, labels in zip(M, c, strict=True)])
    k_m = (M.sum(axis=1) > 0).sum(axis=1)
    np.testing.assert_array_equal(idata["sample_stats"]["ibp_n_active"].values[0], k_plus)
    assert np.any(k_m > k_plus)  # M's empty categories held features the data never use
