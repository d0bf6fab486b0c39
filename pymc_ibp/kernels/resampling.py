"""Weights of a particle population: their effective sample size and systematic resampling
(the sequential Monte Carlo of :func:`pymc_ibp.inference.sample_smc`; Del Moral, Doucet &
Jasra 2006).  Weights are given as logs; ``-inf`` is a weight of zero."""

from __future__ import annotations

import numpy as np

__all__ = ["effective_sample_size", "systematic_resample"]


def _normalised(logw):
    logw = np.asarray(logw, dtype=np.float64)
    top = logw.max(initial=-np.inf)
    if logw.size == 0 or not np.isfinite(top) or np.isnan(logw).any():
        raise ValueError("the log-weights must include a finite value and no NaN; got "
                         f"{logw.size} of them with maximum {top}.")
    w = np.exp(logw - top)
    return w / w.sum()


def effective_sample_size(logw):
    """``(Σ w)² / Σ w²`` of the weights ``w = exp(logw)``: between 1 (one particle holds all
    the weight) and the number of particles (equal weights)."""
    w = _normalised(logw)
    return float(1.0 / np.sum(w * w))


def systematic_resample(rng, logw):
    """Indices (ascending) of a systematic resampling of the weights ``exp(logw)``: one
    uniform ``u`` and the points ``(u + i)/n``, ``i = 0..n-1``, through the cumulative
    weights.  Particle ``i`` is drawn ``⌊n w_i⌋`` or ``⌈n w_i⌉`` times (``w`` normalised), so
    ``n w_i`` in expectation; a zero weight never."""
    w = _normalised(logw)
    cum = np.cumsum(w)
    cum[-1] = 1.0
    u = (rng.random() + np.arange(w.size)) / w.size
    return np.searchsorted(cum, u, side="right")
