"""Tests for the CUSUM / hairiness diagnostics (Brooks 1998; Doshi-Velez 2009, §5.3).

Coverage tolerance (used by every coverage assertion below)
-----------------------------------------------------------
Each replication gives one Bernoulli "final D_T inside the band" outcome.  With R = 2000
independent chains and nominal coverage p = 0.95 the estimated coverage has standard deviation
sqrt(p(1-p)/R) = sqrt(0.95*0.05/2000) ≈ 0.0049, so the window [0.93, 0.97] is ±0.02 ≈ ±4.1 sd
(two-sided false-alarm probability ≈ 4e-5 for a correct implementation).  The band is a normal
approximation: for T = 500 the exact null coverage of the cusum band is ≈ 0.951 (Binomial(499, ½)
count within 249.5 ± 21.9) and the turning band is similar, well inside the window.  A band of the
wrong width (e.g. 1/√t instead of 1/(2√t): coverage ≈ 1.00; literal sign(0) ties on Poisson(3):
coverage ≈ 0) falls far outside.  All seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from pymc_ibp.diagnostics import cusum, hairiness, hairiness_index, plot_cusum

R, T = 2000, 500  # replications (chains) and draws per chain
COVERAGE_WINDOW = (0.93, 0.97)


def _coverage(D, lower, upper):
    final = D[..., -1]
    return float(np.mean((final >= lower[-1]) & (final <= upper[-1])))


def _ar1(rho, shape, rng):
    """Stationary Gaussian AR(1) along the last axis."""
    x = np.empty(shape)
    x[..., 0] = rng.normal(size=shape[:-1]) / np.sqrt(1 - rho**2)
    eps = rng.normal(size=shape)
    for t in range(1, shape[-1]):
        x[..., t] = rho * x[..., t - 1] + eps[..., t]
    return x


# --------------------------------------------------------------------------------------------
# array function: exact small cases
# --------------------------------------------------------------------------------------------
def test_hand_computed_cusum_and_turning():
    x = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 0.0])
    # median 2.5 -> slope signs - + - + + -  -> d = 1 1 1 0 1
    D, lo, hi = hairiness_index(x)
    np.testing.assert_allclose(D, [1, 1, 1, 3 / 4, 4 / 5])
    t = np.arange(1, 6)
    # the normal approximation's band, cut to [0, 1] (D_t is a fraction): it passes 0 and 1
    # for t <= 3
    np.testing.assert_allclose(lo, np.maximum(0.5 - 1.959963984540054 / (2 * np.sqrt(t)), 0))
    np.testing.assert_allclose(hi, np.minimum(0.5 + 1.959963984540054 / (2 * np.sqrt(t)), 1))
    assert lo[0] == 0.0 and hi[2] == 1.0 and 0 < lo[3] and hi[3] < 1
    # turning points: steps + - + - -  -> d = 1 1 1 0 over n-2 = 4 indicators
    D, lo, hi = hairiness_index(x, kind="turning")
    np.testing.assert_allclose(D, [1, 1, 1, 3 / 4])
    n = np.arange(1, 5) + 2
    half = 1.959963984540054 * np.sqrt((16 * n - 29) / 90) / (n - 2)
    np.testing.assert_allclose(lo, np.maximum(2 / 3 - half, 0))
    np.testing.assert_allclose(hi, np.minimum(2 / 3 + half, 1))
    assert lo[0] == 0.0 and hi[3] == 1.0


def test_random_ties_only_touch_tied_draws():
    # continuous draws, even T: nothing ties with the median, so tie handling and seed are moot
    x = np.random.default_rng(0).normal(size=(20, 50))
    D_zero = hairiness_index(x, ties="zero")[0]
    for seed in (1, 2):
        np.testing.assert_array_equal(hairiness_index(x, seed=seed)[0], D_zero)
    # integer draws: randomised, but reproducible with a fixed seed
    k = np.random.default_rng(1).poisson(3, size=(5, 60))
    np.testing.assert_array_equal(hairiness_index(k, seed=3)[0], hairiness_index(k, seed=3)[0])


def test_axis_argument_and_errors():
    x = np.random.default_rng(2).normal(size=(40, 3))
    D_axis0 = hairiness_index(x, axis=0)[0]
    assert D_axis0.shape == (3, 39)
    np.testing.assert_array_equal(D_axis0, hairiness_index(x.T)[0])
    with pytest.raises(ValueError, match="at least 3 draws"):
        hairiness_index([1.0, 2.0])
    with pytest.raises(ValueError, match="center"):
        hairiness_index(x[:, 0], center="mode")
    with pytest.raises(ValueError, match="kind"):
        hairiness_index(x[:, 0], kind="runs")
    with pytest.raises(ValueError, match="finite"):
        hairiness_index(np.array([1.0, np.nan, 2.0, 3.0]))


# --------------------------------------------------------------------------------------------
# (a)-(d) calibration and power (vectorised over R chains)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("center", ["median", "mean"])
def test_iid_continuous_coverage(center):
    x = np.random.default_rng(10).normal(size=(R, T))  # symmetric: mean-centring is calibrated too
    D, lo, hi = hairiness_index(x, center=center, seed=11)
    assert D.shape == (R, T - 1) and lo.shape == hi.shape == (T - 1,)
    cov = _coverage(D, lo, hi)
    assert COVERAGE_WINDOW[0] <= cov <= COVERAGE_WINDOW[1], cov
    assert abs(D[:, -1].mean() - 0.5) < 0.005  # sd of the mean ≈ 0.0224/sqrt(2000) = 0.0005


def test_iid_poisson_coverage_needs_tie_breaking():
    k = np.random.default_rng(20).poisson(3.0, size=(R, T))  # P(K = median 3) ≈ 0.22
    D, lo, hi = hairiness_index(k, seed=21)
    cov = _coverage(D, lo, hi)
    assert COVERAGE_WINDOW[0] <= cov <= COVERAGE_WINDOW[1], cov
    # literal sign(0): P(d=1) = 1 - (a²+b²+c²) ≈ 0.65 -> essentially never inside the band
    D0, lo0, hi0 = hairiness_index(k, ties="zero")
    assert _coverage(D0, lo0, hi0) < 0.05
    assert abs(D0[:, -1].mean() - 0.646) < 0.01


def test_ar1_sticky_chain_is_flagged():
    x = _ar1(0.99, (R, T), np.random.default_rng(30))
    D, lo, hi = hairiness_index(x, seed=31)
    final = D[:, -1]
    assert np.mean(final < lo[-1]) >= 0.99  # outside the band, and on the low side
    # sign-change rate of a Gaussian AR(1) is arccos(rho)/pi ≈ 0.045
    assert final.mean() < 0.15
    assert np.mean(final > hi[-1]) == 0.0


@pytest.mark.parametrize("dist", ["normal", "poisson"])
def test_turning_null_mean_and_coverage(dist):
    rng = np.random.default_rng(40)
    x = rng.normal(size=(R, T)) if dist == "normal" else rng.poisson(3.0, size=(R, T))
    D, lo, hi = hairiness_index(x, kind="turning", seed=41)
    assert D.shape == (R, T - 2)
    # per-chain sd = sqrt((16*500-29)/90)/498 ≈ 0.0189, so the mean over 2000 has sd ≈ 0.00042
    assert abs(D[:, -1].mean() - 2 / 3) < 0.003
    cov = _coverage(D, lo, hi)
    assert COVERAGE_WINDOW[0] <= cov <= COVERAGE_WINDOW[1], cov


# --------------------------------------------------------------------------------------------
# (e) DataTree API
# --------------------------------------------------------------------------------------------
def _fake_idata(n_chains=3, n_draws=200, seed=50):
    rng = np.random.default_rng(seed)
    chain, draw = np.arange(n_chains), np.arange(100, 100 + n_draws)  # non-trivial draw coord
    posterior = xr.Dataset(
        {
            "alpha": (("chain", "draw"), rng.gamma(2.0, size=(n_chains, n_draws))),
            "nu": (("chain", "draw", "feature"), rng.beta(2.0, 1.0, size=(n_chains, n_draws, 2))),
        },
        coords={"chain": chain, "draw": draw, "feature": ["f0", "f1"]},
    )
    sticky = _ar1(0.995, (n_chains, n_draws), rng)
    sample_stats = xr.Dataset(
        {
            "ibp_n_active": (("chain", "draw"), rng.poisson(3, size=(n_chains, n_draws))),
            "sticky": (("chain", "draw"), sticky),
        },
        coords={"chain": chain, "draw": draw},
    )
    return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": sample_stats})


def test_cusum_datatree():
    dt = _fake_idata()
    cs = cusum(dt, ["alpha", "nu", "ibp_n_active"])
    assert set(cs.data_vars) == {"alpha", "nu", "ibp_n_active"}
    assert cs["alpha"].dims == ("chain", "draw")
    assert cs["nu"].dims == ("chain", "draw", "feature")
    assert list(cs["nu"].feature.values) == ["f0", "f1"]
    np.testing.assert_array_equal(cs.draw.values, dt.posterior.draw.values)
    n = dt.sample_stats["ibp_n_active"].values.astype(float)
    np.testing.assert_allclose(cs["ibp_n_active"].values,
                               np.cumsum(n - n.mean(axis=1, keepdims=True), axis=1))
    np.testing.assert_allclose(cs["alpha"].isel(draw=-1), 0.0, atol=1e-9)  # mean-centred
    assert set(cusum(dt).data_vars) == {"alpha", "nu"}  # default: all of the group


def test_hairiness_datatree():
    dt = _fake_idata()
    h = hairiness(dt, ["alpha", "nu", "ibp_n_active", "sticky"])
    for name in ("alpha", "nu", "ibp_n_active", "sticky"):
        assert h[name].dims[:2] == ("chain", "hairiness_draw")
        assert h[f"{name}_final"].dims[0] == "chain"
        assert h[f"{name}_outside"].dtype == bool
    assert h.sizes["hairiness_draw"] == 199
    assert h["nu"].dims == ("chain", "hairiness_draw", "feature")
    assert h["nu_final"].dims == ("chain", "feature")
    np.testing.assert_array_equal(h.hairiness_draw.values, dt.posterior.draw.values[1:])
    np.testing.assert_array_equal(h.hairiness_t.values, np.arange(1, 200))
    assert h["hairiness_lower"].dims == ("hairiness_draw",)
    # values agree with the array function, chain by chain
    D, lo, hi = hairiness_index(dt.posterior["alpha"].values[1])
    np.testing.assert_allclose(h["hairiness_lower"], lo)
    np.testing.assert_allclose(h["hairiness_upper"], hi)
    np.testing.assert_allclose(h["alpha"].sel(chain=1), D)  # no ties: seed irrelevant
    np.testing.assert_allclose(h["alpha_final"], h["alpha"].isel(hairiness_draw=-1))
    # the sample_stats variable was really read, and the sticky one is flagged low
    assert 0.15 < float(h["ibp_n_active_tie_frac"].mean()) < 0.35
    assert h["sticky_outside"].all()
    assert (h["sticky_final"] < h["hairiness_lower"].isel(hairiness_draw=-1)).all()
    assert h.attrs["kind"] == "cusum" and h.attrs["null_mean"] == 0.5

    ht = hairiness(dt, "alpha", kind="turning")
    assert ht.sizes["hairiness_draw"] == 198
    np.testing.assert_array_equal(ht.hairiness_draw.values, dt.posterior.draw.values[2:])


def test_datatree_errors():
    dt = _fake_idata()
    with pytest.raises(ValueError, match="'nope' not found"):
        hairiness(dt, ["alpha", "nope"])
    with pytest.raises(ValueError, match="'nope' not found"):
        cusum(dt, "nope")
    with pytest.raises(ValueError, match="group"):
        cusum(dt, "alpha", group="prior")
    short = _fake_idata(n_draws=2)
    with pytest.raises(ValueError, match="at least 3"):
        hairiness(short, "alpha")
    with pytest.raises(ValueError, match="at least 3"):
        cusum(short, "ibp_n_active")


# --------------------------------------------------------------------------------------------
# (f) plot renders something real
# --------------------------------------------------------------------------------------------
def test_plot_cusum_png(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt

    dt = _fake_idata()
    pc = plot_cusum(dt, ["alpha", "ibp_n_active", "sticky"], backend="matplotlib")
    fig = pc.viz["figure"].item()
    try:
        assert len(fig.axes) == 6  # 3 variables x (CUSUM row, hairiness row)
        for visual in ("cusum", "hairiness", "hairiness_band", "null_line", "title"):
            assert visual in pc.viz.children
        path = tmp_path / "cusum.png"
        pc.savefig(path, dpi=60)
    finally:
        plt.close(fig)
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    assert h >= 250 and w >= 500
    rgb = img[..., :3]
    assert rgb.std() > 0.05
    # chain lines are saturated colours (axes, text and band are grey/black): demand several
    # distinct hues with many pixels, in the CUSUM row *and* in the hairiness row
    saturated = (rgb.max(-1) - rgb.min(-1)) > 0.3
    for half in (saturated[: h // 2], saturated[h // 2:]):
        assert half.mean() > 0.002
    colours, counts = np.unique(np.round(rgb[saturated] * 4), axis=0, return_counts=True)
    assert (counts > 50).sum() >= 3
