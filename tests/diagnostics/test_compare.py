"""pmi.compare_models: k-fold held-out entries (every entry held out once, no row or column
ever entirely) scored by their log predictive density, which matches the closed form of a
conjugate model; the log evidence of the models sample_smc handles; the notes it adds."""

import numpy as np
import pymc as pm
import pytest
from scipy import special, stats

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from tests._helpers import ENUM_X, all_binary_matrices, ibp_logp_fn

_FAST = {"tune": 200, "draws": 200, "chains": 2, "cores": 1}


def _normal(sigma=1.0):
    """x_nd ~ N(mu_d, sigma²), mu_d ~ N(0, 1): the held-out predictive is Gaussian."""
    def build(X):
        with pm.Model() as m:
            mu = pm.Normal("mu", 0.0, 1.0, shape=X.shape[1])
            pm.Normal("X", mu, sigma, observed=X)
        return m
    return build


@pytest.mark.parametrize(("shape", "folds"), [((12, 5), 4), ((7, 9), 3), ((5, 5), 5)])
def test_entry_folds_spread_every_row_and_column_over_the_folds(shape, folds):
    fold = pmi.entry_folds(shape, folds, seed=3)
    assert fold.shape == shape and set(np.unique(fold)) == set(range(folds))
    for axis, size in ((1, shape[1]), (0, shape[0])):
        counts = np.stack([(fold == f).sum(axis=axis) for f in range(folds)])
        assert counts.min() >= size // folds and counts.max() <= -(-size // folds)


def test_entry_folds_refuse_folds_that_would_hide_a_whole_row():
    with pytest.raises(ValueError, match="at most 4 folds"):
        pmi.entry_folds((10, 4), 5)
    with pytest.raises(ValueError, match="integer >= 2"):
        pmi.entry_folds((10, 4), 1)


def test_held_out_scores_match_the_closed_form_and_rank_the_models():
    """mu_d | observed entries of column d ~ N(m, v): each held-out entry's predictive is
    N(m, 1 + v); the Monte Carlo scores agree within 0.03 nats per entry, and a model with
    the wrong noise (sigma = 3) ranks second, with the paired difference of the pointwise
    scores."""
    rng = np.random.default_rng(0)
    X = rng.normal(0.7, 1.0, (12, 5))
    tab = pmi.compare_models({"wide": _normal(3.0), "right": _normal(1.0)}, X, folds=4,
                             random_seed=1, evidence="auto",
                             sample_kwargs={"tune": 300, "draws": 1500, "chains": 2,
                                            "cores": 1})
    assert list(tab.index) == ["right", "wide"]
    fold, pw = tab.attrs["folds"], tab.attrs["pointwise"]
    exact = np.empty_like(X)
    for f in range(4):
        held = fold == f
        for d in range(X.shape[1]):
            obs = X[~held[:, d], d]
            m, v = obs.sum() / (1 + obs.size), 1 / (1 + obs.size)
            exact[held[:, d], d] = stats.norm.logpdf(X[held[:, d], d], m, np.sqrt(1 + v))
    np.testing.assert_allclose(pw["right"], exact, atol=0.03)
    assert tab.loc["right", "elpd_entry"] == pytest.approx(pw["right"].mean())
    assert tab.loc["right", "elpd"] == pytest.approx(pw["right"].sum())
    diff = pw["wide"] - pw["right"]
    assert tab.loc["wide", "d_elpd_entry"] == pytest.approx(diff.mean())
    assert tab.loc["wide", "dse"] == pytest.approx(diff.std(ddof=1) / np.sqrt(diff.size))
    assert tab.loc["right", "d_elpd_entry"] == 0.0
    assert np.isnan(tab.loc["right", "log_evidence"])
    assert "no log evidence" in tab.loc["right", "note"]
    assert "sample_smc needs" in tab.attrs["evidence_errors"]["right"]
    assert tab.loc["right", "max_rhat"] < 1.05


def test_a_seed_gives_the_same_table():
    X = np.random.default_rng(2).normal(size=(6, 4))
    a, b = (pmi.compare_models({"n": _normal()}, X, folds=2, random_seed=5, evidence=False,
                               sample_kwargs=_FAST) for _ in range(2))
    np.testing.assert_array_equal(a.attrs["pointwise"]["n"], b.attrs["pointwise"]["n"])
    np.testing.assert_array_equal(a.attrs["folds"], b.attrs["folds"])


