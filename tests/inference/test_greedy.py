"""Greedy MAP search (iterated conditional modes with the accelerated sweep)."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi


def block_model(X, k_max=8):
    n, d = X.shape
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, d))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
    return model


def test_greedy_map_is_monotone_and_finds_a_good_mode():
    data = pmi.datasets.block_images(100, noise=0.5, seed=2)
    model = block_model(data.X)
    res = pmi.inference.greedy_map(model, max_sweeps=50, random_seed=1)
    assert res.Z.shape == (100, 8) and res.A.shape == (8, 36)
    assert np.all(np.diff(res.log_joint) >= -1e-6 * np.abs(res.log_joint[:-1]))
    truth = np.zeros((100, 8), dtype=np.int64)
    truth[:, :4] = data.Z
    from pymc_ibp import kernels

    lj_truth = kernels.log_joint_of(truth, data.X, 0.25, 1.0, 1.0)[0]
    assert res.log_joint[-1] > lj_truth - 0.05 * abs(lj_truth)
    # the posterior-mean features reconstruct the noise-free images
    mse = np.mean((res.Z @ res.A - data.Z @ data.A) ** 2)
    assert mse < 0.1, mse


def test_greedy_map_start_and_errors():
    data = pmi.datasets.block_images(30, seed=2)
    model = block_model(data.X, k_max=6)
    start = np.zeros((30, 6), dtype=np.int64)
    start[:, :4] = data.Z
    res = pmi.inference.greedy_map(model, start=start, max_sweeps=5, random_seed=0)
    assert res.sweeps >= 1
    with pytest.raises(ValueError, match="shape"):
        pmi.inference.greedy_map(model, start=start[:, :3])
    with pm.Model():
        pm.Normal("y", 0, 1)
        with pytest.raises(pmi.ModelPatternError, match="exactly one"):
            pmi.inference.greedy_map()
