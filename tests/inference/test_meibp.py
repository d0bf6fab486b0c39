"""MEIBP: truncated-Gaussian moments, submodularity of the per-row objective, the maximisers
against brute force, and the monotone objective of the fit; BP-means++."""

import itertools

import numpy as np
import pymc as pm
import pytest
from scipy import integrate, special, stats

import pymc_ibp as pmi
from pymc_ibp.inference import submodular as sm
from pymc_ibp.inference.meibp import erfcx, tn_moments


def test_erfcx_matches_scipy_in_both_tails():
    for x in [-20.0, -5.0, -0.3, 0.0, 0.7, 5.0, 24.9, 25.1, 60.0, 1e3, 1e6]:
        np.testing.assert_allclose(erfcx(x), special.erfcx(x), rtol=1e-12)


@pytest.mark.parametrize("sigma", [0.1, 1.0, 5.0])
def test_truncated_normal_moments_and_entropy(sigma):
    """E a and E a² of N(μ, σ²) truncated to a ≥ 0 against scipy, the entropy against
    quadrature (scipy's truncnorm entropy loses all accuracy in the lower tail; the printed
    formula has a sign error in its last term), and far-tail limits."""
    for mu in [-8.0 * sigma, -1.0, 0.0, 0.5, 3.0 * sigma, 40.0 * sigma]:
        ref = stats.truncnorm(-mu / sigma, -mu / sigma + 80.0, loc=mu, scale=sigma)
        ea, ea2, h = tn_moments(mu, sigma)
        np.testing.assert_allclose(ea, ref.mean(), rtol=1e-7)
        np.testing.assert_allclose(ea2, ref.moment(2), rtol=1e-6)
        hi = max(mu, 0.0) + 40.0 * sigma
        h_num = integrate.quad(lambda a, r=ref: -np.exp(r.logpdf(a)) * r.logpdf(a), 0.0, hi,
                               points=[min(sigma**2 / max(-mu, sigma), hi / 2)], limit=500)[0]
        np.testing.assert_allclose(h, h_num, rtol=1e-6, atol=1e-8)
    # far in the lower tail (where scipy's own log overflows): E a -> σ²/|μ|, finite entropy
    mu = -40.0 * sigma
    ea, ea2, h = tn_moments(mu, sigma)
    np.testing.assert_allclose(ea, sigma**2 / abs(mu), rtol=2e-3)
    np.testing.assert_allclose(ea2, 2 * sigma**4 / mu**2, rtol=5e-3)
    assert np.isfinite(h)


def random_instance(rng, k, k_rest=None):
    phi = np.abs(rng.normal(size=(k, 6)))
    Q = phi @ phi.T / 0.5
    omega = rng.normal(2.0, 3.0, size=k)
    new = (rng.random(k) < 0.4).astype(np.int64)
    return omega, Q, new, int(rng.integers(0, 6) if k_rest is None else k_rest)


def value(z, inst):
    omega, Q, new, k_rest = inst
    return sm.row_value(np.asarray(z, dtype=np.int8), omega, Q, new, k_rest)


