"""DetectionRateGibbs: the conjugate Beta updates of the noisy tag-detection rates (exact
conditional, Geweke joint test, automatic assignment, patterns it refuses)."""

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_ibp as pmi
from tests._helpers import geweke_z

Z = np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]], dtype=np.int8)
A = np.array([[1, 0, 1], [0, 0, 1]], dtype=np.int8)
Y = (Z @ A) > 0
PRIOR = (2.0, 8.0)


def model_of(X, per_column=True):
    with pm.Model() as model:
        f = pm.Beta("f", *PRIOR, shape=3 if per_column else ())
        m = pm.Beta("m", *PRIOR)
        pm.Bernoulli("X", p=pmi.likelihoods.noisy_detection(Z, A, f, m), observed=X)
    return model


def rate_draws(model, point, n=3000):
    """``n`` draws of ``f`` and of ``m`` by DetectionRateGibbs, each from ``point``."""
    with model:
        sf, sm = pmi.DetectionRateGibbs([model["f"]]), pmi.DetectionRateGibbs([model["m"]])
    sf.setup_chain(np.random.default_rng(1), tune=0, draws=1)
    sm.setup_chain(np.random.default_rng(2), tune=0, draws=1)
    fs = np.array([1 / (1 + np.exp(-sf.step(point)[0]["f_logodds__"])) for _ in range(n)])
    ms = np.array([1 / (1 + np.exp(-sm.step(point)[0]["m_logodds__"])) for _ in range(n)])
    return fs, ms


def test_one_update_is_the_beta_conditional():
    rng = np.random.default_rng(0)
    X = (rng.random((5, 3)) < 0.5).astype(float)
    model = model_of(X)
    fs, ms = rate_draws(model, model.initial_point())
    for d in range(3):
        sel = ~Y[:, d]
        ref = stats.beta(PRIOR[0] + (X[sel, d] == 1).sum(), PRIOR[1] + (X[sel, d] == 0).sum())
        assert stats.kstest(fs[:, d], ref.cdf).pvalue > 1e-3, d
    ref = stats.beta(PRIOR[0] + (X[Y] == 0).sum(), PRIOR[1] + (X[Y] == 1).sum())
    assert stats.kstest(ms, ref.cdf).pvalue > 1e-3


def _geweke(n, broken=False, seed=0):
    rng = np.random.default_rng(seed)

    def g(f, m, X):
        return np.concatenate([f, [m], X.mean(axis=0), [f[0] * X[:, 0].mean(),
                                                        m * X[Y].mean()]])

    def p_of(f, m):
        return np.where(Y, 1 - m, f[None, :])

    mc = np.empty((n, 9))
    for i in range(n):
        f, m = rng.beta(*PRIOR, size=3), rng.beta(*PRIOR)
        mc[i] = g(f, m, (rng.random((5, 3)) < p_of(f, m)).astype(float))
    model = model_of(np.zeros((5, 3)))
    with model:
        sf, sm = pmi.DetectionRateGibbs([model["f"]]), pmi.DetectionRateGibbs([model["m"]])
    if broken:
        sm.role = "false"  # the miss rate counted on the wrong entries
    for s in (sf, sm):
        s.setup_chain(rng, tune=0, draws=n)
    f, m = rng.beta(*PRIOR, size=3), rng.beta(*PRIOR)
    point = {"f_logodds__": np.log(f / (1 - f)), "m_logodds__": np.log(m / (1 - m))}
    sc = np.empty((n, 9))
    for i in range(n):
        X = (rng.random((5, 3)) < p_of(f, m)).astype(float)
        sf._x = sm._x = X
        point, _ = sf.step(point)
        point, _ = sm.step(point)
        f = 1 / (1 + np.exp(-point["f_logodds__"]))
        m = float(1 / (1 + np.exp(-point["m_logodds__"])))
        sc[i] = g(f, m, X)
    return geweke_z(mc, sc)


def test_geweke_detection_rates():
    z = _geweke(10_000)
    assert np.all(np.abs(z) < 4.5), np.round(z, 2)


def test_geweke_detects_a_wrong_count():
    z = _geweke(10_000, broken=True)
    assert np.max(np.abs(z)) > 4.5, np.round(z, 2)


def test_pm_sample_assigns_it():
    rng = np.random.default_rng(3)
    X = (rng.random((5, 3)) < 0.5).astype(float)
    model = model_of(X, per_column=False)
    with model:
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
    names = {cls.__name__: sorted(v.name for v in vs) for cls, vs in selected.items()}
    assert names["DetectionRateGibbs"] == ["f_logodds__", "m_logodds__"]


