"""pmi.DependentIBP and pmi.dependent_ibp: logp, exact draws, the prior's marginals and pairwise
dependence, the threshold, the kernel and bad input."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import special, stats

import pymc_ibp as pmi
from pymc_ibp.distributions.dependent import (
    dibp_logodds_numeric,
    dibp_support_point,
    dibp_threshold,
)
from pymc_ibp.distributions.normal_math import log_ndtr, ndtri


def test_normal_math_matches_scipy_in_the_tails():
    ps = np.concatenate([10.0 ** -np.arange(1, 300, 7), np.linspace(1e-3, 1 - 1e-3, 101),
                         1 - 10.0 ** -np.arange(1, 16)])
    got = np.array([ndtri(p) for p in ps])
    ref = special.ndtri(ps)
    assert np.max(np.abs(got - ref) / np.maximum(1, np.abs(ref))) < 1e-14
    xs = np.concatenate([-np.logspace(0, 4, 200), np.linspace(-40, 30, 701)])
    got = np.array([log_ndtr(x) for x in xs])
    ref = special.log_ndtr(xs)
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - ref) / np.maximum(1e-300, np.abs(ref))) < 1e-12
    assert ndtri(0.0) == -np.inf and ndtri(1.0) == np.inf and np.isnan(ndtri(1.5))


def test_threshold_uses_the_standard_deviation():
    # sqrt(Σ_tt + ρ²) Φ⁻¹(b), not (Σ_tt + ρ²) Φ⁻¹(b)
    thr = dibp_threshold(np.array([0.2, 0.7]), np.full((2, 3), 3.0), 1.0)
    np.testing.assert_allclose(thr, 2.0 * special.ndtri([0.2, 0.7])[:, None] * np.ones((2, 3)))
    sym = dibp_threshold(pt.as_tensor([0.2, 0.7]), pt.as_tensor(np.full((2, 3), 3.0)), 1.0)
    np.testing.assert_allclose(sym.eval(), thr)


def test_support_point_is_each_entry_at_its_more_probable_value():
    """One definition for PyMC's default start and the steps' test of it: NumPy and PyTensor
    agree with ``log P(z=1) >= log P(z=0)``, on entries with ``u`` on both sides of 0 and
    close to it, and the model's initial point is that matrix."""
    rng = np.random.default_rng(3)
    sticks, rho, index = np.array([0.8, 0.5, 0.3]), 0.7, np.array([0, 1, 2, 1, 0, 2])
    g = rng.normal(0.0, 0.6, size=(3, 3))
    got = dibp_support_point(sticks, g, 1.0, rho, index)
    logodds = dibp_logodds_numeric(sticks, g, np.ones_like(g), rho, index)
    np.testing.assert_array_equal(got, (logodds >= 0).astype(np.int8))
    assert got.dtype == np.int8 and 0 < got.sum() < got.size
    assert np.abs(logodds).min() < 0.5
    sym = dibp_support_point(pt.as_tensor(sticks), pt.as_tensor(g), pt.as_tensor(1.0), rho, index)
    np.testing.assert_array_equal(sym.eval(), got)
    with pm.Model() as model:
        pmi.DependentIBP("Z", sticks, pm.Normal("g", 0.0, 1.0, shape=(3, 3), initval=g), rho,
                         index, g_var=1.0)
    np.testing.assert_array_equal(model.initial_point()["Z"], got)


def _dist(sticks, g, rho, index, g_var=1.0):
    return pmi.DependentIBP.dist(sticks, g, rho, index, g_var=g_var)


def test_logp_matches_the_formula_and_is_finite_in_the_tails():
    rng = np.random.default_rng(0)
    sticks = np.array([0.9, 0.5, 1e-12])
    g = rng.normal(size=(3, 4)) * np.array([[1.0], [1.0], [40.0]])
    index = np.array([0, 1, 1, 3, 2])
    Z = (rng.random((5, 3)) < 0.5).astype(np.int8)
    rho, g_var = 0.4, np.full((3, 4), 1.3)
    lp = pm.logp(_dist(sticks, g, rho, index, g_var), Z).eval()
    u = (np.sqrt(1.3 + rho**2) * special.ndtri(sticks)[:, None] - g)[:, index].T / rho
    ref = np.where(Z == 1, special.log_ndtr(u), special.log_ndtr(-u)).sum()
    assert np.isfinite(lp)
    np.testing.assert_allclose(lp, ref, rtol=1e-10)
    lo = dibp_logodds_numeric(sticks, g, g_var, rho, index)
    np.testing.assert_allclose(lo, special.log_ndtr(u) - special.log_ndtr(-u))
    assert pm.logp(_dist(sticks, g, rho, index, g_var), np.full((5, 3), 2, np.int8)).eval() \
        == -np.inf


