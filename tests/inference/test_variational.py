"""Mean-field variational IBP: the ELBO, its bounds, coordinate ascent and the result object."""

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.inference import vi_kernels as vk
from pymc_ibp.inference.variational import _stick_terms, _update_sticks, variational_elbo


def block_model(X, k_max=8, *, free=True, beta=1.0):
    n, d = X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0) if free else 1.0
        sigma_x = pm.HalfNormal("sigma_x", 1.0, initval=0.5) if free else 0.5
        sigma_a = pm.HalfNormal("sigma_a", 2.0, initval=1.0) if free else 1.0
        Z = pmi.IBP("Z", alpha, beta, shape=(n, k_max))
        A = pm.Normal("A", 0.0, sigma_a, shape=(k_max, d))
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)
    return model


def random_state(rng, n=6, k=3, d=2):
    X = rng.normal(size=(n, d))
    nu = rng.uniform(0.05, 0.95, size=(n, k))
    phi = rng.normal(size=(k, d))
    Phi = rng.uniform(0.1, 0.5, size=(k, d))
    tau = rng.uniform(0.5, 3.0, size=(k, 2))
    return X, nu, phi, Phi, tau


# --- the bounds on E log(1 - prod v) -------------------------------------------------------
def mc_log1m_prod(tau, rng, draws=400_000):
    v = rng.beta(tau[:, 0], tau[:, 1], size=(draws, tau.shape[0]))
    vals = np.log1p(-np.cumprod(v, axis=1))
    return vals.mean(axis=0), vals.std(axis=0) / np.sqrt(draws)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounds_lie_below_monte_carlo(seed):
    """Both bounds on E log(1 - Π_{m≤k} v_m) are below a Monte Carlo estimate, the Taylor
    bound is at least the multinomial one and close to the estimate, and the multinomial
    bound of stick k only uses sticks m ≤ k (a bound summing over all K sticks would change
    when τ_{k+1} changes)."""
    rng = np.random.default_rng(seed)
    tau = rng.uniform(0.5, 4.0, size=(5, 2))
    mc, se = mc_log1m_prod(tau, rng)
    mult = vk.log1m_prod_multinomial(tau)
    tay = vk.log1m_prod_taylor(tau, terms=50)
    assert np.all(mult <= mc + 4 * se)
    assert np.all(tay <= mc + 4 * se)
    assert np.all(tay >= mult)
    # with every τ_m2 >= 1 the tail bound is finite and the 50-term series is tight (the
    # multinomial bound need not be)
    tau_t = rng.uniform(1.0, 4.0, size=(5, 2))
    mc_t, se_t = mc_log1m_prod(tau_t, rng)
    assert np.all(np.abs(mc_t - vk.log1m_prod_taylor(tau_t, 50)) < 0.01 * np.abs(mc_t)
                  + 4 * se_t)
    tau2 = tau.copy()
    tau2[3:] *= 3.0
    np.testing.assert_allclose(vk.log1m_prod_multinomial(tau2)[:3], mult[:3])


# --- the ELBO against a Monte Carlo expectation -------------------------------------------
def mc_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, method, rng, draws=200_000, mask=None):
    """E_q[log p(X, Z, A, v) - log q(Z, A, v)] by Monte Carlo, written from the model's
    densities directly (scipy), with no shared code."""
    n, d = X.shape
    k = nu.shape[1]
    a_prior = alpha / k if method == "finite" else alpha
    v = rng.beta(tau[:, 0], tau[:, 1], size=(draws, k))
    pi = v if method == "finite" else np.cumprod(v, axis=1)
    Z = (rng.random((draws, n, k)) < nu).astype(float)
    A = phi + np.sqrt(Phi) * rng.standard_normal((draws, k, d))
    mean = np.einsum("snk,skd->snd", Z, A)
    lp = stats.beta.logpdf(v, a_prior, 1.0).sum(axis=1)
    lp += (Z * np.log(pi[:, None, :]) + (1 - Z) * np.log1p(-pi[:, None, :])).sum(axis=(1, 2))
    lp += stats.norm.logpdf(A, 0.0, np.sqrt(sa2)).sum(axis=(1, 2))
    M = np.ones_like(X) if mask is None else mask
    lp += (M * stats.norm.logpdf(X[None], mean, np.sqrt(sx2))).sum(axis=(1, 2))
    lq = stats.beta.logpdf(v, tau[:, 0], tau[:, 1]).sum(axis=1)
    lq += (Z * np.log(nu) + (1 - Z) * np.log1p(-nu)).sum(axis=(1, 2))
    lq += stats.norm.logpdf(A, phi, np.sqrt(Phi)).sum(axis=(1, 2))
    r = lp - lq
    return r.mean(), r.std() / np.sqrt(draws)


