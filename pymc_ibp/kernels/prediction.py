"""New rows of a linear-Gaussian IBP model given one posterior draw of the fitted rows: rows
drawn from the IBP's predictive (:func:`predictive_rows`) and the features of observed new
rows (:func:`fold_in_rows`).  Each new row is row ``N + 1`` of an ``(N + 1)``-row IBP
truncated to ``K_max`` slots (Griffiths & Ghahramani 2011, the prior conditionals of
:func:`pymc_ibp.distributions.ibp_math.ibp_entry_logodds`): existing feature ``k`` with
probability ``m_k / (N + β)``, new features in free slots at the rate ``αβ / (N + β)``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_ibp.distributions.ibp_math import ibp_entry_logodds, log_birth_rate
from pymc_ibp.exceptions import DataError

__all__ = ["MAX_ENUMERATED", "MAX_PATTERNS", "FittedDraw", "fold_in_rows", "new_row_patterns",
           "predictive_rows", "row_log_predictive", "subset_bits",
           "subset_log_probs"]


def subset_bits(k):
    """Every subset of ``k`` items as a row of 0/1 (``2^k x k``, int8; row ``r`` holds the
    bits of ``r``, lowest first)."""
    return ((np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1).astype(np.int8)


class FittedDraw(NamedTuple):
    """One posterior draw of a fitted linear-Gaussian IBP model, as the new rows see it: the
    features ``A`` (``K_max x D``, every slot), the offset ``b`` (``D``), the column counts
    ``m`` of the ``n`` fitted rows, and the IBP's ``alpha`` and ``beta``."""

    A: np.ndarray
    b: np.ndarray
    m: np.ndarray
    n: int
    alpha: float
    beta: float


def predictive_rows(rng, m, n, alpha, beta, n_new, attempts=1000):
    """``n_new`` rows (int8, ``n_new x K_max``) from the predictive of an IBP(``alpha``,
    ``beta``) truncated to ``K_max`` slots whose ``n`` fitted rows have column counts ``m``:
    the new rows of an ``(n + n_new)``-row truncated IBP given the fitted ones.  Drawn one
    after the other from the IBP's predictive without the truncation (row ``n + j`` sees the
    counts before it: existing features Bernoulli ``c_k / (n' + β)``, ``Poisson(αβ / (n' +
    β))`` new features in uniformly random free slots) and kept when every new feature found a
    slot: the truncated IBP is the untruncated one given ``K_+ ≤ K_max``, and the untruncated
    one is projective, so the kept sets are exact draws.  Raises
    :class:`~pymc_ibp.exceptions.DataError` when ``attempts`` sets in a row needed more
    slots."""
    m = np.asarray(m, dtype=np.int64)
    k_max = m.size
    for _ in range(attempts):
        counts = m.copy()
        out = np.zeros((n_new, k_max), dtype=np.int8)
        fits = True
        for j in range(n_new):
            seen = n + j  # rows before this one
            used = counts > 0
            if seen > 0:
                p = counts[used] / (seen + beta)
                out[j, used] = rng.random(p.size) < p
            births = rng.poisson(alpha * beta / (seen + beta))
            free = np.flatnonzero(~used)
            if births > free.size:
                fits = False
                break
            out[j, rng.choice(free, size=births, replace=False)] = 1
            counts += out[j]
        if fits:
            return out
    raise DataError(
        f"pmi.predict_rows: {attempts} draws of {n_new} new rows in a row needed more than "
        f"K_max = {k_max} feature slots; raise K_max (the last entry of the IBP's shape) or "
        "draw fewer rows at a time.")


