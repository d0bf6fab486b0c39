"""Gibbs sweeps of ``Z`` for the linear-Gaussian likelihood (numba).

* :func:`accelerated_sweep` — the accelerated collapsed sampler (Doshi-Velez & Ghahramani
  2009), ``O(N(K² + KD))`` per sweep, in two prior modes (IBP counts with births, or per-entry
  prior log-odds without births);
* :func:`accelerated_sweep_window` — the same conditionals with ``W`` rows removed at a time
  (Doshi-Velez 2009, §4.2, the matrix-normal window likelihood);
* :func:`collapsed_sweep` — the classic collapsed Gibbs sampler (Griffiths & Ghahramani 2011,
  §5.1), which evaluates ``p(X | Z)`` in full for every entry: the reference the others are
  tested against.

Every random number is drawn from the numpy ``Generator`` passed in (the step's ``self.rng``).

References
----------
.. [1] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
.. [2] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and extensions*.
   MSc thesis, University of Cambridge.
.. [3] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *JMLR* 12, 1185–1224.
.. [4] Teh, Y. W., Görür, D. and Ghahramani, Z. (2007). Stick-breaking construction for the
   Indian buffet process. *AISTATS 2007*.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from pymc_ibp._numba_utils import bernoulli_logodds, categorical_logp, partial_shuffle
from pymc_ibp.distributions.ibp_math import log_birth_rate, prior_logodds
from pymc_ibp.kernels.gaussian import (
    collapsed_loglik,
    posterior_from_stats,
    stats_with_row,
)
from pymc_ibp.kernels.linalg import forward_sub
from pymc_ibp.kernels.rows import (
    ObservedRow,
    birth_terms,
    draw_count,
    excess_count,
    gibbs_row_entries,
    row_dims,
    row_update,
    row_work,
)
from pymc_ibp.kernels.slots import (
    append_empty,
    random_free_slots,
    reset_to_prior,
    swap_remove,
    sweep_state,
    write_row,
)


class SweepStats(NamedTuple):
    """What a sweep did: entries flipped, features born and died, whether all ``K_max``
    slots were in use at some row (``kmax_hit``, 0/1), and the births the free slots denied:
    the sum over rows of ``E[(j - free slots)⁺]`` under the untruncated birth count
    (:func:`~pymc_ibp.kernels.rows.excess_count`; 0.0 when the truncation never binds; NaN
    from the windowed and classic collapsed sweeps, which do not count them)."""

    flips: int
    births: int
    deaths: int
    kmax_hit: int
    births_denied: float = 0.0


#: how far past the free slots a sweep looks when it counts the births they deny
BIRTH_LOOKAHEAD = 128


#: :attr:`OtherRows.G` / :attr:`OtherRows.RX`: no other rows
NO_EXT = np.zeros((0, 0))

#: ``miss`` argument of the sweeps: complete data
NO_MISS = np.zeros((0, 0), dtype=np.bool_)


class OtherRows(NamedTuple):
    """The rows a sweep does not visit, by their statistics: ``G = Z_oᵀ Z_o``
    (``K_max x K_max``), ``RX = Z_oᵀ X_o`` (``K_max x D``), slot-indexed (``(0, 0)``: none),
    and ``n`` the number of rows of the whole matrix (the IBP's size)."""

    G: np.ndarray
    RX: np.ndarray
    n: int

    @classmethod
    def none(cls, n):
        return cls(NO_EXT, NO_EXT, int(n))


class SweepOptions(NamedTuple):
    """``refresh``: rows between exact recomputations of ``(Σ, μ)``
    (:func:`refresh_interval`); ``greedy``: each draw replaced by its mode; ``births``: whether
    a row's singleton set is redrawn (off, no feature is created or dropped)."""

    refresh: int
    greedy: bool
    births: bool


def refresh_interval(n):
    """Rows between the sweeps' exact recomputations of the feature posterior ``(Σ, μ)``
    from ``G`` and ``RX`` (the rank-one updates between them drift): a tenth of the ``n``
    rows swept, at least 5.  The ``refresh`` argument of :func:`accelerated_sweep` and the
    other sweeps, wherever a caller does not choose it."""
    return max(5, int(n) // 10)


def accelerated_sweep(rng, Z, X, m, noise, prior, refresh, greedy=False, miss=None):
    """One sweep of the accelerated collapsed Gibbs sampler (Doshi-Velez & Ghahramani 2009,
    Alg. 1, with the rank-one updates of :func:`row_update`).

    Maintains the full-data feature posterior ``(Σ, μ)`` and updates it by rank-one
    Sherman–Morrison down/up-dates as each row is removed and re-added, so each element costs
    ``O(K + D)`` and a sweep ``O(N(K² + KD))`` (``O(N(BK² + KD))`` with ``B`` column blocks
    of their own scales, :class:`pymc_ibp.kernels.gaussian.Noise`).  ``Σ, μ`` are
    recomputed from the exact statistics ``G = ZᵀZ`` and ``RX = ZᵀX`` every ``refresh`` rows
    (drift control).

    Two prior modes (``prior``, a :class:`SweepPrior`):

    * **IBP counts with births** (:meth:`SweepPrior.counts`): the prior of
      :class:`pymc_ibp.IBP`.  Per row ``n`` (visited in random order):

      1. remove row ``n`` from ``(Σ, μ)``, ``G``, ``RX`` and ``m``;
      2. Gibbs each ``z_nk`` with ``m₋ₙₖ > 0`` (:func:`gibbs_row_entries`, prior log-odds
         ``log m/(N-1-m+β)``), row-``n`` singletons kept in the likelihood (their posterior is
         the prior, so they add ``σa²`` to the predictive variance and nothing to the mean);
      3. block-Gibbs row ``n``'s singleton set: drop it, then draw ``j`` (:func:`birth_terms`,
         ``λ = αβ/(N-1+β)``, ``j`` up to the free slots — exact for the truncated prior) and
         place the ``j`` features in uniformly random empty slots; the births the free slots
         deny (up to :data:`BIRTH_LOOKAHEAD` past them) are counted in
         :attr:`SweepStats.births_denied`;
      4. re-add row ``n``.

    * **Per-entry prior log-odds without births** (:meth:`SweepPrior.entries`): the
      entries are independent a priori given their probabilities, e.g.
      ``Z ~ Bernoulli(π)`` under the stick-breaking construction (Teh, Görür & Ghahramani
      2007), so every slot is a feature (empty ones have the prior ``N(0, σa²)`` as posterior)
      and each ``z_nk`` is Gibbs-sampled with prior log-odds ``prior.logodds[n, k]``.

    **Missing entries** (``miss``, ``N x D`` boolean; ``None`` for complete data; ``X``
    holds the current imputed values there): a row with missing entries is updated as a block
    ``(z_n, x_n,mis)``.  Its entries and singletons are drawn with the row's own missing values
    integrated out (the likelihood of its observed entries only), then ``x_n,mis`` is drawn
    from its predictive ``N(z_n μ, z_n Σ z_nᵀ + σx² + jσa²)`` given the new ``z_n`` (written
    into ``X``) before the row is re-added: a partially collapsed Gibbs step (van Dyk & Park
    2008) that does not let the imputed values pin ``z_n`` as plain data augmentation does.

    ``refresh``: rows between exact recomputations (:func:`refresh_interval`); ``greedy``:
    every draw replaced by its mode (a greedy search).  ``m`` (column sums, length K_max) is
    updated in place, as is ``Z``.
    Returns a :class:`SweepStats`.
    """
    return accelerated_sweep_core(rng, Z, X, m, noise, prior, OtherRows.none(X.shape[0]),
                                  SweepOptions(int(refresh), bool(greedy), True),
                                  NO_MISS if miss is None else miss)


def shard_sweep(rng, Z, X, m, noise, prior, refresh, other, births):
    """:func:`accelerated_sweep` (IBP counts mode, ``prior`` from :meth:`SweepPrior.counts`)
    of the rows of one shard of the data, the other rows entering through their statistics
    only (Doshi-Velez 2009, §5.1, eq. 5.2).

    ``X``, ``Z`` are the shard's rows; ``other`` (:class:`OtherRows`) the slot-indexed
    statistics of all other rows and the number of rows of the whole matrix, ``m`` the global
    column counts (the shard's own plus the others', updated in place as the shard's rows
    change).  The feature posterior is that of all the data (``P = (G_own + G_ext)/σx² +
    I/σa²``), the prior odds and birth rate those of the whole ``N``-row IBP, so the sweep is
    an exact Gibbs scan of the shard's rows given the other rows.  ``births=False`` leaves
    every row's singleton set as it is (no feature is created or dropped there: only the
    shard holding the feature token may create features).
    """
    return accelerated_sweep_core(rng, Z, X, m, noise, prior, other,
                                  SweepOptions(int(refresh), False, bool(births)), NO_MISS)


@numba.njit(cache=True)
def accelerated_sweep_core(rng, Z, X, m, noise, prior, other, options, miss):
    """The sweep of :func:`accelerated_sweep` and :func:`shard_sweep`: the prior of ``Z``
    (:class:`SweepPrior`), the rows not visited (:class:`OtherRows`), the options
    (:class:`SweepOptions`) and the missing entries ``miss`` (:data:`NO_MISS`: none).

    Call it from Python (as :func:`accelerated_sweep`, :func:`shard_sweep` and the
    linear-Gaussian steps' ``_assign_rows`` do), not from a jitted wrapper: numba compiles it
    once per tuple of argument types, about ten seconds each, and a jitted caller's constants
    have types of their own (a module-level array is frozen read-only, ``True`` / ``0`` are
    typed as literals)."""
    n_rows, d = X.shape
    n = other.n
    alpha, beta, logodds = prior.alpha, prior.beta, prior.logodds
    refresh, greedy, allow_births = options.refresh, options.greedy, options.births
    G_ext, RX_ext = other.G, other.RX
    k_max = Z.shape[1]
    nb = noise.sx2.shape[0]
    sa2 = noise.sa2
    counts = logodds.shape[0] == 0
    if counts:
        act, k, G, RX, Sig, mu = sweep_state(Z, X, m, nb)
        log_lam = log_birth_rate(alpha, beta, n)
    else:
        act, k, G, RX, Sig, mu = sweep_state(Z, X, np.ones(k_max, dtype=np.int64), nb)
        log_lam = 0.0
    if G_ext.shape[0] > 0:  # the other rows' statistics, in this sweep's compact order
        for a in range(k):
            for b in range(k):
                G[a, b] += G_ext[act[a], act[b]]
            for t in range(d):
                RX[a, t] += RX_ext[act[a], t]
    flips = births = deaths = kmax_hit = 0
    denied = 0.0
    z = np.zeros(k_max)
    work = row_work(d, nb, k_max)
    v, s2, r = work.v, work.s2, work.r
    prior_lo, skip = work.prior_lo, work.skip
    e = np.zeros(d)
    logpj = np.zeros(k_max + BIRTH_LOOKAHEAD + 1)
    free = np.empty(k_max, dtype=np.int64)
    no_w = np.zeros(0)
    w_row = np.ones(d)
    dn_full = np.zeros(nb)
    dn_row = np.zeros(nb)
    row_dims(noise, no_w, dn_full)
    has_miss = miss.shape[0] > 0
    rows = rng.permutation(n_rows)

    for it in range(n_rows):
        i = rows[it]
        masked = False
        if has_miss:
            for t in range(d):
                if miss[i, t]:
                    masked = True
                    break
        if masked:
            for t in range(d):
                w_row[t] = 0.0 if miss[i, t] else 1.0
            row_dims(noise, w_row, dn_row)
            w, dn = w_row, dn_row
        else:
            w, dn = no_w, dn_full
        if k > 0 and (it == 0 or (refresh > 0 and it % refresh == 0)):
            S1, mu1 = posterior_from_stats(G[:k, :k].copy(), RX[:k].copy(), noise)
            Sig[:, :k, :k] = S1
            mu[:k] = mu1
        x = X[i]
        # ---- 1. remove row i ---------------------------------------------------------------
        for a in range(k):
            z[a] = 1.0 if Z[i, act[a]] != 0 else 0.0
        row_update(Sig, mu, z, x, k, noise, -1.0, v, e)
        stats_with_row(G, RX, z, x, k, -1.0)
        for a in range(k):
            if z[a] != 0.0:
                m[act[a]] -= 1
        if counts:
            for a in range(k):
                ma = m[act[a]]
                skip[a] = ma == 0
                if ma == 0 and z[a] != 0.0:  # singleton of row i: exactly the prior posterior
                    reset_to_prior(Sig, mu, a, k, sa2)
                elif ma > 0:
                    prior_lo[a] = prior_logodds(ma, n, beta)
        else:
            for a in range(k):
                prior_lo[a] = logodds[i, act[a]]
        # ---- 2. element-wise Gibbs (all entries, or the shared features) -------------------
        row = ObservedRow(x, w, dn)
        nfl = gibbs_row_entries(rng, z, k, row, Sig, mu, noise, work, greedy)
        flips += nfl
        # ---- 3. singletons of row i: drop, then block-Gibbs the new count ------------------
        jnew = 0
        if counts and not allow_births:
            if k == k_max:
                kmax_hit = 1
        elif counts:
            a = np.int64(0)  # not a literal (kernels/split_merge.py): one swap_remove
            while a < k:
                if z[a] != 0.0 and m[act[a]] == 0:
                    for b in range(nb):
                        s2[b] -= sa2[b]
                    deaths += 1
                    z[a] = z[k - 1]
                    k = swap_remove(a, k, act, Sig, mu, G, RX)
                else:
                    a += 1
            navail = k_max - k
            last = birth_terms(navail + BIRTH_LOOKAHEAD, log_lam, row, noise, work, logpj)
            denied += excess_count(logpj, last, navail)
            jnew = draw_count(rng, logpj, min(last, navail), greedy)
            if jnew > 0:
                random_free_slots(rng, act, k, k_max, jnew, free)
                for j in range(jnew):
                    z[k] = 1.0
                    k = append_empty(k, act, free[j], Sig, mu, G, RX, sa2)
                births += jnew
            if k == k_max:
                kmax_hit = 1
        # ---- 3b. missing entries of row i from their predictive given the new z_i -----------
        if masked:  # mean x - r = z μ (new singletons add nothing), variance s2 + j σa²
            for b in range(nb):
                sd = math.sqrt(s2[b] + jnew * sa2[b])
                for t in range(noise.cols[b], noise.cols[b + 1]):
                    if miss[i, t]:
                        eps = 0.0 if greedy else rng.standard_normal()
                        x[t] = x[t] - r[t] + sd * eps
        # ---- 4. re-add row i ---------------------------------------------------------------
        write_row(Z, i, z, act, k, m)
        row_update(Sig, mu, z, x, k, noise, 1.0, v, e)
        stats_with_row(G, RX, z, x, k, 1.0)
    return SweepStats(flips, births, deaths, kmax_hit, denied)

@numba.njit(cache=True)
def _window_loglik(C, E, d):
    """Matrix-normal ``log N(X_W; Z_W μ₋W, C_W ⊗ I_D)`` up to ``-WD/2 log 2π`` (the likelihood
    of Doshi-Velez 2009, eq. 4.2 = Doshi-Velez & Ghahramani 2009, eq. 8):
    ``-D/2 log|C| - tr(Eᵀ C⁻¹ E)/2`` by one W×W Cholesky."""
    L = np.linalg.cholesky(C)
    logdet = 0.0
    for i in range(L.shape[0]):
        logdet += 2.0 * math.log(L[i, i])
    Y = forward_sub(L, E)
    return -0.5 * d * logdet - 0.5 * np.sum(Y * Y)


@numba.njit(cache=True)
def _window_ll(Zw, Sig, mu, Xw, k, noise, r, j):
    """``Σ_b log N(X_{W,b}; Z_W μ_b, C_{W,b} ⊗ I)`` over the column blocks, with
    ``C_{W,b} = Z_W Σ_b Z_Wᵀ + σx_b² I`` over the first ``k`` features, plus ``j σa_b²`` on the
    diagonal entry of window row ``r`` (``j`` singletons of that row; ``r = -1``: none)."""
    w = Zw.shape[0]
    Zk = np.ascontiguousarray(Zw[:, :k])
    E = Xw - Zk @ np.ascontiguousarray(mu[:k])
    ll = 0.0
    for b in range(noise.sx2.shape[0]):
        C = Zk @ np.ascontiguousarray(Sig[b, :k, :k]) @ np.ascontiguousarray(Zk.T)
        for i in range(w):
            C[i, i] += noise.sx2[b]
        if r >= 0:
            C[r, r] += j * noise.sa2[b]
        c0, c1 = noise.cols[b], noise.cols[b + 1]
        ll += _window_loglik(C, np.ascontiguousarray(E[:, c0:c1]), c1 - c0)
    return ll


@numba.njit(cache=True)
def accelerated_sweep_window(rng, Z, X, m, noise, alpha, beta, refresh, window):
    """Accelerated sweep removing ``W = window`` rows at a time (Doshi-Velez 2009, §4.2 and
    Alg. 1).

    The posterior ``(Σ₋W, μ₋W)`` of all rows outside the window is obtained by ``W`` rank-one
    downdates; each ``z_nk`` of the window is then drawn from the prior odds times the
    matrix-normal likelihood of the whole window, ``N(X_W; Z_W μ₋W, C_W ⊗ I)`` with
    ``C_W = Z_W Σ₋W Z_Wᵀ + σx² I`` (cost ``O(W³ + W²D + WK)`` per entry), births of row ``n``
    use ``C_W + jσa² e_n e_nᵀ``, and the window is re-added by ``W`` rank-one updates.  The
    conditionals are exactly those of :func:`accelerated_sweep` (the window only changes the
    arithmetic); ``W = 1`` is the cheapest, ``W > 1`` refactorises less often per row.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    nb = noise.sx2.shape[0]
    sa2 = noise.sa2
    act, k, G, RX, Sig, mu = sweep_state(Z, X, m, nb)
    log_lam = log_birth_rate(alpha, beta, n)
    flips = births = deaths = kmax_hit = 0
    v = np.zeros((nb, k_max))
    e = np.zeros(d)
    z = np.zeros(k_max)
    order = np.arange(k_max)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)
    done = 0
    for start in range(0, n, window):
        stop = min(start + window, n)
        w = stop - start
        wrows = rows[start:stop]
        if k > 0 and (start == 0 or (refresh > 0 and done >= refresh)):
            done = 0
            S1, mu1 = posterior_from_stats(G[:k, :k].copy(), RX[:k].copy(), noise)
            Sig[:, :k, :k] = S1
            mu[:k] = mu1
        done += w
        # ---- remove the window ---------------------------------------------------------
        Zw = np.zeros((w, k_max))
        Xw = np.empty((w, d))
        for r in range(w):
            i = wrows[r]
            Xw[r] = X[i]
            for a in range(k):
                Zw[r, a] = 1.0 if Z[i, act[a]] != 0 else 0.0
            row_update(Sig, mu, Zw[r], X[i], k, noise, -1.0, v, e)
            stats_with_row(G, RX, Zw[r], X[i], k, -1.0)
        for a in range(k):  # columns owned only inside the window: exactly the prior
            if G[a, a] == 0.0:
                reset_to_prior(Sig, mu, a, k, sa2)
        # ---- Gibbs the window's rows ---------------------------------------------------
        for r in range(w):
            for a in range(k):
                order[a] = a
            partial_shuffle(rng, order[:k], k)
            ll_cur = _window_ll(Zw, Sig, mu, Xw, k, noise, -1, 0)
            for oi in range(k):
                a = order[oi]
                mk = m[act[a]] - int(Zw[r, a])  # owners other than this row
                if mk == 0:
                    continue
                Zw[r, a] = 1.0 - Zw[r, a]
                ll_new = _window_ll(Zw, Sig, mu, Xw, k, noise, -1, 0)
                lo = prior_logodds(mk, n, beta)
                lo += ll_new - ll_cur if Zw[r, a] != 0.0 else ll_cur - ll_new
                now = int(Zw[r, a])
                keep = bernoulli_logodds(rng, lo)
                if keep == now:
                    flips += 1
                    ll_cur = ll_new
                    m[act[a]] += 1 if now == 1 else -1
                else:
                    Zw[r, a] = 1.0 - Zw[r, a]
            # singletons of this row (no other owner anywhere): drop, then draw the count
            a = np.int64(0)  # not a literal (kernels/split_merge.py): one swap_remove
            while a < k:
                if Zw[r, a] != 0.0 and m[act[a]] == 1:
                    m[act[a]] = 0
                    deaths += 1
                    last = k - 1
                    for rr in range(w):
                        Zw[rr, a] = Zw[rr, last]
                        Zw[rr, last] = 0.0
                    k = swap_remove(a, k, act, Sig, mu, G, RX)
                else:
                    a += 1
            navail = k_max - k
            for j in range(navail + 1):
                logpj[j] = (j * log_lam - math.lgamma(j + 1.0)
                            + _window_ll(Zw, Sig, mu, Xw, k, noise, r, j))
            jnew = categorical_logp(rng, logpj, navail + 1)
            if jnew > 0:
                random_free_slots(rng, act, k, k_max, jnew, free)
                for j in range(jnew):
                    for rr in range(w):
                        Zw[rr, k] = 0.0
                    Zw[r, k] = 1.0
                    m[free[j]] = 1
                    k = append_empty(k, act, free[j], Sig, mu, G, RX, sa2)
                births += jnew
            if k == k_max:
                kmax_hit = 1
        # ---- write back and re-add the window ------------------------------------------
        for r in range(w):
            i = wrows[r]
            for c in range(k_max):
                Z[i, c] = 0
            for a in range(k):
                if Zw[r, a] != 0.0:
                    Z[i, act[a]] = 1
            for a in range(k):
                z[a] = Zw[r, a]
            row_update(Sig, mu, z, X[i], k, noise, 1.0, v, e)
            stats_with_row(G, RX, z, X[i], k, 1.0)
    return SweepStats(flips, births, deaths, kmax_hit, np.nan)

@numba.njit(cache=True)
def _loglik_with_new(G, RX, k, z, x, j, trXX, n, d, noise):
    """``log p(X | Z)`` after appending ``j`` new columns that are 1 in row ``x``'s row only
    (``G``, ``RX`` already include that row with pattern ``z``)."""
    kj = k + j
    Gj = np.zeros((kj, kj))
    RXj = np.zeros((kj, d))
    Gj[:k, :k] = G[:k, :k]
    RXj[:k] = RX[:k]
    for b in range(k, kj):
        RXj[b] = x
        for b2 in range(k, kj):
            Gj[b, b2] = 1.0
        for a in range(k):
            if z[a] != 0.0:
                Gj[a, b] = 1.0
                Gj[b, a] = 1.0
    return collapsed_loglik(Gj, RXj, trXX, n, noise)

@numba.njit(cache=True)
def collapsed_sweep(rng, Z, X, m, noise, alpha, beta, trXX):
    """One sweep of the collapsed Gibbs sampler (Griffiths & Ghahramani 2011; Doshi-Velez 2009,
    eqs. 3.6–3.7).

    The papers write the prior factor as ``(m_k - Z_nk)/N``; with row ``n`` treated as the last
    customer it is ``m₋ₙₖ/N`` for ``z_nk = 1`` and ``(N - m₋ₙₖ)/N`` for ``z_nk = 0``
    (``β = 1``), i.e. the odds ``m/(N-1-m+β)`` below.  The number of new features ranges over
    ``j = 0, 1, ...`` (the thesis text omits ``0``), and ``p(X | Z)`` is evaluated from the
    cached ``ZᵀZ`` and ``ZᵀX`` (:func:`collapsed_loglik`), not in the papers' ``N x N`` form.

    Each ``z_nk`` (``m₋ₙₖ > 0``) is drawn from ``m/(N-1-m+β) · p(X | Z)`` with ``p(X | Z)``
    evaluated in full by :func:`collapsed_loglik` (``O(K³ + K²D)`` each, from cached ``ZᵀZ``,
    ``ZᵀX``); row ``n``'s singleton set is then block-Gibbs sampled over ``j = 0..(free
    slots)`` new features with ``Poisson(j; αβ/(N-1+β)) p(X | Z⁽ʲ⁾)``.  It shares no
    likelihood code with :func:`accelerated_sweep`, which makes it the reference.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    # no posterior is kept here; no_sig / no_mu only satisfy the shared slot helpers
    act, k, G, RX, no_sig, no_mu = sweep_state(Z, X, m, noise.sx2.shape[0])
    log_lam = log_birth_rate(alpha, beta, n)
    flips = births = deaths = kmax_hit = 0
    z = np.zeros(k_max)
    ll = np.zeros(2)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)
    for it in range(n):
        i = rows[it]
        x = X[i]
        for a in range(k):
            z[a] = 1.0 if Z[i, act[a]] != 0 else 0.0
            if z[a] != 0.0:
                m[act[a]] -= 1
        perm = rng.permutation(k)
        for oi in range(k):
            a = perm[oi]
            ma = m[act[a]]
            if ma == 0:
                continue
            old = z[a]
            for val in range(2):
                stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = float(val)
                stats_with_row(G, RX, z, x, k, 1.0)
                ll[val] = collapsed_loglik(G[:k, :k], RX[:k], trXX, n, noise)
                stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = old
                stats_with_row(G, RX, z, x, k, 1.0)
            lo = prior_logodds(ma, n, beta) + ll[1] - ll[0]
            newz = bernoulli_logodds(rng, lo)
            if newz != int(old):
                flips += 1
                stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = float(newz)
                stats_with_row(G, RX, z, x, k, 1.0)
        # singletons: remove from the stats and the active set
        a = np.int64(0)  # not a literal (kernels/split_merge.py): one swap_remove
        while a < k:
            if z[a] != 0.0 and m[act[a]] == 0:
                stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = 0.0
                stats_with_row(G, RX, z, x, k, 1.0)
                deaths += 1
                z[a] = z[k - 1]
                k = swap_remove(a, k, act, no_sig, no_mu, G, RX)
            else:
                a += 1
        navail = k_max - k
        for j in range(navail + 1):
            logpj[j] = (j * log_lam - math.lgamma(j + 1.0)
                        + _loglik_with_new(G, RX, k, z, x, j, trXX, n, d, noise))
        jnew = categorical_logp(rng, logpj, navail + 1)
        if jnew > 0:
            stats_with_row(G, RX, z, x, k, -1.0)
            random_free_slots(rng, act, k, k_max, jnew, free)
            for j in range(jnew):
                z[k] = 1.0
                k = append_empty(k, act, free[j], no_sig, no_mu, G, RX, noise.sa2)
            births += jnew
            stats_with_row(G, RX, z, x, k, 1.0)
        if k == k_max:
            kmax_hit = 1
        write_row(Z, i, z, act, k, m)
    return SweepStats(flips, births, deaths, kmax_hit, np.nan)
