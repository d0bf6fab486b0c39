"""Bookkeeping of the active feature slots (numba).

``Z`` is the model's ``N x K_max`` matrix (all slots); ``act[:k]`` lists the active slots in a
compact order and the per-feature arrays (``G``, ``RX``, ``Σ``, ``μ``) are indexed in that order
(``Σ`` has one ``K x K`` matrix per column block, shape ``B x K_max x K_max``).
"""

from __future__ import annotations

import numba
import numpy as np

from pymc_ibp._numba_utils import partial_shuffle
from pymc_ibp.kernels.gaussian import suff_stats


@numba.njit(cache=True)
def active_slots(m):
    """``(act, k)``: the slots with ``m > 0`` in ``act[:k]`` (capacity ``len(m)``)."""
    act = np.empty(m.shape[0], dtype=np.int64)
    k = 0
    for c in range(m.shape[0]):
        if m[c] > 0:
            act[k] = c
            k += 1
    return act, k

@numba.njit(cache=True)
def sweep_state(Z, X, m, nb):
    """Capacity-sized sweep state: active slots, ``G = ZᵀZ``, ``RX = ZᵀX`` (compact order)
    and room for the posterior ``(Σ, μ)`` of ``nb`` column blocks."""
    k_max = Z.shape[1]
    d = X.shape[1]
    act, k = active_slots(m)
    G = np.zeros((k_max, k_max))
    RX = np.zeros((k_max, d))
    G0, RX0 = suff_stats(Z, X, act[:k])
    G[:k, :k] = G0
    RX[:k] = RX0
    return act, k, G, RX, np.zeros((nb, k_max, k_max)), np.zeros((k_max, d))

@numba.njit(cache=True)
def swap_remove(idx, k, act, Sig, mu, G, RX):
    """Remove compact index ``idx`` (of ``k`` active) by swapping in the last one."""
    last = k - 1
    if idx != last:
        act[idx] = act[last]
        for j in range(k):
            G[idx, j] = G[last, j]
        for j in range(k):
            G[j, idx] = G[j, last]
        G[idx, idx] = G[last, last]
        for b in range(Sig.shape[0]):
            for j in range(k):
                Sig[b, idx, j] = Sig[b, last, j]
            for j in range(k):
                Sig[b, j, idx] = Sig[b, j, last]
            Sig[b, idx, idx] = Sig[b, last, last]
        for t in range(mu.shape[1]):
            mu[idx, t] = mu[last, t]
            RX[idx, t] = RX[last, t]
    return k - 1

@numba.njit(cache=True)
def append_empty(k, act, slot, Sig, mu, G, RX, sa2):
    """Append ``slot`` as compact index ``k`` with no data: prior posterior ``N(0, σa_b²)``
    (``sa2`` per block)."""
    act[k] = slot
    for b in range(k + 1):
        G[k, b] = 0.0
        G[b, k] = 0.0
    for blk in range(Sig.shape[0]):
        for b in range(k + 1):
            Sig[blk, k, b] = 0.0
            Sig[blk, b, k] = 0.0
        Sig[blk, k, k] = sa2[blk]
    for t in range(mu.shape[1]):
        mu[k, t] = 0.0
        RX[k, t] = 0.0
    return k + 1

@numba.njit(cache=True)
def random_free_slots(rng, act, k, k_max, count, free):
    """Put ``count`` uniformly random distinct slots not in ``act[:k]`` into ``free[:count]``."""
    used = np.zeros(k_max, dtype=np.bool_)
    for b in range(k):
        used[act[b]] = True
    nf = 0
    for c in range(k_max):
        if not used[c]:
            free[nf] = c
            nf += 1
    partial_shuffle(rng, free[:nf], count)


@numba.njit(cache=True)
def write_row(Z, i, z, act, k, m):
    """Write compact row pattern ``z[:k]`` (over slots ``act[:k]``) into row ``i`` of ``Z`` and
    add it to the column sums ``m`` (the row was taken out of ``m`` before)."""
    for c in range(Z.shape[1]):
        Z[i, c] = 0
    for a in range(k):
        if z[a] != 0.0:
            Z[i, act[a]] = 1
            m[act[a]] += 1


@numba.njit(cache=True)
def reset_to_prior(Sig, mu, a, k, sa2):
    """Set feature ``a``'s posterior (among the first ``k``) to its prior ``N(0, σa_b²)``
    (``sa2`` per block): the posterior of a feature that no remaining row owns."""
    for blk in range(Sig.shape[0]):
        for b in range(k):
            Sig[blk, a, b] = 0.0
            Sig[blk, b, a] = 0.0
        Sig[blk, a, a] = sa2[blk]
    for t in range(mu.shape[1]):
        mu[a, t] = 0.0
