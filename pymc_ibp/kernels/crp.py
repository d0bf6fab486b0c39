"""Kernels of the Chinese restaurant process labels: the Gibbs scan of Neal's (2000)
Algorithm 8 and the sequentially allocated split–merge move (Jain & Neal 2004; Dahl 2003),
both given a table of per-label log-likelihoods computed by the caller."""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_ibp._numba_utils import categorical_logp, ordered_pair

__all__ = ["crp_label_gibbs", "crp_split_merge"]


@numba.njit(cache=True)
def crp_label_gibbs(rng, c, ll, alpha):
    """One Gibbs scan of the labels ``c`` (in place, rows in random order) under the CRP(α)
    with ``L_max = ll.shape[0]`` labels, ``ll[l, n]`` the log-likelihood of row ``n`` in
    category ``l``.  Returns ``(changes, K)``.

    Prior conditional (from the pmf of :class:`pymc_ibp.CRP`): an occupied label ``l`` has
    weight ``n_{-n,l}``, each empty one ``α/(L_max - K_{-n})``, so the empty labels share the
    CRP's new-table weight ``α``; an empty label brings its current parameters, which given
    that it is empty are distributed as their prior (Neal 2000, Algorithm 8, with the empty
    labels as its auxiliary categories).
    """
    L, n = ll.shape
    counts = np.zeros(L, dtype=np.int64)
    for i in range(n):
        counts[c[i]] += 1
    K = 0
    for lab in range(L):
        if counts[lab] > 0:
            K += 1
    w = np.empty(L)
    log_alpha = math.log(alpha)
    changes = 0
    for it in rng.permutation(n):
        old = c[it]
        counts[old] -= 1
        km = K - (1 if counts[old] == 0 else 0)
        log_new = log_alpha - math.log(L - km) if km < L else 0.0
        for lab in range(L):
            if counts[lab] > 0:
                w[lab] = math.log(counts[lab]) + ll[lab, it]
            else:
                w[lab] = log_new + ll[lab, it]
        new = categorical_logp(rng, w, L)
        counts[new] += 1
        K = km + (1 if counts[new] == 1 else 0)
        c[it] = new
        if new != old:
            changes += 1
    return changes, K


@numba.njit(cache=True)
def _allocate(rng, c, ll, members, m, i, j, li, lj, order, force):
    """Sequential allocation (Dahl 2003) of ``members[:m]`` (which hold ``i`` and ``j``)
    between labels ``li`` (``i``'s side) and ``lj`` (``j``'s side) in the random ``order``:
    each next member joins a side with probability ``∝ size · p(x | θ_side)``.  With
    ``force`` the members take the sides given by ``c`` (scoring the current split) instead
    of drawn ones.  Writes the drawn labels into ``c`` (``force=False``).  Returns
    ``(log q, size of i's side, log-likelihood of the allocation)``."""
    n1, n2 = 1, 1
    log_q = 0.0
    lik = ll[li, i] + ll[lj, j]
    for t in range(m):
        k = members[order[t]]
        if k == i or k == j:
            continue
        w1 = math.log(n1) + ll[li, k]
        w2 = math.log(n2) + ll[lj, k]
        mx = max(w1, w2)
        log_norm = mx + math.log(math.exp(w1 - mx) + math.exp(w2 - mx))
        if force:
            first = c[k] == li
        else:
            first = rng.random() < math.exp(w1 - log_norm)
            c[k] = li if first else lj
        if first:
            log_q += w1 - log_norm
            n1 += 1
            lik += ll[li, k]
        else:
            log_q += w2 - log_norm
            n2 += 1
            lik += ll[lj, k]
    return log_q, n1, lik


@numba.njit(cache=True)
def crp_split_merge(rng, c, ll, alpha, n_moves):
    """``n_moves`` split–merge Metropolis–Hastings proposals on the labels ``c`` (in place)
    under the CRP(α) with ``L_max = ll.shape[0]`` labels and the categories' parameters fixed
    (``ll[l, n]``: log-likelihood of row ``n`` in category ``l``).  Returns the number accepted.

    Two distinct rows ``i, j`` are drawn uniformly.  If they share a label the move proposes to
    *split* its category: ``j`` moves to a uniformly chosen empty label ``t`` and the other
    members are allocated one by one, in random order, to ``i``'s or ``j``'s side with
    probability ``∝ size · p(x | θ_side)`` (sequentially allocated merge–split, Dahl 2003; the
    empty label brings its current parameters, as in Neal's Algorithm 8).  Otherwise it
    proposes to *merge* ``j``'s category into ``i``'s.  With the labelled CRP pmf of
    :class:`pymc_ibp.CRP` the choice of ``t`` cancels the label factor ``1/(L_max - K)``, and a
    split is accepted with probability

        min{1, α Γ(n₁) Γ(n₂) / Γ(n) · p(x | split) / p(x | merged) / q(split)},

    ``q`` the product of the allocation probabilities; a merge with the reciprocal, its
    reverse split scored in a fresh random order.  Jain & Neal (2004) use the same ratio with
    a restricted-Gibbs launch state instead of sequential allocation.
    """
    L, n = ll.shape
    if n < 2:
        return 0
    counts = np.zeros(L, dtype=np.int64)
    for k in range(n):
        counts[c[k]] += 1
    members = np.empty(n, dtype=np.int64)
    accepted = 0
    log_alpha = math.log(alpha)
    for _ in range(n_moves):
        i, j = ordered_pair(rng, n)
        ci, cj = c[i], c[j]
        m = 0
        for k in range(n):
            if c[k] == ci or c[k] == cj:
                members[m] = k
                m += 1
        order = rng.permutation(m)
        if ci == cj:  # ---- split
            n_empty = L - (counts > 0).sum()
            if n_empty == 0:
                continue
            pick = int(rng.random() * n_empty)
            t = 0
            for lab in range(L):
                if counts[lab] == 0:
                    if pick == 0:
                        t = lab
                        break
                    pick -= 1
            old = c.copy()
            c[j] = t
            log_q, n1, lik = _allocate(rng, c, ll, members, m, i, j, ci, t, order, False)
            lik_old = 0.0
            for q in range(m):
                lik_old += ll[ci, members[q]]
            log_r = (lik - lik_old + log_alpha + math.lgamma(n1) + math.lgamma(m - n1)
                     - math.lgamma(m) - log_q)
            if math.log(rng.random()) < log_r:
                counts[ci] = n1
                counts[t] = m - n1
                accepted += 1
            else:
                c[:] = old
        else:  # ---- merge j's category into i's
            log_q, n1, lik = _allocate(rng, c, ll, members, m, i, j, ci, cj, order, True)
            lik_new = 0.0
            for q in range(m):
                lik_new += ll[ci, members[q]]
            log_r = (lik_new - lik - log_alpha - math.lgamma(n1) - math.lgamma(m - n1)
                     + math.lgamma(m) + log_q)
            if math.log(rng.random()) < log_r:
                for q in range(m):
                    c[members[q]] = ci
                counts[ci] = m
                counts[cj] = 0
                accepted += 1
    return accepted