def fold_in_rows(rng, X, W, fit, sweeps, Z=None, loglik=None):
    """Features of the observed new rows ``X`` (``R x D``; ``W`` the precisions
    ``1/σx²`` per entry, 0 where an entry is missing) given one draw of the fitted model
    (:class:`FittedDraw`: the features ``A``, the offset ``b`` and the counts ``m`` of the
    ``n`` fitted rows under the IBP(``alpha``, ``beta``)).  Each row is drawn by
    ``sweeps`` Gibbs scans of its entries from ``Z`` (default all zero), each entry from its
    exact conditional: the truncated IBP's prior log-odds for row ``n + 1``
    (:func:`~pymc_ibp.distributions.ibp_math.ibp_entry_logodds`) plus the log-likelihood
    ratio of the row with and without the feature: Gaussian from ``A``, ``b`` and ``W``, or,
    under any other likelihood, ``loglik(Z)`` (the ``R`` rows' log-likelihoods at ``Z``,
    e.g. a compiled model's; two evaluations per column and scan; ``X``, ``W``, ``A`` and
    ``b`` are then unused, ``A`` only gives ``K_max``).  The rows are independent given the
    draw (each is row ``n + 1``).  Returns ``Z`` (int8, ``R x K_max``)."""
    A, b, m, n, alpha, beta = fit
    k_max = A.shape[0]
    rows = X.shape[0]
    Z = np.zeros((rows, k_max), dtype=np.int8) if Z is None else Z.astype(np.int8)
    m = np.asarray(m, dtype=np.int64)
    fitted = m > 0
    log_lam = log_birth_rate(alpha, beta, n + 1)
    if loglik is None:
        X = np.where(W > 0, X, 0.0)
        R = X - b - Z @ A  # residuals
    lo_used = np.array([ibp_entry_logodds(int(m[k]), 0, n + 1, k_max, log_lam, beta)
                        for k in range(k_max)])
    for _ in range(sweeps):
        for k in rng.permutation(k_max):
            if loglik is None:
                zk = Z[:, k].astype(np.float64)
                r0 = R + zk[:, None] * A[k]  # the residuals without feature k
                delta = 0.5 * np.sum((2.0 * r0 - A[k]) * A[k] * W, axis=1)
            else:
                Z[:, k] = 1
                on = np.asarray(loglik(Z), dtype=np.float64)
                Z[:, k] = 0
                delta = on - np.asarray(loglik(Z), dtype=np.float64)
            if fitted[k]:
                lo = np.full(rows, lo_used[k])
            else:  # a birth: λ over the free slots, the row's own other features counted
                active = (fitted[None, :] | (Z > 0))
                others = active.sum(axis=1) - active[:, k]
                lo = log_lam - np.log(k_max - others)
            x = lo + delta
            p = np.where(x > 0, 1.0 / (1.0 + np.exp(-np.abs(x))),
                         np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))
            new = rng.random(rows) < p
            Z[:, k] = new
            if loglik is None:
                R = r0 - new[:, None] * A[k]
    return Z


#: the most features in use whose 2^K+ subsets :func:`row_log_predictive` sums over
MAX_ENUMERATED = 14


def _log_new_counts(fit, free):
    """``log P(j new features)`` of row ``N + 1`` for ``j = 0 .. free``: ``Poisson(αβ/(N + β))``
    given ``j <= free``."""
    from scipy.special import gammaln, logsumexp

    lam = fit.alpha * fit.beta / (fit.n + fit.beta)
    j = np.arange(free + 1, dtype=np.float64)
    log_pj = j * np.log(lam) - gammaln(j + 1.0) if lam > 0 else np.where(j == 0, 0.0, -np.inf)
    return log_pj - logsumexp(log_pj)


#: the most feature sets of a new row :func:`new_row_patterns` enumerates
MAX_PATTERNS = 2**16


def subset_log_probs(bits, p):
    """``log P(subset)`` of each row of ``bits`` (``2^k x k``, :func:`subset_bits`) when
    feature ``t`` is on independently with probability ``p[t]``: ``-inf`` (never NaN) for a
    subset that leaves out a feature with ``p = 1`` (every fitted row owns it, at β -> 0) or
    takes one with ``p = 0``."""
    with np.errstate(divide="ignore"):
        return np.where(bits == 1, np.log(p), np.log1p(-p)).sum(axis=1)


