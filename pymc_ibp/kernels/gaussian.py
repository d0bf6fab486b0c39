"""The linear-Gaussian likelihood with the features integrated out (numba).

``X = Z A + ε``, ``ε ~ N(0, σx² I)``, ``A ~ N(0, σa² I)`` (Griffiths & Ghahramani 2011, §5;
Doshi-Velez & Ghahramani 2009, eq. 2), generalised to column *blocks*: the columns of ``X``
fall into ``B`` contiguous blocks, block ``b`` with its own noise variance ``σx_b²`` and
feature-prior variance ``σa_b²`` (:class:`Noise`).  This covers one ``Z`` shared by several
observed matrices, each with its own ``A`` and scales (their columns stacked), and
per-dimension noise scales (one block per column).  Given ``Z`` the blocks are independent,
so each has its own feature posterior while ``G = ZᵀZ`` is shared.

Everything here is a function of the sufficient statistics ``G = ZᵀZ`` and ``RX = ZᵀX`` over
the active columns, which are sums over rows and therefore add across data shards:

* the feature posterior of each block ``P_b = G/σx_b² + I/σa_b²``, ``Σ_b = P_b⁻¹``,
  ``μ[:, b] = Σ_b RX[:, b]/σx_b²``;
* the collapsed likelihood ``log p(X | Z)`` and the collapsed log joint
  ``log p(X | Z) + log P(Z)``;
* the exact draw of ``A | Z, X``.

References
----------
.. [1] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *JMLR* 12, 1185–1224.
.. [2] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from pymc_ibp.distributions.ibp_math import ibp_log_pmf
from pymc_ibp.kernels.linalg import backward_sub_t, chol_inverse, forward_sub

LOG2PI = math.log(2.0 * math.pi)


class Noise(NamedTuple):
    """The variances of the linear-Gaussian likelihood by column block (a numba-friendly
    named tuple): block ``b`` is columns ``cols[b]:cols[b+1]`` with noise variance ``sx2[b]``
    and feature-prior variance ``sa2[b]``.  Build it with :func:`noise_blocks`."""

    cols: np.ndarray  # int64, B + 1 block boundaries, cols[0] = 0, cols[B] = D
    sx2: np.ndarray  # float64, B noise variances σx_b²
    sa2: np.ndarray  # float64, B feature-prior variances σa_b²


def _variances(sx2, sa2, d, k=None):
    """``σx²`` per column (``D``) and ``σa²`` per column (``D``, or ``K x D`` per feature and
    column), broadcast from scalars and checked positive and finite."""
    sx2 = np.broadcast_to(np.asarray(sx2, dtype=np.float64), (d,))
    sa2 = np.broadcast_to(np.asarray(sa2, dtype=np.float64), (d,) if k is None else (k, d))
    if not (np.all(np.isfinite(sx2)) and np.all(sx2 > 0) and np.all(np.isfinite(sa2))
            and np.all(sa2 > 0)):
        raise ValueError("The noise and feature variances must be positive and finite.")
    return sx2, sa2


def _column_runs(sx2, sa2):
    """The bounds ``cols`` (``B + 1``) of the runs of adjacent columns with equal ``σx²`` and
    equal ``σa²`` (every row of a ``K x D`` ``sa2``)."""
    d = sx2.shape[0]
    change = (sx2[1:] != sx2[:-1]) | np.any(np.atleast_2d(sa2)[:, 1:]
                                             != np.atleast_2d(sa2)[:, :-1], axis=0)
    return np.concatenate([[0], np.flatnonzero(change) + 1, [d]]).astype(np.int64)


def noise_blocks(sx2, sa2, d) -> Noise:
    """:class:`Noise` from per-column (length ``D``) or scalar variances; runs of adjacent
    columns with equal ``(σx², σa²)`` form one block, so scalar scales give ``B = 1``."""
    sx2, sa2 = _variances(sx2, sa2, d)
    cols = _column_runs(sx2, sa2)
    starts = cols[:-1]
    return Noise(cols, np.ascontiguousarray(sx2[starts]), np.ascontiguousarray(sa2[starts]))


@numba.njit(cache=True)
def column_moments(X):
    """Per column of ``X``: the number of finite entries, their mean and their sum of squared
    deviations from it (NaN entries skipped), in two passes over the rows and no ``N x D``
    temporary.  The data summaries below are sums of these."""
    n, d = X.shape
    count = np.zeros(d)
    mean = np.zeros(d)
    m2 = np.zeros(d)
    for i in range(n):
        for j in range(d):
            if not np.isnan(X[i, j]):
                count[j] += 1.0
                mean[j] += X[i, j]
    for j in range(d):
        mean[j] = mean[j] / count[j] if count[j] > 0 else 0.0
    for i in range(n):
        for j in range(d):
            if not np.isnan(X[i, j]):
                dev = X[i, j] - mean[j]
                m2[j] += dev * dev
    return count, mean, m2


def column_sq_norms(X) -> np.ndarray:
    """``‖X_·d‖²`` of each column (NaN entries skipped)."""
    count, mean, m2 = column_moments(np.ascontiguousarray(X, dtype=np.float64))
    return m2 + count * mean * mean


def block_sq_norms(X, noise, colsq=None) -> np.ndarray:
    """``‖X_b‖²`` of each column block (the ``trXX`` argument of the kernels), from the
    columns' sums of squares ``colsq`` when the caller keeps them (data that do not change)."""
    if colsq is None:
        colsq = column_sq_norms(X)
    return np.add.reduceat(colsq, np.asarray(noise.cols[:-1]))


