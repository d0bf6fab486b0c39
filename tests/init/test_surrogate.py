"""The surrogate start (:class:`pymc_ibp.init.surrogate.SurrogateStart`): the annealed search and
accelerated sweeps on a linear-Gaussian surrogate of data whose likelihood is not Gaussian, run
on arrays and the kernels with the chain's generator."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.init.chained import ChainedStart
from pymc_ibp.init.surrogate import (
    SURROGATE_SWEEPS,
    SurrogateStart,
    merged_triples,
    unmerge_triples,
)
from pymc_ibp.matching.correlated import match_correlated


def _glyphs_found(z, truth, at=0.9, complement=False):
    """How many of the planted features some column of ``z`` matches on ``at`` of the rows
    (or, with ``complement``, its complement: with a free offset ``b``, ``b + a`` on the rows
    without the glyph and ``-a`` on the others explain the data as well)."""
    def agree(k, g):
        same = np.mean(z[:, k] == truth[:, g])
        return max(same, 1.0 - same) if complement else same

    return sum(max(agree(k, g) for k in range(z.shape[1])) >= at
               for g in range(truth.shape[1]))


def _student_model(X, k_max=10):
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(X.shape[0], k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, X.shape[1]))
        b = pm.Normal("b", 0.0, 2.0, shape=X.shape[1])
        pm.StudentT("X", nu=30.0, mu=Z @ A + b, sigma=0.3, observed=X)
    return model


def _data(n=120, seed=0):
    data = pmi.datasets.block_images(n, noise=0.0, seed=seed)
    rng = np.random.default_rng(seed)
    return data, 1.5 + data.Z @ data.A + 0.3 * rng.standard_normal(data.X.shape)


def test_the_surrogate_finds_the_planted_features_and_hands_over_its_offset():
    """Block images with a baseline of 1.5 under a Student-t likelihood: the surrogate
    (free scales, a per-column offset fitted beside Z) finds the four glyphs; the model's
    offset b (one free value per column, not given) starts at the surrogate's, near the
    baseline and shaped as b; A is the surrogate's K_max x D.  (A glyph may be found as its
    complement, the offset taking it on: the same fit, seen in 3 of 3 seeds for one of the
    four glyphs.)"""
    data, X = _data()
    model = _student_model(X)
    start = SurrogateStart(model, model["Z"], [model["X"]], (120, 10), 1.0, 1.0, "IBPGibbs")
    assert not start.binary and start.has_offset and start.handover == "b"
    draw = start.draw(np.random.default_rng(1), model.initial_point())
    assert draw.z.dtype == np.int8 and draw.z.shape == (120, 10)
    assert _glyphs_found(draw.z, data.Z, complement=True) == 4
    assert draw.offsets["b"].shape == (36,)
    assert abs(float(np.median(draw.offsets["b"])) - 1.5) < 0.15
    assert draw.features.shape == (10, 36)


def test_binary_data_have_fixed_scales_no_offset_and_no_features():
    data = pmi.datasets.binary_block_images(150, seed=3)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 2.0, shape=(150, 16))
        A = pm.Normal("A", 0.0, 3.0, shape=(16, 36))
        b = pm.Normal("b", -2.0, 2.0, shape=36)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=data.X)
    start = SurrogateStart(model, Z, [model["X"]], (150, 16), 2.0, 1.0, "PolyaGammaGibbs")
    assert start.binary and not start.has_offset and start.handover is None
    draw = start.draw(np.random.default_rng(4), model.initial_point())
    assert draw.features is None and draw.offsets == {}
    assert _glyphs_found(draw.z, data.Z) == 4


def test_one_generator_gives_one_draw_and_the_draw_uses_only_it():
    """The same seed gives the same draw (the chain's generator is the only source of
    randomness), another seed another one."""
    _, X = _data(60, seed=2)
    model = _student_model(X, 6)
    start = SurrogateStart(model, model["Z"], [model["X"]], (60, 6), 1.0, 1.0, "IBPGibbs")
    first = start.draw(np.random.default_rng(7))
    again = start.draw(np.random.default_rng(7))
    other = start.draw(np.random.default_rng(8))
    np.testing.assert_array_equal(first.z, again.z)
    np.testing.assert_array_equal(first.features, again.features)
    assert not np.array_equal(first.features, other.features)
    assert SURROGATE_SWEEPS > 0


def test_data_the_surrogate_cannot_read_are_refused_naming_the_step():
    """A likelihood that is not one observed N x D matrix is a ModelPatternError naming the
    step and Z."""
    _, X = _data(40, seed=1)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(40, 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, 36))
        pm.StudentT("X1", nu=4.0, mu=(Z @ A)[:, :18], sigma=0.5, observed=X[:, :18])
        pm.StudentT("X2", nu=4.0, mu=(Z @ A)[:, 18:], sigma=0.5, observed=X[:, 18:])
    with pytest.raises(ModelPatternError, match=r"IBPGibbs\(init_z='surrogate'\).*'Z'"):
        SurrogateStart(model, Z, [model["X1"], model["X2"]], (40, 5), 1.0, 1.0, "IBPGibbs")


def test_a_merged_triple_is_unmerged_when_the_score_prefers_the_pair():
    """Column 0 the union F of two features, columns 1 and 2 the corrections on the rows
    owning one alone, column 3 another feature (not inside F): the one merged triple is found
    and replaced by the pair (F without v, F without u) when the score prefers fewer features;
    kept (the same object) when it does not."""
    Z = np.zeros((6, 5), dtype=np.int8)
    Z[:5, 0] = 1
    Z[0, 1] = 1
    Z[1, 2] = 1
    Z[4:, 3] = 1
    assert merged_triples(Z) == [(0, 1, 2)]
    out = unmerge_triples(Z, lambda z: -float((z.sum(0) > 0).sum()))
    assert out.tolist() == np.column_stack([[1, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0],
                                            np.zeros(6), Z[:, 3], np.zeros(6)]).tolist()
    assert merged_triples(out) == []
    assert unmerge_triples(Z, lambda z: float((z.sum(0) > 0).sum())) is Z
    # a stray row of a correction outside the union: found only with a tolerance
    Z[5, 1] = 1
    assert merged_triples(Z) == [] and (0, 1, 2) in merged_triples(Z, 0.5)


def _overlapping_clusters(seed):
    """The issue's IBP-IBP data: 200 rows of overlapping clusters of the 4 block glyphs (8
    categories, each owning a combination; a feature on with probability 1 - 0.1^s)."""
    rng = np.random.default_rng(seed)
    A0 = np.asarray(pmi.datasets.BLOCK_GLYPHS, dtype=float)
    M0 = np.asarray(pmi.datasets.BLOCK_COMBINATIONS)[1:]
    C0 = (rng.random((200, 8)) < 0.25).astype(int)
    Z0 = (rng.random((200, 4)) < 1 - 0.1 ** (C0 @ M0)).astype(int)
    return Z0, Z0 @ A0 + 0.5 * rng.standard_normal((200, A0.shape[1]))


def test_the_overlapping_clusters_start_with_each_glyph_its_own_feature():
    """Two glyphs that co-occur in most rows were found as their union plus two corrections
    (a merged triple) by the surrogate with a fitted feature scale, which cannot tell the two
    apart; with the model's own σa = 1 in its sweeps and the greedy unmerge at the end, the
    chained start of the IBP-IBP has the four glyphs, each its own feature (Jaccard >= 0.9
    one to one, nothing else on 2% of the rows), in at least 6 of 8 draws (1 of 8 before)."""
    Z0, X = _overlapping_clusters(2)
    with pm.Model() as model:
        Z = pmi.ibp_ibp("Z", alpha_c=1.0, alpha_m=1.0, l_max=10, shape=(200, 12))
        A = pm.Normal("A", 0.0, 1.0, shape=(12, 36))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
    start = ChainedStart(model, model["Z_M"], match_correlated(model, model["Z_M"]), 1.0, 1.0,
                         "IBPGibbs")
    assert start.surrogate.fixed_sa == 1.0
    point = model.initial_point()
    found = 0
    for seed in range(8):
        draw = start.draw(np.random.default_rng(seed), point)
        Z = (draw.values["Z_C"] @ draw.values["Z_M"] > 0).astype(bool)
        cols = Z[:, Z.sum(0) > 0]
        J = np.array([[np.sum(c & t) / np.sum(c | t) for c in cols.T] for t in Z0.T.astype(bool)])
        best = J.argmax(axis=1)
        rest = np.setdiff1d(np.arange(cols.shape[1]), best)
        found += bool(np.all(J.max(axis=1) >= 0.9) and len(set(best)) == 4
                      and np.all(cols[:, rest].sum(axis=0) < 4))
    assert found >= 6, found



def test_a_start_keeps_the_run_of_highest_surrogate_density_where_its_likelihood_is_the_models():
    """Under the identity link on continuous data a start makes two runs and keeps the one
    whose score (the surrogate's log density at its end) is higher; under a log link (Poisson
    counts) or on 0/1 data one run (benchmarks/surrogate_starts.py measures what the second
    run buys on the overlapping clusters)."""
    data, X = _data()
    model = _student_model(X)
    start = SurrogateStart(model, model["Z"], [model["X"]], (120, 10), 1.0, 1.0, "IBPGibbs")
    assert start.tries == 2
    calls = []

    def fake_run(rng, point):
        calls.append(len(calls))
        return f"run {len(calls)}", [3.0, 7.0, 5.0][len(calls) - 1]

    start._run = fake_run
    assert start.draw(np.random.default_rng(0)) == "run 2" and len(calls) == 2
    assert start.draw(np.random.default_rng(0), tries=1) == "run 3"
    with pm.Model() as counts:
        Z = pmi.IBP("Z", 1.0, shape=(120, 10))
        A = pm.Normal("A", 0.0, 1.0, shape=(10, 36))
        pm.Poisson("Y", pm.math.exp(Z @ A), observed=np.round(np.exp(X / 3.0)))
    assert SurrogateStart(counts, counts["Z"], [counts["Y"]], (120, 10), 1.0, 1.0,
                          "IBPGibbs").tries == 1
