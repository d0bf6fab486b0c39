"""Univariate slice sampling (Neal 2003): one update under a log density given as a Python
callable, and the width adaptation used while tuning."""

from __future__ import annotations

import math

__all__ = ["adapt_width", "slice_sample"]


def slice_sample(rng, logp, x0, w, max_steps=50, name="the variable"):
    """One univariate slice-sampling update of ``x0`` under the log density ``logp`` (Neal
    2003, §4: stepping out by ``w`` at most ``max_steps`` times, then shrinkage).  Returns
    ``(x1, evaluations)``; leaves the density invariant for any ``w > 0``.  A log density
    that is not finite at ``x0`` raises ``FloatingPointError`` naming ``name`` (with ``NaN``
    no point would ever enter the slice: the shrinkage would not end)."""
    lp0 = logp(x0)
    if not math.isfinite(lp0):
        raise FloatingPointError(
            f"The log density of {name} given the rest of the model is {lp0} at its current "
            f"value {x0!r}: a term it depends on is not finite (NaN or inf in the data, an "
            "offset or another variable's value).")
    y = lp0 + math.log(rng.random())  # log(U) ~ -Exp(1)
    evals = 1
    left = x0 - w * rng.random()
    right = left + w
    j = int(max_steps * rng.random())
    k = max_steps - 1 - j
    while j > 0 and logp(left) > y:
        left -= w
        j -= 1
        evals += 1
    while k > 0 and logp(right) > y:
        right += w
        k -= 1
        evals += 1
    while True:
        x1 = left + (right - left) * rng.random()
        evals += 1
        if logp(x1) > y:
            return x1, evals
        if x1 < x0:
            left = x1
        else:
            right = x1


def adapt_width(w, move, n_tuned):
    """Running average of twice the absolute slice moves, the slice width adapted during
    tuning (Neal 2003, §4.1); ``n_tuned`` counts this move."""
    return max(w + (2.0 * abs(move) - w) / n_tuned, 1e-8)