def _prior_draws(n_draws, seed=1):
    t = np.array([0.0, 0.0, 1.0, 3.0])  # two items at t=0, one at t=1 and t=3
    with pm.Model(coords={"obs": range(4), "feature": range(3)}) as model:
        mod = pmi.dependent_ibp("Z", t, alpha=2.0, length_scale=1.5, rho=0.5,
                                dims=("obs", "feature"))
    draws = pm.draw([mod.Z, mod.sticks], n_draws, random_seed=seed)
    return model, mod, draws


def test_prior_marginals_and_pairwise_dependence():
    n = 20_000
    _, mod, (Z, b) = _prior_draws(n)
    assert Z.dtype == np.int8 and Z.shape == (n, 4, 3)
    # P(z_nk = 1 | b) = b_k at every covariate value: E[z_nk] = E[b_k] = (α/(1+α))^k
    expect = (2.0 / 3.0) ** np.arange(1, 4)
    mean = Z.mean(axis=0)
    se = np.sqrt(expect * (1 - expect) / n)
    assert np.all(np.abs(mean - expect[None, :]) < 4.5 * se[None, :]), mean
    # given b, rows n, n' share h's GP part: P(both) = Φ2(q, q; Σ(t,t')/(σ²+ρ²))
    def pair_prob(dt):
        r = np.exp(-dt**2 / 1.5**2) * (1 - 1e-6) / (1.0 + 1e-6 + 0.25)
        q = special.ndtri(b[:, 0])
        mvn = stats.multivariate_normal([0, 0], [[1, r], [r, 1]])
        return np.mean([mvn.cdf([qi, qi]) for qi in q[:2000]])
    for (i, j, dt) in [(0, 1, 0.0), (0, 2, 1.0), (0, 3, 3.0)]:
        both = (Z[:2000, i, 0] * Z[:2000, j, 0]).astype(float)
        expected = pair_prob(dt)
        assert abs(both.mean() - expected) < 4.5 * np.sqrt(expected * (1 - expected) / 2000), \
            (i, j, both.mean(), expected)
    # dependence decays with distance: corr(z(0), z(3)) below corr(z(0), z(0'))
    c01 = np.corrcoef(Z[:, 0, 0], Z[:, 1, 0])[0, 1]
    c03 = np.corrcoef(Z[:, 0, 0], Z[:, 3, 0])[0, 1]
    assert c01 > c03 + 0.05


def test_builder_kernel_is_built_from_the_covariate():
    t = np.array([0.0, 0.5, 2.0, 0.5])
    with pm.Model():
        mod = pmi.dependent_ibp("Z", t, alpha=1.0, k=2, length_scale=[1.0, 2.0], jitter=0.0)
    cov = mod.g.owner.inputs[3].eval()
    vals = np.array([0.0, 0.5, 2.0])
    np.testing.assert_array_equal(mod.covariate_values, vals)
    np.testing.assert_array_equal(mod.index, [0, 1, 2, 1])
    for k, ls in enumerate([1.0, 2.0]):  # Williamson et al. eq. 8: exp(-(t - t')²/ℓ²)
        np.testing.assert_allclose(cov[k], np.exp(-(vals[:, None] - vals[None, :])**2 / ls**2))


def test_tracking_variant_has_one_process_per_item():
    t = np.array([0.0, 1.0, 2.0, 0.0, 1.0])
    item = np.array([0, 0, 0, 1, 1])
    with pm.Model():
        mod = pmi.dependent_ibp("Z", t, alpha=1.0, k=2, item=item, variant="tracking")
    assert mod.g.type.shape == (2, 2, 3)
    np.testing.assert_array_equal(mod.index, [0, 1, 2, 3, 4])
    Z = pm.draw(mod.Z, 3000, random_seed=3)
    # the same item keeps its features over neighbouring t more often than two items do
    same = (Z[:, 0, 0] == Z[:, 1, 0]).mean()
    other = (Z[:, 0, 0] == Z[:, 4, 0]).mean()
    assert same > other + 0.05