def _ibp(k_max, alpha=1.5, sx=0.5):
    def build(X):
        with pm.Model() as m:
            Z = pmi.IBP("Z", alpha, shape=(X.shape[0], k_max))
            A = pm.Normal("A", 0.0, 1.0, shape=(k_max, X.shape[1]))
            pm.Normal("X", Z @ A, sx, observed=X)
        return m
    return build


@pytest.mark.slow  # 96 s; tests/inference/test_smc.py checks the estimate itself by enumeration
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_the_log_evidence_of_a_tiny_ibp_agrees_with_enumeration():
    """N = 3, D = 2, K_max = 3: log p(X) over all 512 matrices, against the SMC estimate
    (4 x 400 particles) within 4 of its standard errors (and 0.1 nats)."""
    n, d = ENUM_X.shape
    mats = all_binary_matrices(n, 3)
    lp = ibp_logp_fn(n, 3, 1.5)(mats)
    for i, Z in enumerate(mats):
        cov = Z @ Z.T + 0.25 * np.eye(n)
        lp[i] += sum(stats.multivariate_normal.logpdf(ENUM_X[:, j], np.zeros(n), cov)
                     for j in range(d))
    exact = special.logsumexp(lp)
    tab = pmi.compare_models({"ibp": _ibp(3)}, ENUM_X, folds=2, random_seed=0,
                             sample_kwargs=_FAST, smc_kwargs={"draws": 400, "chains": 4})
    z, se = tab.loc["ibp", "log_evidence"], tab.loc["ibp", "log_evidence_se"]
    assert abs(z - exact) < max(4 * se, 0.02) and abs(z - exact) < 0.1, (z, se, exact)
    assert "evidence" not in tab.loc["ibp", "note"]


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_a_full_truncation_is_named():
    """Two planted features and K_max = 1: the slot is full in most draws."""
    data = pmi.datasets.block_images(30, noise=0.3, seed=1)
    X = data.X[:, :12]
    tab = pmi.compare_models({"k1": _ibp(1, alpha=3.0, sx=0.3)}, X, folds=3, random_seed=0,
                             evidence=False, sample_kwargs=_FAST)
    assert tab.loc["k1", "truncated"] > 0.5
    assert "raise K_max" in tab.loc["k1", "note"]


def test_evidence_true_estimates_any_model_by_the_generic_kernel():
    """evidence=True on a model without an IBP (the conjugate normal means): sample_smc's
    generic kernel, within 0.1 nats of the closed form sum_d log N(x_d; 0, I + 11^T)."""
    X = np.random.default_rng(2).normal(0.5, 1.0, (6, 4))
    n = X.shape[0]
    exact = sum(stats.multivariate_normal.logpdf(X[:, d], np.zeros(n), np.eye(n) + 1.0)
                for d in range(X.shape[1]))
    tab = pmi.compare_models({"n": _normal()}, X, folds=2, random_seed=3, evidence=True,
                             sample_kwargs=_FAST,
                             smc_kwargs={"draws": 300, "chains": 4, "cores": 1})
    z, se = tab.loc["n", "log_evidence"], tab.loc["n", "log_evidence_se"]
    assert abs(z - exact) < max(4 * se, 0.1), (z, se, exact)


def test_bad_input_is_refused():
    X = np.random.default_rng(0).normal(size=(6, 4))
    with pytest.raises(ValueError, match="without missing"):
        pmi.compare_models({"n": _normal()}, np.where(X > 1, np.nan, X))
    with pytest.raises(ValueError, match="random_seed"):
        pmi.compare_models({"n": _normal()}, X, sample_kwargs={"random_seed": 1})
    with pytest.raises(TypeError, match="returning a pm.Model"):
        pmi.compare_models({"n": lambda X: None}, X, folds=2, evidence=False)
    with pytest.raises(ModelPatternError, match="sample_smc"):
        pmi.compare_models({"n": _normal()}, X, folds=2, evidence=True,
                           smc_kwargs={"kernel": "accelerated"})

    def two(X):
        with pm.Model() as m:
            mu = pm.Normal("mu", 0.0, 1.0)
            pm.Normal("X", mu, 1.0, observed=X)
            pm.Normal("Y", mu, 1.0, observed=X)
        return m

    with pytest.raises(ModelPatternError, match="observed="):
        pmi.compare_models({"two": two}, X, folds=2, evidence=False, sample_kwargs=_FAST)