def test_row_objective_is_submodular():
    """f(A ∪ e) - f(A) >= f(B ∪ e) - f(B) for random A ⊆ B, e ∉ B (Reed 2013, Thm. 2 and the
    concavity of -log((K + κ)!) in κ)."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        k = int(rng.integers(2, 9))
        inst = random_instance(rng, k)
        B = rng.random(k) < 0.5
        A = B & (rng.random(k) < 0.5)
        outside = np.flatnonzero(~B)
        if not outside.size:
            continue
        e = rng.choice(outside)
        Ae, Be = A.copy(), B.copy()
        Ae[e] = Be[e] = True
        assert value(Ae, inst) - value(A, inst) >= value(Be, inst) - value(B, inst) - 1e-9


def brute_force(inst, k):
    vals = [value(z, inst) for z in itertools.product([0, 1], repeat=k)]
    return max(vals), min(vals)


def run(kind, inst, rng):
    omega, Q, new, k_rest = inst
    z, _ = sm.maximise_row(rng, omega, Q, new, k_rest, sm.MAXIMISERS.index(kind))
    return value(z, inst)


@pytest.mark.parametrize("kind", sm.MAXIMISERS)
def test_maximisers_keep_their_guarantees(kind):
    """On random instances (K <= 10), every maximiser reaches at least 1/3 of the normalised
    optimum (F - min F); the randomised double greedy 1/2 on average."""
    rng = np.random.default_rng(1)
    ratios = []
    for _ in range(150):
        k = int(rng.integers(2, 11))
        inst = random_instance(rng, k)
        opt, low = brute_force(inst, k)
        if opt - low < 1e-9:
            continue
        ratios.append((run(kind, inst, rng) - low) / (opt - low))
    ratios = np.array(ratios)
    assert ratios.min() >= 1 / 3 - 1e-9
    if kind == "lg-sto":
        assert ratios.mean() >= 0.5


def reed_instances(rng, k, rows=20, n=500, d=50):
    """Per-row objectives of Reed's synthetic setup (N = 500, D = 50, non-negative features,
    the true A as E a), for ``rows`` rows."""
    A = np.abs(rng.normal(size=(k, d)))
    Z = (rng.random((n, k)) < 0.3).astype(float)
    sx2 = 0.5
    X = Z @ A + np.sqrt(sx2) * rng.normal(size=(n, d))
    Q = A @ A.T / sx2
    m = Z.sum(axis=0)
    out = []
    for i in range(rows):
        m_rest = (m - Z[i]).astype(np.int64)
        omega = (A @ X[i] - 0.05 * d) / sx2 + np.where(
            m_rest > 0, [np.log(max(mr, 1)) - np.log(n - mr) for mr in m_rest], -np.log(n))
        new = (m_rest == 0).astype(np.int64)
        out.append((omega, Q, new, int((m_rest > 0).sum())))
    return out


@pytest.mark.parametrize("kind", ["ls", "lg-ord"])
def test_best_maximisers_are_near_optimal_on_reed_setup(kind):
    """Reed (2013, §4.9): local search and ordered linear greedy reach >= 99% of the
    brute-force optimum for K <= 12 (normalised by the minimum)."""
    rng = np.random.default_rng(2)
    ratios = []
    for k in (4, 8, 12):
        for inst in reed_instances(rng, k, rows=8):
            opt, low = brute_force(inst, k)
            ratios.append((run(kind, inst, rng) - low) / (opt - low))
    assert np.mean(ratios) >= 0.99


def nonneg_model(X, k_max=10, sigma_x=0.5):
    n, d = X.shape
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(n, k_max))
        A = pm.HalfNormal("A", 1.0, shape=(k_max, d))
        pm.Normal("X", Z @ A, sigma_x, observed=X)
    return model


@pytest.mark.parametrize("kind", sm.MAXIMISERS)
def test_meibp_objective_never_decreases_and_finds_the_blocks(kind):
    data = pmi.datasets.block_images(200, noise=0.5, seed=3)
    res = pmi.inference.fit_meibp(nonneg_model(data.X), maximiser=kind, random_seed=4)
    assert np.all(np.diff(res.objective) >= -1e-9 * np.abs(res.objective[-1]))
    assert res.converged and np.all(res.A >= 0)
    Z = res.Z.astype(bool)
    found = 0
    for k in range(4):
        t = data.Z[:, k].astype(bool)
        jac = (Z & t[:, None]).sum(0) / np.maximum((Z | t[:, None]).sum(0), 1)
        found += jac.max() > 0.9
    assert found >= 3


def test_meibp_refuses_a_gaussian_feature_prior():
    X = np.abs(np.random.default_rng(0).normal(size=(10, 3)))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    with pytest.raises(pmi.ModelPatternError, match="HalfNormal"):
        pmi.inference.fit_meibp(model)


def gaussian_model(X, k_max=12, sigma_x=0.5):
    n, d = X.shape
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, d))
        pm.Normal("X", Z @ A, sigma_x, observed=X)
    return model


def glyphs_found(Z, Z_true):
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    return sum(max(np.mean(Z[:, j] == Z_true[:, k]) for j in act) >= 0.95 for k in range(4))


@pytest.mark.parametrize(("n", "noise", "seed"), [(200, 0.5, 1), (200, 0.3, 1), (1000, 0.5, 2)])
def test_bp_means_default_penalty_finds_the_blocks(n, noise, seed):
    """The default λ² = (N + D) σx² recovers the four glyphs and no other feature; the
    objective never increases.  (The BP-means of 1f6777f found none of them at any λ² on
    block_images(200, 0.5, 1): benchmarks/results/bp_means_lam2.md.)"""
    data = pmi.datasets.block_images(n, noise=noise, seed=seed)
    res = pmi.inference.fit_bp_means(gaussian_model(data.X, sigma_x=noise), random_seed=0)
    assert np.all(np.diff(res.objective) <= 1e-9 * np.abs(res.objective[0]))
    assert (res.Z.sum(axis=0) > 0).sum() == 4 and glyphs_found(res.Z, data.Z) == 4
    assert set(res.initvals()) == {"Z", "A"} and res.initvals()["Z"].dtype == np.int8


def test_bp_means_penalty_window_and_model_variants():
    """Far below the noise's gain, features fit noise; far above a glyph's, glyphs are lost.
    A half-normal A gives the same Z (the fit is the same) and a clipped A."""
    data = pmi.datasets.block_images(200, noise=0.5, seed=1)
    lam2 = (200 + 36) * 0.25
    low = pmi.inference.fit_bp_means(gaussian_model(data.X), lam2=0.1 * lam2, random_seed=0)
    high = pmi.inference.fit_bp_means(gaussian_model(data.X), lam2=8 * lam2, random_seed=0)
    assert (low.Z.sum(axis=0) > 0).sum() > 6 and (high.Z.sum(axis=0) > 0).sum() < 4
    res = pmi.inference.fit_bp_means(nonneg_model(data.X, k_max=12), random_seed=0)
    res_g = pmi.inference.fit_bp_means(gaussian_model(data.X), random_seed=0)
    np.testing.assert_array_equal(res.Z, res_g.Z)
    assert np.all(res.A >= 0) and res.A.min() == 0.0 < -res_g.A.min()


def test_bp_means_default_penalty_needs_a_fixed_noise_scale():
    data = pmi.datasets.block_images(30, noise=0.5, seed=1)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(30, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 36))
        pm.Normal("X", Z @ A, pm.HalfNormal("sigma_x", 1.0), observed=data.X)
    with pytest.raises(pmi.ModelPatternError, match="pass lam2="):
        pmi.inference.fit_bp_means(model)
    assert pmi.inference.fit_bp_means(model, lam2=15.0, random_seed=0).converged
    with pytest.raises(ValueError, match="lam2 must be"):
        pmi.inference.fit_bp_means(model, lam2=-1.0)


def test_pm_sample_starts_from_the_meibp_fit():
    """``initvals()`` is accepted by pm.sample on the same (non-negative) model, and its step
    (IBPGibbs for Z) starts from that Z: after one sweep most rows are unchanged."""
    data = pmi.datasets.block_images(60, noise=0.5, seed=3)
    model = nonneg_model(data.X, k_max=8)
    res = pmi.inference.fit_meibp(model, maximiser="lg-ord", random_seed=1)

    def first_draw(**kw):
        with model:
            idata = pm.sample(tune=0, draws=1, chains=1, random_seed=1, progressbar=False,
                              compute_convergence_checks=False, **kw)
        return idata["posterior"]["Z"].values[0, 0]

    same = np.mean(np.all(first_draw(initvals=res.initvals()) == res.Z, axis=1))
    assert same > 0.6


def test_meibp_learns_the_hyperparameters():
    """learn_hyper=True: from sigma_x = 1 (twice the truth) the variational estimates of the
    scales (Reed 2013, App. A.3.2) recover the noise, and the glyphs are found."""
    data = pmi.datasets.block_images(300, noise=0.5, seed=3)
    res = pmi.inference.fit_meibp(nonneg_model(data.X, sigma_x=1.0), learn_hyper=True,
                                  random_seed=2)
    assert abs(res.sigma_x - 0.5) < 0.03
    assert (res.Z.sum(axis=0) > 30).sum() == 4
    fixed = pmi.inference.fit_meibp(nonneg_model(data.X, sigma_x=1.0), random_seed=2)
    assert fixed.sigma_x == 1.0


def test_a_normal_factor_is_refused_with_the_pattern_meibp_needs():
    """fit_meibp on A ~ pm.Normal: the message asks for a pm.HalfNormal A and shows the
    pattern with it (it showed the linear-Gaussian pattern, with pm.Normal)."""
    X = pmi.datasets.block_images(30, seed=1).X
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(30, 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, 36))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        with pytest.raises(pmi.ModelPatternError) as err:
            pmi.inference.fit_meibp()
    assert "must be a free pm.HalfNormal" in str(err.value)
    assert "A = pm.HalfNormal('A', sigma_a" in str(err.value)
    assert "pm.Normal('A'" not in str(err.value)
