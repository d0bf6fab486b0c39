"""DataParallelGibbs on a local Dask cluster: statistics, reproducibility, pm.sample, failure."""

import os

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.distributed import DataParallelGibbs
from pymc_ibp.exceptions import ModelPatternError, ShardFailure
from pymc_ibp.step_methods import kernels
from tests._helpers import lg_model
from tests.step_methods.test_state import readme_model

distributed = pytest.importorskip("distributed")

X = pmi.datasets.block_images(90, seed=4).X


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def drive(step, model, iters, seed):
    step.setup_chain(np.random.default_rng(seed), tune=0, draws=iters)
    point = model.initial_point()
    out = []
    for _ in range(iters):
        point, _ = step.step(point)
        out.append(point)
    return out


def test_statistics_equal_a_recomputation_after_every_iteration(client):
    """P = 3 shards on 2 workers: after every outer iteration the summed shard statistics are
    those of the assembled Z, the counts its column sums, and only the shard holding the
    feature token (round-robin) created features."""
    Xs = pmi.datasets.ibp_linear_gaussian(90, 6, alpha=3.0, sigma_x=0.3, sigma_a=1.0,
                                          seed=2).X
    model = lg_model(Xs, 30, alpha=3.0, sigma_x=0.5, sigma_a=1.0)
    with model:
        step = DataParallelGibbs([model["Z"]], client=client, n_shards=3, inner_sweeps=2,
                                 init_z="point")  # from Z = 0: features must be born
    step.setup_chain(np.random.default_rng(3), tune=0, draws=8)
    point = model.initial_point()
    births = 0
    for it in range(8):
        point, stats = step.step(point)
        Z = point["Z"]
        assert Z.dtype == np.int8
        G, RX = kernels.suff_stats(Z, Xs, np.arange(Z.shape[1]))
        np.testing.assert_allclose(sum(s[0] for s in step._stats), G)
        np.testing.assert_allclose(sum(s[1] for s in step._stats), RX, atol=1e-9)
        np.testing.assert_array_equal(sum(s[2] for s in step._stats), Z.sum(axis=0))
        assert stats[0]["ibp_n_active"] == int((Z.sum(axis=0) > 0).sum())
        assert step.sweeps == it + 1
        # the feature token: only its holder (moving round-robin) created features
        last = step.last_iteration
        assert last["token"] == it % 3
        assert all(b == 0 for p, b in enumerate(last["births"]) if p != last["token"])
        births += sum(last["births"])
    assert births > 0


def test_reproducible_for_a_seed_given_p(client):
    model = readme_model(X)
    runs = []
    for _ in range(2):
        with model:
            step = DataParallelGibbs([model["Z"]], client=client, n_shards=2, inner_sweeps=2)
        runs.append([p["Z"] for p in drive(step, model, 5, seed=9)])
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_pm_sample_with_one_line(client):
    """The user's one line: step=[pmi.DataParallelGibbs(...)]; alpha and the scales get their
    usual steps, the result is pm.sample's DataTree with the ibp_ stats, and the chain finds
    the block images' features."""
    model = readme_model(X, k_max=12)  # N = 90: K+ reaches 8 at times
    with model:
        idata = pm.sample(tune=30, draws=20, chains=1, cores=1, random_seed=5,
                          step=[pmi.DataParallelGibbs([model["Z"]], client=client, n_shards=2)],
                          progressbar=False, compute_convergence_checks=False)
    ss = idata["sample_stats"]
    assert {"ibp_n_active", "ibp_log_joint", "ibp_alpha_accept"} <= set(ss.data_vars)
    k = ss["ibp_n_active"].values[0, -10:]
    assert np.all((k >= 4) & (k <= 7))


@pytest.mark.filterwarnings("ignore::pymc.exceptions.ImputationWarning")
def test_refuses_models_it_cannot_shard(client):
    Xn = X.copy()
    Xn[0, 0] = np.nan
    model = readme_model(Xn)
    with model, pytest.raises(ModelPatternError, match="complete data"):
        DataParallelGibbs([model["Z"]], client=client)


def test_a_lost_worker_stops_the_run_naming_the_shard(client):
    """A worker killed between two iterations: its shard's data is gone, and the next step
    raises ShardFailure naming the shard and its rows (no hang, no partial answer)."""
    model = readme_model(X)
    with model:
        step = DataParallelGibbs([model["Z"]], client=client, n_shards=2, inner_sweeps=1,
                                 timeout=60)
    step.setup_chain(np.random.default_rng(1), tune=0, draws=3)
    point, _ = step.step(model.initial_point())  # the start search (A drawn, no shards yet)
    point, _ = step.step(point)  # the shards are on the workers now
    victim = step._x[1][2]
    client.run(os._exit, 1, workers=[victim], on_error="ignore")
    with pytest.raises(ShardFailure, match=r"shard 1 \(rows 45-89"):
        step.step(point)
    client.wait_for_workers(2, timeout=60)


def test_exact_mode_on_the_cluster(client):
    """mode="exact": the shards' statistics stay those of the assembled Z, a rejected
    proposal leaves Z as it was, an accepted one changes only the rows the shared seed chose,
    and the acceptance is recorded in the ibp_exact_accepted stat."""
    model = readme_model(X)
    with model:
        step = DataParallelGibbs([model["Z"]], client=client, n_shards=2, inner_sweeps=1,
                                 mode="exact", exact_rows=3, init_z="point")
    step.setup_chain(np.random.default_rng(2), tune=0, draws=20)
    point = model.initial_point()
    accepted = 0
    for _ in range(20):
        before = point["Z"].copy()
        point, stats = step.step(point)
        Z = point["Z"]
        G, RX = kernels.suff_stats(Z, X, np.arange(Z.shape[1]))
        np.testing.assert_allclose(sum(s[0] for s in step._stats), G)
        acc = stats[0]["ibp_exact_accepted"]
        assert acc == int(step.last_iteration["accepted"])
        if acc:
            changed = np.flatnonzero((Z != before).any(axis=1))
            allowed = np.concatenate([a + r for (a, _, _, _), r in
                                      zip(step._x, step.last_iteration["rows"], strict=True)])
            assert set(changed) <= set(allowed)
        else:
            np.testing.assert_array_equal(Z, before)
        accepted += acc
    assert accepted > 0
