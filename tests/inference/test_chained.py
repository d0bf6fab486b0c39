"""Chained initialisation of the correlated models (DP -> DP-IBP -> IBP-IBP -> noisy-or)."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.inference.chained import PREVIOUS, STAGES, build_stage, hand_over

N, K_MAX, L_MAX = 12, 5, 4


def _z_of(stage, state):
    """The binary matrix the likelihood sees in ``stage`` at ``state``."""
    if stage == "dp":
        return np.eye(L_MAX, K_MAX, dtype=np.int64)[state["Z_c"]]
    if stage == "dp_ibp":
        return np.asarray(state["Z_M"], dtype=np.int64)[state["Z_c"]]
    if stage == "ibp_ibp":
        return (state["Z_C"].astype(np.int64) @ state["Z_M"] > 0).astype(np.int64)
    return np.asarray(state["Z"], dtype=np.int64)  # noisy-or, ibp


def _random_state(stage, rng):
    state = {"A": rng.normal(size=(K_MAX, 3)), "sigma_x": 0.7}
    if stage in ("dp", "dp_ibp"):
        state["Z_c"] = rng.integers(0, L_MAX, size=N)
    if stage == "dp_ibp":
        state["Z_M"] = (rng.random((L_MAX, K_MAX)) < 0.4).astype(np.int8)
    if stage == "ibp_ibp":
        state["Z_C"] = (rng.random((N, L_MAX)) < 0.4).astype(np.int8)
        state["Z_M"] = (rng.random((L_MAX, K_MAX)) < 0.4).astype(np.int8)
    return state


def _likelihood(X):
    def add(Z):
        A = pm.Normal("A", 0.0, 1.0, shape=(K_MAX, X.shape[1]))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)
    return add


@pytest.mark.parametrize("dst", list(PREVIOUS))
def test_hand_over_keeps_z_and_the_other_variables(dst):
    """Each hand-over starts the next model at the same binary matrix Z (so the likelihood
    is unchanged) with every other variable kept, at a finite log density."""
    src = PREVIOUS[dst]
    rng = np.random.default_rng(len(dst))
    X = rng.normal(size=(N, 3))
    for _ in range(5):
        state = _random_state(src, rng)
        init = hand_over(state, src, dst, l_max=L_MAX, k_max=K_MAX)
        np.testing.assert_array_equal(_z_of(dst, init), _z_of(src, state))
        np.testing.assert_array_equal(init["A"], state["A"])
        model = build_stage(dst, _likelihood(X), n=N, k_max=K_MAX, l_max=L_MAX)
        point = model.initial_point()
        point.update({k: v for k, v in init.items() if k in point})
        point["sigma_x_log__"] = np.log(state["sigma_x"])
        assert np.isfinite(model.compile_logp()(point))
    with pytest.raises(ValueError, match="does not follow"):
        hand_over(state, dst, src, l_max=L_MAX, k_max=K_MAX)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # l_max = 4 labels, N = 12
def test_chained_fit_runs_every_stage_from_the_last():
    data = pmi.datasets.block_combinations(n=N, seed=1)
    X = data.X[:, :3]
    fit = pmi.inference.chained_fit(_likelihood(X), n=N, k_max=K_MAX, l_max=L_MAX, tune=2,
                                    draws=2, chains=1, cores=1, random_seed=3,
                                    progressbar=False, compute_convergence_checks=False)
    assert fit.stages == list(STAGES)
    assert set(fit["noisy_or"]["posterior"].data_vars) >= {"Z", "Z_C", "Z_M", "A"}
    assert set(fit.initvals[0]) == {"Z", "Z_C", "Z_M", "A", "sigma_x"}
    with pytest.raises(ValueError, match="consecutive"):
        pmi.inference.chained_fit(_likelihood(X), n=N, k_max=K_MAX, l_max=L_MAX,
                                  stages=["dp", "ibp_ibp"])
    with pytest.raises(ValueError, match="k_max >= l_max"):
        build_stage("dp", _likelihood(X), n=N, k_max=2, l_max=L_MAX)


def test_ibp_stage_has_no_category_concentration():
    """The plain IBP stage does not create alpha_c (it would be sampled from its prior)."""
    X = np.zeros((N, 3))
    model = build_stage("ibp", _likelihood(X), n=N, k_max=K_MAX, l_max=L_MAX,
                        alpha_c=lambda: pm.Gamma("alpha_c", 1.0, 1.0),
                        alpha_m=lambda: pm.Gamma("alpha_m", 1.0, 1.0))
    assert "alpha_c" not in model.named_vars and "alpha_m" in model.named_vars


def test_a_handed_over_z_is_kept_not_searched():
    """The noisy-or stage receives Z = 1[CM > 0], the support point of its prior at the
    handed-over C and M.  AcceleratedGibbs keeps it instead of taking it for PyMC's default
    start and replacing it by its start search (which knows nothing of the noisy-or's
    impossible entries: states of zero probability): when pm.sample builds the step at the
    chain's initial point (initvals differ from the model's default), and when the values
    are the variables' own initial values (``mark_given``, as chained_fit does)."""
    from pymc_ibp.inference.chained import mark_given

    rng = np.random.default_rng(4)
    X = rng.normal(size=(N, 3))
    state = {"A": rng.normal(size=(K_MAX, 3)), "sigma_x": 0.7,
             "Z_C": np.eye(N, L_MAX, dtype=np.int8), "Z_M": np.eye(L_MAX, K_MAX, dtype=np.int8)}
    init = hand_over(state, "ibp_ibp", "noisy_or", l_max=L_MAX, k_max=K_MAX)
    searches = []
    for given, at_point in ((False, False), (True, False), (False, True)):
        model = build_stage("noisy_or", _likelihood(X), n=N, k_max=K_MAX, l_max=L_MAX, q=0.2)
        if given:
            mark_given(model, init)
        point = model.initial_point()
        point.update({k: v for k, v in init.items() if k in point})
        with model:
            step = pmi.AcceleratedGibbs([model["Z"], model["A"]],
                                        initial_point=point if at_point else None)
        step.update.noise(point)
        assert step.mode.is_support_point(init["Z"])
        searches.append(step.search.will_search(np.asarray(init["Z"], dtype=np.int8)))
    assert searches == [True, False, False]


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # l_max = 4 may bind
def test_only_the_last_stage_runs_convergence_checks(monkeypatch):
    """The stages before the last only choose where the next starts: PyMC's R-hat / ESS
    checks (and their warnings) run on the last stage only, unless the user says otherwise.
    There, ArviZ's R-hat of the entries no draw changes is NaN without a RuntimeWarning
    (warnings are errors here)."""
    seen = []
    sample = pm.sample
    monkeypatch.setattr(pm, "sample", lambda *a, **k: seen.append(
        k.get("compute_convergence_checks", True)) or sample(*a, **k))
    X = pmi.datasets.block_images(30, noise=0.5, seed=1).X

    def likelihood(Z):  # 8 slots for 4 glyphs: empty columns of Z in every draw
        pm.Normal("X", mu=Z @ pm.Normal("A", 0.0, 1.0, shape=(8, 36)), sigma=0.5, observed=X)

    pmi.inference.chained_fit(likelihood, n=30, k_max=8, l_max=L_MAX, stages=["dp", "dp_ibp"],
                              tune=2, draws=100, chains=2, cores=1, random_seed=3,
                              progressbar=False)
    assert seen == [False, True]