def new_row_patterns(fit, tail=1e-6):
    """The feature sets row ``N + 1`` of the draw ``fit`` can take, as rows over all ``K_max``
    slots, and their log prior probabilities (module docstring): every subset of the features
    in use, times ``j`` new features in every set of ``j`` free slots (probability
    ``P(j) / C(free, j)`` each), for ``j`` up to the smallest count whose prior tail beyond
    it is below ``tail`` (all of them when the free slots are fewer).  The probabilities of
    the sets enumerated sum to at least ``1 - tail``.  Under a likelihood without a closed
    form the new features' rows of ``A`` are the draw's own (its free slots' values, draws
    from their prior given that no fitted row owns them).

    Returns
    -------
    patterns : ndarray (C, K_max) int8
    log_prior : ndarray (C,)
    """
    from itertools import combinations
    from math import comb

    m = np.asarray(fit.m)
    used, free_slots = np.flatnonzero(m > 0), np.flatnonzero(m == 0)
    kp, free = used.size, free_slots.size
    log_pj = _log_new_counts(fit, free)
    cum = np.cumsum(np.exp(log_pj))
    top = int(min(free, np.searchsorted(cum, 1.0 - tail)))
    sizes = [comb(free, j) for j in range(top + 1)]
    count = 2**kp * sum(sizes)
    if count > MAX_PATTERNS:
        raise DataError(
            f"scoring held-out rows sums over the feature sets of a new row; this draw has "
            f"{count} of them (at most {MAX_PATTERNS}: {kp} features in use, up to {top} new "
            f"ones in {free} free slots). Hold out entries instead "
            "(pmi.compare_models(holdout='entries')).")
    bits = subset_bits(kp)
    log_pz = subset_log_probs(bits, m[used] / (fit.n + fit.beta))
    news, log_new = [], []
    for j in range(top + 1):
        for slots in combinations(free_slots, j):
            row = np.zeros(m.size, dtype=np.int8)
            row[list(slots)] = 1
            news.append(row)
            log_new.append(log_pj[j] - np.log(sizes[j]))
    news = np.array(news, dtype=np.int8)
    patterns = np.repeat(news, 2**kp, axis=0)
    patterns[:, used] = np.tile(bits, (len(news), 1))
    log_prior = np.repeat(np.array(log_new), 2**kp) + np.tile(log_pz, len(news))
    return patterns, log_prior


def row_log_predictive(X, fit, sx2, sa2):
    """``log p(x_r | one posterior draw)`` of each row of ``X`` (``R x D``, no missing
    entries) as a new row of the draw ``fit``, with ``A`` of the new features integrated out.

    The new row takes each feature in use with probability ``m_k / (N + β)`` and ``j`` new
    ones with ``j ~ Poisson(αβ / (N + β))`` given ``j <= K_max - K+`` (the conditional of row
    ``N + 1`` of the truncated IBP, module docstring); a new feature's row of ``A`` is a prior
    draw, ``Normal(0, σa²)`` per column, so given the features in use ``z`` and ``j``,
    ``x_rd ~ Normal((z A)_d + b_d, σx_d² + j σa_d²)``.  The sum over the ``2^K+`` subsets of
    the features in use and over every ``j`` is exact (no term is cut by its prior weight: a
    row far from every feature can favour many new ones).

    Parameters
    ----------
    X : ndarray (R, D)
    fit : FittedDraw
        The draw's ``A`` (its columns in use are read), offset ``b``, counts ``m`` of the
        ``n`` fitted rows, ``alpha`` and ``beta``.
    sx2, sa2 : float or ndarray (D,)
        The draw's noise and feature variances per column.

    Returns
    -------
    ndarray (R,)
    """
    from scipy.special import logsumexp

    X = np.asarray(X, dtype=np.float64)
    m = np.asarray(fit.m)
    used = np.flatnonzero(m > 0)
    kp, free = used.size, m.size - used.size
    if kp > MAX_ENUMERATED:
        raise DataError(f"scoring held-out rows sums over the 2^K+ subsets of the features in "
                        f"use; this draw uses {kp} (at most {MAX_ENUMERATED}). Hold out "
                        "entries instead (pmi.compare_models(holdout='entries')).")
    d = X.shape[1]
    sx2 = np.broadcast_to(np.asarray(sx2, dtype=np.float64), (d,))
    sa2 = np.broadcast_to(np.asarray(sa2, dtype=np.float64), (d,))
    j = np.arange(free + 1, dtype=np.float64)
    log_pj = _log_new_counts(fit, free)
    bits = subset_bits(kp)
    log_pz = subset_log_probs(bits, m[used] / (fit.n + fit.beta))
    subsets = bits.astype(np.float64)
    mean = subsets @ np.asarray(fit.A, dtype=np.float64)[used] + np.asarray(fit.b, float)
    var = sx2[None, :] + j[:, None] * sa2[None, :]  # (J, D)
    log_norm = -0.5 * np.log(2.0 * np.pi * var).sum(axis=1)  # (J,)
    out = np.empty(X.shape[0])
    for r, x in enumerate(X):
        sq = (x[None, :] - mean) ** 2  # (2^K+, D)
        ll = log_norm[:, None] - 0.5 * (sq @ (1.0 / var).T).T  # (J, 2^K+)
        out[r] = logsumexp(ll + log_pj[:, None] + log_pz[None, :])
    return out
