"""Held-out evaluation (Doshi-Velez & Ghahramani 2009, §6)."""

import numpy as np
import pytest
import xarray as xr
from scipy import stats

import pymc_ibp as pmi


def test_holdout_mask_protects_rows_and_columns():
    rng = np.random.default_rng(0)
    for n, d, k in [(10, 4, 20), (5, 12, 40), (30, 30, 800), (3, 3, 6)]:
        mask = pmi.holdout_mask(np.zeros((n, d)), k, seed=int(rng.integers(1000)))
        assert mask.sum() == k
        assert (~mask).any(axis=1).all() and (~mask).any(axis=0).all()
    a = pmi.holdout_mask(np.zeros((20, 5)), 30, seed=3)
    assert np.array_equal(a, pmi.holdout_mask(np.zeros((20, 5)), 30, seed=3))
    assert not np.array_equal(a, pmi.holdout_mask(np.zeros((20, 5)), 30, seed=4))
    with pytest.raises(ValueError, match="no row or column"):
        pmi.holdout_mask(np.zeros((3, 3)), 7)


def test_holdout_mask_is_uniform_over_cells():
    counts = np.zeros((6, 4))
    for s in range(3000):
        counts += pmi.holdout_mask(np.zeros((6, 4)), 5, seed=s)
    # every cell equally likely (the protected transversal is random)
    res = stats.chisquare(counts.ravel())
    assert res.pvalue > 1e-3, res


def fake_idata(Z, A, sx):
    post = xr.Dataset({
        "Z": (("chain", "draw", "obs", "feature"), Z),
        "A": (("chain", "draw", "feature", "dim"), A),
        "sigma_x": (("chain", "draw"), sx),
    })
    return xr.DataTree.from_dict({"posterior": post})


def test_heldout_metrics_match_hand_computation():
    rng = np.random.default_rng(1)
    c, s, n, k, d = 2, 5, 7, 3, 4
    Z = (rng.random((c, s, n, k)) < 0.5).astype(np.int64)
    A = rng.normal(size=(c, s, k, d))
    sx = rng.uniform(0.3, 1.0, size=(c, s))
    X = rng.normal(size=(n, d))
    mask = pmi.holdout_mask(X, 6, seed=2)
    got = pmi.heldout_metrics(fake_idata(Z, A, sx), X, mask)
    rows, cols = np.nonzero(mask)
    err, lp = [], []
    for ci in range(c):
        for si in range(s):
            mean = (Z[ci, si] @ A[ci, si])[rows, cols]
            err.append((X[rows, cols] - mean) ** 2)
            lp.append(stats.norm.logpdf(X[rows, cols], mean, sx[ci, si]))
    err, lp = np.array(err), np.array(lp)
    assert np.isclose(got["l2"], err.mean())
    assert np.isclose(got["mean_log_pred"], lp.mean())
    assert np.isclose(got["log_mean_pred"], np.log(np.exp(lp).mean(axis=0)).mean())
    last = pmi.heldout_metrics(fake_idata(Z, A, sx), X, mask, last=2)
    assert last["n_draws"] == 4
    with pytest.raises(ValueError, match="shape"):
        pmi.heldout_metrics(fake_idata(Z, A, sx), X, mask[:, :2])


@pytest.mark.parametrize("b_shape", [(4,), (), (7, 1)], ids=["per-column", "scalar", "per-row"])
def test_heldout_metrics_with_an_offset_and_per_column_noise(b_shape):
    """A model with an offset (mu = Z @ A + b) and a noise scale per column (sigma_x with
    dims="dim"): each draw's b and the entry's column's sigma_x enter, as in the likelihood;
    constants too; a shape that does not broadcast is an error naming it."""
    rng = np.random.default_rng(3)
    c, s, n, k, d = 2, 5, 7, 3, 4
    Z = (rng.random((c, s, n, k)) < 0.5).astype(np.int64)
    A = rng.normal(size=(c, s, k, d))
    b = rng.normal(size=(c, s, *b_shape))
    sx = rng.uniform(0.3, 1.0, size=(c, s, d))
    X = rng.normal(size=(n, d)) + 3.0
    mask = pmi.holdout_mask(X, 6, seed=2)
    post = xr.Dataset({
        "Z": (("chain", "draw", "obs", "feature"), Z),
        "A": (("chain", "draw", "feature", "dim"), A),
        "b": (("chain", "draw", *[f"b_dim_{i}" for i in range(len(b_shape))]), b),
        "sigma_x": (("chain", "draw", "dim"), sx),
    })
    idata = xr.DataTree.from_dict({"posterior": post})
    got = pmi.heldout_metrics(idata, X, mask, offset="b")
    rows, cols = np.nonzero(mask)
    err, lp = [], []
    for ci in range(c):
        for si in range(s):
            mean = (Z[ci, si] @ A[ci, si] + b[ci, si])[rows, cols]
            err.append((X[rows, cols] - mean) ** 2)
            lp.append(stats.norm.logpdf(X[rows, cols], mean, sx[ci, si][cols]))
    err, lp = np.array(err), np.array(lp)
    assert np.isclose(got["l2"], err.mean())
    assert np.isclose(got["mean_log_pred"], lp.mean())
    assert np.isclose(got["log_mean_pred"], np.log(np.exp(lp).mean(axis=0)).mean())
    const = pmi.heldout_metrics(idata, X, mask, offset=3.0, sigma_x=np.full(d, 0.5))
    mean = np.array([(Z[ci, si] @ A[ci, si])[rows, cols] + 3.0
                     for ci in range(c) for si in range(s)])
    assert np.isclose(const["mean_log_pred"],
                      stats.norm.logpdf(X[rows, cols], mean, 0.5).mean())
    with pytest.raises(ValueError, match="offset"):
        pmi.heldout_metrics(idata, X, mask, offset=np.zeros(3))


