"""Label-invariant summary, relabelling and feature plots (docs/diagnostics.md)."""

import matplotlib

matplotlib.use("Agg")

import arviz as az
import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_ibp as pmi
from pymc_ibp.diagnostics.feature_plots import plot_assignments, plot_features, posterior_features
from pymc_ibp.diagnostics.relabel import relabel, relabel_permutations
from pymc_ibp.diagnostics.summary import chain_summary, sorted_feature_sizes, summary

N, K_MAX, K_TRUE, D = 60, 6, 3, 4
N_CHAINS, N_DRAWS = 4, 200
# chain c, slot j holds true slot PERMS[c][j]: every chain uses a different labelling
PERMS = np.array([[0, 1, 2, 3, 4, 5], [1, 2, 0, 3, 4, 5], [4, 0, 5, 1, 2, 3], [2, 5, 1, 0, 3, 4]])
A_TRUE = np.array(
    [[3.0, 0.0, 0.0, 1.0], [0.0, -3.0, 0.0, 1.0], [0.0, 0.0, 3.0, -2.0],
     [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
)


def true_z(seed=0):
    rng = np.random.default_rng(seed)
    Z = np.zeros((N, K_MAX), dtype=np.int64)
    Z[:, :K_TRUE] = rng.random((N, K_TRUE)) < np.array([0.6, 0.4, 0.2])
    return Z


def fake_idata(seed=1, with_stats=True, const_k=False):
    """4 chains, each the truth under its own slot permutation, plus noise: A of active slots
    +N(0, 0.05²), inactive slots' A from the N(0, 1) prior, 1 % bit flips in the active columns
    and a singleton 'birth' in a free slot in 15 % of the draws."""
    rng = np.random.default_rng(seed)
    Zt = true_z()
    Zs = np.empty((N_CHAINS, N_DRAWS, N, K_MAX), dtype=np.int64)
    As = np.empty((N_CHAINS, N_DRAWS, K_MAX, D))
    for c, perm in enumerate(PERMS):
        active = perm < K_TRUE
        for t in range(N_DRAWS):
            Z = Zt[:, perm].copy()
            flips = (rng.random((N, K_MAX)) < 0.01) & active
            Z[flips] = 1 - Z[flips]
            if not const_k and rng.random() < 0.15:
                Z[rng.integers(N), rng.choice(np.flatnonzero(~active))] = 1
            A = A_TRUE[perm] + 0.05 * rng.normal(size=(K_MAX, D))
            on = Z.any(axis=0)
            A[~on] = rng.normal(size=(int((~on).sum()), D))
            Zs[c, t], As[c, t] = Z, A
    coords = {"chain": np.arange(N_CHAINS), "draw": np.arange(N_DRAWS), "obs": np.arange(N),
              "feature": np.arange(K_MAX), "dim": np.arange(D)}
    sd = ("chain", "draw")
    m = Zs.sum(axis=2)
    post = xr.Dataset(
        {
            "Z": ((*sd, "obs", "feature"), Zs),
            "A": ((*sd, "feature", "dim"), As),
            "pi": ((*sd, "feature"), m / N + 0.01 * rng.random(m.shape)),
            "alpha": (sd, rng.gamma(2.0, 1.0, size=(N_CHAINS, N_DRAWS))),
            "sigma_x": (sd, 0.5 + 0.01 * rng.normal(size=(N_CHAINS, N_DRAWS))),
        },
        coords=coords,
    )
    groups = {"posterior": post}
    if with_stats:
        groups["sample_stats"] = xr.Dataset(
            {
                "ibp_n_active": (sd, (m > 0).sum(axis=-1)),
                "ibp_log_joint": (sd, rng.normal(-1000.0, 5.0, size=(N_CHAINS, N_DRAWS))),
                "ibp_flips": (sd, rng.integers(0, 5, size=(N_CHAINS, N_DRAWS))),
            },
            coords={"chain": coords["chain"], "draw": coords["draw"]},
        )
    return xr.DataTree.from_dict(groups)


@pytest.fixture(scope="module")
def idata():
    return fake_idata()


def _png_stats(path):
    img = mpimg.imread(path)
    colours = np.unique(np.round(img[..., :3].reshape(-1, 3), 3), axis=0)
    return img, float(img[..., :3].std()), len(colours)


def _image_axes(fig):
    return [a for a in fig.axes if a.get_images()]


# ---------------------------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------------------------
def test_summary_label_invariant_rows(idata):
    s = summary(idata, round_to="none")
    for row in ("ibp_n_active", "ibp_log_joint", "alpha", "sigma_x",
                "m_sorted[0]", "m_sorted[1]", "m_sorted[2]"):
        assert row in s.index, row
        assert s.loc[row, "r_hat"] < 1.05, (row, s.loc[row, "r_hat"])
        assert s.loc[row, "ess_bulk"] > 200, row
    # label-dependent variables are not summarised; ibp_flips is not a requested stat
    assert not any(r.startswith(("A[", "Z[", "pi[")) for r in s.index)
    assert "ibp_flips" not in s.index
    # K = max K+ = 4 (3 features + occasional singleton births): m_sorted[0..3] only
    assert "m_sorted[3]" in s.index and "m_sorted[4]" not in s.index
    sizes = np.sort(true_z().sum(axis=0))[::-1][:K_TRUE]
    np.testing.assert_allclose(s.loc[["m_sorted[0]", "m_sorted[1]", "m_sorted[2]"], "mean"],
                               sizes, atol=1.0)
    assert {"mean", "sd", "ess_bulk", "ess_tail", "r_hat", "mcse_mean"} <= set(s.columns)


def test_summary_shows_interval_bounds_to_the_precision_of_the_sd():
    """ArviZ's default display rounds an interval's bounds to two significant figures, which
    for a log joint near -29244 (sd 53) reads -29000 to -29000: the summary shows them to the
    sd's precision instead, keeps integer bounds (K+) as they are, and leaves the numbers."""
    rng = np.random.default_rng(0)
    post = xr.Dataset({"lj": (("chain", "draw"), -29244 + 53 * rng.standard_normal((2, 300))),
                       "s": (("chain", "draw"), 0.41 + 0.03 * rng.standard_normal((2, 300)))})
    stats = xr.Dataset({"ibp_n_active": (("chain", "draw"), rng.integers(4, 9, (2, 300)))})
    idata = xr.DataTree.from_dict({"posterior": post, "sample_stats": stats})
    table = summary(idata, var_names=["lj", "s"])
    shown = str(table)
    raw = summary(idata, var_names=["lj", "s"], round_to="none")
    row = shown.splitlines()[[r.split()[0] for r in shown.splitlines()].index("lj")].split()
    assert [float(row[3]), float(row[4])] == pytest.approx(
        raw.loc["lj", ["eti89_lb", "eti89_ub"]].to_numpy(float), abs=0.5)
    assert row[3] != row[4]
    k = shown.splitlines()[[r.split()[0] for r in shown.splitlines()].index("ibp_n_active")]
    assert k.split()[3:5] == ["4", "8"]
    np.testing.assert_array_equal(table.to_numpy(float), raw.to_numpy(float))


def test_summary_shows_a_constants_bounds_as_its_mean():
    """A quantity constant over the draws (a feature used by 394 rows in every draw; a
    variational fit's point value) has its interval bounds shown as its mean is, not rounded
    to two figures (390) nor printed with 18 digits."""
    rng = np.random.default_rng(0)
    post = xr.Dataset({"c": (("chain", "draw"), np.full((2, 300), 394.0)),
                       "v": (("chain", "draw"), np.full((2, 300), 1.7416143878676786))})
    stats = xr.Dataset({"ibp_n_active": (("chain", "draw"), rng.integers(4, 9, (2, 300)))})
    idata = xr.DataTree.from_dict({"posterior": post, "sample_stats": stats})
    lines = str(summary(idata, var_names=["c", "v"])).splitlines()
    rows = {r.split()[0]: r.split() for r in lines[1:]}
    assert rows["c"][1] == rows["c"][3] == rows["c"][4] == "394"
    assert rows["v"][3] == rows["v"][4] == rows["v"][1] and len(rows["v"][3]) < 10


def test_summary_invariant_under_relabelling(idata):
    a = summary(idata, round_to="none")
    b = summary(relabel(idata), round_to="none")
    np.testing.assert_allclose(a.values, b.values)
    assert list(a.index) == list(b.index)


def test_summary_reports_the_log_joint_and_log_likelihood_of_every_step():
    """Steps that keep A (IBPGibbs, PolyaGammaGibbs) name their log joint ibp_model_logp:
    it is summarised by default, as is the log-likelihood ibp_log_lik, and a pair of chains
    that agree on K+ but sit at different log-likelihoods gets a large R-hat there."""
    dt = fake_idata()
    stats = dt["sample_stats"].to_dataset()
    rng = np.random.default_rng(3)
    shift = np.repeat([[0.0], [0.0], [60.0], [60.0]], N_DRAWS, axis=1)  # two chains higher
    stats = stats.rename({"ibp_log_joint": "ibp_model_logp"}).assign(
        ibp_log_lik=(("chain", "draw"), rng.normal(-300.0, 5.0, (N_CHAINS, N_DRAWS)) + shift))
    dt = xr.DataTree.from_dict({"posterior": dt["posterior"].to_dataset(),
                                "sample_stats": stats})
    s = summary(dt, round_to="none")
    assert list(s.index[:3]) == ["ibp_n_active", "ibp_model_logp", "ibp_log_lik"]
    assert s.loc["ibp_model_logp", "r_hat"] < 1.05
    assert s.loc["ibp_log_lik", "r_hat"] > 1.5
    assert "ibp_log_lik" not in summary(dt, stat_names=("ibp_n_active",)).index


def test_chain_summary_gives_each_chains_means():
    """One row per chain: its means of the stats, the scalars, the number of ones and the
    largest sorted feature sizes, and its mean log joint's gap to the highest chain's; the same
    after relabelling (label-invariant)."""
    dt = fake_idata()
    stats = dt["sample_stats"].to_dataset()
    stats = stats.rename({"ibp_log_joint": "ibp_model_logp"})
    stats["ibp_model_logp"] = stats["ibp_model_logp"] + np.array([0.0, -40.0, 0.0, 25.0])[:, None]
    dt = xr.DataTree.from_dict({"posterior": dt["posterior"].to_dataset(),
                                "sample_stats": stats})
    t = chain_summary(dt, ranks=3)
    Z = dt["posterior"]["Z"].values
    lj = stats["ibp_model_logp"].values
    assert list(t.index) == list(range(N_CHAINS)) and t.index.name == "chain"
    assert list(t.columns) == ["ibp_n_active", "ibp_model_logp", "alpha", "sigma_x", "n_ones",
                               "m_sorted[0]", "m_sorted[1]", "m_sorted[2]", "log_joint_gap"]
    np.testing.assert_allclose(t["ibp_model_logp"], lj.mean(axis=1))
    np.testing.assert_allclose(t["log_joint_gap"], lj.mean(axis=1) - lj.mean(axis=1).max())
    assert t["log_joint_gap"].idxmax() == 3 and t["log_joint_gap"][1] < -60
    np.testing.assert_allclose(t["alpha"], dt["posterior"]["alpha"].values.mean(axis=1))
    np.testing.assert_allclose(t["n_ones"], Z.sum(axis=(2, 3)).mean(axis=1))
    sizes = -np.sort(-Z.sum(axis=2), axis=-1)
    for r in range(3):
        np.testing.assert_allclose(t[f"m_sorted[{r}]"], sizes[..., r].mean(axis=1))
    np.testing.assert_allclose(t["ibp_n_active"], (Z.sum(axis=2) > 0).sum(-1).mean(axis=1))
    relabelled = relabel(dt)
    np.testing.assert_allclose(chain_summary(relabelled, ranks=3).values, t.values)
    per_entry = chain_summary(relabelled, var_names=["A"], ranks=1)
    assert f"A[{K_MAX - 1}, {D - 1}]" in per_entry and "alpha" not in per_entry
    # without a log joint in the stats: no gap column; K+ from Z
    bare = chain_summary(fake_idata(with_stats=False))
    assert "log_joint_gap" not in bare and "ibp_n_active" in bare
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="ranks"):
            chain_summary(dt, ranks=bad)


def test_summary_var_names_stats_fallback_and_constant():
    dt = fake_idata(with_stats=False, const_k=True)
    s = summary(dt, var_names=["alpha"], round_to="none")
    assert "sigma_x" not in s.index and "alpha" in s.index
    # K+ derived from Z when the sample stat is absent; constant -> r_hat NaN, no warning
    assert s.loc["ibp_n_active", "mean"] == K_TRUE
    assert np.isnan(s.loc["ibp_n_active", "r_hat"])
    assert "ibp_log_joint" not in s.index
    ms = sorted_feature_sizes(dt)
    assert ms.sizes["m_sorted_dim_0"] == K_TRUE
    assert (ms.diff("m_sorted_dim_0") <= 0).all()
    # default display rounding also works
    assert "alpha" in summary(dt).index


def test_summary_of_a_trace_without_z():
    """A trace that leaves Z out (pm.sample(var_names=...) beside pmi.KeepEvery, as
    docs/large-data.md shows) is summarised from its sample stats and scalars, each row as
    with Z; with Z under another name, or without Z and without the stats, it is an error."""
    dt = fake_idata()
    post = dt["posterior"].to_dataset().drop_vars("Z")
    no_z = xr.DataTree.from_dict({"posterior": post,
                                  "sample_stats": dt["sample_stats"].to_dataset()})
    s, full = summary(no_z, round_to="none"), summary(dt, round_to="none")
    assert {"ibp_n_active", "ibp_log_joint", "alpha", "sigma_x"} <= set(s.index)
    assert not any(i.startswith("m_sorted") for i in s.index)
    np.testing.assert_allclose(s.loc[list(s.index)].values, full.loc[list(s.index)].values)
    cs = chain_summary(no_z)
    assert "n_ones" not in cs and "log_joint_gap" in cs
    np.testing.assert_allclose(cs["ibp_log_joint"], chain_summary(dt)["ibp_log_joint"])
    with pytest.raises(ValueError, match="no variable 'W'"):
        summary(dt, z_name="W")
    with pytest.raises(ValueError, match="no variable 'Z'"):
        summary(xr.DataTree.from_dict({"posterior": post}))


def test_summary_errors():
    dt = fake_idata()
    with pytest.raises(ValueError, match="no 'posterior' group"):
        summary(xr.DataTree.from_dict({"sample_stats": dt["sample_stats"].to_dataset()}))
    with pytest.raises(ValueError, match="no variable 'W'"):
        summary(dt, z_name="W")
    with pytest.raises(ValueError, match="not in the posterior"):
        summary(dt, var_names=["beta"])
    with pytest.raises(ValueError, match="no 'posterior' group"):
        relabel(xr.DataTree.from_dict({"sample_stats": dt["sample_stats"].to_dataset()}))
    with pytest.raises(ValueError, match="no variable 'Q'"):
        relabel(dt, z_name="Q")
    for kwargs in (dict(a_weight=-1.0), dict(a_weight=np.nan), dict(n_refine=-1),
                   dict(n_refine=1.5)):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            relabel(dt, **kwargs)
    # a continuous matrix named as Z (its "feature sizes" would be sums of real numbers)
    for fn in (summary, relabel):
        with pytest.raises(ValueError, match="'A' is not a binary matrix"):
            fn(dt, z_name="A")


# ---------------------------------------------------------------------------------------------
# relabel
# ---------------------------------------------------------------------------------------------
def test_relabel_fixes_label_switching(idata):
    raw = az.rhat(idata["posterior"].to_dataset()[["A"]])["A"].values
    assert np.nanmax(raw) > 1.5
    out = relabel(idata)
    rh = az.rhat(out["posterior"].to_dataset()[["A"]])["A"].values
    assert rh.shape == (K_MAX, D)
    assert np.all(rh < 1.05), rh
    # each kept feature is one true feature; different kept features are different true ones
    res = posterior_features(out, relabel_first=False)
    assert len(res["slots"]) == K_TRUE
    Zr = out["posterior"]["Z"].values
    Zt = true_z()
    matched = []
    for slot, feat in zip(res["slots"], res["features"], strict=True):
        j = int(np.argmin(((A_TRUE[:K_TRUE] - feat) ** 2).sum(1)))
        np.testing.assert_allclose(feat, A_TRUE[j], atol=0.05)
        ham = (Zr[:, :, :, slot] != Zt[:, j]).mean()
        assert ham < 0.03, (slot, j, ham)
        # the same true feature in every chain and draw
        assert (Zr[:, :, :, slot] != Zt[:, j]).mean(axis=2).max() < 0.1
        matched.append(j)
    assert sorted(matched) == list(range(K_TRUE))


def test_relabel_is_a_consistent_permutation(idata):
    out, perm = relabel(idata, return_permutation=True)
    p_in, p_out = idata["posterior"], out["posterior"]
    P = perm.values
    assert P.shape == (N_CHAINS, N_DRAWS, K_MAX)
    assert np.all(np.sort(P, axis=-1) == np.arange(K_MAX))
    Z0, A0, pi0 = p_in["Z"].values, p_in["A"].values, p_in["pi"].values
    np.testing.assert_array_equal(p_out["Z"].values, np.take_along_axis(Z0, P[:, :, None, :], 3))
    np.testing.assert_array_equal(p_out["A"].values, np.take_along_axis(A0, P[..., None], 2))
    np.testing.assert_array_equal(p_out["pi"].values, np.take_along_axis(pi0, P, 2))
    # permutations are not all the identity (chains 1..3 were permuted)
    assert (P != np.arange(K_MAX)).any(axis=-1).mean() > 0.5
    # label-free variables, other groups and the input are untouched
    np.testing.assert_array_equal(p_out["alpha"].values, p_in["alpha"].values)
    xr.testing.assert_identical(out["sample_stats"].to_dataset(),
                                idata["sample_stats"].to_dataset())
    np.testing.assert_array_equal(idata["posterior"]["Z"].values, Z0)
    assert p_out["Z"].dims == p_in["Z"].dims and p_out["Z"].dtype == p_in["Z"].dtype
    # the default reference is the draw with the highest ibp_log_joint
    lj = idata["sample_stats"]["ibp_log_joint"].values
    assert tuple(perm.attrs["reference"]) == np.unravel_index(np.argmax(lj), lj.shape)
    assert list(p_out.attrs["relabel_reference"]) == list(perm.attrs["reference"])


def test_relabel_reference_options(idata):
    # order="use" (default): the reference's features in decreasing order of use, empty last
    out, P = relabel(idata, reference=(2, 7), return_permutation=True)
    counts = out["posterior"]["Z"].values[2, 7].sum(axis=0)
    assert np.all(np.diff(counts) <= 0) and counts[0] > 0, counts
    raw = idata["posterior"]["Z"].values[2, 7].sum(axis=0)
    np.testing.assert_array_equal(P.values[2, 7], np.argsort(-raw, kind="stable"))
    with pytest.raises(ValueError, match="order"):
        relabel(idata, order="size")
    P = relabel_permutations(idata, reference=(2, 7), order="reference").values
    np.testing.assert_array_equal(P[2, 7], np.arange(K_MAX))  # the reference maps to itself
    # the reference's labelling wins: chain 2's slots are (almost) never moved
    assert (P[2] == np.arange(K_MAX)).all(axis=-1).mean() > 0.8
    assert (P[0] != np.arange(K_MAX)).any(axis=-1).all()
    no_stats = fake_idata(with_stats=False)
    assert relabel_permutations(no_stats).attrs["reference"] == (0, N_DRAWS - 1)
    assert relabel_permutations(idata, reference="last").attrs["reference"] == (0, N_DRAWS - 1)
    with pytest.raises(ValueError, match="reference"):
        relabel(idata, reference=(9, 0))
    with pytest.raises(ValueError, match="reference"):
        relabel(idata, reference="best")
    with pytest.raises(ValueError, match="ibp_log_joint"):
        relabel(no_stats, reference="map")


def test_relabel_without_a_and_with_refinement(idata):
    for kw in ({"a_name": None}, {"n_refine": 2}):
        out = relabel(idata, **kw)
        Zr = out["posterior"]["Z"].values
        m = Zr.sum(axis=2)  # (chain, draw, feature)
        big = np.argsort(-m.mean(axis=(0, 1)))[:K_TRUE]
        # every chain puts the same true feature in each of the three big slots
        for k in big:
            per_chain = m[:, :, k].mean(axis=1)
            assert per_chain.max() - per_chain.min() < 2.0, (kw, per_chain)
        rh = az.rhat(out["posterior"].to_dataset()[["A"]])["A"].values
        assert np.all(rh[big] < 1.05), kw


def test_relabel_unnamed_dims(idata):
    post = idata["posterior"].to_dataset()
    post = post.rename({"feature": "Z_dim_1", "obs": "Z_dim_0"})
    A = post["A"].rename({"Z_dim_1": "A_dim_0", "dim": "A_dim_1"})
    post = post.drop_vars("A").assign(A=A)
    dt = xr.DataTree.from_dict({"posterior": post,
                                "sample_stats": idata["sample_stats"].to_dataset()})
    out, perm = relabel(dt, return_permutation=True)
    ref = relabel_permutations(idata)
    np.testing.assert_array_equal(perm.values, ref.values)
    np.testing.assert_array_equal(out["posterior"]["A"].values,
                                  relabel(idata)["posterior"]["A"].values)


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------
def test_plot_features_png(idata, tmp_path):
    # true features given in an order different from the posterior-size order (0, 1, 2)
    fig = plot_features(idata, (2, 2), true_features=A_TRUE[[2, 0, 1]])
    try:
        assert len(_image_axes(fig)) == 2 * K_TRUE
        # true features reordered to match the posterior features column by column
        top = [a.get_images()[0].get_array().ravel() for a in fig.axes[:K_TRUE]]
        bottom = [a.get_images()[0].get_array().ravel() for a in fig.axes[K_TRUE:2 * K_TRUE]]
        for t, b in zip(top, bottom, strict=True):
            np.testing.assert_allclose(t, b, atol=0.05)
        fig.savefig(tmp_path / "features.png", dpi=60)
    finally:
        plt.close(fig)
    img, std, n_col = _png_stats(tmp_path / "features.png")
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 200
    assert std > 0.1 and n_col > 10

    fig = plot_features(idata, (4,), n_features=2)
    try:
        assert len(_image_axes(fig)) == 2
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        assert plot_features(idata, (2, 2), true_features=A_TRUE[:K_TRUE], ax=ax) is fig
        assert len(_image_axes(fig)) == 1
        fig.savefig(tmp_path / "mosaic.png", dpi=40)
    finally:
        plt.close(fig)
    assert _png_stats(tmp_path / "mosaic.png")[1] > 0.1
    with pytest.raises(ValueError, match="pixels"):
        plot_features(idata, (3, 3))


def test_plot_assignments_png(idata, tmp_path):
    fig = plot_assignments(idata, chain=1, draw=3)
    try:
        [ax] = _image_axes(fig)
        shown = ax.get_images()[0].get_array()
        Z = idata["posterior"]["Z"].values[1, 3]
        assert shown.shape == (N, int(Z.any(axis=0).sum()))
        # columns by decreasing size, rows sorted lexicographically (ones first)
        np.testing.assert_array_equal(shown.sum(0), np.sort(Z.sum(0)[Z.any(0)])[::-1])
        rows = [tuple(r) for r in (1 - np.asarray(shown)).astype(int)]
        assert rows == sorted(rows)
        fig.savefig(tmp_path / "z.png", dpi=60)
    finally:
        plt.close(fig)
    img, std, n_col = _png_stats(tmp_path / "z.png")
    assert img.ndim == 3 and std > 0.1 and n_col > 5
    fig = plot_assignments(idata, sort=False)
    try:
        shown = _image_axes(fig)[0].get_images()[0].get_array()
        Z = idata["posterior"]["Z"].values[0, -1]
        cols = np.argsort(-Z.sum(0), kind="stable")[: shown.shape[1]]
        np.testing.assert_array_equal(shown, Z[:, cols])
    finally:
        plt.close(fig)
    for bad in (dict(chain=N_CHAINS), dict(chain=-N_CHAINS - 1), dict(draw=N_DRAWS),
                dict(chain=0.5)):
        with pytest.raises(ValueError, match=f"{next(iter(bad))}=.* is not a position"):
            plot_assignments(idata, **bad)


# ---------------------------------------------------------------------------------------------
# a real (tiny) run
# ---------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_real_run(tmp_path):
    data = pmi.datasets.block_images(30, seed=0)
    n, d = data.X.shape
    with pm.Model(coords={"obs": range(n), "feature": range(8), "dim": range(d)}):
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0, initval=0.5)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X, dims=("obs", "dim"))
        dt = pm.sample(draws=30, tune=20, chains=2, cores=1, random_seed=1, progressbar=False,
                       compute_convergence_checks=False)
    s = summary(dt, round_to="none", check=False)  # 30 draws: the checks' verdicts vary
    for row in ("ibp_n_active", "ibp_log_joint", "alpha", "sigma_a", "sigma_x", "m_sorted[0]"):
        assert row in s.index, row
    k_max = int(dt["sample_stats"]["ibp_n_active"].max())
    assert f"m_sorted[{k_max - 1}]" in s.index and f"m_sorted[{k_max}]" not in s.index
    out = relabel(dt)
    for v in ("Z", "A"):
        assert out["posterior"][v].shape == dt["posterior"][v].shape
    np.testing.assert_array_equal(np.sort(out["posterior"]["Z"].values.sum(2), -1),
                                  np.sort(dt["posterior"]["Z"].values.sum(2), -1))
    # 30 draws are too few for a converged fit: check consistency, not feature quality
    n_post = len(posterior_features(dt)["slots"])
    fig = plot_features(dt, data.image_shape, true_features=data.A)
    try:
        assert len(_image_axes(fig)) == n_post + data.A.shape[0]
        fig.savefig(tmp_path / "real.png", dpi=50)
    finally:
        plt.close(fig)
    assert _png_stats(tmp_path / "real.png")[1] > 0.05
