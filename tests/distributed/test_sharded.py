"""Sharded data (pmi.ShardedData): the driver never holds X; the shards load their rows on
their workers, and the chain equals the one on the same data held by the driver."""

import logging
import os

import numpy as np
import pymc as pm
import pytest
from pymc.step_methods.compound import CompoundStep

import pymc_ibp as pmi
from pymc_ibp.datasets.sharded import ShardedData, ShardedDataNotGathered
from pymc_ibp.distributed import DataParallelGibbs
from pymc_ibp.distributed.shards import apply_changes, shard_report, shard_stats, z_changes
from pymc_ibp.exceptions import DataError, ModelPatternError
from tests._helpers import DIST_WAIT, noise_of

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
# A worker the scheduler drops under load (two xdist workers on two cores; seen once in about
# ten CI runs) is recovered by the step with the same seeds, as the recovery tests below show:
# the other tests accept such a run and still compare its draws.
pytestmark = pytest.mark.filterwarnings("ignore::pymc_ibp.ShardRecoveryWarning")

X = pmi.datasets.block_images(90, seed=4).X
GLYPHS = pmi.datasets.block_images(90, seed=4).Z
BOUNDS = [0, 30, 60, 90]  # DataParallelGibbs's own split of 90 rows into 3 shards
# PyMC cannot put sharded data in its observed_data group: it says so and leaves it out
NO_OBSERVED_GROUP = pytest.mark.filterwarnings(
    "ignore:Could not extract data from symbolic observation:UserWarning")


def npy_shards(tmp_path, data, bounds=BOUNDS):
    paths = []
    for p in range(len(bounds) - 1):
        path = tmp_path / f"shard{p}.npy"
        np.save(path, data[bounds[p]:bounds[p + 1]])
        paths.append(path)
    return paths


def model_of(observed, n=90, d=36, k_max=8):
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(k_max, d))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=observed)
    return model


def test_sources_describe_and_load_their_shards(tmp_path):
    paths = npy_shards(tmp_path, X)
    files = ShardedData.from_npy(paths)
    assert files.shape == (90, 36) and files.n_shards == 3 and files.rows == [30, 30, 30]
    assert str(paths[1]) in files.describe(1) and "rows 30-59" in files.describe(1)
    chunks = ShardedData.from_dask(da.from_array(X, chunks=(45, 12)), n_shards=3)
    assert chunks.rows == [30, 30, 30]
    for data in (files, chunks):
        for p in range(3):
            np.testing.assert_array_equal(data.load(p), X[BOUNDS[p]:BOUNDS[p + 1]])
        rows = np.array([0, 29, 30, 77, 89])
        np.testing.assert_array_equal(data.take(rows), X[rows])
        s = data.summary()
        assert s.n == 90
        np.testing.assert_allclose(s.colsum, X.sum(axis=0))
        np.testing.assert_allclose(s.colsq, (X**2).sum(axis=0))
        np.testing.assert_allclose(s.spread, np.sqrt(np.mean((X - X.mean(axis=0)) ** 2)))
        # the symbolic observed data: assembled on the driver only when allowed
        with pytest.raises(ShardedDataNotGathered, match="allow_gather=True"):
            data.tensor().eval()
    gathered = ShardedData.from_npy(paths, allow_gather=True)
    np.testing.assert_array_equal(gathered.tensor().eval(), X)


def test_the_models_logp_with_sharded_data_refuses_without_rewrite_failures(tmp_path, caplog):
    """Compiling the logp of a model whose data stay on their shards logs nothing (PyTensor
    does not try to constant-fold the data, which logged one traceback per rewrite pass); the
    compiled function refuses with ShardedDataNotGathered."""
    model = model_of(ShardedData.from_npy(npy_shards(tmp_path, X)).tensor())
    with caplog.at_level(logging.WARNING):
        logp = model.compile_logp()
    assert not [r for r in caplog.records if "Rewrite failure" in r.getMessage()]
    with pytest.raises(ShardedDataNotGathered, match="allow_gather=True"):
        logp(model.initial_point())


