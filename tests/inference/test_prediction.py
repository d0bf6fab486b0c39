"""pmi.predict_rows: new rows of a fitted model, one set per posterior draw, for the
linear-Gaussian model (closed form) and any other likelihood (the model's own logp) (the
kernels are tested against enumeration in tests/kernels/test_prediction.py)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import xarray as xr
from scipy import special, stats

import pymc_ibp as pmi
from tests._helpers import all_binary_matrices, chi2_pooled, codes

Z_FIT = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=np.int8)
A_DRAW = np.array([[1.0, -0.5], [0.2, 1.1], [-0.8, 0.7]])


def _tiny_model():
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 2.0)
        Z = pmi.IBP("Z", alpha, shape=(3, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Normal("X", Z @ A + b, sigma_x, observed=np.zeros((3, 2)))
    return model


def _one_draw_repeated(draws, **values):
    """A posterior of ``draws`` identical draws (so every draw's predictions are independent
    draws from one conditional); ``values`` replace the defaults."""
    rep = {"Z": Z_FIT, "A": A_DRAW, "alpha": 1.3, "sigma_x": 0.7, "b": np.array([0.3, -0.2]),
           **values}
    data = {k: (("chain", "draw", *[f"{k}_{i}" for i in range(np.ndim(v))]),
                np.broadcast_to(v, (1, draws, *np.shape(v))).copy()) for k, v in rep.items()}
    return xr.DataTree.from_dict({"posterior": xr.Dataset(data)})


def test_fold_in_through_the_posterior_is_the_exact_conditional_of_each_draw():
    """X_new of one row with a posterior of identical draws: the features over the draws
    follow p(z | x, draw) by enumeration (the IBP over the 3 fitted rows and the new one,
    alpha, sigma_x and the offset b read from the draw)."""
    model = _tiny_model()
    x = np.array([0.9, 0.6])
    pred = pmi.predict_rows(_one_draw_repeated(3000), model, X_new=x[None], sweeps=10,
                            random_seed=1)
    z = pred["Z_new"].values[0, :, 0]
    rows = all_binary_matrices(1, 3)[:, 0]
    value = pt.tensor3("v", dtype="int64")
    logp = pytensor.function([value], pm.logp(pmi.IBP.dist(1.3, 1.0, shape=(4, 3)), value))
    lp = logp(np.array([np.vstack([Z_FIT, r]) for r in rows]))
    lp = lp + np.array([stats.norm.logpdf(x, r @ A_DRAW + [0.3, -0.2], 0.7).sum() for r in rows])
    post = np.exp(lp - special.logsumexp(lp))
    counts = np.bincount(codes(z[:, None, :]), minlength=8)[codes(rows[:, None, :])]
    res = chi2_pooled(counts, post * len(z))
    assert res.pvalue > 1e-3, res


def test_new_rows_from_the_model_and_their_data():
    """n_new rows: Z_new and X_new per draw, X_new = Z_new A + b + noise at the draw's
    sigma_x; one seed gives one answer."""
    model = _tiny_model()
    idata = _one_draw_repeated(400)
    pred = pmi.predict_rows(idata, model, n_new=5, random_seed=3)
    again = pmi.predict_rows(idata, model, n_new=5, random_seed=3)
    z, x = pred["Z_new"].values[0], pred["X_new"].values[0]
    assert z.shape == (400, 5, 3) and z.dtype == np.int8 and x.shape == (400, 5, 2)
    np.testing.assert_array_equal(x, again["X_new"].values[0])
    resid = x - (z @ A_DRAW + [0.3, -0.2])
    assert abs(resid.std() - 0.7) < 0.05 and abs(resid.mean()) < 0.05
    # features of the fitted rows with probability m_k / (N + 1) for the first new row
    np.testing.assert_allclose(z[:, 0, :2].mean(axis=0), [2 / 4, 2 / 4], atol=0.08)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_fold_in_of_held_out_block_images_recovers_their_glyphs():
    """The README model fitted on 200 block images; 40 held-out images folded in: each draw's
    Z_new A reconstructs the held-out images' noise-free glyphs."""
    data = pmi.datasets.block_images(240, noise=0.5, seed=4)
    X, X_new, clean = data.X[:200], data.X[200:], (data.Z @ data.A)[200:]
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(200, 8))
        A = pm.Normal("A", 0.0, 1.0, shape=(8, 36))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        idata = pm.sample(tune=30, draws=10, chains=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    pred = pmi.predict_rows(idata, model, X_new=X_new, random_seed=0)
    A_post = idata["posterior"]["A"].values[0]
    recon = np.einsum("drk,dkc->drc", pred["Z_new"].values[0], A_post)
    assert np.sqrt(np.mean((recon - clean) ** 2)) < 0.25


def test_bad_requests_are_errors():
    model = _tiny_model()
    idata = _one_draw_repeated(2)
    with pytest.raises(ValueError, match="X_new .* or n_new"):
        pmi.predict_rows(idata, model)
    with pytest.raises(pmi.DataError, match=r"X_new must be R x 2"):
        pmi.predict_rows(idata, model, X_new=np.zeros((2, 3)))
    with pm.Model() as per_row:
        Z = pmi.IBP("Z", 1.0, shape=(3, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        b = pm.Normal("b", 0.0, 1.0, shape=(3, 1))
        pm.Poisson("X", pm.math.exp(Z @ A + b), observed=np.zeros((3, 2)))
    rows = _one_draw_repeated(2, b=np.zeros((3, 1)))
    with pytest.raises(pmi.ModelPatternError, match="terms per fitted row"):
        pmi.predict_rows(rows, per_row, X_new=np.zeros((2, 2)))
    with pm.Model() as two:
        Z = pmi.IBP("Z", 1.0, shape=(3, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        pm.Poisson("X", pm.math.exp(Z @ A), observed=np.zeros((3, 2)))
        pm.Poisson("Y", pm.math.exp(Z @ A), observed=np.zeros((3, 2)))
    with pytest.raises(pmi.ModelPatternError, match="one observed N x D matrix"):
        pmi.predict_rows(idata, two, n_new=1)


def _tiny_poisson_model():
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 2.0)
        Z = pmi.IBP("Z", alpha, shape=(3, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Poisson("X", pm.math.exp(Z @ A + b), observed=np.zeros((3, 2)))
    return model


def test_fold_in_under_any_likelihood_is_the_exact_conditional_of_each_draw():
    """A Poisson likelihood (no closed form): two new rows, one with a missing entry, over a
    posterior of identical draws follow p(z | x, draw) by enumeration, each row on its own
    (the IBP over the 3 fitted rows and the new one; alpha and the offset b from the draw)."""
    model = _tiny_poisson_model()
    X_new = np.array([[4.0, 0.0], [np.nan, 3.0]])
    pred = pmi.predict_rows(_one_draw_repeated(3000), model, X_new=X_new, sweeps=10,
                            random_seed=1)
    rows = all_binary_matrices(1, 3)[:, 0]
    value = pt.tensor3("v", dtype="int64")
    logp = pytensor.function([value], pm.logp(pmi.IBP.dist(1.3, 1.0, shape=(4, 3)), value))
    prior = logp(np.array([np.vstack([Z_FIT, r]) for r in rows]))
    for j, x in enumerate(X_new):
        seen = ~np.isnan(x)
        rate = np.exp(rows @ A_DRAW + [0.3, -0.2])
        lp = prior + stats.poisson.logpmf(x[seen], rate[:, seen]).sum(axis=1)
        post = np.exp(lp - special.logsumexp(lp))
        z = pred["Z_new"].values[0, :, j]
        counts = np.bincount(codes(z[:, None, :]), minlength=8)[codes(rows[:, None, :])]
        res = chi2_pooled(counts, post * len(z))
        assert res.pvalue > 1e-3, (j, res)


def test_new_rows_under_any_likelihood_are_drawn_from_it():
    """n_new rows of the Poisson model: X_new is Poisson with rate exp(Z_new A + b) of each
    draw's Z_new (the mean and variance of X_new given Z_new agree)."""
    pred = pmi.predict_rows(_one_draw_repeated(1000), _tiny_poisson_model(), n_new=3,
                            random_seed=2)
    z, x = pred["Z_new"].values[0], pred["X_new"].values[0]
    rate = np.exp(z @ A_DRAW + [0.3, -0.2])
    assert x.shape == (1000, 3, 2) and np.all(x == np.round(x)) and np.all(x >= 0)
    standard = (x - rate) / np.sqrt(rate)
    assert abs(standard.mean()) < 0.05 and abs(standard.std() - 1.0) < 0.05


def test_the_density_of_held_out_rows_reads_every_draws_parameters():
    """pmi.log_predictive_rows on the draws of the tiny model (alpha, sigma_x and the offset
    free, sigma_a = 1): each draw's value is the sum over the new row's 8 feature sets under
    the 4-row IBP given Z, A's free column integrated out; other models are refused."""
    X = np.array([[1.4, 0.2], [-0.5, 1.0], [0.0, 0.0]])
    idata = _one_draw_repeated(3)
    got = pmi.log_predictive_rows(idata, _tiny_model(), X)
    assert got.shape == (1, 3, 3)
    rows = all_binary_matrices(1, 3)[:, 0]
    value = pt.tensor3("v", dtype="int64")
    logp = pytensor.function([value], pm.logp(pmi.IBP.dist(1.3, 1.0, shape=(4, 3)), value))
    lp = logp(np.array([np.vstack([Z_FIT, r]) for r in rows]).astype(np.int64))
    lp -= special.logsumexp(lp)
    b = np.array([0.3, -0.2])
    exact = [special.logsumexp([lp[i] + stats.norm.logpdf(
        x, r[:2] @ A_DRAW[:2] + b, np.sqrt(0.7**2 + r[2] * 1.0)).sum()
        for i, r in enumerate(rows)]) for x in X]
    np.testing.assert_allclose(got[0], np.broadcast_to(exact, (3, 3)), rtol=1e-10)
    with pm.Model() as no_ibp:
        pm.Normal("Y", pm.Normal("mu", 0.0, 1.0), 1.0, observed=np.ones((3, 2)))
    with pytest.raises(pmi.ModelPatternError, match="hold out entries"):
        pmi.log_predictive_rows(idata, no_ibp, X)
    with pytest.raises(pmi.DataError, match="finite rows of 2 columns"):
        pmi.log_predictive_rows(idata, _tiny_model(), np.ones((2, 3)))


@pytest.mark.parametrize("n", [3, 40])
def test_held_out_rows_under_any_likelihood_sum_the_new_rows_features(n):
    """A Poisson likelihood (no closed form): each draw's value is the sum over every row of
    6 slots of P(z | Z) (the ratio of the (N + 1)- and N-row IBP pmfs) times the Poisson
    likelihood with the draw's A, also of the free slots.  At N = 40 the sets with 4 new
    features (prior tail below 1e-6) are left out: within 1e-6."""
    rng = np.random.default_rng(3)
    Z = np.zeros((n, 6), dtype=np.int8)
    Z[:, :2] = rng.random((n, 2)) < 0.5
    Z[0, :2] = 1
    A = rng.normal(0.0, 0.7, (6, 2))
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 2.0)
        Zv = pmi.IBP("Z", alpha, shape=(n, 6))
        Av = pm.Normal("A", 0.0, 1.0, shape=(6, 2))
        pm.Poisson("X", pm.math.exp(Zv @ Av + pm.Normal("b", 0.0, 1.0, shape=2)),
                   observed=np.zeros((n, 2)))
    idata = _one_draw_repeated(2, Z=Z, A=A)
    X = np.array([[0.0, 3.0], [2.0, 1.0], [7.0, 0.0]])
    got = pmi.log_predictive_rows(idata, model, X)
    rows = all_binary_matrices(1, 6)[:, 0]
    value = pt.tensor3("v", dtype="int64")
    logp = pytensor.function([value], pm.logp(pmi.IBP.dist(1.3, 1.0, shape=(n + 1, 6)),
                                              value))
    lp = logp(np.array([np.vstack([Z, r]) for r in rows]).astype(np.int64))
    lp -= special.logsumexp(lp)
    rate = np.exp(rows @ A + [0.3, -0.2])
    exact = [special.logsumexp(lp + stats.poisson.logpmf(x, rate).sum(axis=1)) for x in X]
    np.testing.assert_allclose(got[0], np.broadcast_to(exact, (2, 3)),
                               rtol=1e-10 if n == 3 else 1e-6)
    if n == 40:
        assert np.all(got[0] <= np.asarray(exact) + 1e-12)  # the sets left out only lower it



@pytest.mark.parametrize("likelihood", ["poisson", "normal"])
def test_held_out_rows_of_a_dp_ibp_sum_over_the_new_rows_category(likelihood):
    """A DP-IBP (Z = M[c], 3 labels): each draw's value is the sum over the new row's label
    of the ratio of the truncated CRP's pmfs for 4 and 3 rows (a free label included, with
    the draw's row of M) times the likelihood of M[label]; with every label in use, no new
    category.  pmi.predict_rows at one draw repeated: each folded-in row's label follows the
    label's prior times the row's likelihood (one entry missing), Z_new = M[label], and two
    rows from the model follow the 5-row truncated CRP given the 3 fitted rows."""
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", pm.Gamma("ac", 2.0, 2.0), 1.0, l_max=3, shape=(3, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        mu = Z @ A + pm.Normal("b", 0.0, 1.0, shape=2)
        if likelihood == "poisson":
            pm.Poisson("X", pm.math.exp(mu), observed=np.zeros((3, 2)))
        else:
            pm.Normal("X", mu, 0.6, observed=np.zeros((3, 2)))
    M = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.int8)
    A = np.array([[0.8, -0.4], [-0.3, 0.9]])
    b = np.array([0.3, -0.2])
    X = np.array([[0.0, 3.0], [2.0, 1.0]])
    crp = pytensor.function([value := pt.lmatrix("c")],
                            pm.logp(pmi.CRP.dist(1.3, l_max=3, shape=4), value))
    for c in ([0, 0, 1], [1, 1, 1], [2, 0, 1]):
        data = {"Z_c": np.array(c), "Z_M": M, "A": A, "b": b, "ac": 1.3}
        idata = xr.DataTree.from_dict({"posterior": xr.Dataset(
            {k: (("chain", "draw", *[f"{k}_{i}" for i in range(np.ndim(v))]),
                 np.broadcast_to(v, (1, 2, *np.shape(v))).copy()) for k, v in data.items()})})
        got = pmi.log_predictive_rows(idata, model, X)
        lp = crp(np.array([[*c, j] for j in range(3)]))
        lp -= special.logsumexp(lp)
        mean = M @ A + b
        if likelihood == "poisson":
            ll = [stats.poisson.logpmf(x, np.exp(mean)).sum(axis=1) for x in X]
        else:
            ll = [stats.norm.logpdf(x, mean, 0.6).sum(axis=1) for x in X]
        exact = [special.logsumexp(lp + row) for row in ll]
        np.testing.assert_allclose(got[0], np.broadcast_to(exact, (2, 2)), rtol=1e-10)
    # new rows: fold-in of X (one entry missing) and two rows from the model, by enumeration
    draws = 3000
    c = np.array([0, 0, 1])
    data = {"Z_c": c, "Z_M": M, "A": A, "b": b, "ac": 1.3}
    idata = _one_draw_repeated(draws, **data)
    X_new = np.array([[0.0, 3.0], [np.nan, 1.0]])
    pred = pmi.predict_rows(idata, model, X_new=X_new, random_seed=3)
    labels = pred["Z_c_new"].values[0]
    np.testing.assert_array_equal(pred["Z_new"].values[0], M[labels])
    lp = crp(np.array([[*c, j] for j in range(3)]))
    mean = M @ A + b
    for r, x in enumerate(X_new):
        seen = ~np.isnan(x)
        ll = (stats.poisson.logpmf(x[seen], np.exp(mean[:, seen])) if likelihood == "poisson"
              else stats.norm.logpdf(x[seen], mean[:, seen], 0.6)).sum(axis=1)
        post = np.exp(lp + ll - special.logsumexp(lp + ll))
        res = chi2_pooled(np.bincount(labels[:, r], minlength=3), post * draws)
        assert res.pvalue > 1e-3, (r, res)
    pred = pmi.predict_rows(idata, model, n_new=2, random_seed=4)
    labels = pred["Z_c_new"].values[0]
    assert pred["X_new"].shape == (1, draws, 2, 2)
    crp5 = pytensor.function([value], pm.logp(pmi.CRP.dist(1.3, l_max=3, shape=5), value))
    pairs = np.array([[i, j] for i in range(3) for j in range(3)])
    lp = crp5(np.array([[*c, *pair] for pair in pairs]))
    res = chi2_pooled(np.bincount(labels @ [3, 1], minlength=9),
                      np.exp(lp - special.logsumexp(lp)) * draws)
    assert res.pvalue > 1e-3, res


@pytest.mark.parametrize("kind", ["ibp_ibp", "noisy_or"])
def test_held_out_rows_of_an_ibp_ibp_sum_over_the_new_rows_categories(kind):
    """An IBP-IBP (Z = 1[C M > 0]) and a noisy-or IBP-IBP (P(z_k = 1) = 1 - q^(C M)_k), 2
    category slots: each draw's value is the sum over the new row's categories c of the ratio
    of C's IBP pmfs for 4 and 3 rows (a category no fitted row owns included, with the draw's
    row of M) times the likelihood of z = 1[c M > 0], or of every z given c.  pmi.predict_rows
    at one draw repeated: each folded-in row's (c, z) follows the same joint times the row's
    likelihood, and two rows from the model follow C's 5-row IBP given the 3 fitted rows."""
    with pm.Model() as model:
        ac = pm.Gamma("ac", 2.0, 2.0)
        if kind == "ibp_ibp":
            Z = pmi.ibp_ibp("Z", ac, 1.0, l_max=2, shape=(3, 2))
        else:
            Z = pmi.noisy_or_ibp_ibp("Z", ac, 1.0, pm.Beta("q", 2.0, 2.0), l_max=2,
                                     shape=(3, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        pm.Normal("X", Z @ A + pm.Normal("b", 0.0, 1.0, shape=2), 0.6,
                  observed=np.zeros((3, 2)))
    M = np.array([[1, 0], [1, 1]], dtype=np.int8)
    A = np.array([[0.8, -0.4], [-0.3, 0.9]])
    b = np.array([0.3, -0.2])
    X = np.array([[0.0, 1.0], [1.2, 0.4]])
    q = 0.35
    ibp = pytensor.function([value := pt.lmatrix("c")],
                            pm.logp(pmi.IBP.dist(1.3, 1.0, shape=(4, 2)), value))
    cats = all_binary_matrices(1, 2)[:, 0]
    zs = all_binary_matrices(1, 2)[:, 0]
    for C in ([[1, 0], [1, 1], [0, 1]], [[1, 0], [1, 0], [0, 0]]):
        C = np.array(C, dtype=np.int8)
        data = {"Z_C": C, "Z_M": M, "A": A, "b": b, "ac": 1.3, "q": q,
                "Z": (C @ M > 0).astype(np.int8)}
        idata = xr.DataTree.from_dict({"posterior": xr.Dataset(
            {k: (("chain", "draw", *[f"{k}_{i}" for i in range(np.ndim(v))]),
                 np.broadcast_to(v, (1, 2, *np.shape(v))).copy()) for k, v in data.items()})})
        got = pmi.log_predictive_rows(idata, model, X)
        lp = np.array([ibp(np.vstack([C, c]).astype(np.int64)) for c in cats])
        lp -= special.logsumexp(lp)
        # log P(z | c) for every (c, z)
        if kind == "ibp_ibp":
            log_pz = np.where((zs[None, :, :] == (cats @ M > 0)[:, None, :]).all(axis=2),
                              0.0, -np.inf)
        else:
            p = 1.0 - q ** (cats @ M)
            with np.errstate(divide="ignore"):
                log_pz = np.where(zs[None] == 1, np.log(p[:, None]),
                                  np.log1p(-p[:, None])).sum(axis=2)
        ll = np.array([stats.norm.logpdf(x, zs @ A + b, 0.6).sum(axis=1) for x in X])
        exact = special.logsumexp(lp[None, :, None] + log_pz[None] + ll[:, None, :],
                                  axis=(1, 2))
        np.testing.assert_allclose(got[0], np.broadcast_to(exact, (2, 2)), rtol=1e-10)
    # new rows at the last C: the fold-in's (c, z) of each row and the categories of two
    # rows from the model, by enumeration
    draws = 3000
    idata = _one_draw_repeated(draws, **data)
    pred = pmi.predict_rows(idata, model, X_new=X, random_seed=3)
    c_new, z_new = pred["Z_C_new"].values[0], pred["Z_new"].values[0]
    assert c_new.shape == (draws, 2, 2) and z_new.shape == (draws, 2, 2)
    for r in range(2):
        joint = lp[:, None] + log_pz + ll[r][None, :]  # (c, z)
        got = np.bincount(4 * codes(c_new[:, r][:, None]) + codes(z_new[:, r][:, None]),
                          minlength=16)
        # cats and zs are both in code order 0..3
        res = chi2_pooled(got, np.exp(joint - special.logsumexp(joint)).ravel() * draws)
        assert res.pvalue > 1e-3, (r, res)
    pred = pmi.predict_rows(idata, model, n_new=2, random_seed=4)
    c_new = pred["Z_C_new"].values[0]
    ibp5 = pytensor.function([value], pm.logp(pmi.IBP.dist(1.3, 1.0, shape=(5, 2)), value))
    two = all_binary_matrices(2, 2)
    lp5 = np.array([ibp5(np.vstack([C, m]).astype(np.int64)) for m in two])
    res = chi2_pooled(np.bincount(codes(c_new), minlength=16)[codes(two)],
                      np.exp(lp5 - special.logsumexp(lp5)) * draws)
    assert res.pvalue > 1e-3, res
    if kind == "ibp_ibp":
        np.testing.assert_array_equal(pred["Z_new"].values[0], c_new @ M > 0)


@pytest.mark.slow  # a DP-IBP and an IBP-IBP fitted on 150 rows (about 40 s)
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.parametrize("builder", ["dp_ibp", "ibp_ibp"])
def test_fold_in_of_held_out_block_combinations_recovers_their_glyphs(builder):
    """The correlated model fitted on 150 rows of pmi.datasets.block_combinations (4 glyphs in
    combinations); 30 held-out rows folded in: each draw's Z_new A reconstructs the held-out
    rows' noise-free images, and Z_new is the one the new rows' labels give."""
    data = pmi.datasets.block_combinations(180, noise=0.5, seed=7)
    X, X_new = data.X[:150], data.X[150:]
    clean = (np.asarray(data.Z) @ np.asarray(pmi.datasets.BLOCK_GLYPHS, float))[150:]
    with pm.Model() as model:
        Z = getattr(pmi, builder)("Z", 1.0, 1.0, l_max=10, shape=(150, 8))
        A = pm.Normal("A", 0.0, 1.0, shape=(8, 36))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        idata = pm.sample(tune=100, draws=10, chains=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    pred = pmi.predict_rows(idata, model, X_new=X_new, random_seed=0)
    post = idata["posterior"]
    z_new = pred["Z_new"].values[0]
    if builder == "dp_ibp":
        M = post["Z_M"].values[0]
        labels = pred["Z_c_new"].values[0]
        np.testing.assert_array_equal(
            z_new, np.stack([m[c] for m, c in zip(M, labels, strict=True)]))
    else:
        M = post["Z_M"].values[0].astype(np.int64)
        labels = pred["Z_C_new"].values[0].astype(np.int64)
        np.testing.assert_array_equal(z_new, np.einsum("drl,dlk->drk", labels, M) > 0)
    recon = np.einsum("drk,dkc->drc", z_new, post["A"].values[0])
    assert np.sqrt(np.mean((recon - clean) ** 2)) < 0.25
