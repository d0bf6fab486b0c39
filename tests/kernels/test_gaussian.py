"""Kernels of the linear-Gaussian likelihood and the per-row updates: conditionals, draws,
rank-one drift."""

import numba
import numpy as np
import pytest
from scipy import stats

import pymc_ibp as pmi
from pymc_ibp import kernels
from tests._helpers import rand_state

#: per-column scales making three column blocks
COL_SX = np.array([0.5, 0.5, 0.9, 0.3])
COL_SA = np.array([1.3, 1.3, 0.7, 2.0])


@numba.njit
def state_after_rows(Z, X, rows, noise):
    """``(Σ, μ)`` maintained by :func:`kernels.row_update` while each of ``rows`` is removed
    and re-added (``z`` unchanged), with no refresh."""
    k = Z.shape[1]
    d = X.shape[1]
    G, RX = kernels.suff_stats(Z, X, np.arange(k))
    Sig, mu = kernels.posterior_from_stats(G, RX, noise)
    v = np.zeros((noise.sx2.shape[0], k))
    e = np.zeros(d)
    z = np.zeros(k)
    for it in range(rows.shape[0]):
        i = rows[it]
        for a in range(k):
            z[a] = float(Z[i, a])
        kernels.row_update(Sig, mu, z, X[i], k, noise, -1.0, v, e)
        kernels.row_update(Sig, mu, z, X[i], k, noise, 1.0, v, e)
    return Sig, mu


@pytest.mark.parametrize("sx,sa", [(0.6, 1.3), (COL_SX, COL_SA)], ids=["scalar", "blocks"])
def test_collapsed_loglik_matches_direct_mvn(sx, sa):
    rng = np.random.default_rng(1)
    Z, X = rand_state(rng, 7, 3, 4)
    sx, sa = np.broadcast_to(sx, (4,)), np.broadcast_to(sa, (4,))
    noise = kernels.noise_blocks(sx**2, sa**2, 4)
    assert len(noise.sx2) == (1 if np.all(sx == sx[0]) else 3)
    G, RX = kernels.suff_stats(Z, X, np.arange(3))
    got = kernels.collapsed_loglik(G, RX, kernels.block_sq_norms(X, noise), 7, noise)
    ref = sum(stats.multivariate_normal.logpdf(
        X[:, j], np.zeros(7), sa[j] ** 2 * Z @ Z.T + sx[j] ** 2 * np.eye(7)) for j in range(4))
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    np.testing.assert_allclose(kernels.log_joint_of(Z, X, sx**2, sa**2, 1.0)[1], ref, rtol=1e-12)