@pytest.mark.parametrize("missing", [False, True])
def test_finite_elbo_equals_its_expectation(missing):
    """The finite ELBO has no bound in it: it must equal the Monte Carlo expectation of
    log p - log q (catches a -1/σ² in place of -1/(2σ²), a doubled diagonal in the cross
    terms of E[(x - zA)²], and wrong entropies); with missing entries, the likelihood of the
    observed ones only."""
    rng = np.random.default_rng(3)
    X, nu, phi, Phi, tau = random_state(rng)
    M = (rng.random(X.shape) > 0.3).astype(float) if missing else None
    sx2, sa2, alpha = 0.6, 1.3, 1.5
    exact = variational_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, method="finite", mask=M)
    mc, se = mc_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, "finite", rng, mask=M)
    assert abs(exact - mc) < 4 * se + 1e-9, (exact, mc, se)


def brute_force_finite_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, mask):
    """The finite ELBO as an exact expectation: a sum over all 2^(NK) binary matrices Z
    weighted by q(Z); for each Z the Gaussian likelihood's expectation under q(A) from the
    mean and variance of each entry's linear predictor; E log v and E log(1 - v) by numerical
    quadrature against the Beta density; entropies from scipy.  No shared code with the
    implementation and no Monte Carlo error."""
    from itertools import product

    from scipy import integrate

    n, d = X.shape
    k = nu.shape[1]
    a0 = alpha / k

    def e_beta(f, a, b):
        return integrate.quad(lambda x: f(x) * stats.beta.pdf(x, a, b), 0, 1, limit=200)[0]

    elv = np.array([e_beta(np.log, a, b) for a, b in tau])
    el1v = np.array([e_beta(lambda x: np.log1p(-x), a, b) for a, b in tau])
    total = 0.0
    for bits in product((0.0, 1.0), repeat=n * k):
        Z = np.array(bits).reshape(n, k)
        qz = np.prod(np.where(Z > 0, nu, 1.0 - nu))
        mean, var = Z @ phi, (Z ** 2) @ Phi
        ell = -0.5 * np.log(2 * np.pi * sx2) - ((X - mean) ** 2 + var) / (2 * sx2)
        lz = (Z * elv + (1 - Z) * el1v).sum()
        total += qz * ((mask * ell).sum() + lz)
    lp_v = np.sum(np.log(a0) + (a0 - 1.0) * elv)
    lp_a = np.sum(-0.5 * np.log(2 * np.pi * sa2) - (phi ** 2 + Phi) / (2 * sa2))
    h = stats.beta(tau[:, 0], tau[:, 1]).entropy().sum()
    h += stats.norm(0.0, np.sqrt(Phi)).entropy().sum()
    h += stats.bernoulli(nu).entropy().sum()
    return total + lp_v + lp_a + h


@pytest.mark.parametrize("missing", [False, True])
def test_finite_elbo_equals_a_brute_force_expectation(missing):
    """Exact check of the finite ELBO on a tiny problem (N = 3, K = 2, D = 2): every Z
    enumerated, quadrature for the sticks; agreement to 1e-7."""
    rng = np.random.default_rng(8)
    X, nu, phi, Phi, tau = random_state(rng, n=3, k=2, d=2)
    M = np.array([[1, 0], [1, 1], [0, 1]], dtype=float) if missing else np.ones_like(X)
    sx2, sa2, alpha = 0.6, 1.3, 1.5
    got = variational_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, method="finite", mask=M)
    want = brute_force_finite_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, M)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7)


