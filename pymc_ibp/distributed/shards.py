"""What a worker runs on its shard of rows: numba kernels only (no PyTensor, so nothing is
compiled per worker but the numba functions, which load from the on-disk cache).

A shard is a block of consecutive rows ``X_p`` (``N_p x D``) and its part ``Z_p`` of the binary
matrix.  Its statistics ``G_p = Z_pᵀ Z_p``, ``RX_p = Z_pᵀ X_p`` and counts ``m_p`` are indexed
by feature *slot* (``K_max x K_max``, ``K_max x D``, ``K_max``), so the global ones are their
sums (Doshi-Velez 2009, §5.1, eq. 5.1: the linear-Gaussian likelihood's sufficient statistics
add over processors).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_ibp.step_methods import kernels

__all__ = ["ShardResult", "shard_stats", "shard_sweeps"]


class ShardResult(NamedTuple):
    """A shard's state after its inner sweeps: its ``Z_p`` and slot-indexed statistics, and
    what the sweeps did (summed over them)."""

    Z: np.ndarray
    G: np.ndarray
    RX: np.ndarray
    m: np.ndarray
    flips: int
    births: int
    deaths: int
    kmax_hit: int


def shard_stats(X, Z) -> ShardResult:
    """The slot-indexed statistics of a shard (no sweep)."""
    Z = np.ascontiguousarray(Z, dtype=np.int8)
    slots = np.arange(Z.shape[1])
    G, RX = kernels.suff_stats(Z, X, slots)
    return ShardResult(Z, G, RX, Z.sum(axis=0).astype(np.int64), 0, 0, 0, 0)


def shard_sweeps(X, source, m_global, G_ext, RX_ext, noise, alpha, beta, n_total, sweeps, seed,
                 births):
    """``sweeps`` accelerated sweeps of the shard's rows (:func:`kernels.shard_sweep`) given the
    rest of the data through its statistics ``G_ext, RX_ext`` and counts (``m_global`` minus
    the shard's own), which stay fixed meanwhile; only the token holder (``births``) creates
    features.  ``source`` is the shard's previous :class:`ShardResult` (or its ``Z_p``)."""
    Z = np.array(source.Z if isinstance(source, ShardResult) else source, dtype=np.int8,
                 copy=True)
    rng = np.random.default_rng(seed)
    m = np.asarray(m_global, dtype=np.int64).copy()
    refresh = max(5, X.shape[0] // 10)
    flips = born = died = hit = 0
    for _ in range(int(sweeps)):
        s = kernels.shard_sweep(rng, Z, X, m, noise, float(alpha), float(beta), refresh,
                                G_ext, RX_ext, int(n_total), bool(births))
        flips += s.flips
        born += s.births
        died += s.deaths
        hit = max(hit, s.kmax_hit)
    out = shard_stats(X, Z)
    return out._replace(flips=flips, births=born, deaths=died, kmax_hit=hit)