@pytest.mark.parametrize("sx,sa", [(0.6, 1.3), (COL_SX, COL_SA)], ids=["scalar", "blocks"])
def test_observed_loglik_matches_direct_mvn(sx, sa):
    """``log p(X_obs | Z)`` with missing entries: each column's observed rows are
    ``N(0, σa² Z_o Z_oᵀ + σx² I)``; the values at the missing entries do not matter."""
    rng = np.random.default_rng(2)
    Z, X = rand_state(rng, 9, 3, 4)
    miss = rng.random((9, 4)) < 0.3
    miss[0] = True  # a row with nothing observed
    sx, sa = np.broadcast_to(sx, (4,)), np.broadcast_to(sa, (4,))
    noise = kernels.noise_blocks(sx**2, sa**2, 4)
    got = kernels.observed_loglik(Z, X, miss, noise)
    ref = 0.0
    for j in range(4):
        o = ~miss[:, j]
        Zo = Z[o].astype(float)
        ref += stats.multivariate_normal.logpdf(
            X[o, j], np.zeros(o.sum()), sa[j] ** 2 * Zo @ Zo.T + sx[j] ** 2 * np.eye(o.sum()))
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    X2 = np.where(miss, rng.normal(size=X.shape) * 50, X)
    np.testing.assert_allclose(kernels.observed_loglik(Z, X2, miss, noise), ref, rtol=1e-12)
    np.testing.assert_allclose(kernels.observed_loglik(Z, X, np.zeros_like(miss), noise),
                               kernels.log_joint_of(Z, X, sx**2, sa**2, 1.0)[1], rtol=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("blocks", [False, True])
def test_accelerated_and_collapsed_conditionals_agree(seed, blocks):
    """log p(X|Z¹) - log p(X|Z⁰) (collapsed) equals the predictive-ratio of row n under the
    rank-one downdated posterior p(A | X₋ₙ, Z₋ₙ) (accelerated, Doshi-Velez & Ghahramani 2009,
    eq. 8) to 1e-9, with one or three column blocks of their own scales (the predictive of
    each column uses its own block's posterior)."""
    rng = np.random.default_rng(seed)
    n, k, d = 9, 4, 4
    Z, X = rand_state(rng, n, k, d)
    sxc = COL_SX if blocks else np.full(d, 0.5)
    sac = COL_SA if blocks else np.full(d, 1.2)
    noise = kernels.noise_blocks(sxc**2, sac**2, d)
    trXX = kernels.block_sq_norms(X, noise)
    G, RX = kernels.suff_stats(Z, X, np.arange(k))
    Sig, mu = kernels.posterior_from_stats(G, RX, noise)
    # the kernels' predictive moments of row i, after its rank-one removal
    work = kernels.row_work(d, len(noise.sx2), k)
    v, e = work.v, np.zeros(d)
    full, dn = np.zeros(0), np.zeros(len(noise.sx2))  # every entry observed
    kernels.row_dims(noise, full, dn)
    for i in range(n):
        z = Z[i].astype(float)
        Sig_m, mu_m = Sig.copy(), mu.copy()
        kernels.row_update(Sig_m, mu_m, z, X[i], k, noise, -1.0, v, e)
        for kk in range(k):
            lls, llc = [], []
            for val in (0, 1):
                zz = z.copy()
                zz[kk] = val
                kernels.row_moments(Sig_m, mu_m, zz, kernels.ObservedRow(X[i], full, dn), k,
                                    noise, work)
                lls.append(kernels.row_loglik(work.s2, work.rr, noise, dn))
                # reference: column by column with numpy, from scratch
                ref = 0.0
                for j in range(d):
                    P = G - np.outer(z, z)
                    P = P / sxc[j] ** 2 + np.eye(k) / sac[j] ** 2
                    Sj = np.linalg.inv(P)
                    mj = Sj @ (RX[:, j] - z * X[i, j]) / sxc[j] ** 2
                    sj = zz @ Sj @ zz + sxc[j] ** 2
                    ref += -0.5 * np.log(sj) - (X[i, j] - zz @ mj) ** 2 / (2 * sj)
                np.testing.assert_allclose(lls[-1], ref, rtol=1e-9)
                Z2 = Z.copy()
                Z2[i, kk] = val
                G2, RX2 = kernels.suff_stats(Z2, X, np.arange(k))
                llc.append(kernels.collapsed_loglik(G2, RX2, trXX, n, noise))
            np.testing.assert_allclose(lls[1] - lls[0], llc[1] - llc[0], rtol=1e-9, atol=1e-9)

@pytest.mark.parametrize("blocks", [False, True])
def test_feature_draw_moments(blocks):
    """A | Z, X draws have the posterior mean and covariance of Doshi-Velez & Ghahramani
    (2009, eq. 6), column by column with each column's own scales."""
    rng = np.random.default_rng(0)
    d = 4
    Z, X = rand_state(rng, 50, 5, d)
    sxc = COL_SX if blocks else np.full(d, 0.55)
    sac = COL_SA if blocks else np.full(d, 1.4)
    noise = kernels.noise_blocks(sxc**2, sac**2, d)
    G, RX = kernels.suff_stats(Z, X, np.arange(5))
    draws = np.array([kernels.draw_active_features(rng, G, RX, noise) for _ in range(20000)])
    for j in range(d):
        Sj = np.linalg.inv(G / sxc[j] ** 2 + np.eye(5) / sac[j] ** 2)
        mj = Sj @ RX[:, j] / sxc[j] ** 2
        se = np.sqrt(np.diag(Sj)) / np.sqrt(len(draws))
        assert np.all(np.abs(draws[:, :, j].mean(axis=0) - mj) < 5 * se)
        np.testing.assert_allclose(np.cov(draws[:, :, j].T), Sj, atol=0.1 * np.abs(Sj).max())

def test_rank_one_drift_ill_conditioned():
    """10^4 rank-one down/up-dates on data whose dimensions' variances differ 100x: the
    maintained posterior matches a from-scratch Cholesky to 1e-8 relative."""
    rng = np.random.default_rng(3)
    n, k, d = 200, 8, 6
    Z = (rng.random((n, k)) < 0.3).astype(np.int64)
    X = rng.normal(size=(n, d)) * np.array([10.0, 10.0, 1.0, 1.0, 0.1, 0.1])
    rows = rng.integers(0, n, size=5000)  # 5000 rows x (remove + add) = 10^4 updates
    noise = kernels.noise_blocks(np.array([0.05, 0.05, 0.05, 0.01, 0.05, 0.2]) ** 2, 1.0, d)
    Sig, mu = state_after_rows(Z, X, rows, noise)
    G, RX = kernels.suff_stats(Z, X, np.arange(k))
    Sig0, mu0 = kernels.posterior_from_stats(G, RX, noise)
    assert np.abs(Sig - Sig0).max() / np.abs(Sig0).max() < 1e-8
    assert np.abs(mu - mu0).max() / np.abs(mu0).max() < 1e-8


def test_data_summaries_match_numpy():
    """The one-pass summaries of the data (no N x D temporaries) against numpy's formulas:
    per-block squared norms, block variances and the column-centred spread with NaN entries
    skipped, and ``‖X_b − off_b − Z A‖²`` with an N-row, a one-row and no offset."""
    rng = np.random.default_rng(5)
    X = rng.normal(3.0, 2.0, size=(60, 7))
    Xn = X.copy()
    Xn[rng.random(X.shape) < 0.15] = np.nan
    cols = np.array([0, 2, 3, 7])
    noise = kernels.noise_blocks(np.ones(7), np.ones(7), 7)._replace(
        cols=cols, sx2=np.ones(3), sa2=np.ones(3))
    blocks = list(zip(cols[:-1], cols[1:], strict=True))
    np.testing.assert_allclose(kernels.block_sq_norms(X, noise),
                               [np.sum(X[:, a:b] ** 2) for a, b in blocks], rtol=1e-12)
    np.testing.assert_allclose(kernels.block_variances(Xn, cols),
                               [np.nanvar(Xn[:, a:b]) for a, b in blocks], rtol=1e-12)
    np.testing.assert_allclose(kernels.centred_spread(Xn),
                               np.sqrt(np.nanmean((Xn - np.nanmean(Xn, axis=0)) ** 2)),
                               rtol=1e-12)
    Z = (rng.random((60, 4)) < 0.5).astype(np.int8)
    A = rng.normal(size=(4, 3))
    off = rng.normal(size=(60, 9))
    none = kernels.NO_ROWS
    ref = np.sum((X[:, 2:5] - off[:, 4:7] - Z @ A) ** 2)
    assert kernels.residual_sq_sum(X, 2, Z, A, off, 4, none) == pytest.approx(ref, rel=1e-12)
    ref1 = np.sum((X[:, 2:5] - off[:1, 4:7] - Z @ A) ** 2)
    assert kernels.residual_sq_sum(X, 2, Z, A, off[:1], 4, none) == pytest.approx(ref1,
                                                                                rel=1e-12)
    ref0 = np.sum((X[:, 2:5] - Z @ A) ** 2)
    assert kernels.residual_sq_sum(X, 2, Z, A, np.zeros((1, 3)), 0, none) == pytest.approx(
        ref0, rel=1e-12)
    labels = rng.integers(0, 5, 60)  # one row of the offset per group (b[group])
    table = rng.normal(size=(5, 9))
    refg = np.sum((X[:, 2:5] - table[labels][:, 4:7] - Z @ A) ** 2)
    assert kernels.residual_sq_sum(X, 2, Z, A, table, 4, labels) == pytest.approx(refg,
                                                                                rel=1e-12)


def _spectral_case(rng, n, d, k, n_random):
    """Data, its column sums of squares, ``n_random`` random binary matrices and an empty
    one, and per-matrix column scales ``sx2``, ``sa2``."""
    X = rng.normal(size=(n, d))
    mats = [(rng.random((n, k)) < 0.5).astype(np.int8) for _ in range(n_random)]
    mats.append(np.zeros((n, k), dtype=np.int8))
    sx2 = rng.uniform(0.1, 2.0, (len(mats), d))
    sa2 = rng.uniform(0.3, 3.0, (len(mats), d))
    return X, kernels.column_sq_norms(X), mats, sx2, sa2


def test_the_spectral_tempered_loglik_equals_the_cholesky_one():
    """tempered_loglik_columns (eigenvalues of ZᵀZ, any per-column scales, many particles)
    against tempered_loglik (Cholesky per column block), including an empty Z and two
    identical columns (a zero eigenvalue)."""
    rng = np.random.default_rng(0)
    n, d, k = 7, 5, 4
    X, colsq, mats, sx2, sa2 = _spectral_case(rng, n, d, k, 4)
    mats.append(np.repeat(mats[0][:, :1], k, axis=1))
    sx2 = np.vstack([sx2, rng.uniform(0.1, 2.0, d)])
    sa2 = np.vstack([sa2, rng.uniform(0.3, 3.0, d)])
    sx2[1], sa2[1] = 0.5, 1.5  # scalar scales: one block
    spectra = []
    for Z in mats:
        G, RX = kernels.suff_stats(Z, X, np.flatnonzero(Z.sum(axis=0)))
        spectra.append((G, RX, kernels.collapsed_spectrum(G, RX, k)))
    g = np.stack([s[2][0] for s in spectra])
    q = np.stack([s[2][1] for s in spectra])
    for t in (0.0, 0.01, 0.4, 1.0):
        got = kernels.tempered_loglik_columns(g, q, colsq, n, sx2, sa2, t)
        for i, (G, RX, _) in enumerate(spectra):
            noise = kernels.noise_blocks(sx2[i], sa2[i], d)
            want = kernels.tempered_loglik(G, RX, kernels.block_sq_norms(X, noise), n, noise, t)
            np.testing.assert_allclose(got[i], want, rtol=1e-10, atol=1e-10)


def test_the_slope_of_the_tempered_loglik_in_the_temperature():
    """tempered_loglik_slope_columns against central differences of tempered_loglik_columns
    (τ = 0.003 to 1), and at τ = 0 against the expectation of log p(X | Z, A) over A's prior
    (Monte Carlo, 20,000 draws)."""
    rng = np.random.default_rng(1)
    n, d, k = 7, 5, 4
    X, colsq, mats, sx2, sa2 = _spectral_case(rng, n, d, k, 3)
    g, q = map(np.stack, zip(*(kernels.collapsed_spectrum(
        *kernels.suff_stats(Z, X, np.flatnonzero(Z.sum(axis=0))), k) for Z in mats),
        strict=True))
    for t in (0.003, 0.2, 1.0):
        h = 1e-5 * t
        num = (kernels.tempered_loglik_columns(g, q, colsq, n, sx2, sa2, t + h)
               - kernels.tempered_loglik_columns(g, q, colsq, n, sx2, sa2, t - h)) / (2 * h)
        got = kernels.tempered_loglik_slope_columns(g, q, colsq, n, sx2, sa2, t)
        np.testing.assert_allclose(got, num, rtol=1e-5)
    at0 = kernels.tempered_loglik_slope_columns(g, q, colsq, n, sx2, sa2, 0.0)
    for i, Z in enumerate(mats):
        A = rng.normal(size=(20000, k, d)) * np.sqrt(sa2[i])
        R = X[None] - np.einsum("nk,skd->snd", Z.astype(float), A)
        ll = (-0.5 * n * np.log(2 * np.pi * sx2[i]) - 0.5 * (R**2).sum(axis=1) / sx2[i]).sum(1)
        assert abs(at0[i] - ll.mean()) < 4 * ll.std() / np.sqrt(ll.size) + 1e-9, i


def _birth_count_reference(u, navail, log_lam, s2, rr, dn, sa2):
    """The birth-count draw over all ``navail + 1`` terms (eq. 3.7 of Doshi-Velez 2009) for
    the uniform ``u``, the way :func:`kernels.birth_count` lays out its sums."""
    j = np.arange(navail + 1)
    lp = j * log_lam - np.concatenate([[0.0], np.cumsum(np.log(np.maximum(j[1:], 1)))])
    for b in range(len(s2)):
        sj = s2[b] + j * sa2[b]
        lp = lp - (0.5 * dn[b] * np.log(sj) + 0.5 * rr[b] / sj)
    w = np.exp(lp - lp.max())
    return int(min(np.searchsorted(np.cumsum(w), u * w.sum(), side="right"), navail)), lp


@pytest.mark.parametrize("rr_scale", [0.1, 30.0, 3000.0])
def test_birth_count_stops_early_without_changing_the_draw(rr_scale):
    """``birth_count`` stops summing once the remaining terms are negligible: with 400 free
    slots its draws are those of the full categorical for the same uniforms, from rows that
    want no new feature (small residual) to rows that want dozens (large residual)."""
    noise = kernels.noise_blocks(COL_SX**2, COL_SA**2, 4)
    nb, navail = len(noise.sx2), 400
    work = kernels.row_work(4, nb, 1)
    dn = np.array([2.0, 1.0, 1.0])
    row = kernels.ObservedRow(np.zeros(4), np.zeros(0), dn)
    logpj = np.zeros(navail + 1)
    drawn = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        work.s2[:] = noise.sx2 + rng.random(nb)
        work.rr[:] = rr_scale * rng.random(nb) * dn
        log_lam = np.log(rng.choice([1e-3, 0.5, 5.0]))
        j = kernels.birth_count(np.random.default_rng(seed + 1000), navail, log_lam, row,
                                noise, work, logpj, False)
        ref, lp = _birth_count_reference(np.random.default_rng(seed + 1000).random(), navail,
                                         log_lam, work.s2, work.rr, dn, noise.sa2)
        assert j == ref
        assert kernels.birth_count(rng, navail, log_lam, row, noise, work, logpj,
                                   True) == int(np.argmax(lp))
        drawn.append(j)
    if rr_scale > 1000:
        assert np.mean(drawn) > 10  # rows that want many births are covered


def test_the_noise_scale_estimate_of_low_rank_signal_plus_noise():
    """The Marchenko-Pastur median at beta = 1 is 0.6528 (and by simulation at 0.25); the
    estimate recovers the noise scale of pure noise in either orientation, and of a rank-4
    signal (the block images) within 10 %; scaling the data scales it."""
    assert abs(kernels.marchenko_pastur_median(1.0) - 0.6528) < 1e-3
    rng = np.random.default_rng(0)
    E = rng.standard_normal((800, 200))
    sim = np.median(np.linalg.eigvalsh(E.T @ E / 800))
    assert abs(kernels.marchenko_pastur_median(0.25) - sim) < 0.02
    with pytest.raises(ValueError, match="beta"):
        kernels.marchenko_pastur_median(1.5)
    for shape in [(300, 40), (40, 300), (30, 36)]:
        X = 0.3 * rng.standard_normal(shape)
        assert abs(kernels.noise_scale_estimate(X) / 0.3 - 1.0) < 0.06
    X = pmi.datasets.block_images(200, noise=0.5, seed=1).X
    est = kernels.noise_scale_estimate(X)
    assert abs(est / 0.5 - 1.0) < 0.1
    assert abs(kernels.noise_scale_estimate(3.0 * X) - 3.0 * est) < 1e-9
