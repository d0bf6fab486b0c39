"""pmi.GaussianFeatureGibbs: the exact Gaussian conditional of A given any binary Z (whitened
draws), the joint posterior of an IBP-IBP with A free against enumeration with A integrated
out, automatic assignment and bad wiring."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.sampling.mcmc import assign_step_methods
from pymc.step_methods import CompoundStep
from scipy import stats

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from tests._helpers import all_binary_matrices, chi2_pooled, codes

Z_FIXED = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 1, 0], [0, 0, 0]], dtype=np.int8)
X_TINY = np.array([[0.9, -0.3], [1.3, 0.4], [0.2, 1.0], [1.1, 0.8], [np.nan, 0.1]])
SX = np.array([0.5, 0.8])
SA = np.array([[1.2, 0.7], [0.9, 1.5], [0.6, 2.0]])  # one per feature and column
OFFSET = np.array([0.1, -0.2])


def test_draws_follow_the_exact_conditional_of_each_column():
    """Z fixed (a constant with an unused third feature), σx one per column, σa one per
    feature and column, an offset, one missing entry imputed by PyMC: every draw of column
    d, whitened by the exact
    conditional's Cholesky factor (X's missing entry at its current imputed value), is
    N(0, I) (Kolmogorov-Smirnov on each coordinate, and no correlation between them); the
    unused feature's row follows its prior."""
    with pm.Model() as model:
        A = pm.Normal("A", 0.0, SA, shape=(3, 2))
        with pytest.warns(pm.exceptions.ImputationWarning):
            pm.Normal("X", mu=Z_FIXED @ A + OFFSET, sigma=SX, observed=X_TINY)
        step = pmi.GaussianFeatureGibbs([A])
    step.rng = np.random.default_rng(3)
    point = model.initial_point()
    point["X_unobserved"] = np.array([0.6])
    X = np.where(np.isnan(X_TINY), 0.6, X_TINY) - OFFSET
    draws = np.array([step.step(point)[0]["A"] for _ in range(4000)])
    Z = Z_FIXED[:, :2].astype(float)
    white = []
    for d in range(2):
        P = Z.T @ Z / SX[d] ** 2 + np.diag(1.0 / SA[:2, d] ** 2)
        mean = np.linalg.solve(P, Z.T @ X[:, d] / SX[d] ** 2)
        L = np.linalg.cholesky(P)
        white.append((draws[:, :2, d] - mean) @ L)  # L^T (a - mean) ~ N(0, I)
        white.append(draws[:, 2:, d] / SA[2, d])
    white = np.hstack(white)
    for j in range(white.shape[1]):
        assert stats.kstest(white[:, j], "norm").pvalue > 1e-3, j
    corr = np.corrcoef(white.T)[np.triu_indices(white.shape[1], 1)]
    assert np.abs(corr).max() < 4 / np.sqrt(len(draws))
    _, st = step.step(point)
    assert st == [{"ibp_features_drawn": 2}]


X2 = np.array([[1.1, 0.9], [0.1, 1.2]])


@pytest.mark.slow  # 46 s; the default suite has the exact conditional above
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
def test_with_ibp_gibbs_it_samples_the_ibp_ibps_exact_posterior():
    """An IBP-IBP (2 rows, 2 categories, 2 features) with A ~ Normal(0, 1) free: the (C, M)
    visits of IBPGibbs on C and M and this step on A against the enumerated posterior with
    A integrated out (each column of X is N(0, σx² I + Z Zᵀ)), chi-square."""
    def build(with_likelihood):
        with pm.Model() as model:
            Z = pmi.ibp_ibp("Z", alpha_c=1.5, alpha_m=1.2, l_max=2, shape=(2, 2))
            if with_likelihood:
                A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
                pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X2)
        return model

    prior_logp = build(False).compile_logp()
    mats = all_binary_matrices(2, 2).astype(np.int8)
    lp = np.empty((16, 16))
    for i, C in enumerate(mats):
        for j, M in enumerate(mats):
            Z = (C @ M > 0).astype(float)
            cov = 0.25 * np.eye(2) + Z @ Z.T
            lp[i, j] = (prior_logp({"Z_C": C, "Z_M": M})
                        + stats.multivariate_normal(np.zeros(2), cov).logpdf(X2.T).sum())
    post = np.exp(lp - lp.max())
    post /= post.sum()
    model = build(True)
    with model:
        steps = [pmi.IBPGibbs([model["Z_C"]]), pmi.IBPGibbs([model["Z_M"]]),
                 pmi.GaussianFeatureGibbs([model["A"]])]
    step = CompoundStep(steps)
    for i, s in enumerate(steps):
        s.setup_chain(np.random.default_rng(40 + i), tune=0, draws=1)
    point = model.initial_point()
    index = dict(zip(codes(mats).tolist(), range(16), strict=True))
    counts = np.zeros((16, 16))
    for it in range(16_000):
        point, _ = step.step(point)
        if it % 2 == 0:
            counts[index[int(codes(point["Z_C"][None])[0])],
                   index[int(codes(point["Z_M"][None])[0])]] += 1
    res = chi2_pooled(counts.ravel(), post.ravel() * counts.sum())
    assert res.pvalue > 1e-3, res