def block_variances(X, cols) -> np.ndarray:
    """The variance of the entries of each column block ``cols[b]:cols[b+1]`` of ``X``, NaN
    entries ignored (the annealing's starting noise variances): the columns' moments pooled
    about the block's mean."""
    count, mean, m2 = column_moments(np.ascontiguousarray(X, dtype=np.float64))
    out = []
    for a, b in zip(cols[:-1], cols[1:], strict=True):
        n = count[a:b].sum()
        grand = float(np.dot(count[a:b], mean[a:b])) / n
        out.append(float(m2[a:b].sum() + np.dot(count[a:b], (mean[a:b] - grand) ** 2)) / n)
    return np.array(out)


def centred_spread(X) -> float:
    """The root mean square of the column-centred entries of ``X`` (NaN entries skipped)."""
    count, _, m2 = column_moments(np.ascontiguousarray(X, dtype=np.float64))
    return float(np.sqrt(m2.sum() / count.sum()))


@numba.njit(cache=True)
def suff_stats(Z, X, act):
    """``G = Z_actᵀ Z_act`` and ``RX = Z_actᵀ X`` (the shard-summable statistics)."""
    n, d = X.shape
    k = act.shape[0]
    G = np.zeros((k, k))
    RX = np.zeros((k, d))
    for i in range(n):
        for a in range(k):
            if Z[i, act[a]] != 0:
                for t in range(d):
                    RX[a, t] += X[i, t]
                for b in range(k):
                    if Z[i, act[b]] != 0:
                        G[a, b] += 1.0
    return G, RX

@numba.njit(cache=True)
def stats_with_row(G, RX, z, x, k, sign):
    """Add (``sign=+1``) or remove (``-1``) one row's terms of ``G = ZᵀZ`` and ``RX = ZᵀX``."""
    for a in range(k):
        if z[a] != 0.0:
            for t in range(x.shape[0]):
                RX[a, t] += sign * x[t]
            for b in range(k):
                if z[b] != 0.0:
                    G[a, b] += sign