@pytest.mark.parametrize("bound", ["multinomial", "taylor"])
def test_infinite_elbo_is_a_lower_bound_close_to_its_expectation(bound):
    """With the stick-breaking prior the ELBO uses a lower bound on E log(1 - Π v): it must be
    below the Monte Carlo expectation and within the bound's slack of it."""
    rng = np.random.default_rng(4)
    X, nu, phi, Phi, tau = random_state(rng)
    sx2, sa2, alpha = 0.6, 1.3, 1.5
    val = variational_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, bound=bound)
    mc, se = mc_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, "infinite", rng)
    assert val < mc + 4 * se
    assert mc - val < 0.05 * abs(mc)


def test_expected_sq_error_sums_distinct_features_once():
    """E[(x - z A)²] for one entry, against brute force over the 2^K values of z."""
    rng = np.random.default_rng(5)
    X, nu, phi, Phi, _ = random_state(rng, n=1, k=3, d=1)
    R = X - nu @ phi
    got = vk.expected_sq_error(R, nu, phi, Phi, np.ones_like(R))[0]
    want = 0.0
    for bits in range(8):
        z = np.array([(bits >> i) & 1 for i in range(3)], dtype=float)
        p = np.prod(np.where(z > 0, nu[0], 1 - nu[0]))
        want += p * ((X[0, 0] - z @ phi[:, 0]) ** 2 + z @ Phi[:, 0])
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("bound", ["multinomial", "taylor"])
def test_stick_objective_gradient(bound):
    """The analytic gradient of the sticks' ELBO terms against central differences."""
    rng = np.random.default_rng(8)
    tau = rng.uniform(1.2, 4.0, size=(5, 2))
    m = rng.uniform(0, 50, 5)
    _, g = vk.stick_objective(tau, 1.5, m, 60, bound)
    num = np.zeros_like(tau)
    for i in range(5):
        for j in range(2):
            e = np.zeros_like(tau)
            e[i, j] = 1e-6
            num[i, j] = (vk.stick_objective(tau + e, 1.5, m, 60, bound)[0]
                         - vk.stick_objective(tau - e, 1.5, m, 60, bound)[0]) / 2e-6
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-5)


# --- coordinate ascent ---------------------------------------------------------------------
@pytest.mark.parametrize("method,bound,missing", [("infinite", "multinomial", False),
                                                  ("infinite", "taylor", False),
                                                  ("finite", "multinomial", False),
                                                  ("infinite", "multinomial", True)])
def test_every_coordinate_update_raises_the_elbo(method, bound, missing):
    rng = np.random.default_rng(6)
    data = pmi.datasets.block_images(60, noise=0.5, seed=3)
    X = np.ascontiguousarray(data.X)
    n, d = X.shape
    M = (rng.random((n, d)) > 0.2).astype(float) if missing else np.ones((n, d))
    k = 6
    sx2, sa2, alpha = np.full(d, 0.25), np.full(d, 1.0), 1.0
    nu = rng.random((n, k))
    phi, Phi = np.zeros((k, d)), np.ones((k, d))
    tau = np.column_stack([np.full(k, alpha), np.ones(k)])
    R = M * (X - nu @ phi)

    def elbo():
        return variational_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, method=method,
                                bound=bound, R=R, mask=M)

    prev = elbo()
    for _ in range(15):
        vk.feature_update(X, R, nu, phi, Phi, sx2, sa2, M)
        cur = elbo()
        assert cur >= prev - 1e-8 * abs(prev), "features"
        on, off = _stick_terms(tau, method, bound, 50)
        vk.nu_update(R, nu, phi, Phi, sx2, np.ascontiguousarray(on - off), M)
        prev, cur = cur, elbo()
        assert cur >= prev - 1e-8 * abs(prev), "assignments"
        tau = _update_sticks(tau, nu, alpha, method, n, bound)
        prev, cur = cur, elbo()
        assert cur >= prev - 1e-8 * abs(prev), "sticks"
        prev = cur
        np.testing.assert_allclose(R, M * (X - nu @ phi), atol=1e-9)