def _lg(sigma_x):
    """The README pattern with a fixed noise scale."""
    def build(X):
        with pm.Model() as m:
            Z = pmi.IBP("Z", 1.0, shape=(X.shape[0], 6))
            A = pm.Normal("A", 0.0, 1.0, shape=(6, X.shape[1]))
            pm.Normal("X", Z @ A, sigma_x, observed=X)
        return m
    return build


def test_row_folds_are_balanced_and_refuse_empty_folds():
    fold = pmi.row_folds(11, 3, seed=0)
    assert sorted(np.bincount(fold)) == [3, 4, 4]
    with pytest.raises(ValueError, match="at most 2 folds"):
        pmi.row_folds(2, 3)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_held_out_rows_are_scored_once_and_rank_the_models():
    """24 block images in 3 folds of rows: every row scored once as a new row of the model
    fitted to the others (finite, the right noise scale first, paired differences over
    rows); a model without the linear-Gaussian pattern is told to hold out entries."""
    X = pmi.datasets.block_images(24, noise=0.5, seed=2).X
    tab = pmi.compare_models({"wide": _lg(1.5), "right": _lg(0.5)}, X, folds=3,
                             holdout="rows", random_seed=1, evidence=False,
                             sample_kwargs=_FAST)
    assert list(tab.index) == ["right", "wide"]
    assert tab.attrs["folds"].shape == (24,) and sorted(np.bincount(tab.attrs["folds"])) == [
        8, 8, 8]
    pw = tab.attrs["pointwise"]
    assert pw["right"].shape == (24,) and np.all(np.isfinite(pw["right"]))
    assert tab.loc["right", "elpd_row"] == pytest.approx(pw["right"].mean())
    diff = pw["wide"] - pw["right"]
    assert tab.loc["wide", "d_elpd_row"] == pytest.approx(diff.mean())
    assert diff.mean() < 0
    assert tab.loc["wide", "dse"] == pytest.approx(diff.std(ddof=1) / np.sqrt(24))
    with pytest.raises(ModelPatternError, match="hold out entries"):
        pmi.compare_models({"n": _normal()}, X[:6, :4], folds=2, holdout="rows",
                           evidence=False, sample_kwargs=_FAST)
    with pytest.raises(ValueError, match="holdout"):
        pmi.compare_models({"n": _normal()}, X, holdout="columns")


def _poisson(bias):
    """An IBP with a Poisson likelihood, its bias fixed at ``bias`` (log rate)."""
    def build(X):
        with pm.Model() as m:
            Z = pmi.IBP("Z", 1.0, shape=(X.shape[0], 4))
            A = pm.Normal("A", 0.0, 1.0, shape=(4, X.shape[1]))
            pm.Poisson("X", pm.math.exp(Z @ A + bias), observed=X)
        return m
    return build


@pytest.mark.slow  # 56 s; tests/inference/test_prediction.py checks the scores exactly
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_held_out_rows_of_a_poisson_likelihood_rank_the_models():
    """Held-out rows under a likelihood without a closed form (the model's own logp summed
    over each new row's feature sets): every row scored once, finite, and the model with the
    planted bias ahead of one whose rates are e^2 times too high."""
    rng = np.random.default_rng(4)
    Z = (rng.random((18, 2)) < 0.5).astype(int)
    X = rng.poisson(np.exp(Z @ rng.normal(0.0, 1.0, (2, 5)) + 0.5)).astype(float)
    tab = pmi.compare_models({"high": _poisson(2.5), "right": _poisson(0.5)}, X, folds=3,
                             holdout="rows", random_seed=2, evidence=False,
                             sample_kwargs={**_FAST, "tune": 60, "draws": 60})
    pw = tab.attrs["pointwise"]
    assert list(tab.index) == ["right", "high"] and np.all(np.isfinite(pw["high"]))
    assert pw["right"].shape == (18,) and tab.loc["high", "d_elpd_row"] < 0