def test_bad_input_is_rejected_with_a_clear_message():
    with pm.Model():
        with pytest.raises(pmi.DataError, match=r"covariate\[1\] = nan"):
            pmi.dependent_ibp("Z", [0.0, np.nan], alpha=1.0, k=2)
    g = np.zeros((2, 3))
    with pytest.raises(pmi.DataError, match=r"index\[1\] = 5 is out of range"):
        _dist([0.5, 0.2], g, 1.0, [0, 5])
    with pytest.raises(ValueError, match="g has 3 rows but there are 2 sticks"):
        _dist([0.5, 0.2], np.zeros((3, 3)), 1.0, [0, 1])
    with pytest.raises(ValueError, match="rho > 0"):
        _dist([0.5, 0.2], g, 0.0, [0, 1])
    with pytest.raises(ValueError, match="needs the prior variance of g"):
        pmi.DependentIBP.dist([0.5, 0.2], g, 1.0, [0, 1])
    with pm.Model():
        with pytest.raises(ValueError, match="must be .bag., .tracking. or .hierarchical."):
            pmi.dependent_ibp("Z", [0.0, 1.0], alpha=1.0, k=2, variant="other")


def test_hierarchical_variant_keeps_the_ibp_marginals_and_gets_the_steps():
    t = np.array([0.0, 1.0, 0.0, 1.0, 2.0])
    item = np.array([0, 0, 1, 1, 1])
    with pm.Model() as model:
        mod = pmi.dependent_ibp("Z", t, alpha=2.0, k=3, item=item, variant="hierarchical")
        pm.Normal("X", mod.Z.sum(axis=1), 1.0, observed=np.zeros(5))
    assert model["Z_item_g"].type.shape == (3, 2, 3)
    # the threshold sees the variance of the shared and the item process: P(z = 1) = b_k
    n = 20_000
    Z, b = pm.draw([mod.Z, mod.sticks], n, random_seed=4)
    cond = (Z == 1).mean(axis=0)
    expect = b.mean(axis=0)
    assert np.all(np.abs(cond - expect[None, :]) < 4.5 * np.sqrt(0.25 / n)), (cond, expect)
    with model:
        _, selected = pm.sampling.mcmc.assign_step_methods(model, None)
    names = {cls.__name__: sorted(v.name for v in vs) for cls, vs in selected.items()}
    assert names["DependentIBPGibbs"] == ["Z_g", "Z_item_g", "Z_sticks_stickbreaking__"]
    assert names["GPLengthScaleHMC"] == ["Z_item_ls_log__", "Z_ls_log__"]


def test_rows_are_ibp_rows_and_only_independent_processes_make_an_ibp_matrix():
    """docs/distributions/dependent-ibp.md: every row is distributed as a row of the
    stick-breaking IBP (P(z_nk = 1) = E[b_k]); two rows at one covariate value are an IBP
    matrix (P(both) = E[b_k²]) when they read independent processes (the tracking variant),
    not when they read the same one (the bag variant: P(both) > E[b_k²])."""
    n = 4000
    t = np.array([0.0, 0.0, 1.0])
    with pm.Model():
        bag = pmi.dependent_ibp("Z", t, alpha=1.0, k=2)
    with pm.Model():
        track = pmi.dependent_ibp("Z", t, alpha=1.0, k=2, item=np.array([0, 1, 0]),
                                  variant="tracking")
    Zb = pm.draw(bag.Z, n, random_seed=5)
    Zt = pm.draw(track.Z, n, random_seed=5)
    eb, eb2 = 0.5, 1.0 / 3.0  # E[b_1], E[b_1²] for b_1 ~ Beta(1, 1)
    for Z in (Zb, Zt):
        assert abs(Z[:, :2, 0].mean() - eb) < 4.5 * np.sqrt(eb * (1 - eb) / n)
    se = np.sqrt(eb2 * (1 - eb2) / n)
    assert abs((Zt[:, 0, 0] * Zt[:, 1, 0]).mean() - eb2) < 4.5 * se
    assert (Zb[:, 0, 0] * Zb[:, 1, 0]).mean() > eb2 + 10 * se