@numba.njit(cache=True)
def posterior_from_stats(G, RX, noise):
    """Feature posterior ``p(A | Z, X)`` (Doshi-Velez & Ghahramani 2009, eq. 6, in information
    form), block by block: ``P_b = G/σx_b² + I/σa_b²``, ``Σ_b = P_b⁻¹`` and
    ``μ[:, b] = Σ_b RX[:, b]/σx_b²``.  Returns ``(Σ, μ)`` with ``Σ`` of shape ``B x K x K``."""
    k = G.shape[0]
    nb = noise.sx2.shape[0]
    Sig = np.empty((nb, k, k))
    mu = np.empty(RX.shape)
    for b in range(nb):
        P = G / noise.sx2[b]
        for i in range(k):
            P[i, i] += 1.0 / noise.sa2[b]
        S, _ = chol_inverse(P)
        Sig[b] = S
        c0, c1 = noise.cols[b], noise.cols[b + 1]
        mu[:, c0:c1] = (S @ np.ascontiguousarray(RX[:, c0:c1])) / noise.sx2[b]
    return Sig, mu

@numba.njit(cache=True)
def _block_loglik(G, RX, trXX, n, d, sx2, sa2):
    k = G.shape[0]
    ratio = sx2 / sa2
    lp = -0.5 * n * d * LOG2PI - 0.5 * (n - k) * d * math.log(sx2) - 0.5 * k * d * math.log(sa2)
    if k == 0:
        return lp - 0.5 * trXX / sx2
    Mi = G.copy()
    for i in range(k):
        Mi[i, i] += ratio
    M, logdet = chol_inverse(Mi)
    quad = 0.0
    MR = M @ RX
    for a in range(k):
        for t in range(d):
            quad += RX[a, t] * MR[a, t]
    return lp - 0.5 * d * logdet - 0.5 * (trXX - quad) / sx2

@numba.njit(cache=True)
def collapsed_loglik(G, RX, trXX, n, noise):
    """``log p(X | Z)`` with ``A`` integrated out (Griffiths & Ghahramani 2011, §5), summed over
    the column blocks (``trXX[b] = ‖X_b‖²``).  For one block of ``D`` columns:

    ``-ND/2 log 2π - (N-K)D log σx - KD log σa - D/2 log|ZᵀZ + σx²/σa² I|
    - (‖X‖² - tr(RXᵀ M RX)) / (2σx²)``, ``M = (ZᵀZ + σx²/σa² I)⁻¹``, costing ``O(K³ + K²D)``.

    This is the corrected form of eq. 5 of Doshi-Velez & Ghahramani (2009) (= eq. A.2 of
    Doshi-Velez 2009), whose exponent ``Xᵀ(I - ZMZᵀ)X`` is printed without the trace.
    Derivation: the ``D`` columns of ``X`` are independent ``N(0, σa² ZZᵀ + σx² I_N)``
    vectors and ``(σa² ZZᵀ + σx² I_N)⁻¹ = (I - ZMZᵀ)/σx²`` (Woodbury), so their quadratic
    forms add up to ``tr(Xᵀ(I - ZMZᵀ)X)/σx²``, and
    ``tr(Xᵀ(I - ZMZᵀ)X) = ‖X‖² - tr((ZᵀX)ᵀ M (ZᵀX))``.  Written with the cached ``ZᵀZ`` and
    ``ZᵀX`` the cost does not depend on ``N`` (the papers' ``O(N³)`` refers to the ``N x N``
    form).
    """
    total = 0.0
    for b in range(noise.sx2.shape[0]):
        c0, c1 = noise.cols[b], noise.cols[b + 1]
        total += _block_loglik(G, np.ascontiguousarray(RX[:, c0:c1]), trXX[b], n, c1 - c0,
                               noise.sx2[b], noise.sa2[b])
    return total

