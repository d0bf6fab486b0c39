"""Pattern-swap Metropolis–Hastings moves on a pair of features, and moves between a pair and
the merged triple that fits the same (numba; :func:`pair_triple_moves`).

Chains of the linear-Gaussian IBP settle in *complement modes* that neither single-site Gibbs
nor split–merge leaves: a true feature ``f`` owned by rows ``S`` is represented by a feature
``g`` owned by (almost) every row plus a "negative" feature ``h ≈ -g`` owned by the rows outside
``S``, so that ``g + h ≈ 0`` there.  Repairing it changes hundreds of entries at once (``h`` off,
or ``g`` off, on every row of ``h``), each of which alone costs a large amount of likelihood.

The move: draw an ordered pair ``(g, h)`` of distinct active features uniformly, and one of five
transpositions ``τ`` of the four patterns ``(z_g, z_h) ∈ {00, 01, 10, 11}`` uniformly (the
sixth, ``01 ↔ 10``, would only exchange the two labels); every row whose pattern is one of the
two swapped ones gets the other (e.g. ``τ = 11 ↔ 01`` turns
``g`` off on every row owning both, and on on every row owning only ``h``).  With ``A``
integrated out the features' values re-fit themselves, so in the complement mode above
``11 ↔ 01`` leaves the likelihood nearly unchanged (``h`` re-fits to about zero, ``g`` to ``f``)
and removes the surplus owners of ``g`` at once; the prior (column sizes) then favours the new
state.  A proposal that empties either column is rejected, so ``K+`` and the pair's selection
probability ``1/(K+(K+-1))`` are the same both ways and every ``τ`` is its own inverse: the
proposal is symmetric, and the move is accepted with probability

    ``min{1, p(X | Z')/p(X | Z) · B(m_g', N-m_g'+β) B(m_h', N-m_h'+β) / (B(m_g, N-m_g+β)
    B(m_h, N-m_h+β))}``

(the :class:`pymc_ibp.IBP` pmf depends on ``Z`` only through ``K+`` and the column sizes
``m``; ``B`` as in :func:`pymc_ibp.distributions.ibp_math.log_beta_term`).  Exactness is tested
by pushing exact-posterior draws through the move (tests/kernels/test_split_merge.py).  Cost
per proposal ``O(N(K + D) + K³ + K²D)``: the two columns' statistics and one collapsed
likelihood (:func:`pymc_ibp.kernels.gaussian.collapsed_loglik`).

This is the deterministic-involution form of Metropolis–Hastings (Tierney 1998; Green 1995)
applied to the feature-pair moves that the split–merge proposals of Meeds et al. (2007) and
Jain & Neal (2004) do not cover.

References
----------
.. [1] Green, P. J. (1995). Reversible jump Markov chain Monte Carlo computation and Bayesian
   model determination. *Biometrika* 82, 711–732.
.. [2] Tierney, L. (1998). A note on Metropolis–Hastings kernels for general state spaces.
   *Annals of Applied Probability* 8, 1–9.
.. [3] Meeds, E., Ghahramani, Z., Neal, R. M. and Roweis, S. T. (2007). Modeling dyadic data
   with binary latent factors. *Advances in Neural Information Processing Systems 19*.
.. [4] Jain, S. and Neal, R. M. (2004). A split-merge Markov chain Monte Carlo procedure for
   the Dirichlet process mixture model. *Journal of Computational and Graphical Statistics*
   13, 158–182.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_ibp._numba_utils import ordered_pair, ordered_triple
from pymc_ibp.distributions.ibp_math import log_beta_term
from pymc_ibp.kernels.gaussian import collapsed_loglik, matrix_log_joint, suff_stats
from pymc_ibp.kernels.slots import active_slots

#: transpositions of the patterns 2·z_g + z_h ∈ {0, 1, 2, 3}, without 01 ↔ 10 (a label swap)
_SWAPS = np.array([[0, 3], [0, 1], [0, 2], [1, 3], [2, 3]], dtype=np.int64)


@numba.njit(cache=True)
def pair_pattern_swaps(rng, Z, X, m, noise, alpha, beta, n_proposals, trXX):
    """``n_proposals`` pattern-swap Metropolis–Hastings moves on feature pairs (module
    docstring).  ``Z`` (``N x K_max``) and its column counts ``m`` are updated in place;
    ``alpha`` is unused (``K+`` does not change) but kept for the common signature of the
    moves.  Returns the number of accepted moves."""
    n, k_max = Z.shape
    d = X.shape[1]
    act, k = active_slots(m)
    if k < 2 or n_proposals < 1:
        return 0
    # compact statistics of the active features, kept current across accepted moves
    G, RX = suff_stats(Z, X, act[:k])
    ll = collapsed_loglik(G, RX, trXX, n, noise)
    G2 = np.empty((k, k))
    RX2 = np.empty((k, d))
    flip_g = np.empty(n, dtype=np.bool_)
    flip_h = np.empty(n, dtype=np.bool_)
    accepted = 0
    for _ in range(n_proposals):
        a, b = ordered_pair(rng, k)
        s = int(rng.random() * _SWAPS.shape[0])
        p, q = _SWAPS[s, 0], _SWAPS[s, 1]
        g, h = act[a], act[b]
        # the new statistics: rows whose pattern is p or q change
        G2[:, :] = G
        RX2[:, :] = RX
        mg, mh = m[g], m[h]
        for r in range(n):
            pat = 2 * (Z[r, g] != 0) + (Z[r, h] != 0)
            flip_g[r] = False
            flip_h[r] = False
            if pat != p and pat != q:
                continue
            new = q if pat == p else p
            og, oh = pat >> 1, pat & 1
            ng, nh = new >> 1, new & 1
            dg, dh = ng - og, nh - oh
            flip_g[r] = dg != 0
            flip_h[r] = dh != 0
            mg += dg
            mh += dh
            for t in range(d):
                RX2[a, t] += dg * X[r, t]
                RX2[b, t] += dh * X[r, t]
            # G[a, c] for the other features c of the row; G[a, a], G[b, b], G[a, b]
            for c in range(k):
                if c != a and c != b and Z[r, act[c]] != 0:
                    G2[a, c] += dg
                    G2[c, a] += dg
                    G2[b, c] += dh
                    G2[c, b] += dh
            G2[a, a] += dg
            G2[b, b] += dh
            G2[a, b] += ng * nh - og * oh
            G2[b, a] = G2[a, b]
        if mg == 0 or mh == 0:
            continue  # would change K+: rejected (keeps the proposal symmetric)
        ll2 = collapsed_loglik(G2, RX2, trXX, n, noise)
        log_r = (ll2 - ll + log_beta_term(mg, n, beta) + log_beta_term(mh, n, beta)
                 - log_beta_term(m[g], n, beta) - log_beta_term(m[h], n, beta))
        if math.log(rng.random()) < log_r:
            for r in range(n):
                if flip_g[r]:
                    Z[r, g] = 1 - Z[r, g]
                if flip_h[r]:
                    Z[r, h] = 1 - Z[r, h]
            m[g], m[h] = mg, mh
            G[:, :] = G2
            RX[:, :] = RX2
            ll = ll2
            accepted += 1
    return accepted


@numba.njit(cache=True)
def is_merged_triple(Z, s1, s2, s3, tol):
    """Whether columns ``(s1, s2, s3)`` of ``Z`` are a *merged triple*: ``u = z_s2`` and
    ``v = z_s3`` disjoint and inside ``F = z_s1``, and ``F`` owning rows outside both (two
    features ``F ∧ ¬v`` and ``F ∧ ¬u`` found as their union and two corrections on the rows
    owning one alone).  ``tol``: the share of the rows of ``u`` (of ``v``) that may lie outside
    ``F``, and of the smaller of the two that may lie in both (0: exactly; a start search
    leaves a few stray rows)."""
    n = Z.shape[0]
    n_u = n_v = u_out = v_out = both = 0
    rest = False
    for r in range(n):
        f, u, v = Z[r, s1] != 0, Z[r, s2] != 0, Z[r, s3] != 0
        n_u += u
        n_v += v
        u_out += u and not f
        v_out += v and not f
        both += u and v
        rest = rest or (f and not u and not v)
    return (rest and n_u > 0 and n_v > 0 and u_out <= tol * n_u and v_out <= tol * n_v
            and both <= tol * min(n_u, n_v))


@numba.njit(cache=True)
def pair_overlap(Z, s1, s2):
    """``(n_pq, n_p, n_q)``: the rows owning both columns ``s1`` and ``s2`` of ``Z``, ``s1``
    alone and ``s2`` alone (a pair merges into a triple when all three are positive)."""
    n_pq = n_p = n_q = 0
    for r in range(Z.shape[0]):
        p, q = Z[r, s1] != 0, Z[r, s2] != 0
        if p and q:
            n_pq += 1
        elif p:
            n_p += 1
        elif q:
            n_q += 1
    return n_pq, n_p, n_q


@numba.njit(cache=True)
def unmerge_columns(Z, out, s1, s2, s3):
    """Write into ``out`` (a copy of ``Z``) the pair a merged triple ``(s1, s2, s3)`` of ``Z``
    stands for: ``z_s1 = F ∧ ¬v``, ``z_s2 = F ∧ ¬u``, ``s3`` emptied."""
    for r in range(Z.shape[0]):
        f, u, v = Z[r, s1] != 0, Z[r, s2] != 0, Z[r, s3] != 0
        out[r, s1] = 1 if (f and not v) else 0
        out[r, s2] = 1 if (f and not u) else 0
        out[r, s3] = 0


@numba.njit(cache=True)
def merge_columns(Z, out, s1, s2, s3):
    """Write into ``out`` (a copy of ``Z``) the merged triple of the pair ``(s1, s2)`` of
    ``Z`` with the empty slot ``s3``: ``z_s1 = p ∨ q``, ``z_s2 = p ∧ ¬q``, ``z_s3 = q ∧ ¬p``
    (the inverse of :func:`unmerge_columns`)."""
    for r in range(Z.shape[0]):
        p, q = Z[r, s1] != 0, Z[r, s2] != 0
        out[r, s1] = 1 if (p or q) else 0
        out[r, s2] = 1 if (p and not q) else 0
        out[r, s3] = 1 if (q and not p) else 0


@numba.njit(cache=True)
def pair_triple_moves(rng, Z, X, m, noise, alpha, beta, n_proposals, trXX):
    """``n_proposals`` Metropolis–Hastings moves between a pair of overlapping features and
    the *merged triple* that represents the same fits with one feature more.

    Two glyphs ``p, q`` that co-occur in most rows are often found as ``F = p ∨ q`` (the sum
    of both) with two *correction* features ``u = p ∧ ¬q`` (``≈ -q``) and ``v = q ∧ ¬p``
    (``≈ -p``) on the rows owning one alone: ``Z @ A`` is the same, but the search and the
    single-site and pair moves cannot leave it.  *Unmerge* (probability ½): an ordered triple
    ``(s1, s2, s3)`` of distinct active columns (among ``K+ (K+ - 1) (K+ - 2)``); unless
    ``u = z_s2`` and ``v = z_s3`` are non-empty, disjoint and inside ``F = z_s1``, and ``F``
    has rows outside both, a null move; else ``z_s1 = F ∧ ¬v``, ``z_s2 = F ∧ ¬u`` and
    ``s3`` is emptied.  *Merge* (the reverse): an ordered pair ``(s1, s2)`` of active columns
    (among ``K+ (K+ - 1)``) and an empty slot ``s3`` (among ``E``); unless ``p = z_s1`` and
    ``q = z_s2`` overlap and each has rows without the other, a null move; else
    ``z_s1 = p ∨ q``, ``z_s2 = p ∧ ¬q``, ``z_s3 = q ∧ ¬p``.  The two maps are inverse
    bijections, so a merge is accepted with
    ``min{1, p(X, Z') / p(X, Z) · E / (K+ + 1)}`` (``K+``, ``E`` before it; ``p(X, Z)`` the
    collapsed log joint of :func:`pymc_ibp.kernels.gaussian.collapsed_log_joint`), an
    unmerge with the reciprocal (Green 1995).  ``Z`` and ``m`` are updated in place; returns
    the number of accepted moves.  Cost per valid proposal ``O(N K (K + D) + K³ + K²D)``."""
    n, k_max = Z.shape
    accepted = 0
    cur = np.nan
    Z2 = np.empty_like(Z)
    for _ in range(n_proposals):
        act, k = active_slots(m)
        if rng.random() < 0.5:  # ---- unmerge: triple -> pair
            if k < 3:
                continue
            a, b, c = ordered_triple(rng, k)
            s1, s2, s3 = act[a], act[b], act[c]
            if not is_merged_triple(Z, s1, s2, s3, 0.0):
                continue
            Z2[:, :] = Z
            m2 = m.copy()
            unmerge_columns(Z, Z2, s1, s2, s3)
            m2[s1] = 0
            m2[s2] = 0
            for r in range(n):
                m2[s1] += Z2[r, s1]
                m2[s2] += Z2[r, s2]
            m2[s3] = 0
            log_sel = math.log(k) - math.log(k_max - k + 1)
        else:  # ---- merge: pair -> triple
            if k < 2 or k == k_max:
                continue
            a, b = ordered_pair(rng, k)
            s1, s2 = act[a], act[b]
            e = int(rng.random() * (k_max - k))
            s3 = -1
            for t in range(k_max):  # the e-th empty slot
                if m[t] == 0:
                    if e == 0:
                        s3 = t
                        break
                    e -= 1
            n_pq, n_p, n_q = pair_overlap(Z, s1, s2)
            if n_pq == 0 or n_p == 0 or n_q == 0:
                continue
            Z2[:, :] = Z
            m2 = m.copy()
            merge_columns(Z, Z2, s1, s2, s3)
            m2[s1] = n_pq + n_p + n_q
            m2[s2] = n_p
            m2[s3] = n_q
            log_sel = math.log(k_max - k) - math.log(k + 1)
        if not np.isfinite(cur):
            cur = matrix_log_joint(Z, X, m, noise, alpha, beta, trXX)[0]
        new = matrix_log_joint(Z2, X, m2, noise, alpha, beta, trXX)[0]
        if math.log(rng.random()) < new - cur + log_sel:
            Z[:, :] = Z2
            m[:] = m2
            cur = new
            accepted += 1
    return accepted