def test_bad_shards_are_named(tmp_path):
    np.save(tmp_path / "flat.npy", np.zeros(5))
    with pytest.raises(DataError, match="flat.npy.*2-D"):
        ShardedData.from_npy([tmp_path / "flat.npy"])
    np.save(tmp_path / "a.npy", np.zeros((4, 3)))
    np.save(tmp_path / "b.npy", np.zeros((4, 2)))
    with pytest.raises(DataError, match="b.npy.*2 columns"):
        ShardedData.from_npy([tmp_path / "a.npy", tmp_path / "b.npy"])
    with pytest.raises(DataError, match="cannot read"):
        ShardedData.from_npy([tmp_path / "missing.npy"])
    bad = X[30:60].copy()
    bad[3, 5] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    np.save(tmp_path / "c.npy", np.zeros((4, 36)))
    data = ShardedData.from_npy([tmp_path / "c.npy", tmp_path / "nan.npy"])
    with pytest.raises(DataError, match=r"shard 1 \(rows 4-33, .*nan.npy\) contains NaN at "
                                        r"\(row 3 of the shard, column 5\)"):
        data.load(1)
    arr = da.from_array(X, chunks=(30, 36))
    with pytest.raises(DataError, match="known chunk sizes"):
        ShardedData.from_dask(arr[arr[:, 0] > 0])
    # the model's Z must fit the data, and only DataParallelGibbs samples such a model
    with pytest.raises(ModelPatternError, match="Shape mismatch"):
        with model_of(ShardedData.from_npy(npy_shards(tmp_path, X)).tensor(), n=80) as model:
            DataParallelGibbs([model["Z"]])
    with model_of(ShardedData.from_npy(npy_shards(tmp_path, X)).tensor()) as model:
        with pytest.raises(ModelPatternError, match="DataParallelGibbs"):
            pmi.AcceleratedGibbs([model["Z"]])
        with pytest.raises(ValueError, match="come in 3 shards"):
            DataParallelGibbs([model["Z"]], n_shards=2)


def test_a_shard_with_nan_stops_the_run_naming_its_file(tmp_path, client):
    bad = X.copy()
    bad[40, 2] = np.inf
    with model_of(ShardedData.from_npy(npy_shards(tmp_path, bad)).tensor()) as model:
        step = DataParallelGibbs([model["Z"]], client=client, timeout=DIST_WAIT)
    step.setup_chain(np.random.default_rng(0), tune=0, draws=1)
    with pytest.raises(pmi.ShardFailure, match=r"shard1.npy.*contains inf at \(row 10"):
        step.step(model.initial_point())


def test_reports_carry_only_the_changes():
    """A shard reports the entries of Z_p that changed; patching the driver's copy of Z with
    them gives the shard's new Z_p."""
    rng = np.random.default_rng(0)
    Xp = rng.normal(size=(20, 3))
    old = (rng.random((20, 6)) < 0.3).astype(np.int8)
    new = old.copy()
    new[rng.random(new.shape) < 0.1] ^= 1
    res_old, res_new = shard_stats(Xp, old), shard_stats(Xp, new)
    rep = shard_report(res_new, Xp, res_old, with_stats=True)
    assert rep.changes.size == int((old != new).sum())
    np.testing.assert_array_equal(rep.stats.G, res_new.G)
    Z = np.zeros((50, 6), dtype=np.int8)
    Z[10:30] = old
    apply_changes(Z, 10, z_changes(res_new, res_old))
    np.testing.assert_array_equal(Z[10:30], new)
    assert not Z[:10].any() and not Z[30:].any()


def test_statistics_are_published_for_the_current_z_only():
    data = ShardedData.from_arrays([X[:45], X[45:]])
    Z = np.zeros((90, 4), dtype=np.int8)
    G, RX = data.statistics_at(Z)  # no feature in use: nothing to publish
    assert not G.any() and not RX.any()
    Z[:5, 0] = 1
    assert data.statistics_at(Z) is None  # nothing published yet: the scale step waits
    stats = shard_stats(X, Z)
    data.publish(Z.copy(), (stats.G, stats.RX, stats.m))
    np.testing.assert_array_equal(data.statistics_at(Z)[1], stats.RX)
    Z[7, 1] = 1
    with pytest.raises(ModelPatternError, match="not those of the current Z"):
        data.statistics_at(Z)


def compound(model, client, **kwargs):
    with model:
        return CompoundStep([
            DataParallelGibbs([model["Z"]], client=client, inner_sweeps=2, timeout=DIST_WAIT,
                              **kwargs),
            pmi.IBPAlphaGibbs([model["alpha"]]),
            pmi.IBPScaleSlice([model["sigma_a"], model["sigma_x"]]),
        ])


def run(step, model, iters, seed=7):
    step.setup_chain(np.random.default_rng(seed), tune=0, draws=iters)
    point, out = model.initial_point(), []
    for _ in range(iters):
        point, _ = step.step(point)
        out.append({k: np.array(v, copy=True) for k, v in point.items()})
    return out


# K_max = 8 may bind: these 90 rows' posterior has small features beside the 4 glyphs (K+ 4-7
# at 95 %, median 5, measured with K_max = 16)
# 80-100 s: the slow suite; the default suite has the sharded run through pm.sample, the lost
# worker that reloads its shard and the subset start on the shards
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_sharded_run_equals_the_run_on_the_drivers_data(tmp_path, client):
    """The same 3 shards held by the driver (X scattered) or loaded by the workers (files,
    Dask chunks): the same Z at every iteration, and the same A, alpha and scales up to
    round-off (the scale step forms ‖X - ZA‖² from the published statistics of Z instead of
    the residuals).  The start search reads its rows from the shards."""
    held = model_of(X)
    ref = run(compound(held, client, n_shards=3), held, 8)
    for data in (ShardedData.from_npy(npy_shards(tmp_path, X)),
                 ShardedData.from_dask(da.from_array(X, chunks=(30, 36)))):
        sharded = model_of(data.tensor())
        got = run(compound(sharded, client), sharded, 8)
        for a, b in zip(ref, got, strict=True):
            np.testing.assert_array_equal(a["Z"], b["Z"])
            for name in ("A", "alpha_log__", "sigma_x_log__", "sigma_a_log__"):
                np.testing.assert_allclose(a[name], b[name], rtol=1e-7, atol=1e-9)
        # every glyph is a feature of the last draw, up to a few rows
        same = (got[-1]["Z"][:, None, :] == GLYPHS[:, :, None]).sum(axis=0)
        assert np.all(same.max(axis=1) >= 81), same.max(axis=1)


