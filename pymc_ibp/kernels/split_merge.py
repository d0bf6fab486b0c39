"""Split–merge Metropolis–Hastings moves for the collapsed linear-Gaussian IBP.

Two proposal families, both on labelled columns of the ``N x K_max`` slot matrix and both exact
Metropolis–Hastings moves for the :class:`pymc_ibp.IBP` pmf times the collapsed likelihood
``p(X | Z)`` (``A`` integrated out; Griffiths & Ghahramani [5]_, §5; Doshi-Velez &
Ghahramani [6]_, eq. 5 with the trace, see :func:`kernels.collapsed_loglik`):

* :func:`random_split_merge` — the split–merge move of Meeds et al. [1]_ (as described by
  Doshi-Velez [7]_, §3.3): a split gives each owner of a column one of ``(1,0), (0,1), (1,1)``
  uniformly, a merge takes the OR of two columns; the acceptance ratio for labelled slots
  follows from the argument below (:func:`_log_split_ratio`).  Its acceptance falls like
  ``3^{-m}`` in the column size ``m``, so it only moves small features.
* :func:`sequential_split_merge` — a sequentially-allocated (SAMS-style, Dahl [3]_, after the
  restricted split–merge of Jain & Neal [2]_; adapted to feature allocations as in Meeds et al.
  [1]_) proposal with two *anchor* rows.  The owners of the split column are allocated one at
  a time in random order, each choosing among ``(1,0), (0,1), (1,1)`` with probability
  proportional to its collapsed predictive density given the rows already allocated (and all
  rows outside the column).  The proposal probability is the product of those choice
  probabilities; a merge scores the reverse allocation by replaying it.  It splits and merges
  features of any size, which the random proposal cannot.
* :func:`column_split_merge` — the same sequential allocation with a selection uniform over
  features instead of rows, so that small features are proposed as often as large ones.

Selection of the sequential move.  An ordered pair of distinct rows ``(i, j)`` is drawn
uniformly, then a column ``c_i`` uniformly among row ``i``'s active columns and ``c_j`` among row
``j``'s.  If ``c_i = c_j = s``: *split* ``s``; ``i`` keeps slot ``s`` alone, ``j`` takes a
uniformly chosen empty slot ``t`` alone, the other owners of ``s`` are allocated sequentially.
If ``c_i ≠ c_j`` with ``z_{i,c_j} = z_{j,c_i} = 0``: *merge* them into slot ``c_i`` (their OR);
otherwise nothing happens.  The split from the merged state with the same anchors leads back to
the same labelled matrix with the same selection probability ``1/(N(N-1)|a_i||a_j|)`` (the
anchors' numbers of active columns ``|a_i|, |a_j|`` are the same in both states), and the
empty-slot choice ``1/(K_max-K_+)`` cancels the ``(K_max-K_+)!`` of the pmf, so a split
``Z → Z'`` (``K_+ → K_+ + 1``) is accepted with probability

    ``min{1, p(X|Z')/p(X|Z) · αβ · B(m_1, N-m_1+β) B(m_2, N-m_2+β) / B(m, N-m+β) / q(Z'|Z)}``

(``q`` = product of the sequential choice probabilities; ``B`` the Beta function of the
two-parameter IBP pmf [4]_) and a merge with the reciprocal, ``q`` replayed.  The row order is
a uniform permutation drawn afresh in either direction, an auxiliary variable that cancels.
Exactness is tested by pushing i.i.d. exact-posterior draws through the move
(tests/kernels/test_split_merge.py).

Cost per proposal: ``O(m (K² + KD) + K³ + K²D)`` for a column of size ``m`` — rank-one
updates of the feature posterior (:func:`kernels.row_update`), never a full pass over the data
except after an accepted move (statistics rebuilt from ``Z``, ``O(N(K² + KD))``).

References
----------
.. [1] Meeds, E., Ghahramani, Z., Neal, R. M. and Roweis, S. T. (2007). Modeling dyadic data
   with binary latent factors. *Advances in Neural Information Processing Systems 19*.
.. [2] Jain, S. and Neal, R. M. (2004). A split-merge Markov chain Monte Carlo procedure for
   the Dirichlet process mixture model. *Journal of Computational and Graphical Statistics*
   13, 158–182.
.. [3] Dahl, D. B. (2005). Sequentially-allocated merge-split sampler for conjugate and
   nonconjugate Dirichlet process mixture models. Technical report, Texas A&M University.
.. [4] Ghahramani, Z., Griffiths, T. L. and Sollich, P. (2007). Bayesian nonparametric latent
   feature models. *Bayesian Statistics 8*, 201–226.
.. [5] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *JMLR* 12, 1185–1224.
.. [6] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
.. [7] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and
   extensions*. MSc thesis, University of Cambridge.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from pymc_ibp._numba_utils import ordered_pair, partial_shuffle
from pymc_ibp.distributions.ibp_math import log_beta_term, log_split_prior
from pymc_ibp.kernels.allocation import (
    allocation,
    compact_row,
    compact_stats,
    random_active,
    scratch,
    sequential_allocation,
    shuffle_prefix,
    slot_row,
    slot_stats,
    stats_without,
)
from pymc_ibp.kernels.gaussian import collapsed_loglik, stats_with_row, suff_stats
from pymc_ibp.kernels.slots import active_slots, random_free_slots

_LOG3 = math.log(3.0)


class Proposal(NamedTuple):
    """One split (``s1`` → ``s1`` with anchor ``i`` and the empty slot ``s2`` with anchor
    ``j``) or merge (``s2`` into ``s1``) of :func:`_split_merge_move`, with the log ratio
    ``log_sel`` of its selection probabilities and ``col_k`` (the ``K+`` of a split selected
    by column; 0 otherwise).  Build it with :func:`_proposal`."""

    i: np.int64
    j: np.int64
    s1: np.int64
    s2: np.int64
    split: np.bool_
    log_sel: float
    col_k: np.int64


@numba.njit(cache=True)
def _proposal(i, j, s1, s2, split, log_sel, col_k):
    return Proposal(np.int64(i), np.int64(j), np.int64(s1), np.int64(s2), np.bool_(split),
                    float(log_sel), np.int64(col_k))


@numba.njit(cache=True)
def _loglik_of(Z, X, m, trXX, noise):
    act, k = active_slots(m)
    G, RX = suff_stats(Z, X, act[:k])
    return collapsed_loglik(G, RX, trXX, X.shape[0], noise)


# ---------------------------------------------------------------------------------------------
# random allocation (Meeds et al. 2007)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _log_split_ratio(ll_split, ll_merged, m1, m2, mm, kplus_merged, n, alpha, beta):
    """log of π(Z_split) q(merge) / (π(Z_merged) q(split)) for the random proposal.

    ``= Δ log p(X|Z) + log αβ + log B(m1,N-m1+β) + log B(m2,N-m2+β) - log B(m,N-m+β)
    - log(K+ + 1) - log a_m``, ``a_m = 3^{-m}/(1 - 2·3^{-m})``, where ``K+`` counts the merged
    state's active columns; the empty-slot choice of the split cancels the ``(K_max-K+)!`` of
    the prior (the argument of the module docstring with the uniform allocation's probability
    ``a_m`` in place of ``q``).
    """
    log_am = -mm * _LOG3 - math.log1p(-2.0 * math.exp(-mm * _LOG3))
    return (ll_split - ll_merged + log_split_prior(m1, m2, mm, n, alpha, beta)
            - math.log(kplus_merged + 1.0) - log_am)


@numba.njit(cache=True)
def random_split_merge(rng, Z, X, m, noise, alpha, beta, n_proposals, trXX):
    """``n_proposals`` split–merge moves with uniformly random allocation (Meeds et al. 2007).

    Split (probability ½): an active column ``k`` chosen uniformly, an empty slot ``e`` chosen
    uniformly; each owner of ``k`` goes to ``(k)``, ``(e)`` or both uniformly, redrawn until both
    are non-empty.  Merge (probability ½): an ordered pair ``(keep, remove)`` of distinct active
    columns chosen uniformly; ``keep`` becomes their OR and ``remove`` is emptied.  The two are
    each other's reverse, accepted with :func:`_log_split_ratio`.  A split with no empty slot, or
    a merge with fewer than two active columns, leaves the state unchanged.  Returns the number
    of accepted moves.
    """
    n, k_max = Z.shape
    accepted = 0
    ll = _loglik_of(Z, X, m, trXX, noise)
    col1 = np.empty(n, dtype=np.int64)
    col2 = np.empty(n, dtype=np.int64)
    free = np.empty(k_max, dtype=np.int64)
    for _ in range(n_proposals):
        act, k = active_slots(m)
        if rng.random() < 0.5:  # ---- split
            if k == 0 or k == k_max:
                continue
            a = act[int(rng.random() * k)]
            random_free_slots(rng, act, k, k_max, np.int64(1), free)
            e = free[0]
            mm = m[a]
            while True:
                m1 = 0
                m2 = 0
                for i in range(n):
                    col1[i] = 0
                    col2[i] = 0
                    if Z[i, a] != 0:
                        u = int(rng.random() * 3.0)
                        if u != 1:
                            col1[i] = 1
                            m1 += 1
                        if u != 0:
                            col2[i] = 1
                            m2 += 1
                if m1 > 0 and m2 > 0:
                    break
            old = Z[:, a].copy()
            Z[:, a] = col1
            Z[:, e] = col2
            m[a] = m1
            m[e] = m2
            ll_new = _loglik_of(Z, X, m, trXX, noise)
            log_acc = _log_split_ratio(ll_new, ll, m1, m2, mm, k, n, alpha, beta)
            if math.log(rng.random()) < log_acc:
                ll = ll_new
                accepted += 1
            else:
                Z[:, a] = old
                Z[:, e] = 0
                m[a] = mm
                m[e] = 0
        else:  # ---- merge
            if k < 2:
                continue
            i1, i2 = ordered_pair(rng, k)
            keep = act[i1]
            rem = act[i2]
            m1 = m[keep]
            m2 = m[rem]
            old_keep = Z[:, keep].copy()
            old_rem = Z[:, rem].copy()
            mm = 0
            for i in range(n):
                v = 1 if (old_keep[i] != 0 or old_rem[i] != 0) else 0
                Z[i, keep] = v
                Z[i, rem] = 0
                mm += v
            m[keep] = mm
            m[rem] = 0
            ll_new = _loglik_of(Z, X, m, trXX, noise)
            log_acc = -_log_split_ratio(ll, ll_new, m1, m2, mm, k - 1, n, alpha, beta)
            if math.log(rng.random()) < log_acc:
                ll = ll_new
                accepted += 1
            else:
                Z[:, keep] = old_keep
                Z[:, rem] = old_rem
                m[keep] = m1
                m[rem] = m2
    return accepted


# Integers and flags that reach another jitted function are np.int64(...) / np.bool_(...), not
# bare constants: numba types a constant argument (and, while it types a loop, a variable that
# starts as a constant) as a literal and compiles and caches a specialisation of the callee
# for it. Measured on a cold cache: sequential_allocation compiled 5 times, _split_merge_move
# 3 times (3-5 s each) before; once each since.
@numba.njit(cache=True)
def _split_merge_move(rng, Z, X, m, Gs, RXs, noise, alpha, beta, trXX, ll, prop, work):
    """One sequentially-allocated split (``s1`` → ``s1`` with anchor ``i`` and the empty slot
    ``s2`` with anchor ``j``) or merge (``s2`` into ``s1``; ``i`` owns only ``s1`` and ``j``
    only ``s2``) Metropolis–Hastings move (the :class:`Proposal` ``prop``; ``work``: the
    scratch of :func:`scratch`), given a selection whose log probability ratio
    ``log q_sel(reverse) - log q_sel(forward)`` is ``log_sel``.  A split selected by
    :func:`column_split_merge` (``col_k`` = its ``K+`` > 0) adds the part of that ratio known
    only after the allocation: ``log K+ m(m-1) - log (K+ + 1) K+ u₁ u₂``.  ``Gs``, ``RXs``
    (slot-indexed statistics) and ``ll`` are the current state's; updates ``Z``, ``m``, ``Gs``,
    ``RXs`` on acceptance.  Returns ``(accepted, ll)``."""
    i, j, s1, s2, split, log_sel, col_k = prop
    rows, alloc, _, lay = work
    n, k_max = Z.shape
    act, k = active_slots(m)
    for a in range(k):
        lay[a] = act[a]
    kk = k
    if split:
        lay[k] = s2
        kk = k + 1
    ia = np.int64(-1)
    ib = np.int64(-1)
    for a in range(kk):
        if lay[a] == s1:
            ia = a
        if lay[a] == s2:
            ib = a
    nr = np.int64(0)
    for r in range(n):
        if (Z[r, s1] != 0 or Z[r, s2] != 0) and r != i and r != j:
            rows[nr] = r
            nr += 1
    shuffle_prefix(rng, rows, nr)
    Gc, RXc = compact_stats(Gs, RXs, lay, kk)
    if split:
        logq = sequential_allocation(rng, Z, X, Gc, RXc,
                                      allocation(lay, kk, ia, ib, i, j, rows, nr), noise,
                                      np.bool_(False), alloc)
        ll_new = collapsed_loglik(Gc, RXc, trXX, n, noise)
        m1 = np.int64(1)
        m2 = np.int64(1)
        for q in range(nr):
            if alloc[q] != 1:
                m1 += 1
            if alloc[q] != 0:
                m2 += 1
        mm = m[s1]
        if col_k > 0:  # column selection: u1, u2 = rows left in one column only
            u1 = 1
            u2 = 1
            for q in range(nr):
                if alloc[q] == 0:
                    u1 += 1
                elif alloc[q] == 1:
                    u2 += 1
            log_sel += (math.log(col_k * 1.0) + math.log(mm * (mm - 1.0))
                        - math.log((col_k + 1.0) * col_k) - math.log(u1 * 1.0)
                        - math.log(u2 * 1.0))
        log_acc = ll_new - ll + log_split_prior(m1, m2, mm, n, alpha, beta) - logq + log_sel
    else:
        Gm, RXm = compact_stats(Gs, RXs, lay, kk)
        logq = sequential_allocation(rng, Z, X, Gc, RXc,
                                      allocation(lay, kk, ia, ib, i, j, rows, nr), noise,
                                      np.bool_(True), alloc)
        # merged state's statistics: every owner carries ia only, then drop ib
        z = np.empty(kk)
        for q in range(nr + 2):
            r = rows[q] if q < nr else (i if q == nr else j)
            compact_row(Z, r, lay, kk, z)
            stats_with_row(Gm, RXm, z, X[r], kk, -1.0)
            z[ia] = 1.0
            z[ib] = 0.0
            stats_with_row(Gm, RXm, z, X[r], kk, 1.0)
        Gm2, RXm2 = stats_without(Gm, RXm, kk, ib)
        ll_new = collapsed_loglik(Gm2, RXm2, trXX, n, noise)
        m1 = m[s1]
        m2 = m[s2]
        mm = nr + 2
        log_acc = ll_new - ll - log_split_prior(m1, m2, mm, n, alpha, beta) + logq + log_sel
    if math.log(rng.random()) >= log_acc:
        return False, ll
    for q in range(nr + 2):
        r = rows[q] if q < nr else (i if q == nr else j)
        slot_row(Gs, RXs, Z, r, X[r], -1.0)
        if split:
            o = alloc[q] if q < nr else (0 if q == nr else 1)
            Z[r, s1] = 1 if o != 1 else 0
            Z[r, s2] = 1 if o != 0 else 0
        else:
            Z[r, s1] = 1
            Z[r, s2] = 0
        slot_row(Gs, RXs, Z, r, X[r], 1.0)
    if split:
        m[s1] = m1
        m[s2] = m2
    else:
        m[s1] = mm
        m[s2] = 0
    return True, ll_new


@numba.njit(cache=True)
def sequential_split_merge(rng, Z, X, m, noise, alpha, beta, n_proposals, trXX):
    """``n_proposals`` anchored, sequentially-allocated split–merge moves (module docstring):
    the anchors are two uniformly chosen rows, so features are proposed in proportion to their
    owners (large features often, small ones rarely; :func:`column_split_merge` is the
    feature-uniform counterpart).

    ``Z`` (``N x K_max`` int8) and its column sums ``m`` are updated in place.  Returns the
    number of accepted moves.
    """
    n, k_max = Z.shape
    accepted = 0
    if n < 2:
        return 0
    Gs, RXs, ll = slot_stats(Z, X, m, noise, trXX)
    work = scratch(n, k_max)
    free = work[2]
    for _ in range(n_proposals):
        i, j = ordered_pair(rng, n)
        ci = random_active(rng, Z, i, k_max)
        cj = random_active(rng, Z, j, k_max)
        if ci < 0 or cj < 0:
            continue
        act, k = active_slots(m)
        split = ci == cj
        if split:  # split ci into (ci: anchor i) and (t: anchor j)
            if k == k_max:
                continue
            random_free_slots(rng, act, k, k_max, np.int64(1), free)
            s2 = free[0]
        else:  # merge ci (anchor i) and cj (anchor j) into ci
            if Z[i, cj] != 0 or Z[j, ci] != 0:
                continue
            s2 = cj
        # the selection probabilities of the two directions are equal (module docstring)
        ok, ll = _split_merge_move(rng, Z, X, m, Gs, RXs, noise, alpha, beta, trXX, ll,
                                   _proposal(i, j, ci, s2, split, 0.0, 0), work)
        accepted += ok
    return accepted


@numba.njit(cache=True)
def _owners_only(Z, a, b, out):
    """Rows owning column ``a`` but not ``b`` into ``out``; returns their number."""
    c = 0
    for r in range(Z.shape[0]):
        if Z[r, a] != 0 and Z[r, b] == 0:
            out[c] = r
            c += 1
    return c


@numba.njit(cache=True)
def column_split_merge(rng, Z, X, m, noise, alpha, beta, n_proposals, trXX):
    """``n_proposals`` sequentially-allocated split–merge moves whose selection is uniform over
    *features* rather than rows, so that small features are merged as often as large ones
    (with row anchors a pair of small duplicated features is almost never proposed).

    * Split (probability ½): a column ``c`` uniformly among the ``K+`` active ones, an ordered
      pair of distinct owners ``(i, j)`` of ``c`` uniformly, an empty slot ``t`` uniformly;
      ``i`` keeps ``c`` alone, ``j`` takes ``t`` alone and the other owners are allocated
      sequentially as in :func:`sequential_split_merge`.
    * Merge (probability ½): an ordered pair of distinct active columns ``(c₁, c₂)``
      uniformly, ``i`` uniformly among the rows owning ``c₁`` but not ``c₂`` and ``j`` among
      those owning ``c₂`` but not ``c₁`` (none: no move); ``c₂`` is merged into ``c₁`` and the
      reverse split is replayed for ``q``.

    A split ``Z → Z'`` (``K+ → K+ + 1``, column of ``m`` owners into ``m₁``, ``m₂``, with
    ``u₁``, ``u₂`` rows owning only one of them) is accepted with probability

        ``min{1, p(X|Z')/p(X|Z) · αβ B(m₁, N-m₁+β) B(m₂, N-m₂+β)/B(m, N-m+β) / q ·
        K+ m(m-1) / ((K+ + 1) K+ u₁ u₂)}``

    (the empty-slot choice cancels the ``(K_max-K+)!`` of the pmf, as in the module docstring)
    and a merge with the reciprocal.  Exactness is tested by pushing exact-posterior draws
    through the move (tests/kernels/test_split_merge.py).
    """
    n, k_max = Z.shape
    accepted = 0
    if n < 2:
        return 0
    Gs, RXs, ll = slot_stats(Z, X, m, noise, trXX)
    work = scratch(n, k_max)
    free = work[2]
    only1 = np.empty(n, dtype=np.int64)
    only2 = np.empty(n, dtype=np.int64)
    for _ in range(n_proposals):
        act, k = active_slots(m)
        if rng.random() < 0.5:  # ---- split
            if k == 0 or k == k_max:
                continue
            c = act[int(rng.random() * k)]
            mc = m[c]
            if mc < 2:
                continue
            owners = only1
            no = 0
            for r in range(n):
                if Z[r, c] != 0:
                    owners[no] = r
                    no += 1
            pi, pj = ordered_pair(rng, mc)
            i, j = owners[pi], owners[pj]
            random_free_slots(rng, act, k, k_max, np.int64(1), free)
            # the selection ratio depends on the allocation (u1, u2): added by the move
            ok, ll = _split_merge_move(rng, Z, X, m, Gs, RXs, noise, alpha, beta, trXX, ll,
                                       _proposal(i, j, c, free[0], True, 0.0, k), work)
            accepted += ok
        else:  # ---- merge
            if k < 2:
                continue
            a1, a2 = ordered_pair(rng, k)
            c1, c2 = act[a1], act[a2]
            u1 = _owners_only(Z, c1, c2, only1)
            u2 = _owners_only(Z, c2, c1, only2)
            if u1 == 0 or u2 == 0:
                continue
            i = only1[int(rng.random() * u1)]
            j = only2[int(rng.random() * u2)]
            mm = 0
            for r in range(n):
                if Z[r, c1] != 0 or Z[r, c2] != 0:
                    mm += 1
            # log q_sel(split from the merged state) - log q_sel(this merge)
            log_sel = (-math.log(k - 1.0) - math.log(mm * (mm - 1.0))
                       + math.log(k * (k - 1.0)) + math.log(u1 * 1.0) + math.log(u2 * 1.0))
            ok, ll = _split_merge_move(rng, Z, X, m, Gs, RXs, noise, alpha, beta, trXX, ll,
                                       _proposal(i, j, c1, c2, False, log_sel, 0), work)
            accepted += ok
    return accepted


# ---------------------------------------------------------------------------------------------
# data-driven births and deaths (a split from nothing)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def sequential_birth_death(rng, Z, X, m, noise, alpha, beta, n_proposals, n_rows, trXX):
    """``n_proposals`` data-driven birth/death Metropolis–Hastings moves (a split from nothing).

    A row ``i`` (the anchor) is drawn uniformly, and a uniformly random ordered subset ``R`` of
    ``M = min(n_rows, N-1)`` other rows, independently of the state (an auxiliary variable).

    * **Birth** (probability ½): a uniformly chosen empty slot ``t`` becomes a new feature owned
      by ``i``; then each row of ``R`` in turn joins it or not, with probability proportional to
      its collapsed predictive density given the rows already placed (rank-one updates of the
      feature posterior, as in :func:`sequential_split_merge`).  The new feature is therefore
      built from the residuals of rows that resemble the anchor's, and can be large at once —
      which single-row births, each paying the full cost of a new feature, cannot do.
    * **Death** (probability ½): a uniformly chosen active column ``c`` of row ``i``; possible
      only if every other owner of ``c`` is in ``R``; the birth that would create ``c`` is
      replayed to score its proposal probability.

    With ``q`` the product of the sequential choice probabilities, ``m'`` the new feature's size
    and ``|a_i'|`` the number of row ``i``'s active columns in the state with the feature, a
    birth ``Z → Z'`` is accepted with probability

        ``min{1, p(X|Z')/p(X|Z) · αβ · B(m', N-m'+β) / (|a_i'| · q)}``

    (the slot choice ``1/(K_max-K+)`` cancels the ``(K_max-K+)!`` of the :class:`pymc_ibp.IBP`
    pmf; the anchor and subset probabilities are the same both ways) and a death with the
    reciprocal.  Exactness is tested by pushing exact-posterior draws through the move
    (tests/kernels/test_split_merge.py).  Cost per proposal ``O(N + M(K² + KD) + K³ + K²D)``.
    ``Z`` and ``m`` are updated in place; returns the number of accepted moves.
    """
    n, k_max = Z.shape
    if n < 2 or n_rows < 1:
        return 0
    M = min(n_rows, n - 1)
    accepted = 0
    Gs, RXs, ll = slot_stats(Z, X, m, noise, trXX)
    pool = np.empty(n - 1, dtype=np.int64)
    in_r = np.zeros(n, dtype=np.bool_)
    alloc = np.empty(M, dtype=np.int64)
    free = np.empty(k_max, dtype=np.int64)
    lay = np.empty(k_max, dtype=np.int64)
    log_ab = math.log(alpha * beta)
    for _ in range(n_proposals):
        i = int(rng.random() * n)
        c = 0
        for r in range(n):
            if r != i:
                pool[c] = r
                c += 1
        partial_shuffle(rng, pool, M)
        rows = pool[:M]
        act, k = active_slots(m)
        birth = rng.random() < 0.5
        if birth:
            if k == k_max:
                continue
            random_free_slots(rng, act, k, k_max, np.int64(1), free)
            t = free[0]
            for a in range(k):
                lay[a] = act[a]
            lay[k] = t
            kk = k + 1
            ia = k
        else:
            t = random_active(rng, Z, i, k_max)
            if t < 0:
                continue
            for q in range(M):
                in_r[rows[q]] = True
            ok = True
            for r in range(n):
                if Z[r, t] != 0 and r != i and not in_r[r]:
                    ok = False
                    break
            for q in range(M):
                in_r[rows[q]] = False
            if not ok:
                continue
            kk = k
            ia = np.int64(-1)
            for a in range(k):
                lay[a] = act[a]
                if act[a] == t:
                    ia = a
        Gc, RXc = compact_stats(Gs, RXs, lay, kk)
        logq = sequential_allocation(rng, Z, X, Gc, RXc,
                                      allocation(lay, kk, ia, -1, i, -1, rows, M), noise,
                                      not birth, alloc)
        ll_with = collapsed_loglik(Gc, RXc, trXX, n, noise)
        m_new = np.int64(1)
        for q in range(M):
            m_new += alloc[q]
        n_act_i = 1
        for cc in range(k_max):
            if Z[i, cc] != 0 and cc != t:
                n_act_i += 1
        if birth:
            ll_without = ll
        else:
            G2, RX2 = stats_without(Gc, RXc, kk, ia)
            ll_without = collapsed_loglik(G2, RX2, trXX, n, noise)
        log_r = (ll_with - ll_without + log_ab + log_beta_term(m_new, n, beta)
                 - math.log(n_act_i) - logq)
        if not birth:
            log_r = -log_r
        if math.log(rng.random()) < log_r:
            for q in range(M + 1):
                r = rows[q] if q < M else i
                slot_row(Gs, RXs, Z, r, X[r], -1.0)
                if birth:
                    Z[r, t] = 1 if (q == M or alloc[q] == 1) else 0
                else:
                    Z[r, t] = 0
                slot_row(Gs, RXs, Z, r, X[r], 1.0)
            m[t] = m_new if birth else 0
            ll = ll_without if not birth else ll_with
            accepted += 1
    return accepted


#: the split–merge proposals by name.  Steps keep the name, not the kernel: a numba dispatcher
#: held by a step would be pickled by value when PyMC sends the step to a spawned worker, and
#: rebuilt there without its on-disk cache (compiled again in every worker, about 26 s).
SPLIT_MERGE_PROPOSALS = {"sequential": sequential_split_merge, "random": random_split_merge}