def test_assigned_for_a_gaussian_a_below_any_binary_z_the_collapsed_samplers_do_not_take():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 3))

    def steps(build):
        with pm.Model() as model:
            build()
            _, sel = assign_step_methods(model)
        return {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}

    def dp_ibp(sigma_a=1.0, mean=0.0):
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=4, shape=(12, 3))
        A = pm.Normal("A", mean, sigma_a, shape=(3, 3))
        pm.Normal("X", mu=Z @ A, sigma=pm.HalfNormal("s", 1.0), observed=X)

    def plain_ibp(sigma_a=1.0):
        Z = pmi.IBP("Z", 1.0, shape=(12, 3))
        pm.Normal("X", mu=Z @ pm.Normal("A", 0.0, sigma_a, shape=(3, 3)), sigma=1.0,
                  observed=X)

    got = steps(dp_ibp)
    assert got["GaussianFeatureGibbs"] == ["A"] and got["NUTS"] == ["s_log__"]
    got = steps(lambda: dp_ibp(sigma_a=pm.HalfNormal("sa", 1.0, shape=3)))  # one per column
    assert got["GaussianFeatureGibbs"] == ["A"]
    got = steps(lambda: dp_ibp(sigma_a=pm.HalfNormal("sa", 1.0, shape=(3, 1))))  # per feature
    assert got["GaussianFeatureGibbs"] == ["A"]
    # AcceleratedGibbs samples a pmi.IBP's A with Z; with one scale per feature it does not
    assert "GaussianFeatureGibbs" not in steps(plain_ibp)
    got = steps(lambda: plain_ibp(sigma_a=pm.HalfNormal("sa", 1.0, shape=(3, 1))))
    assert got["GaussianFeatureGibbs"] == ["A"] and got["IBPGibbs"] == ["Z"]
    # a prior mean: not this step's pattern
    assert "GaussianFeatureGibbs" not in steps(lambda: dp_ibp(mean=1.0))
    with pm.Model():
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=4, shape=(12, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 3))
        pm.Normal("X", mu=Z @ A, sigma=1.0, observed=X)
        pm.Normal("Y", mu=A.sum(), sigma=1.0, observed=0.0)
        with pytest.raises(ModelPatternError, match="other than through a Normal mean"):
            pmi.GaussianFeatureGibbs([A])


def test_an_integer_z_that_is_not_binary_is_an_error_not_a_wrong_draw():
    """Z = C @ M (counts, not 1[C M > 0]): the kernels would count a 2 as a 1, so the step
    raises a DataError naming the fix instead of drawing from the wrong conditional."""
    C = np.array([[1, 1], [1, 0], [0, 1]], dtype=np.int8)
    M = np.array([[1, 0], [1, 1]], dtype=np.int8)
    with pm.Model() as model:
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        pm.Normal("X", mu=pt.as_tensor(C @ M) @ A, sigma=0.5, observed=np.ones((3, 2)))
        step = pmi.GaussianFeatureGibbs([A])
    with pytest.raises(pmi.DataError, match="needs a binary Z"):
        step.step(model.initial_point())