def test_patterns_it_cannot_handle():
    with pm.Model():
        f = pm.Beta("f", 1.0, 1.0)
        pm.Bernoulli("X", p=f, observed=np.ones(3))
        assert pmi.DetectionRateGibbs.competence(f, True).name == "INCOMPATIBLE"
        with pytest.raises(pmi.ModelPatternError, match="switch of noisy_detection"):
            pmi.DetectionRateGibbs([f])


MISSING = np.zeros((5, 3), dtype=bool)
MISSING[[0, 2, 3, 4], [2, 0, 1, 2]] = True  # two entries with y = 1, two with y = 0


def _masked_data(seed):
    rng = np.random.default_rng(seed)
    X = (rng.random((5, 3)) < 0.5).astype(np.int64)
    return X, np.ma.masked_array(X, mask=MISSING)


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entries_count_at_their_imputed_values():
    X, Xm = _masked_data(4)
    model = model_of(Xm)
    point = model.initial_point()
    imputed = np.array([1, 0, 1, 1])  # the free X_unobserved, in row-major order of MISSING
    point["X_unobserved"] = imputed
    full = X.copy()
    full[MISSING] = imputed
    fs, ms = rate_draws(model, point)
    for d in range(3):
        sel = ~Y[:, d]
        ref = stats.beta(PRIOR[0] + (full[sel, d] == 1).sum(), PRIOR[1] + (full[sel, d] == 0).sum())
        assert stats.kstest(fs[:, d], ref.cdf).pvalue > 1e-3, d
    ref = stats.beta(PRIOR[0] + (full[Y] == 0).sum(), PRIOR[1] + (full[Y] == 1).sum())
    assert stats.kstest(ms, ref.cdf).pvalue > 1e-3


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_missing_entries_through_pm_sample():
    """pm.sample with a masked X: DetectionRateGibbs for f and m, PyMC's binary Gibbs step for
    the imputed entries; the rates' marginals are the Beta posteriors of the observed entries
    and the imputed entries' frequencies their posterior predictive probabilities."""
    X, Xm = _masked_data(5)
    model = model_of(Xm)
    with model:
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
        names = {cls.__name__: sorted(v.name for v in vs) for cls, vs in selected.items()}
        assert names["DetectionRateGibbs"] == ["f_logodds__", "m_logodds__"]
        idata = pm.sample(tune=200, draws=6000, chains=1, random_seed=6, progressbar=False,
                          compute_convergence_checks=False)
    post = idata.posterior
    f = post["f"].values[0, ::3]
    m = post["m"].values[0, ::3]
    obs = ~MISSING
    refs_f = []
    for d in range(3):
        sel = ~Y[:, d] & obs[:, d]
        ref = stats.beta(PRIOR[0] + (X[sel, d] == 1).sum(), PRIOR[1] + (X[sel, d] == 0).sum())
        refs_f.append(ref.mean())
        assert stats.kstest(f[:, d], ref.cdf).pvalue > 1e-3, d
    sel = Y & obs
    ref_m = stats.beta(PRIOR[0] + (X[sel] == 0).sum(), PRIOR[1] + (X[sel] == 1).sum())
    assert stats.kstest(m, ref_m.cdf).pvalue > 1e-3
    rows, cols = np.nonzero(MISSING)
    p_exact = np.where(Y[rows, cols], 1 - ref_m.mean(), np.array(refs_f)[cols])
    x_u = post["X_unobserved"].values[0, ::3]
    se = np.sqrt(p_exact * (1 - p_exact) / x_u.shape[0])
    assert np.all(np.abs(x_u.mean(axis=0) - p_exact) < 4.5 * se), (x_u.mean(axis=0), p_exact)


def test_a_likelihood_on_some_entries_counts_only_those():
    """A likelihood written on a subset of the entries (``p[keep]``, observed ``X[keep]``,
    no imputation): the counts run over those entries only."""
    rng = np.random.default_rng(7)
    X = (rng.random((5, 3)) < 0.5).astype(np.int64)
    keep = ~MISSING
    with pm.Model() as model:
        f = pm.Beta("f", *PRIOR)
        m = pm.Beta("m", *PRIOR)
        p = pmi.likelihoods.noisy_detection(Z, A, f, m)
        pm.Bernoulli("X", p=p[keep], observed=X[keep])
    fs, ms = rate_draws(model, model.initial_point())
    off, on = ~Y & keep, Y & keep
    ref = stats.beta(PRIOR[0] + (X[off] == 1).sum(), PRIOR[1] + (X[off] == 0).sum())
    assert stats.kstest(fs, ref.cdf).pvalue > 1e-3
    ref = stats.beta(PRIOR[0] + (X[on] == 0).sum(), PRIOR[1] + (X[on] == 1).sum())
    assert stats.kstest(ms, ref.cdf).pvalue > 1e-3
