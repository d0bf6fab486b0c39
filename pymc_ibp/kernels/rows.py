"""Per-row kernels of the accelerated sampler, shared by every prior and every sweep (numba).

Given the feature posterior ``(Σ, μ)`` of all rows but one, the row's entries are drawn from
their exact conditionals at ``O(BK + D)`` each (Doshi-Velez & Ghahramani 2009, eq. 7–8 and
Alg. 1, with the rank-one updates written out in :func:`row_update`); ``B`` is the number of
column blocks with their own scales (:class:`pymc_ibp.kernels.gaussian.Noise`),
each with its own ``Σ_b``.  The prior enters only
through one log-odds per entry, so the same kernels serve the IBP's counts, a stick-breaking
prior's feature probabilities and any per-entry prior.

References
----------
.. [1] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
.. [2] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and extensions*.
   MSc thesis, University of Cambridge.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from pymc_ibp._numba_utils import bernoulli_logodds, categorical_logp, partial_shuffle

#: :attr:`SweepPrior.logodds` of the IBP-counts mode (no per-entry log-odds)
NO_LOGODDS = np.zeros((0, 0))

class SweepPrior(NamedTuple):
    """The prior of ``Z`` in a sweep: the IBP's column counts with births
    (:meth:`counts`: ``alpha``, ``beta``; ``logodds`` empty) or one prior log-odds per entry
    without births (:meth:`entries`: ``logodds`` of shape ``N x K_max``)."""

    alpha: float
    beta: float
    logodds: np.ndarray

    @classmethod
    def counts(cls, alpha, beta):
        return cls(float(alpha), float(beta), NO_LOGODDS)

    @classmethod
    def entries(cls, logodds):
        return cls(1.0, 1.0, logodds)


class ObservedRow(NamedTuple):
    """A data row ``x`` (``D``), its 0/1 observed weights ``w`` (empty: every entry
    observed) and its number of observed entries per column block ``dn`` (``B``;
    :func:`row_dims`)."""

    x: np.ndarray
    w: np.ndarray
    dn: np.ndarray


class RowWork(NamedTuple):
    """The per-row buffers of a sweep (:func:`row_work`): the entries' prior log-odds
    ``prior_lo`` and ``skip`` flags (``K_max``, read by :func:`gibbs_row_entries`), the row's
    predictive moments (written by :func:`row_moments`: ``r = x - zμ`` (``D``),
    ``v[b] = Σ_b z`` (``B x K_max``), ``s2`` and ``rr`` (``B``)) and scratch (``pair``,
    ``2 x B``; ``order``, ``K_max``)."""

    prior_lo: np.ndarray
    skip: np.ndarray
    r: np.ndarray
    v: np.ndarray
    s2: np.ndarray
    rr: np.ndarray
    pair: np.ndarray
    order: np.ndarray


@numba.njit(cache=True)
def row_work(d, nb, k_max):
    """Zeroed :class:`RowWork` for rows of ``d`` entries, ``nb`` column blocks and ``k_max``
    feature slots."""
    return RowWork(np.zeros(k_max), np.zeros(k_max, dtype=np.bool_), np.zeros(d),
                   np.zeros((nb, k_max)), np.zeros(nb), np.zeros(nb), np.zeros((2, nb)),
                   np.arange(k_max))


@numba.njit(cache=True)
def sig_z(Sig, z, k, v):
    """``v = Σ z`` (first ``k`` entries) and return ``zᵀ Σ z``."""
    q = 0.0
    for a in range(k):
        s = 0.0
        for b in range(k):
            if z[b] != 0.0:
                s += Sig[a, b]
        v[a] = s
        q += z[a] * s
    return q

@numba.njit(cache=True)
def residual(x, z, mu, k, r):
    """``r = x - z μ`` and return ``‖r‖²``."""
    rr = 0.0
    for t in range(x.shape[0]):
        s = x[t]
        for a in range(k):
            if z[a] != 0.0:
                s -= mu[a, t]
        r[t] = s
        rr += s * s
    return rr

@numba.njit(cache=True)
def row_update(Sig, mu, z, x, k, noise, sign, v, e):
    """Add (``sign=+1``) or remove (``sign=-1``) observation row ``(z, x)`` from the feature
    posterior ``(Σ, μ)`` by a rank-one Sherman–Morrison update of each column block ``b``:

    remove: ``Σ₋ = Σ + v vᵀ/(σx² - zᵀv)``, ``μ₋ = μ - v (x - zμ)ᵀ/(σx² - zᵀv)``;
    add:    ``Σ = Σ₋ - v vᵀ/(σx² + zᵀv)``, ``μ = μ₋ + v (x - zμ₋)ᵀ/(σx² + zᵀv)``; ``v = Σz``

    (``Σ = Σ_b``, ``σx² = σx_b²``, ``μ`` and ``x`` restricted to the block's columns; ``v[b]``
    receives ``Σ_b z``).

    These are the window equations of Doshi-Velez & Ghahramani (2009, §4; Doshi-Velez 2009,
    §4.2) for a window of ``W = 1`` row, in corrected form: the printed window-removal *mean*
    is wrong (and the re-add mean has ``X_i`` for ``X_W``); the printed covariance down-date,
    with its minus sign, is right.  Derivation (``z`` as a column): in information form
    ``P = Σ⁻¹``, ``h = Pμ``, removing the row gives ``P₋ = P - z zᵀ/σx²`` and
    ``h₋ = h - z xᵀ/σx²``.  Sherman–Morrison gives ``Σ₋ = Σ + v vᵀ/c`` with ``c = σx² - zᵀv``;
    since ``vᵀP = zᵀ`` and ``Σ₋z = v σx²/c``, ``μ₋ = Σ₋h₋ = μ + v(zᵀμ)/c - v xᵀ/c``.
    Re-adding the row (``P = P₋ + z zᵀ/σx²``) is the same computation with the opposite sign.
    """
    residual(x, z, mu, k, e)
    for blk in range(noise.sx2.shape[0]):
        S = Sig[blk]
        vb = v[blk]
        q = sig_z(S, z, k, vb)
        c = noise.sx2[blk] + sign * q
        c0, c1 = noise.cols[blk], noise.cols[blk + 1]
        eb = e[c0:c1]  # 1-d views keep the inner loops vectorisable
        for a in range(k):
            va = sign * vb[a] / c
            for b in range(k):
                S[a, b] -= va * vb[b]
            mrow = mu[a, c0:c1]
            for t in range(c1 - c0):
                mrow[t] += va * eb[t]

@numba.njit(cache=True)
def row_moments(Sig, mu, z, row, k, noise, work):
    """Predictive moments of the :class:`ObservedRow` ``row`` with pattern ``z`` under the
    posterior ``(Σ, μ)`` of the other rows, into the :class:`RowWork` ``work``:
    ``r = x - zμ``, and per block ``v[b] = Σ_b z``, ``s2[b] = zᵀΣ_b z + σx_b²`` and
    ``rr[b] = ‖r_b‖²`` (over the row's observed entries, ``w[t] = 1``, when ``w`` is not
    empty: see :func:`row_dims`)."""
    w, r, v, s2, rr = row.w, work.r, work.v, work.s2, work.rr
    total = residual(row.x, z, mu, k, r)
    nb = noise.sx2.shape[0]
    for b in range(nb):
        s2[b] = noise.sx2[b] + sig_z(Sig[b], z, k, v[b])
        if nb == 1 and w.shape[0] == 0:
            rr[0] = total
        else:
            s = 0.0
            for t in range(noise.cols[b], noise.cols[b + 1]):
                s += r[t] * r[t] * (w[t] if w.shape[0] else 1.0)
            rr[b] = s

@numba.njit(cache=True)
def row_dims(noise, w, dn):
    """``dn[b]``: the row's observed entries in block ``b`` (all of them when ``w`` is empty;
    else the sum of the 0/1 weights ``w``)."""
    for b in range(noise.sx2.shape[0]):
        c0, c1 = noise.cols[b], noise.cols[b + 1]
        if w.shape[0] == 0:
            dn[b] = c1 - c0
        else:
            s = 0.0
            for t in range(c0, c1):
                s += w[t]
            dn[b] = s

@numba.njit(cache=True, inline="always")
def row_loglik(s2, rr, noise, dn):
    """``Σ_b log N(x_b; zμ_b, s2[b] I)`` up to ``-D/2 log 2π``, over the ``dn[b]`` observed
    entries of each block."""
    ll = 0.0
    for b in range(noise.sx2.shape[0]):
        ll -= 0.5 * dn[b] * math.log(s2[b]) + 0.5 * rr[b] / s2[b]
    return ll

@numba.njit(cache=True)
def gibbs_row_entries(rng, z, k, row, Sig, mu, noise, work, greedy):
    """Gibbs-sample ``z[a]`` for ``a < k`` with ``skip[a] == False`` (random order), given the
    posterior ``(Σ, μ)`` of the *other* rows (Doshi-Velez & Ghahramani 2009, eq. 8 with a
    window of ``W = 1`` row); ``row`` is an :class:`ObservedRow`, ``work`` a :class:`RowWork`
    holding ``prior_lo`` and ``skip``:

    ``log P(z_a=1)/P(z_a=0) = prior_lo[a] + Σ_b [log N(x_b; z¹μ_b, s²_{1b} I)
    - log N(x_b; z⁰μ_b, s²_{0b} I)]``, ``s²_b = zΣ_b zᵀ + σx_b²``.  ``prior_lo`` carries each
    entry's own prior log-odds (the IBP's ``log m/(N-1-m+β)`` here; a per-entry probability for
    a dependent IBP).  Each test costs ``O(B + D)`` and each flip ``O(BK + D)``.  On return
    ``work`` holds the row's moments (:func:`row_moments`).  With missing entries (``row.w``
    the row's 0/1 observed weights, ``row.dn`` its observed entries per block) the likelihood
    is that of the observed entries only: the row's missing values integrated out.
    Returns the number of flips.
    """
    nb = noise.sx2.shape[0]
    x, w, dn = row.x, row.w, row.dn
    prior_lo, skip, order = work.prior_lo, work.skip, work.order
    r, v, s2, rr = work.r, work.v, work.s2, work.rr
    masked = w.shape[0] > 0
    row_moments(Sig, mu, z, row, k, noise, work)
    ll_cur = row_loglik(s2, rr, noise, dn)
    s2n = work.pair[0]
    rrn = work.pair[1]
    cols = noise.cols
    for a in range(k):
        order[a] = a
    partial_shuffle(rng, order[:k], k)
    flips = 0
    for oi in range(k):
        a = order[oi]
        if skip[a]:
            continue
        delta = 1.0 - 2.0 * z[a]
        mrow = mu[a]
        ll_new = 0.0
        for b in range(nb):
            c0, c1 = cols[b], cols[b + 1]
            sn = s2[b] + 2.0 * delta * v[b, a] + Sig[b, a, a]
            rmu = 0.0
            mm = 0.0
            rb = r[c0:c1]
            mb = mrow[c0:c1]
            if masked:
                wb = w[c0:c1]
                for t in range(c1 - c0):
                    rmu += rb[t] * mb[t] * wb[t]
                    mm += mb[t] * mb[t] * wb[t]
            else:
                for t in range(c1 - c0):
                    rmu += rb[t] * mb[t]
                    mm += mb[t] * mb[t]
            rn = rr[b] - 2.0 * delta * rmu + mm
            s2n[b] = sn
            rrn[b] = rn
            ll_new -= 0.5 * dn[b] * math.log(sn) + 0.5 * rn / sn
        lo = prior_lo[a] + (ll_cur - ll_new if z[a] != 0.0 else ll_new - ll_cur)
        newz = (1 if lo > 0 else 0) if greedy else bernoulli_logodds(rng, lo)
        if newz != int(z[a]):
            flips += 1
            for t in range(x.shape[0]):
                r[t] -= delta * mrow[t]
            ll_cur = ll_new
            for b in range(nb):
                rr[b] = rrn[b]
                s2[b] = s2n[b]
                S = Sig[b]
                vb = v[b]
                for c in range(k):
                    vb[c] += delta * S[c, a]
            z[a] = float(newz)
    return flips

_NEGLIGIBLE = 60.0
"""Nats below the largest term at which :func:`birth_terms` stops: ``e^-60 ≈ 1e-26`` is far
below half a unit in the last place of a sum of at least one."""


@numba.njit(cache=True)
def birth_terms(navail, log_lam, row, noise, work, logpj):
    """``logpj[j] = log p(j)`` (unnormalised) of the number ``j`` of row-``n`` singleton
    features, ``p(j) ∝ Poisson(j; λ) Π_b N(x_b; zμ_b, (s²_b + jσa_b²) I)``, for
    ``j = 0..last``; returns ``last`` (at most ``navail``).

    Eq. 3.7 of Doshi-Velez (2009) (eq. 4 of Doshi-Velez & Ghahramani 2009) with the new
    features' values integrated out (each adds ``σa²`` to the predictive variance and nothing
    to its mean) and ``λ = α/N`` (``αβ/(N-1+β)`` for the two-parameter IBP).  The sum starts at
    ``j = 0``: the thesis text ranges over ``1..k_max``, which would force a new feature on
    every row.  ``row``: the :class:`ObservedRow` (its observed entries per block ``dn``);
    ``work``: the :class:`RowWork` holding its moments ``s2``, ``rr``.

    The terms stop at the first ``j`` past the modes of both factors at which ``log p(j)`` is
    :data:`_NEGLIGIBLE` nats below the largest so far: every later term is smaller and would
    round away in any sum, so a draw over ``0..last`` is the one over all ``navail + 1``
    terms, at a cost set by the row's data rather than by ``K_max``."""
    s2, rr, dn = work.s2, work.rr, row.dn
    nb = noise.sx2.shape[0]
    lam = math.exp(log_lam)
    lf = 0.0  # log j!
    mx = -np.inf
    last = navail
    for j in range(navail + 1):
        if j > 1:
            lf += math.log(j)
        lp = j * log_lam - lf
        past_modes = j + 1 > lam  # the Poisson terms decrease from here on ...
        for b in range(nb):
            hd = 0.5 * dn[b]
            sj = s2[b] + j * noise.sa2[b]
            q = 0.5 * rr[b]
            lp -= hd * math.log(sj) + q / sj
            if hd * sj < q:  # ... and block b's likelihood terms too once s_j ≥ q / hd
                past_modes = False
        logpj[j] = lp
        mx = max(mx, lp)
        if past_modes and lp < mx - _NEGLIGIBLE:
            last = j  # every later term is below this one: each would round away in the sum
            break
    return last


