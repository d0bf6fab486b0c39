"""The start search's last stage, feature-drop hill climbing
(:func:`pymc_ibp.init.refine.drop_features`, :meth:`pymc_ibp.init.search.AnnealedSearch.refine`)."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp import kernels
from pymc_ibp.init.refine import drop_features
from tests._helpers import lg_model


def test_drop_features_keeps_a_copy_only_when_it_scores_higher():
    """A feature whose emptying raises the score is dropped, one whose emptying lowers it is
    kept; the re-sweep sees each emptied copy, never ``Z`` itself; a pass (each feature, then
    as many pairs) without an improvement ends the search."""
    Z = np.zeros((6, 4), dtype=np.int8)
    Z[:3, 0] = Z[3:, 1] = Z[:2, 2] = 1  # feature 2: a "noise" feature the score dislikes
    seen = []

    def resweep(rng, trial):
        assert trial is not Z
        seen.append(frozenset(np.flatnonzero(~trial.any(axis=0) & Z.any(axis=0)).tolist()))

    def score(trial):
        return 10.0 * trial[:, :2].any(axis=0).sum() - 3.0 * trial[:, 2].any()

    best, tries, kept = drop_features(np.random.default_rng(0), Z, score, resweep, 50)
    assert kept == 1 and not Z[:, 2].any() and Z[:, :2].sum() == 6
    assert best == 20.0
    # after the improvement a whole pass over the two features left: each, then the pair
    assert tries == len(seen)
    assert sorted(map(sorted, seen[-3:])) == [[0], [0, 1], [1]]


def test_drop_features_stops_at_its_budget():
    Z = np.ones((5, 6), dtype=np.int8)
    calls = []
    best, tries, kept = drop_features(np.random.default_rng(1), Z,
                                      lambda trial: -float(trial.any(axis=0).sum()),
                                      lambda rng, trial: calls.append(1), 3)
    assert tries == kept == len(calls) == 3
    assert Z.any(axis=0).sum() == 3 and best == -3.0


def _overlapping_search(seed):
    """The start search of the dependent IBP's model on ``pmi.datasets.dependent_glyphs``
    (eight 8x8 glyphs sharing most of their pixels, about 4.4 per row, 800 rows)."""
    data = pmi.datasets.dependent_glyphs(seed=seed)
    t = np.asarray(data.covariate, dtype=float)
    with pm.Model() as model:
        dibp = pmi.dependent_ibp("Z", t, alpha=2.0, cov="matern52", shape=(t.size, 16))
        A = pm.Normal("A", 0.0, 1.0, shape=(16, 64))
        pm.Normal("X", mu=dibp.Z @ A, sigma=0.5, observed=data.X)
        step = pmi.AcceleratedGibbs([model["Z"], A])
        noise = step.update.noise(model.initial_point())
    return data, step.search, noise


def _found(Z, truth):
    """Whether the columns in use are the true features (Jaccard of owners >= 0.8, one to
    one, nothing else)."""
    cols = Z[:, Z.any(axis=0)].astype(bool)
    if cols.shape[1] != truth.shape[1]:
        return False
    t = truth.astype(bool)
    inter = t.T.astype(int) @ cols.astype(int)
    jac = inter / (t.sum(0)[:, None] + cols.sum(0)[None, :] - inter)
    return bool((jac.max(axis=1) >= 0.8).all() and (jac.max(axis=0) >= 0.8).all())


@pytest.mark.parametrize("refine", [True, False])
def test_searches_on_overlapping_features_end_at_the_planted_ones(refine):
    """On glyphs that share most of their pixels a single annealed search mostly ends in a
    *pieces* mode (12-15 features, each a fractional mix of glyphs, thousands of nats below
    the truth, which no move of the chain leaves); with the last stage the searches end at the
    eight glyphs.  Without it they do not: the check that the test can fail."""
    data, search, noise = _overlapping_search(4)
    search.refines = refine
    X = np.asarray(data.X, dtype=np.float64)
    found = [_found(search.search(np.random.default_rng(s), X, noise)[0], data.Z)
             for s in range(4)]
    if refine:
        assert sum(found) >= 3, found
    else:
        assert sum(found) <= 1, found


def test_refine_raises_the_search_score_and_only_moves_z():
    """The stage scores as the search does (the collapsed log joint under the search's IBP
    prior at the search's noise) and never lowers it; ``X`` is left alone."""
    data, search, noise = _overlapping_search(5)
    X = np.asarray(data.X, dtype=np.float64)
    X0 = X.copy()
    rng = np.random.default_rng(3)
    Z, _, fit = search.search(rng, X, noise)
    trial = Z.copy()
    trial[:, np.flatnonzero(trial.any(axis=0))[:2]] = 0  # two features lost
    ibp = search.search_prior()
    trXX = kernels.block_sq_norms(X, fit)
    before = search.log_joint(trial, X, trXX, fit, ibp)[0]
    best, tries, kept = search.refine(rng, trial, X, fit, ibp)
    assert np.array_equal(X, X0)
    assert best == pytest.approx(search.log_joint(trial, X, trXX, fit, ibp)[0])
    assert tries >= 1 and (best > before if kept else best == before)


def test_a_search_that_fills_every_slot_is_not_refined():
    """K_max binds at such a start: more features are wanted, not fewer, and the stage would
    only cost (four times the search on the continuous digits at K_max = 30)."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=1)
    with lg_model(data.X, 3, alpha=1.0, sigma_x=0.5, sigma_a=1.0) as model:
        step = pmi.AcceleratedGibbs([model["Z"]])
    search, calls = step.search, []
    search.refine = lambda rng, Z, *a: calls.append(Z.copy()) or (0.0, 0, 0)
    full = np.ones((60, 3), dtype=np.int8)
    part = full.copy()
    part[:, 2] = 0
    ends = iter([full, part])
    search.anneal = lambda rng, X, noise, trXX, M=None, groups=None: (next(ends), X, noise, None)
    search.search(np.random.default_rng(0), step.update.data.X,
                  kernels.noise_blocks(0.25, 1.0, 36), restarts=2)
    assert len(calls) == 1 and np.array_equal(calls[0], part)