def test_fit_finds_the_block_features_and_learns_the_scales():
    data = pmi.datasets.block_images(300, noise=0.5, seed=2)
    model = block_model(data.X)
    res = pmi.inference.fit_variational(model, random_seed=1)
    assert res.converged
    assert np.all(np.diff(res.elbo[50:]) >= -1e-6 * np.abs(res.elbo[-1]))
    Z = res.Z.astype(bool)
    for k in range(4):  # every true feature has a near-copy among the fitted ones
        t = data.Z[:, k].astype(bool)
        jac = (Z & t[:, None]).sum(0) / np.maximum((Z | t[:, None]).sum(0), 1)
        assert jac.max() > 0.9
    assert isinstance(res.sigma_x, float) and abs(res.sigma_x - 0.5) < 0.05  # as the model's
    assert res.sigma_x_columns.shape == (res.phi.shape[1],)


def test_free_per_column_scales_are_fitted_and_drawn_in_their_shape():
    """sigma_x and sigma_a with one free value per column (shape (D,)), as pm.sample runs the
    model: the fit learns each column's noise (0.3 on half of the columns, 0.8 on the other
    half), and draws carry one value per column (the matcher's view of a per-column scale
    was once taken for another free variable)."""
    data = pmi.datasets.block_images(200, noise=0.5, seed=1)
    scale = np.tile([0.3, 0.3, 0.3, 0.8, 0.8, 0.8], 6)
    X = data.Z @ data.A + scale * np.random.default_rng(0).standard_normal(data.X.shape)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(200, 8))
        A = pm.Normal("A", 0.0, pm.HalfNormal("sigma_a", 2.0, shape=36), shape=(8, 36))
        pm.Normal("X", Z @ A, pm.HalfNormal("sigma_x", 1.0, shape=36), observed=X)
    res = pmi.inference.fit_variational(model, random_seed=1, restarts=1)
    assert res.sigma_x.shape == (36,) and res.sigma_a.shape == (36,)
    np.testing.assert_allclose(res.sigma_x, scale, atol=0.1)
    post = res.sample(5, random_seed=1)["posterior"]
    assert post["sigma_x"].shape[-1] == 36 and post["sigma_a"].shape[-1] == 36


def test_sample_is_shaped_like_pm_sample_and_feeds_the_diagnostics():
    data = pmi.datasets.block_images(80, noise=0.5, seed=2)
    model = block_model(data.X)
    res = pmi.inference.fit_variational(model, random_seed=2, restarts=1)
    idata = res.sample(30, chains=2, random_seed=1)
    post = idata["posterior"]
    assert post["Z"].shape == (2, 30, 80, 8)
    assert post["A"].shape == (2, 30, 8, 36)
    assert post["sigma_x"].shape == (2, 30)
    np.testing.assert_allclose(post["sigma_x"].values, res.sigma_x)
    np.testing.assert_allclose(post["alpha"].values, res.alpha)
    table = pmi.summary(idata)
    assert "ibp_n_active" in table.index
    mask = pmi.holdout_mask(data.X, 100, seed=0)
    assert np.isfinite(pmi.heldout_metrics(idata, data.X, mask)["l2"])


def test_pm_sample_starts_from_the_fit():
    """``initvals()`` is accepted by pm.sample, and the linear-Gaussian step starts the chain
    from that Z: after one sweep most rows still equal the fit's, unlike a prior start."""
    data = pmi.datasets.block_images(100, noise=0.5, seed=2)
    model = block_model(data.X, k_max=16)
    res = pmi.inference.fit_variational(model, random_seed=3)

    def first_draw(**kw):
        with model:
            idata = pm.sample(tune=0, draws=1, chains=1, random_seed=1, progressbar=False,
                              compute_convergence_checks=False, **kw)
        return idata["posterior"]["Z"].values[0, 0]

    def same_rows(Z):
        return np.mean(np.all(Z == res.Z, axis=1))

    assert same_rows(first_draw(initvals=res.initvals())) > 0.6
    assert same_rows(first_draw()) < 0.2


def test_refuses_models_it_cannot_fit():
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ModelPatternError, match="beta = 1"):
        pmi.inference.fit_variational(block_model(X, 4, beta=2.0))
    with block_model(X, 4):
        pm.Normal("other", 0.0, 1.0)
        with pytest.raises(ModelPatternError, match="other free variables"):
            pmi.inference.fit_variational()