@numba.njit(cache=True)
def draw_count(rng, logpj, last, greedy):
    """A draw ``j ∈ 0..last`` with ``p(j) ∝ exp(logpj[j])`` (the mode when ``greedy``)."""
    if greedy:
        best = 0
        for j in range(last + 1):
            if logpj[j] > logpj[best]:
                best = j
        return best
    return categorical_logp(rng, logpj, last + 1)


@numba.njit(cache=True)
def excess_count(logpj, last, navail):
    """``E[(j - navail)⁺]`` under ``p(j) ∝ exp(logpj[j])``, ``j = 0..last``: the features a row
    wants beyond the ``navail`` free slots (0 when ``last ≤ navail``)."""
    if last <= navail:
        return 0.0
    mx = -np.inf
    for j in range(last + 1):
        mx = max(mx, logpj[j])
    tot = 0.0
    ex = 0.0
    for j in range(last + 1):
        w = math.exp(logpj[j] - mx)
        tot += w
        if j > navail:
            ex += (j - navail) * w
    return ex / tot


@numba.njit(cache=True)
def birth_count(rng, navail, log_lam, row, noise, work, logpj, greedy):
    """Draw the number ``j ∈ 0..navail`` of row-``n`` singleton features from the terms of
    :func:`birth_terms`."""
    return draw_count(rng, logpj, birth_terms(navail, log_lam, row, noise, work, logpj),
                      greedy)