def tempered_loglik(G, RX, trXX, n, noise, temperature):
    """``log ∫ p(X | Z, A)^τ p(A) dA`` of the linear-Gaussian model at ``τ = temperature``
    in ``[0, 1]`` (the tempered likelihood of sequential Monte Carlo, Del Moral, Doucet &
    Jasra 2006), from ``G = ZᵀZ``, ``RX = ZᵀX`` of the active columns and ``trXX`` per block.
    A Gaussian likelihood to the power ``τ`` is the same likelihood with noise ``σx²/τ`` times
    a constant, so per block of ``d_b`` columns

    ``log ℓ_τ = N d_b (-(τ/2) log 2πσx² + (1/2) log 2πσx²/τ) + log p(X_b | Z; σx²/τ, σa²)``

    (:func:`collapsed_loglik` at the hot noise); ``0`` at ``τ = 0`` and the collapsed
    log-likelihood at ``τ = 1``."""
    if temperature <= 0.0:
        return 0.0
    widths = np.diff(noise.cols)
    log2pi_sx2 = LOG2PI + np.log(noise.sx2)
    const = float(np.sum(n * widths * (-0.5 * temperature * log2pi_sx2
                                       + 0.5 * (log2pi_sx2 - math.log(temperature)))))
    hot = Noise(noise.cols, noise.sx2 / temperature, noise.sa2)
    return const + collapsed_loglik(G, RX, trXX, n, hot)


def collapsed_spectrum(G, RX, k_max):
    """The spectrum of the collapsed likelihood of one ``Z``: the eigenvalues ``g`` of
    ``G = ZᵀZ`` (active columns) and ``q[i, t] = (v_iᵀ RX[:, t])²`` for its eigenvectors
    ``v_i``, zero-padded to ``k_max`` rows (:func:`tempered_loglik_columns`)."""
    g = np.zeros(k_max)
    q = np.zeros((k_max, RX.shape[1]))
    k = G.shape[0]
    if k:
        w, V = np.linalg.eigh(G)
        g[:k] = np.maximum(w, 0.0)
        q[:k] = (V.T @ RX) ** 2
    return g, q


def tempered_loglik_columns(g, q, colsq, n, sx2, sa2, temperature):
    """:func:`tempered_loglik` of many particles at once from their spectra
    (:func:`collapsed_spectrum`; ``g``: ``P x K``, ``q``: ``P x K x D``), the data's column
    sums of squares ``colsq`` (``D``) and per-column variances ``sx2``, ``sa2`` (``P x D``).
    Per column, with ``s = σx²/τ`` and ``a = σa²``, ``det(sI + aZZᵀ) = s^N Π_i (1 + a g_i/s)``
    and ``xᵀ(sI + aZZᵀ)⁻¹x = (‖x‖² - Σ_i (v_iᵀZᵀx)²/(s/a + g_i))/s``, so that a temperature
    costs ``O(P K D)`` without a factorisation."""
    if temperature <= 0.0:
        return np.zeros(g.shape[0])
    s = sx2 / temperature  # P x D
    a = sa2
    logdet = n * np.log(s) + np.log1p(a[:, None, :] * g[:, :, None] / s[:, None, :]).sum(1)
    quad = (colsq[None, :] - (q / (s[:, None, :] / a[:, None, :] + g[:, :, None])).sum(1)) / s
    log2pi_sx2 = LOG2PI + np.log(sx2)
    const = n * (-0.5 * temperature * log2pi_sx2 + 0.5 * (log2pi_sx2 - math.log(temperature)))
    return (const - 0.5 * (n * LOG2PI + logdet + quad)).sum(axis=1)


def tempered_loglik_slope_columns(g, q, colsq, n, sx2, sa2, temperature):
    """``d/dτ`` of :func:`tempered_loglik_columns` for many particles at once: by the
    identity of thermodynamic integration (Gelman & Meng 1998) the mean of it over particles
    drawn at ``τ`` is ``d log p_τ(X)/dτ``.  Written without the ``1/τ`` terms that cancel, so
    that it holds down to ``τ = 0`` (per column, with ``u_i = σx² + τσa²g_i``):
    ``-n log(2πσx²)/2 - Σ_i σa²g_i/(2u_i) - (‖x‖² - Σ_i τσa²q_i/u_i)/(2σx²)
    + Σ_i τσa²q_i/(2u_i²)``; at ``τ = 0`` the expectation of ``log p(X | Z, A)`` over the prior
    of ``A``."""
    tau = float(temperature)
    s2, a = sx2[:, None, :], sa2[:, None, :]  # P x 1 x D
    ag = a * g[:, :, None]  # P x K x D
    u = s2 + tau * ag
    w = tau * a * q / u
    resid = colsq[None, :] - w.sum(axis=1)
    slope = (-0.5 * n * (LOG2PI + np.log(sx2)) - 0.5 * (ag / u).sum(axis=1)
             - 0.5 * resid / sx2 + 0.5 * (w / u).sum(axis=1))
    return slope.sum(axis=1)