def test_bernoulli_heldout_metrics():
    """Per-entry Bernoulli scores against direct formulas, and clear errors."""
    p = np.array([[0.9, 0.2, 0.5], [0.7, 0.4, 0.5]])
    x = np.array([1, 0, 1])
    s = pmi.bernoulli_heldout_metrics(p, x)
    lp = np.log(np.array([[0.9, 0.8, 0.5], [0.7, 0.6, 0.5]]))
    assert np.isclose(s["mean_log_pred"], lp.mean())
    assert np.isclose(s["log_mean_pred"], np.log(np.exp(lp).mean(axis=0)).mean())
    assert np.isclose(s["l2"], ((x - p) ** 2).mean())
    with pytest.raises(ValueError, match="draws, entries"):
        pmi.bernoulli_heldout_metrics(p[0], x)
    with pytest.raises(ValueError, match="0 and 1"):
        pmi.bernoulli_heldout_metrics(p, np.array([1, 2, 0]))


def test_logit_heldout_metrics_match_hand_computation():
    """A Bernoulli-logit model (logit_p = Z @ A + b): each draw's sigmoid(z_n a_d + b_d) at
    the held-out entries, scored as bernoulli_heldout_metrics scores it, finite in the tails
    (|psi| = 800, where sigmoid rounds to 0 or 1); non-binary held-out values are an error."""
    rng = np.random.default_rng(4)
    c, s, n, k, d = 2, 5, 7, 3, 4
    Z = (rng.random((c, s, n, k)) < 0.5).astype(np.int64)
    A = rng.normal(size=(c, s, k, d))
    b = rng.normal(size=(c, s, d))
    X = (rng.random((n, d)) < 0.5).astype(float)
    mask = pmi.holdout_mask(X, 6, seed=2)
    post = xr.Dataset({
        "Z": (("chain", "draw", "obs", "feature"), Z),
        "A": (("chain", "draw", "feature", "dim"), A),
        "b": (("chain", "draw", "dim"), b),
    })
    idata = xr.DataTree.from_dict({"posterior": post})
    got = pmi.logit_heldout_metrics(idata, X, mask, offset="b")
    rows, cols = np.nonzero(mask)
    p = np.array([1.0 / (1.0 + np.exp(-(Z[ci, si] @ A[ci, si] + b[ci, si])[rows, cols]))
                  for ci in range(c) for si in range(s)])
    want = pmi.bernoulli_heldout_metrics(p, X[rows, cols])
    for key in ("l2", "mean_log_pred", "log_mean_pred"):
        assert np.isclose(got[key], want[key]), key
    assert (got["n_heldout"], got["n_draws"]) == (6, 10)
    assert pmi.logit_heldout_metrics(idata, X, mask, offset="b", last=1)["n_draws"] == 2
    # a wrong prediction far in the tail: log-likelihood -800, not -inf or a clipped -27.6
    x_tail = X.copy()
    x_tail[rows, cols] = 1.0
    tail = xr.DataTree.from_dict({"posterior": post.assign(b=post["b"] * 0 - 800.0)})
    assert np.isclose(pmi.logit_heldout_metrics(tail, x_tail, mask, offset="b",
                                                last=1)["mean_log_pred"],
                      -800.0, atol=10.0)
    bad = X.copy()
    bad[rows[0], cols[0]] = 2.0
    with pytest.raises(ValueError, match="0 and 1"):
        pmi.logit_heldout_metrics(idata, bad, mask, offset="b")


def test_bad_input_is_an_error():
    """Data or a mask of another shape than Z @ A, NaN at a held-out entry, a non-positive
    noise, a bad ``last`` or variable name, a non-binary Z: a clear ValueError each (before:
    a subset scored silently, an IndexError, or nan scores)."""
    rng = np.random.default_rng(0)
    Z = (rng.random((1, 4, 6, 2)) < 0.5).astype(np.int8)
    A = rng.normal(size=(1, 4, 2, 3))
    idata = fake_idata(Z, A, np.full((1, 4), 0.5))
    X = rng.normal(size=(6, 3))
    mask = np.zeros((6, 3), dtype=bool)
    mask[1, 2] = mask[4, 0] = True
    cases = [
        (dict(X_true=X[:, :-1], mask=mask[:, :-1]), r"shape \(6, 2\); Z @ A is 6 x 3"),
        (dict(X_true=X[:-1], mask=mask[:-1]), r"shape \(5, 3\); Z @ A is 6 x 3"),
        (dict(X_true=np.where(mask, np.nan, X), mask=mask), "not finite at some held-out"),
        (dict(X_true=X, mask=mask, sigma_x=-1.0), "sigma_x must be positive"),
        (dict(X_true=X, mask=mask, sigma_x=0.0), "sigma_x must be positive"),
        (dict(X_true=X, mask=mask, last=0), "last must be a positive"),
        (dict(X_true=X, mask=mask, a_name="B"), "no variable 'B'"),
        (dict(X_true=X, mask=mask, sigma_x="s"), "no variable 's'"),
        (dict(X_true=X, mask=mask, z_name="A"), "'A' is not a binary matrix"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            pmi.heldout_metrics(idata, **kwargs)
    with pytest.raises(ValueError, match="not a binary matrix"):
        pmi.heldout_metrics(fake_idata(3 * Z, A, np.full((1, 4), 0.5)), X, mask)
    with pytest.raises(ValueError, match="n_missing is a number of entries"):
        pmi.holdout_mask(X, 2.5)
    # a posterior Dataset is accepted as pmi.summary accepts it
    full = pmi.heldout_metrics(idata, X, mask)
    assert pmi.heldout_metrics(idata["posterior"].to_dataset(), X, mask) == full
