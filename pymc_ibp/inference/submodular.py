r"""Maximisers of the per-row objective of the MEIBP (Reed & Ghahramani 2013; Reed 2013, ch. 4).

Given the other rows and ``q(A)``, the ELBO of :func:`pymc_ibp.inference.fit_meibp` as a
function of one row ``z ∈ {0,1}^K`` is (Reed 2013, eq. 4.20)

.. math:: F(z) = z\,ω^\top - \tfrac12 z Q z^\top - \log\big((K_{+\setminus n} + κ(z))!\big),

with ``Q = E[A] E[A]ᵀ / σx²`` (entry-wise non-negative because ``A ≥ 0``), ``κ(z)`` the number
of chosen features that no other row owns and ``ω`` the linear weights.  The off-diagonal
weights of the quadratic form are ``-Q_kj ≤ 0`` and the last term is a concave function of a
count, so ``F`` is submodular (Reed 2013, Thm. 2 and eq. 3.6; with the diagonal folded into
the linear term, since ``z_k² = z_k``).

All maximisers keep, for their current set ``S``, the array
``aux_k = ω_k - ½ Q_kk - Σ_{j ∈ S, j ≠ k} Q_kj``; the gain of adding ``k ∉ S`` is
``aux_k - new_k log(K_fin + 1)`` and that of removing ``k ∈ S`` is
``-(aux_k - new_k log K_fin)``, ``K_fin = K_{+\setminus n} + κ(S)`` and ``new_k`` whether no
other row owns ``k``.  Each gain is ``O(1)``, each add or remove ``O(K)``.

* :func:`local_search` (``"ls"``, Feige, Mirrokni & Vondrák 2011; the greedy-ordered form of
  Reed 2013, Alg. 4, with additive threshold 0): grow by the best positive gain, prune any
  negative member, repeat; return the better of the set and its complement.
* :func:`linear_greedy` (``"lg"``, Buchbinder, Feldman, Naor & Schwartz 2012, deterministic,
  ⅓-approximation; ``"lg-sto"`` the randomised one, ½ in expectation; ``"lg-ord"`` visits the
  element with the largest gain first).

The guarantees hold for the non-negative function ``F - min F``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["MAXIMISERS", "linear_greedy", "local_search", "row_value"]

MAXIMISERS = ("ls", "lg", "lg-ord", "lg-sto")


@numba.njit(cache=True)
def row_value(z, omega, Q, new, k_rest):
    """``F(z) - F(0)``: ``Σ_{k∈z} ω_k - ½ Σ_{k,j∈z} Q_kj - log((K_rest + κ)! / K_rest!)``."""
    val = 0.0
    kappa = 0
    for k in range(z.shape[0]):
        if z[k]:
            val += omega[k]
            kappa += new[k]
            for j in range(z.shape[0]):
                if z[j]:
                    val -= 0.5 * Q[k, j]
    return val - (math.lgamma(k_rest + kappa + 1.0) - math.lgamma(k_rest + 1.0))


@numba.njit(cache=True)
def _aux_of(z, omega, Q):
    K = z.shape[0]
    aux = np.empty(K)
    for k in range(K):
        a = omega[k] - 0.5 * Q[k, k]
        for j in range(K):
            if z[j] and j != k:
                a -= Q[k, j]
        aux[k] = a
    return aux


@numba.njit(cache=True)
def _toggle(z, aux, Q, e, on):
    """Add (``on``) or remove ``e`` from the set, updating ``aux`` (diagonal excluded)."""
    z[e] = 1 if on else 0
    s = -1.0 if on else 1.0
    for k in range(z.shape[0]):
        if k != e:
            aux[k] += s * Q[k, e]


@numba.njit(cache=True)
def _gain(z, aux, new, kfin, k):
    """Gain of adding ``k`` (``z_k = 0``) or of removing it (``z_k = 1``)."""
    if z[k] == 0:
        return aux[k] - (math.log(kfin + 1.0) if new[k] else 0.0)
    return -(aux[k] - (math.log(kfin) if new[k] else 0.0))


@numba.njit(cache=True)
def _best_move(z, aux, new, kfin, member):
    """The element with ``z_k = member`` whose toggle gains most (``-1`` if no gain is
    positive), and the number of gains evaluated."""
    best, arg, queries = 0.0, -1, 0
    for k in range(z.shape[0]):
        if z[k] == member:
            g = _gain(z, aux, new, kfin, k)
            queries += 1
            if g > best:
                best, arg = g, k
    return arg, queries


@numba.njit(cache=True)
def local_search(omega, Q, new, k_rest):
    """Greedy-ordered local search with additive threshold 0; returns ``(z, queries)``."""
    K = omega.shape[0]
    z = np.zeros(K, dtype=np.int8)
    queries = 0
    # start from the best singleton
    best, arg = -np.inf, -1
    for k in range(K):
        v = omega[k] - 0.5 * Q[k, k] - (math.log(k_rest + 1.0) if new[k] else 0.0)
        queries += 1
        if v > best:
            best, arg = v, k
    if best <= 0.0:
        return z, queries
    aux = _aux_of(z, omega, Q)
    kfin = k_rest
    _toggle(z, aux, Q, arg, True)
    kfin += new[arg]
    while True:
        # grow: add the best positive gain; otherwise prune the member whose removal gains most
        arg, q = _best_move(z, aux, new, kfin, 0)
        queries += q
        if arg < 0:
            arg, q = _best_move(z, aux, new, kfin, 1)
            queries += q
            if arg < 0:
                break
        on = z[arg] == 0
        _toggle(z, aux, Q, arg, on)
        kfin += new[arg] if on else -new[arg]
    comp = (1 - z).astype(np.int8)
    queries += 2
    if row_value(comp, omega, Q, new, k_rest) > row_value(z, omega, Q, new, k_rest):
        return comp, queries
    return z, queries


@numba.njit(cache=True)
def linear_greedy(rng, omega, Q, new, k_rest, ordered, stochastic):
    """Double greedy of Buchbinder et al. (2012): ``C = V``, ``E = ∅``; each element (in index
    order, or the one with the largest gain first if ``ordered``) is removed from ``C`` or added
    to ``E``, by the larger gain (``stochastic``: with probability proportional to the positive
    parts).  Returns ``(z, queries)``."""
    K = omega.shape[0]
    e_set = np.zeros(K, dtype=np.int8)
    c_set = np.ones(K, dtype=np.int8)
    aux_e = _aux_of(e_set, omega, Q)
    aux_c = _aux_of(c_set, omega, Q)
    kfin_e = k_rest
    kfin_c = k_rest
    for k in range(K):
        kfin_c += new[k]
    done = np.zeros(K, dtype=np.bool_)
    queries = 0
    for _ in range(K):
        if ordered:
            best, w = -np.inf, -1
            for k in range(K):
                if not done[k]:
                    g = max(_gain(e_set, aux_e, new, kfin_e, k),
                            _gain(c_set, aux_c, new, kfin_c, k))
                    queries += 2
                    if g > best:
                        best, w = g, k
        else:
            w = 0
            while done[w]:
                w += 1
        done[w] = True
        d_e = _gain(e_set, aux_e, new, kfin_e, w)
        d_c = _gain(c_set, aux_c, new, kfin_c, w)
        queries += 2
        if stochastic:
            a, b = max(d_e, 0.0), max(d_c, 0.0)
            add = True if a + b == 0.0 else rng.random() < a / (a + b)
        else:
            add = not (d_c > d_e)
        if add:
            _toggle(e_set, aux_e, Q, w, True)
            kfin_e += new[w]
        else:
            _toggle(c_set, aux_c, Q, w, False)
            kfin_c -= new[w]
    return e_set, queries


@numba.njit(cache=True)
def maximise_row(rng, omega, Q, new, k_rest, kind):
    """The maximiser ``kind`` (index into :data:`MAXIMISERS`); returns ``(z, queries)``."""
    if kind == 0:
        return local_search(omega, Q, new, k_rest)
    return linear_greedy(rng, omega, Q, new, k_rest, kind == 2, kind == 3)