def test_a_zero_offset_is_fitted_and_a_free_offset_is_told_what_to_do():
    """mu = Z @ A + 0 is the model without an offset (pm.sample gives it AcceleratedGibbs);
    a free offset b gets an error that names it and says how to fit without it, a constant
    offset one that says to subtract it from the data."""
    X = pmi.datasets.block_images(40, noise=0.5, seed=1).X
    for offset in ("zero", "free", "constant"):
        with pm.Model() as model:
            Z = pmi.IBP("Z", 1.0, shape=(40, 6))
            A = pm.Normal("A", 0.0, 1.0, shape=(6, 36))
            b = {"zero": 0.0, "constant": 1.0}.get(offset) if offset != "free" else pm.Normal(
                "b", 0.0, 1.0, shape=36)
            pm.Normal("X", Z @ A + b, 0.5, observed=X)
        if offset == "zero":
            res = pmi.inference.fit_variational(model, random_seed=1, restarts=1)
            assert res.Z.shape == (40, 6)
        elif offset == "free":
            with pytest.raises(ModelPatternError, match=r"adds the offset 'b': centre the "
                                                        r"data's columns.*pm.sample"):
                pmi.inference.fit_variational(model)
        else:
            with pytest.raises(ModelPatternError, match=r"adds a constant offset: subtract it "
                                                        r"from the data.*pm.sample"):
                pmi.inference.fit_variational(model)


# --- truncation ----------------------------------------------------------------------------
def test_truncation_bound_reproduces_the_paper_and_bounds_monte_carlo():
    """Doshi-Velez 2009, §6.4 (N = 30, α = 5): the Lévy–Khintchine bound is 0.980 / 0.468 /
    0.097 at K = 20 / 30 / 40, above the Monte Carlo truncation probability."""
    got = pmi.inference.truncation_bound(30, 5.0, [20, 30, 40])
    np.testing.assert_allclose(got, [0.980, 0.468, 0.097], atol=1.5e-3)
    rng = np.random.default_rng(0)
    draws, k_far = 20_000, 400
    v = rng.beta(5.0, 1.0, size=(draws, k_far))
    pi = np.cumprod(v, axis=1)
    for k, bound in zip([20, 30, 40], got, strict=True):
        # P(some row of 30 uses a stick beyond k) = 1 - E prod_{i>k} (1 - π_i)^N
        p = 1.0 - np.exp(30 * np.log1p(-pi[:, k:]).sum(axis=1)).mean()
        assert p <= bound + 0.01


def test_fit_with_missing_entries_imputes_them_in_the_draws():
    """NaN entries are marginalised by the fit, and its draws hold PyMC's imputed variable;
    the held-out error of the draws is near the noise variance."""
    data = pmi.datasets.block_images(300, noise=0.5, seed=2)
    mask = pmi.holdout_mask(data.X, 900, seed=1)
    with pytest.warns(pm.exceptions.ImputationWarning):
        model = block_model(np.where(mask, np.nan, data.X))
    res = pmi.inference.fit_variational(model, method="finite", random_seed=1)
    idata = res.sample(40, random_seed=2)
    assert idata["posterior"]["X_unobserved"].shape == (1, 40, 900)
    assert pmi.heldout_metrics(idata, data.X, mask)["l2"] < 0.25 * 1.3


def test_free_scales_start_from_the_data_spread():
    """Data on a small scale (block images x 0.1) with free scales whose PyMC default start
    (HalfNormal's support point, sigma_x = 1) is ten times too large: the fit starts the
    learned scales from the data's spread (as IBPScaleSlice does) and finds the glyphs
    instead of switching every feature off."""
    data = pmi.datasets.block_images(200, noise=0.5, seed=2)
    n, d = data.X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        Z = pmi.IBP("Z", alpha, shape=(n, 8))
        A = pm.Normal("A", 0.0, sigma_a, shape=(8, d))
        pm.Normal("X", Z @ A, sigma_x, observed=0.1 * data.X)
    res = pmi.inference.fit_variational(model, method="finite", random_seed=1)
    assert (res.Z.sum(axis=0) > 20).sum() >= 4
    assert abs(res.sigma_x - 0.05) < 0.01
