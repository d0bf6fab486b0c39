"""BinaryFeatureGibbs: element-wise Gibbs of binary feature-dimension links A on cached counts
S = Z A under the thesis's binary likelihoods (Doshi-Velez 2009, App. A.3, §7.3); the joint
posterior of (Z, A) of a tiny problem against enumeration."""

import numpy as np
import pymc as pm
import pytest
from pymc.sampling.mcmc import assign_step_methods
from pymc.step_methods import CompoundStep

import pymc_ibp as pmi
from tests._helpers import all_binary_matrices, chi2_pooled, codes

X3 = np.array([[1, 0], [1, 1], [0, 1]])


def _model(lik, x=X3, p_a=0.4):
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.2, shape=(3, 2))
        A = pm.Bernoulli("A", p_a, shape=(2, 2))
        if lik == "noisy_or":
            p = pmi.likelihoods.leaky_noisy_or(Z, A, leak=np.array([0.1, 0.2]), activation=0.7)
        else:
            p = pmi.likelihoods.noisy_detection(Z, A, false_rate=0.15,
                                                miss_rate=np.array([0.1, 0.3]))
        pm.Bernoulli("X", p=p, observed=x)
    return model


# the noisy-or without a missing entry (40-50 s) in the slow suite: with one, the other rows
# still take the complete-data update
@pytest.mark.parametrize("lik,missing", [pytest.param("noisy_or", False, marks=pytest.mark.slow),
                                         ("detection", False), ("noisy_or", True)])
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_joint_posterior_of_z_and_a_matches_enumeration(lik, missing):
    """With a missing entry (NaN: PyMC's X_unobserved, imputed by BinaryGibbsMetropolis) the
    (Z, A) marginal is the posterior given the observed entries."""
    x = X3.astype(float)
    if missing:
        x[1, 0] = np.nan
    model = _model(lik, x=np.ma.masked_array(X3, mask=np.isnan(x)) if missing else X3)
    with model:
        steps = [pmi.IBPGibbs([model["Z"]], split_merge=0, combination_moves=0),
                 pmi.BinaryFeatureGibbs([model["A"]])]
        if missing:
            steps.append(pm.BinaryGibbsMetropolis([model["X_unobserved"]]))
            assert steps[1].likelihood.missing is not None
    step = CompoundStep(steps)
    point = model.initial_point()
    if missing:  # the posterior given the observed entries: the missing one dropped
        with pm.Model() as ref:
            Z = pmi.IBP("Z", 1.2, shape=(3, 2))
            A = pm.Bernoulli("A", 0.4, shape=(2, 2))
            p = pmi.likelihoods.leaky_noisy_or(Z, A, leak=np.array([0.1, 0.2]), activation=0.7)
            obs = ~np.isnan(x)
            pm.Bernoulli("X", p=p[obs], observed=X3[obs])
        logp = ref.compile_logp()
    else:
        logp = model.compile_logp()
    zs = all_binary_matrices(3, 2).astype(point["Z"].dtype)
    as_ = all_binary_matrices(2, 2).astype(point["A"].dtype)
    base = {k: v for k, v in point.items() if k in ("Z", "A")}
    lp = np.array([[logp({**base, "Z": z, "A": a}) for a in as_] for z in zs])
    post = np.exp(lp - lp[np.isfinite(lp)].max())
    post /= post.sum()
    zi = dict(zip(codes(zs).tolist(), range(len(zs)), strict=True))
    ai = dict(zip(codes(as_).tolist(), range(len(as_)), strict=True))
    for i, s in enumerate(steps):
        s.setup_chain(np.random.default_rng(60 + i), tune=0, draws=1)
    counts = np.zeros((len(zs), len(as_)))
    for _ in range(12_000):
        point, _ = step.step(point)
        counts[zi[int(codes(point["Z"][None])[0])], ai[int(codes(point["A"][None])[0])]] += 1
    res = chi2_pooled(counts.ravel(), post.ravel() * counts.sum())
    assert res.pvalue > 1e-3, res


def test_assigned_by_pm_sample_and_patterns_checked():
    X = np.random.default_rng(1).integers(0, 2, size=(10, 4))
    with pm.Model() as model:
        C = pmi.IBP("C", 1.0, shape=(10, 3))
        rate = pm.Beta("rho", 1.0, 3.0)
        A = pm.Bernoulli("A", rate, shape=(3, 4))
        f, m = pm.Beta("f", 1.0, 9.0), pm.Beta("m", 1.0, 9.0, shape=4)
        pm.Bernoulli("X", p=pmi.likelihoods.noisy_detection(C, A, f, m), observed=X)
        _, sel = assign_step_methods(model)
    got = {k.__name__: sorted(v.name for v in vs) for k, vs in sel.items()}
    assert got["BinaryFeatureGibbs"] == ["A"]
    # a probability that varies along the rows other than through Z @ A: told the pattern
    with pm.Model() as bad:
        C = pmi.IBP("C", 1.0, shape=(10, 3))
        A = pm.Bernoulli("A", 0.3, shape=(3, 4))
        leak = np.linspace(0.05, 0.5, 10)[:, None]
        pm.Bernoulli("X", p=pmi.likelihoods.leaky_noisy_or(C, A, leak, 0.8), observed=X)
        with pytest.raises(pmi.ModelPatternError, match="constant along the rows"):
            pmi.BinaryFeatureGibbs([A])
        _, sel = assign_step_methods(bad)
    assert "BinaryFeatureGibbs" not in {k.__name__ for k in sel}


def test_a_user_variable_named_like_the_count_input_is_not_overwritten():
    """The count input S of the step's compiled probability has a private name, so a model
    variable called ``S`` (here the leak) keeps its own value in the step's tables."""
    def tables(name):
        with pm.Model() as model:
            Z = pmi.IBP("Z", 1.2, shape=(3, 2))
            A = pm.Bernoulli("A", 0.4, shape=(2, 2))
            leak = pm.Beta(name, 2.0, 5.0, shape=2, default_transform=None)  # value var `name`
            pm.Bernoulli("X", p=pmi.likelihoods.leaky_noisy_or(Z, A, leak=leak, activation=0.7),
                         observed=X3)
            step = pmi.BinaryFeatureGibbs([A])
        point = model.initial_point()
        point[name] = np.array([0.2, 0.6])
        return step.tables(point)

    for ours, ref in zip(tables("S"), tables("leak"), strict=True):
        np.testing.assert_array_equal(ours, ref)
