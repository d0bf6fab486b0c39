"""The chained start of the correlated models (:class:`pymc_ibp.init.chained.ChainedStart`):
features by a plain IBP on the surrogate first, then categories that reproduce them."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.init.chained import ChainedStart, categories_of_rows, owners_of_features
from pymc_ibp.matching.correlated import match_correlated


def _random_z(rng, n, k, patterns):
    pats = (rng.random((patterns, k)) < 0.5).astype(np.int8)
    return pats[rng.integers(0, patterns, n)]


@pytest.mark.parametrize("seed", range(5))
def test_categories_reproduce_z_when_they_can(seed):
    rng = np.random.default_rng(seed)
    Z = _random_z(rng, 40, 6, 5)
    c, M = categories_of_rows(Z, 7)
    np.testing.assert_array_equal(M[c], Z)
    assert M.shape == (7, 6) and c.min() >= 0 and c.max() < 7
    # the categories in decreasing order of use
    counts = np.bincount(c, minlength=7)
    used = counts[counts > 0]
    assert np.all(np.diff(used) <= 0)


def test_rare_patterns_beyond_l_max_go_to_the_nearest_kept_one():
    Z = np.array([[1, 0, 0]] * 5 + [[0, 1, 1]] * 4 + [[1, 0, 1]] * 2 + [[0, 1, 0]],
                 dtype=np.int8)
    c, M = categories_of_rows(Z, 2)
    np.testing.assert_array_equal(M, [[1, 0, 0], [0, 1, 1]])
    # [1, 0, 1] is one flip from both kept patterns: the more used one; [0, 1, 0] one from the
    # second
    np.testing.assert_array_equal(c, [0] * 5 + [1] * 4 + [0, 0, 1])


@pytest.mark.parametrize(("k", "l_max"), [(4, 6), (6, 3)])
def test_owners_reproduce_z(k, l_max):
    rng = np.random.default_rng(k)
    Z = _random_z(rng, 30, k, 3)
    Z[:, 0] = 0  # an unused feature keeps no owner
    Z[0] = 0  # a row without features has no category
    C, M = owners_of_features(Z, l_max)
    if k > l_max:  # one category per pattern of the rows with features
        assert np.all(C.sum(axis=1)[1:] == 1)
    np.testing.assert_array_equal((C @ M > 0).astype(np.int8), Z)
    assert C.shape == (30, l_max) and M.shape == (l_max, k)
    assert not C[0].any() and not M[:, 0].any()


def _block_model(builder, data, **kw):
    n, d = data.X.shape
    with pm.Model() as model:
        Z = builder("Z", 1.0, 1.0, l_max=10, shape=(n, 8), **kw)
        A = pm.Normal("A", 0.0, 1.0, shape=(8, d))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X)
    return model


@pytest.mark.parametrize("builder", [pmi.dp_ibp, pmi.ibp_ibp])
def test_the_start_finds_the_glyphs_and_factorises_them(builder):
    """On pmi.datasets.block_combinations(150): the plain IBP's features are the four glyphs,
    and the categories reproduce them exactly (Z = M[c], or 1[C M > 0]); A starts at the
    surrogate's features, near the glyphs; any other column is a rare one (at most 3% of the
    rows)."""
    data = pmi.datasets.block_combinations(150, noise=0.5, seed=7)
    model = _block_model(builder, data)
    match = match_correlated(model, model["Z_M"])
    start = ChainedStart(model, model["Z_M"], match, 1.0, 1.0, "IBPGibbs")
    assert not start.given and start.a_name == "A"
    point = model.initial_point()
    draw = start.draw(np.random.default_rng(1), point)
    M = draw.values["Z_M"]
    labels = draw.values["Z_c" if builder is pmi.dp_ibp else "Z_C"]
    assert M.dtype == point["Z_M"].dtype and labels.dtype == point[start.labels_name].dtype
    Z = M[labels] if builder is pmi.dp_ibp else (labels @ M > 0).astype(np.int8)
    truth = np.asarray(data.Z)
    act = np.flatnonzero(Z.sum(0))
    agree = np.array([[np.mean(Z[:, k] == truth[:, g]) for g in range(4)] for k in act])
    assert np.all(agree.max(axis=0) > 0.95)
    best = act[np.argmax(agree, axis=0)]
    assert len(set(best)) == 4
    others = np.setdiff1d(act, best)
    assert np.all(Z[:, others].sum(axis=0) <= 0.03 * len(Z))
    glyphs = np.asarray(pmi.datasets.BLOCK_GLYPHS, dtype=float)
    err = [np.abs(draw.features[best[g]] - glyphs[g]).max() for g in range(4)]
    assert max(err) < 0.6


def test_a_given_start_of_the_labels_or_a_is_told():
    data = pmi.datasets.block_combinations(30, noise=0.5, seed=7)
    n, d = data.X.shape
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=5, shape=(n, 4))
        pm.Normal("A", 0.0, 1.0, shape=(4, d), initval=np.ones((4, d)))
        pm.Normal("X", mu=Z @ model["A"], sigma=0.5, observed=data.X)
    match = match_correlated(model, model["Z_M"])
    start = ChainedStart(model, model["Z_M"], match, 1.0, 1.0, "IBPGibbs")
    assert start.a_name is None and not start.given
    ip = model.initial_point()
    ip["Z_c"] = np.arange(n) % 5
    start = ChainedStart(model, model["Z_M"], match, 1.0, 1.0, "IBPGibbs", ip)
    assert start.given


def test_a_log_link_likelihood_is_started_on_the_log_scale():
    """The issue's DP-IBP with a Poisson likelihood, mu = exp(Z @ A + b) (3 features, 4
    categories): the surrogate reads the counts as log(y + 1/2), where the features add, so
    the start has 3 features spanning the planted ones on all but a few rows (on the counts
    themselves it filled K_max = 8; with an offset per column, which this model's scalar b
    is not, it left a category without features), and b starts on the log scale."""
    rng = np.random.default_rng(11)
    Mt = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    ct = rng.integers(0, 4, 200)
    Y = rng.poisson(np.exp(Mt[ct] @ (1.2 * rng.normal(0, 1, (3, 20))) + 0.5))
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=12, shape=(200, 8))
        A = pm.Normal("A", 0.0, 1.5, shape=(8, 20))
        b = pm.Normal("b", 0.0, 2.0)
        pm.Poisson("Y", mu=pm.math.exp(Z @ A + b), observed=Y)
    match = match_correlated(model, model["Z_M"])
    start = ChainedStart(model, model["Z_M"], match, 1.0, 1.0, "IBPGibbs")
    assert start.surrogate.log_link and start.surrogate.has_offset
    draw = start.draw(np.random.default_rng(1), model.initial_point())
    Z = draw.values["Z_M"][draw.values["Z_c"]]
    cols = Z[:, Z.sum(0) > 0].astype(float)
    assert cols.shape[1] == 3
    # the 4 most used patterns hold all but at most 2% of the rows, and there the columns
    # span the planted features (a stray row may have a pattern of its own)
    _, inv, counts = np.unique(cols, axis=0, return_inverse=True, return_counts=True)
    main = np.isin(inv.ravel(), np.argsort(-counts)[:4])
    assert main.sum() >= 196
    assert np.linalg.matrix_rank(np.hstack([cols[main], Mt[ct][main]])) == 3
    assert -1.0 < float(draw.values["b"]) < 2.0


def test_the_noisy_or_start_has_no_feature_its_category_lacks():
    """With more patterns than l_max the rarer rows go to a kept pattern: the noisy-or's Z
    starts at Z* only where C M > 0 (z = 1 where C M = 0 has density 0), and the model's log
    density at every start is finite."""
    data = pmi.datasets.block_combinations(60, noise=0.5, seed=7)
    n, d = data.X.shape
    with pm.Model() as model:
        q = pm.Beta("q", 1.0, 1.0)
        Z = pmi.noisy_or_ibp_ibp("Z", 1.0, 1.0, q, l_max=2, shape=(n, 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, d))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X)
    match = match_correlated(model, model["Z_M"])
    start = ChainedStart(model, model["Z_M"], match, 1.0, 1.0, "IBPGibbs")
    point = model.initial_point()
    logp = model.compile_logp()
    for seed in range(4):
        v = start.draw(np.random.default_rng(seed), point).values
        cm = v["Z_C"].astype(np.int64) @ v["Z_M"]
        assert len(np.unique(v["Z"], axis=0)) > 2  # more patterns than categories
        assert not np.any((v["Z"] == 1) & (cm == 0))
        assert np.isfinite(logp({**point, **v}))