@NO_OBSERVED_GROUP
def test_pm_sample_assigns_the_step_and_the_driver_never_loads_x(tmp_path, client, monkeypatch):
    """pm.sample() alone picks DataParallelGibbs for a model with sharded data, and nothing
    on the driver reads a shard (every read there raises); the chain finds the glyphs."""
    data = ShardedData.from_npy(npy_shards(tmp_path, X))

    def refuse(*_args, **_kw):
        raise AssertionError("the driver read the sharded data")

    monkeypatch.setattr(ShardedData, "load", refuse)
    monkeypatch.setattr(ShardedData, "gather", refuse)
    with model_of(data.tensor(), k_max=12):
        idata = pm.sample(tune=30, draws=20, chains=1, cores=1, random_seed=5,
                          progressbar=False, compute_convergence_checks=False,
                          data_parallel_gibbs={"client": client})
    ss = idata["sample_stats"]
    assert "ibp_shard_token" in ss.data_vars
    assert np.all(ss["ibp_n_active"].values[0, -10:] >= 4)
    # every glyph is a feature of the last draw, up to a few rows (small features of a few
    # rows come and go beside them)
    Z = idata["posterior"]["Z"].values[0, -1]
    same = (Z[:, None, :] == GLYPHS[:, :, None]).sum(axis=0)
    assert np.all(same.max(axis=1) >= 81), same.max(axis=1)
    assert 0.4 < float(idata["posterior"]["sigma_x"].values[0, -10:].mean()) < 0.6


def test_a_lost_worker_reloads_its_shard(tmp_path, own_client):
    """A worker killed between iterations: its shard is loaded again from its file by
    another worker, and the chain equals an uninterrupted run's."""
    data = ShardedData.from_npy(npy_shards(tmp_path, X))
    model = model_of(data.tensor())
    client = own_client

    def chain(kill_at):
        with model:
            step = DataParallelGibbs([model["Z"]], client=client, inner_sweeps=2, timeout=DIST_WAIT)
        step.setup_chain(np.random.default_rng(4), tune=0, draws=5)
        point, out = model.initial_point(), []
        for it in range(5):
            if it == kill_at:
                client.run(os._exit, 1, workers=[step.cluster.shards[1][2]], on_error="ignore")
            point, _ = step.step(point)
            out.append((point["Z"].copy(), point["A"].copy()))
        return out

    clean = chain(None)
    with pytest.warns(pmi.ShardRecoveryWarning, match=r"shard 1 \(rows 30-59"):
        recovered = chain(3)
    for (z1, a1), (z2, a2) in zip(clean, recovered, strict=True):
        np.testing.assert_array_equal(z1, z2)
        np.testing.assert_array_equal(a1, a2)


def test_a_subset_start_assigns_the_other_rows_on_their_shards(tmp_path, client):
    """With sharded data and N > init_subsample the start search runs on rows fetched from
    the shards; then every shard sweeps its rows once without births, so the chain's first
    steps see a Z covering every row (not the searched rows only), and the shards' global
    statistics are those of that Z."""
    data = ShardedData.from_npy(npy_shards(tmp_path, X))
    model = model_of(data.tensor())
    with model:
        step = DataParallelGibbs([model["Z"]], client=client, inner_sweeps=2, timeout=DIST_WAIT,
                                 init_subsample=30, init_sweeps=15, init_restarts=2)
    step.setup_chain(np.random.default_rng(3), tune=20, draws=5)
    Z, *_ = step.search.start(step.rng, np.zeros((90, 8), dtype=np.int64), step.update.data.X,
                              noise_of(step, 0.25), n_tune=step.update.n_tune)
    assert (Z.sum(axis=0) > 0).sum() >= 3  # the search found the large features
    assert (Z.sum(axis=1) > 0).sum() > 60  # the other rows were given features
    assert step.cluster.z_last is not None and np.array_equal(step.cluster.z_last, Z)
    np.testing.assert_array_equal(step.cluster.total.m, Z.sum(axis=0))
    stats = shard_stats(X, Z)
    np.testing.assert_allclose(step.cluster.total.RX, stats.RX, atol=1e-9)
    assert step.search.restarts == 1 and step.search.segment == 0
