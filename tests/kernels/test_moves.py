"""The moves after a linear-Gaussian sweep (:func:`pymc_ibp.kernels.linear_gaussian_moves`)."""

import numpy as np

import pymc_ibp as pmi
from pymc_ibp import kernels


def _state(seed=0):
    data = pmi.datasets.block_images(80, noise=0.5, seed=seed)
    rng = np.random.default_rng(seed)
    Z = (rng.random((80, 8)) < 0.3).astype(np.int8)
    noise = kernels.noise_blocks(0.25, 1.0, data.X.shape[1])
    return Z, data.X, noise, kernels.block_sq_norms(data.X, noise)


def test_the_moves_are_the_kernels_in_their_order():
    """The composite draws exactly what the four kernels draw when called one after the other
    (split–merge, column split–merge, birth/death, pair swaps), and reports their
    acceptances."""
    moves = kernels.Moves(4, "random", 3, 2, 16, 3)
    Z, X, noise, trXX = _state()
    Z1, m1 = Z.copy(), Z.sum(axis=0).astype(np.int64)
    info = kernels.linear_gaussian_moves(np.random.default_rng(5), Z1, X, m1, noise, 1.5, 1.0,
                                         trXX, moves)
    Z2, m2, rng = Z.copy(), Z.sum(axis=0).astype(np.int64), np.random.default_rng(5)
    sm = kernels.random_split_merge(rng, Z2, X, m2, noise, 1.5, 1.0, 4, trXX)
    sm += kernels.column_split_merge(rng, Z2, X, m2, noise, 1.5, 1.0, 3, trXX)
    bd = kernels.sequential_birth_death(rng, Z2, X, m2, noise, 1.5, 1.0, 2, 16, trXX)
    ps = kernels.pair_pattern_swaps(rng, Z2, X, m2, noise, 1.5, 1.0, 3, trXX)
    np.testing.assert_array_equal(Z1, Z2)
    np.testing.assert_array_equal(m1, Z1.sum(axis=0))
    assert info == kernels.MovesInfo(sm, bd, ps)


def test_moves_switched_off_draw_nothing():
    Z, X, noise, trXX = _state(1)
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    Z1, m = Z.copy(), Z.sum(axis=0).astype(np.int64)
    info = kernels.linear_gaussian_moves(rng, Z1, X, m, noise, 1.0, 1.0, trXX, kernels.Moves())
    assert info == (0, 0, 0, 0) and rng.bit_generator.state == before
    np.testing.assert_array_equal(Z1, Z)
