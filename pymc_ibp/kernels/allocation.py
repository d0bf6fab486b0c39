"""Sequential allocation (Dahl 2005; Jain & Neal 2004): the proposal that the split–merge and
birth–death moves of :mod:`pymc_ibp.kernels.split_merge` share, and the bookkeeping of the
slot-indexed statistics they keep across moves (numba).

The rows of a column are placed one at a time on one or two compact columns, each by its
collapsed predictive given the rows already placed (rank-one updates of the feature
posterior, :func:`pymc_ibp.kernels.rows.row_update`); the product of the choice
probabilities is the proposal's probability, and a replay scores the reverse move.

References
----------
.. [1] Jain, S. and Neal, R. M. (2004). A split-merge Markov chain Monte Carlo procedure for
   the Dirichlet process mixture model. *Journal of Computational and Graphical Statistics*
   13, 158–182.
.. [2] Dahl, D. B. (2005). Sequentially-allocated merge-split sampler for conjugate and
   nonconjugate Dirichlet process mixture models. Technical report, Texas A&M University.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from pymc_ibp._numba_utils import categorical_logp
from pymc_ibp.kernels.gaussian import (
    collapsed_loglik,
    posterior_from_stats,
    stats_with_row,
    suff_stats,
)
from pymc_ibp.kernels.rows import residual, row_update, sig_z
from pymc_ibp.kernels.slots import active_slots


class Allocation(NamedTuple):
    """What a sequential allocation places: the rows ``rows[:nr]`` onto compact columns ``ia``
    and ``ib`` (``-1``: a birth, one column) of the layout ``lay[:kk]`` (compact column →
    slot), with anchors ``i`` and ``j`` (``-1``: none).  Build it with :func:`allocation`."""

    lay: np.ndarray
    kk: np.int64
    ia: np.int64
    ib: np.int64
    i: np.int64
    j: np.int64
    rows: np.ndarray
    nr: np.int64


@numba.njit(cache=True)
def allocation(lay, kk, ia, ib, i, j, rows, nr):
    # every integer as np.int64: a literal would type (and compile) a specialisation
    return Allocation(lay, np.int64(kk), np.int64(ia), np.int64(ib), np.int64(i),
                      np.int64(j), rows, np.int64(nr))


@numba.njit(cache=True)
def random_active(rng, Z, i, k_max):
    """A uniformly chosen active slot of row ``i`` (``-1`` if none)."""
    cnt = 0
    for c in range(k_max):
        if Z[i, c] != 0:
            cnt += 1
    if cnt == 0:
        return -1
    pick = int(rng.random() * cnt)
    for c in range(k_max):
        if Z[i, c] != 0:
            if pick == 0:
                return c
            pick -= 1
    return -1


@numba.njit(cache=True)
def compact_row(Z, r, lay, kk, z):
    for a in range(kk):
        z[a] = 1.0 if Z[r, lay[a]] != 0 else 0.0


@numba.njit(cache=True)
def slot_row(Gs, RXs, Z, r, x, sign):
    """Add (``sign=+1``) or remove (``-1``) row ``r`` of ``Z`` from slot-indexed ``ZᵀZ``,
    ``ZᵀX``."""
    k_max = Z.shape[1]
    for a in range(k_max):
        if Z[r, a] != 0:
            for t in range(x.shape[0]):
                RXs[a, t] += sign * x[t]
            for b in range(k_max):
                if Z[r, b] != 0:
                    Gs[a, b] += sign


@numba.njit(cache=True)
def compact_stats(Gs, RXs, lay, kk):
    G = np.empty((kk, kk))
    RX = np.empty((kk, RXs.shape[1]))
    for a in range(kk):
        for b in range(kk):
            G[a, b] = Gs[lay[a], lay[b]]
        RX[a] = RXs[lay[a]]
    return G, RX


@numba.njit(cache=True)
def slot_stats(Z, X, m, noise, trXX):
    """Slot-indexed ``ZᵀZ``, ``ZᵀX`` (kept current across a kernel's moves) and the current
    ``log p(X | Z)``, from the active columns (those with ``m > 0``) only, so that the cost is
    ``O(N K+ + K_max²)`` rather than ``O(N K_max)``: empty slots are cheap."""
    act, k = active_slots(m)
    G, RX = suff_stats(Z, X, act[:k])
    k_max = Z.shape[1]
    Gs = np.zeros((k_max, k_max))
    RXs = np.zeros((k_max, X.shape[1]))
    for a in range(k):
        for b in range(k):
            Gs[act[a], act[b]] = G[a, b]
        RXs[act[a]] = RX[a]
    return Gs, RXs, collapsed_loglik(G, RX, trXX, X.shape[0], noise)


@numba.njit(cache=True)
def scratch(n, k_max):
    """Scratch buffers of the sequential moves: row order, allocations, free slots, layout."""
    return (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty(k_max, dtype=np.int64), np.empty(k_max, dtype=np.int64))


@numba.njit(cache=True)
def stats_without(G, RX, kk, drop):
    """Compact statistics of the first ``kk`` features without feature ``drop``."""
    keep = np.empty(kk - 1, dtype=np.int64)
    c = 0
    for a in range(kk):
        if a != drop:
            keep[c] = a
            c += 1
    return compact_stats(G, RX, keep, kk - 1)


@numba.njit(cache=True)
def _option_logpdf(e, v, Sig, mu, q0, noise, a, b):
    """Collapsed predictive ``Σ_blk log N(x_blk; (z + e_a + e_b) μ_blk, s_blk I)`` (up to
    ``-D/2 log 2π``) of a row whose base pattern ``z`` has ``v[blk] = Σ_blk z``,
    ``q0[blk] = zᵀΣ_blk z`` and residual ``e = x - zμ``, with columns ``a`` and ``b`` switched
    on (``-1``: none); ``O(B + D)``."""
    total = 0.0
    for blk in range(noise.sx2.shape[0]):
        S = Sig[blk]
        vb = v[blk]
        s = noise.sx2[blk] + q0[blk]
        if a >= 0:
            s += 2.0 * vb[a] + S[a, a]
        if b >= 0:
            s += 2.0 * vb[b] + S[b, b]
            if a >= 0:
                s += 2.0 * S[a, b]
        rr = 0.0
        c0, c1 = noise.cols[blk], noise.cols[blk + 1]
        for t in range(c0, c1):
            u = e[t]
            if a >= 0:
                u -= mu[a, t]
            if b >= 0:
                u -= mu[b, t]
            rr += u * u
        total -= 0.5 * (c1 - c0) * math.log(s) + 0.5 * rr / s
    return total


@numba.njit(cache=True)
def sequential_allocation(rng, Z, X, G, RX, plan, noise, replay, alloc):
    """Allocate the rows of the :class:`Allocation` ``plan`` (``rows[:nr]``) to compact
    columns ``ia`` / ``ib`` of layout ``lay``, one at a time, each by its collapsed predictive
    given the rows already in.

    ``G``, ``RX`` (modified in place) are the current state's statistics in layout ``lay``;
    the anchors and ``rows[:nr]`` are taken out first.

    * Split (``ib >= 0``): anchor ``i`` goes back with ``ia`` only and ``j`` with ``ib`` only,
      then each row with option ``0 = (1,0)``, ``1 = (0,1)`` or ``2 = (1,1)``.
    * Birth (``ib = -1``, ``j`` unused): anchor ``i`` goes back with ``ia``, then each row with
      option ``0`` (not in ``ia``) or ``1`` (in ``ia``).

    With ``replay`` the options are read from ``Z`` instead of drawn.  The feature posterior
    takes one rank-one step per row (:func:`row_update`).  Returns ``log q``, the log
    probability of the allocation; ``G``, ``RX`` end as the statistics of the allocated state
    and ``alloc[:nr]`` holds the options.
    """
    lay, kk, ia, ib, i, j, rows, nr = plan
    d = X.shape[1]
    split = ib >= 0
    n_anchor = 2 if split else 1
    n_opt = 3 if split else 2
    # which of the two columns each option switches on, on top of the row's other columns
    has_a = np.array([1, 0, 1]) if split else np.array([0, 1, 0])
    has_b = np.array([0, 1, 1]) if split else np.array([0, 0, 0])
    z = np.empty(kk)
    for q in range(nr + n_anchor):
        r = rows[q] if q < nr else (i if q == nr else j)
        compact_row(Z, r, lay, kk, z)
        stats_with_row(G, RX, z, X[r], kk, -1.0)
    for anchor in range(n_anchor):
        r = i if anchor == 0 else j
        compact_row(Z, r, lay, kk, z)
        z[ia] = 1.0 if anchor == 0 else 0.0
        if split:
            z[ib] = 0.0 if anchor == 0 else 1.0
        stats_with_row(G, RX, z, X[r], kk, 1.0)
    Sig, mu = posterior_from_stats(G, RX, noise)
    nb = noise.sx2.shape[0]
    v = np.empty((nb, kk))
    q0 = np.empty(nb)
    e = np.empty(d)
    lp = np.empty(3)
    logq = 0.0
    for q in range(nr):
        r = rows[q]
        x = X[r]
        compact_row(Z, r, lay, kk, z)
        z[ia] = 0.0
        if split:
            z[ib] = 0.0
        # the options differ from the base row z (none of the columns) by e_ia, e_ib or both:
        # predictive variance s = σx² + zᵀΣz and residual x - zμ updated in O(K + D)
        for blk in range(nb):
            q0[blk] = sig_z(Sig[blk], z, kk, v[blk])  # v = Σz
        residual(x, z, mu, kk, e)  # e = x - zμ
        mx = -np.inf
        for o in range(n_opt):
            lp[o] = _option_logpdf(e, v, Sig, mu, q0, noise, ia if has_a[o] else -1,
                                   ib if has_b[o] else -1)
            mx = max(mx, lp[o])
        tot = 0.0
        for o in range(n_opt):
            tot += math.exp(lp[o] - mx)
        lse = mx + math.log(tot)
        if replay:
            in_a = Z[r, lay[ia]] != 0
            if not split:
                o = 1 if in_a else 0
            elif Z[r, lay[ib]] == 0:
                o = 0
            else:
                o = 2 if in_a else 1
        else:
            o = categorical_logp(rng, lp, n_opt)
        alloc[q] = o
        logq += lp[o] - lse
        z[ia] = float(has_a[o])
        if split:
            z[ib] = float(has_b[o])
        row_update(Sig, mu, z, x, kk, noise, 1.0, v, e)
        stats_with_row(G, RX, z, x, kk, 1.0)
    return logq


@numba.njit(cache=True)
def shuffle_prefix(rng, arr, nr):
    for q in range(nr - 1, 0, -1):
        p = int(rng.random() * (q + 1))
        arr[q], arr[p] = arr[p], arr[q]