def marchenko_pastur_median(beta):
    """The median of the Marchenko–Pastur law of aspect ratio ``beta`` in ``(0, 1]`` with unit
    variance: of the eigenvalues of ``EᵀE / n`` for an ``n x m`` (``m = beta n``) matrix of
    standard normal noise, as ``n`` grows."""
    from scipy import integrate, optimize

    beta = float(beta)
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta must lie in (0, 1]; got {beta!r}.")
    lo, hi = (1.0 - math.sqrt(beta)) ** 2, (1.0 + math.sqrt(beta)) ** 2

    def density(x):
        return math.sqrt(max((hi - x) * (x - lo), 0.0)) / (2.0 * math.pi * beta * x)

    def cdf(x):
        return integrate.quad(density, lo, x, limit=200)[0]

    return float(optimize.brentq(lambda x: cdf(x) - 0.5, lo, hi, xtol=1e-12))


def noise_scale_estimate(X):
    """A robust estimate of the noise scale of ``X = signal + σE`` (``E`` standard normal)
    whose signal has low rank: the median singular value of ``X`` over its value under pure
    noise, ``σ̂ = s_med / sqrt(n μ_β)`` with ``n = max(N, D)``, ``β = min(N, D) / n`` and
    ``μ_β`` the median of the Marchenko–Pastur law (Gavish & Donoho 2014, eq. 3).  Biased
    upwards when the signal's rank is not small against ``min(N, D)``."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    gram = X.T @ X if d <= n else X @ X.T
    eig = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    big, small = max(n, d), min(n, d)
    return float(math.sqrt(np.median(eig) / (big * marchenko_pastur_median(small / big))))


@numba.njit(cache=True)
def draw_active_features(rng, G, RX, noise):
    """``A_act ~ N(μ, Σ)`` column-wise (Doshi-Velez & Ghahramani 2009, eq. 6), per block of
    :class:`Noise`: :func:`draw_active_blocks` with the prior precision ``1/σa_b²`` of every
    feature."""
    nb = noise.sx2.shape[0]
    prec = np.empty((nb, G.shape[0]))
    for b in range(nb):
        prec[b, :] = 1.0 / noise.sa2[b]
    return draw_active_blocks(rng, G, RX, noise.cols, noise.sx2, prec)


@numba.njit(cache=True)
def draw_active_blocks(rng, G, RX, cols, sx2, prior_prec):
    """``A_act ~ N(μ, Σ)`` column-wise, per block ``b`` of columns ``cols[b]:cols[b+1]`` with
    noise variance ``sx2[b]`` and the features' prior precisions ``prior_prec[b]`` (``K``):
    one Cholesky ``P_b = L Lᵀ`` of ``P_b = G/σx_b² + diag(prior_prec[b])``;
    ``μ = L⁻ᵀ L⁻¹ RX_b/σx_b²``, ``A_b = μ + L⁻ᵀ ε``."""
    k, d = RX.shape
    A = np.empty((k, d))
    for b in range(sx2.shape[0]):
        c0, c1 = cols[b], cols[b + 1]
        P = G / sx2[b]
        for i in range(k):
            P[i, i] += prior_prec[b, i]
        L = np.linalg.cholesky(P)
        eps = np.empty((k, c1 - c0))
        for i in range(k):
            for t in range(c1 - c0):
                eps[i, t] = rng.standard_normal()
        rhs = np.ascontiguousarray(RX[:, c0:c1]) / sx2[b]
        A[:, c0:c1] = backward_sub_t(L, forward_sub(L, rhs) + eps)
    return A


def _as_noise(noise_or_sx2, sa2, d):
    if isinstance(noise_or_sx2, Noise):
        return noise_or_sx2
    return noise_blocks(noise_or_sx2, sa2, d)


def draw_features(rng, Z, X, sx2, sa2=None):
    """``A | Z, X`` for all ``K_max`` slots: active rows from :func:`draw_active_features`,
    empty slots from the prior ``N(0, σa²)``.  ``sx2`` is a :class:`Noise` (then ``sa2`` is
    unused) or the variances, scalars or per column; ``sa2`` may also be ``K_max x D`` (a
    prior variance per feature and column, :func:`draw_active_blocks` over the runs of
    columns with equal variances)."""
    if sa2 is not None and np.ndim(sa2) == 2 and not isinstance(sx2, Noise):
        return _draw_features_per_entry(rng, Z, X, sx2, sa2)
    noise = _as_noise(sx2, sa2, X.shape[1])
    k_max = Z.shape[1]
    sa_col = np.sqrt(np.repeat(noise.sa2, np.diff(noise.cols)))
    A = rng.normal(0.0, 1.0, size=(k_max, X.shape[1])) * sa_col
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    if act.size:
        G, RX = suff_stats(Z, X, act)
        A[act] = draw_active_features(rng, G, RX, noise)
    return A


def _draw_features_per_entry(rng, Z, X, sx2, sa2):
    """:func:`draw_features` with prior variances ``sa2`` per feature and column."""
    k_max, d = Z.shape[1], X.shape[1]
    sx2, sa2 = _variances(sx2, sa2, d, k_max)
    A = rng.normal(0.0, 1.0, size=(k_max, d)) * np.sqrt(sa2)
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    if act.size:
        G, RX = suff_stats(Z, X, act)
        va = sa2[act]
        cols = _column_runs(sx2, va)
        starts = cols[:-1]
        prec = np.ascontiguousarray((1.0 / va[:, starts]).T)
        A[act] = draw_active_blocks(rng, G, RX, cols, np.ascontiguousarray(sx2[starts]), prec)
    return A


@numba.njit(cache=True)
def collapsed_log_joint(G, RX, m_act, trXX, n, noise, alpha, beta, k_max):
    """``(log p(X | Z) + log P(Z), log p(X | Z))`` under :class:`pymc_ibp.IBP`: the collapsed
    likelihood (:func:`collapsed_loglik`) plus the truncated IBP pmf
    (:func:`pymc_ibp.distributions.ibp_math.ibp_log_pmf`) of the active column sizes
    ``m_act``.  The ``ibp_log_joint`` sample stat, the multi-start selection and the
    benchmarks all use this function."""
    loglik = collapsed_loglik(G, RX, trXX, n, noise)
    return loglik + ibp_log_pmf(m_act, n, k_max, alpha, beta), loglik


#: ``rows`` argument of the kernels that read an offset (:func:`offset_row`): the offset is
#: not read by group
NO_ROWS = np.zeros(0, dtype=np.int64)


@numba.njit(cache=True, inline="always")
def offset_row(off, rows, i):
    """The row of an offset table ``off`` that data row ``i`` reads: ``rows[i]`` when the
    offset is held one row per group (``rows`` every row's row of ``off``), else ``i`` when
    ``off`` has a row per data row, else ``0`` (one row added to every row; ``rows`` is
    :data:`NO_ROWS` in both cases)."""
    if rows.shape[0] > 0:
        return rows[i]
    return i if off.shape[0] != 1 else 0


@numba.njit(cache=True)
def residual_sq_sum(X, xc, Z, A, off, oc, rows):
    """``‖X_b − off_b − Z A‖²`` in one pass over the rows, no ``N x D`` temporary: ``X_b``
    the columns ``xc : xc + D_b`` of ``X``, ``off_b`` the columns ``oc : oc + D_b`` of
    ``off`` (``N`` rows, or one row added to every row, or one row per group with ``rows``
    every row's row of ``off``, as in :func:`offset_row`), ``A`` ``K x D_b``, ``Z`` binary
    ``N x K``.  The noise scale's sufficient statistic (:class:`~pymc_ibp.IBPScaleSlice`)."""
    n, k = Z.shape
    d = A.shape[1]
    r = np.empty(d)
    total = 0.0
    for i in range(n):
        oi = offset_row(off, rows, i)
        for j in range(d):
            r[j] = X[i, xc + j] - off[oi, oc + j]
        for t in range(k):
            if Z[i, t] != 0:
                for j in range(d):
                    r[j] -= A[t, j]
        for j in range(d):
            total += r[j] * r[j]
    return total


def observed_loglik(Z, X, miss, noise):
    """``log p(X_obs | Z)``, ``A`` integrated out, when the entries ``miss`` (``N x D``
    boolean) of ``X`` are missing: the columns of ``X`` are independent given ``Z`` (``A``'s
    columns are a priori), so column ``d`` contributes :func:`collapsed_loglik`'s one-column
    term over its observed rows, with ``G_d = ZᵀZ - Z_misᵀ Z_mis`` (``Z_mis`` its missing
    rows) and ``(ZᵀX)_d`` over its observed rows.  ``O(N K D + D K³)``.  The exact criterion of
    the start search with missing data (the values imputed in ``X[miss]`` are ignored)."""
    Zf = np.asarray(Z, dtype=np.float64)
    Zf = Zf[:, Zf.sum(axis=0) > 0]
    miss = np.asarray(miss, dtype=bool)
    Xo = np.where(miss, 0.0, X)
    G = Zf.T @ Zf
    RX = Zf.T @ Xo
    total = 0.0
    for b in range(noise.sx2.shape[0]):
        for d in range(noise.cols[b], noise.cols[b + 1]):
            Zm = Zf[miss[:, d]]
            Gd = np.ascontiguousarray(G - Zm.T @ Zm)
            x = Xo[:, d]
            total += _block_loglik(Gd, np.ascontiguousarray(RX[:, d:d + 1]), float(x @ x),
                                   int(miss.shape[0] - miss[:, d].sum()), 1,
                                   noise.sx2[b], noise.sa2[b])
    return total


def log_joint_of(Z, X, sx2, sa2, alpha, beta=1.0, trXX=None):
    """:func:`collapsed_log_joint` of a whole ``N x K_max`` matrix ``Z`` (Python entry point:
    the statistics are computed from ``Z`` at ``O(N K (K + D))``).  ``sx2`` and ``sa2`` are
    scalars or per-column variances (or ``sx2`` a :class:`Noise`)."""
    Z = np.asarray(Z, dtype=np.int8)
    noise = _as_noise(sx2, sa2, X.shape[1])
    trXX = block_sq_norms(X, noise) if trXX is None else np.asarray(trXX, dtype=np.float64)
    return matrix_log_joint(Z, X, Z.sum(axis=0).astype(np.int64), noise, float(alpha),
                            float(beta), trXX.reshape(-1))


@numba.njit(cache=True)
def matrix_log_joint(Z, X, m, noise, alpha, beta, trXX):
    """:func:`collapsed_log_joint` of a whole ``N x K_max`` matrix ``Z`` with column counts
    ``m`` (the numba form of :func:`log_joint_of`)."""
    act = np.nonzero(m > 0)[0]
    G, RX = suff_stats(Z, X, act)
    return collapsed_log_joint(G, RX, m[act].astype(np.int64), trXX, Z.shape[0], noise, alpha,
                               beta, Z.shape[1])


def data_start(X, role, spread=None):
    """Data-driven starting value of a scale: the spread ``s`` (root mean square) of the
    column-centred data ``X`` (NaN ignored; or ``spread`` given, e.g. from the column sums of
    sharded data) for ``sigma_a``, ``s/2`` for ``sigma_x``.  Used when the user gave no
    initial value (PyMC's default start, the prior's support point, can be far from the
    data's scale) by :class:`IBPScaleSlice` and :func:`pymc_ibp.inference.fit_variational`."""
    if spread is None:
        spread = centred_spread(X)
    return spread / 2.0 if role == "sigma_x" else spread
