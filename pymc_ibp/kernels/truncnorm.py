r"""Exact draws from a Gaussian truncated to a half-line, stable in the far tails.

``N(μ, s²)`` restricted to ``x ≥ lo`` is ``μ + s t`` with ``t`` a standard normal truncated to
``t ≥ a = (lo - μ)/s``.  Two exact rejection samplers cover every ``a``:

* ``a < a₀``: draw ``t ~ N(0, 1)`` until ``t ≥ a`` (acceptance ``Φ(-a) ≥ Φ(-a₀)``);
* ``a ≥ a₀``: Robert's (1995) translated-exponential proposal ``t = a + E/λ``,
  ``E ~ Exp(1)``, with the optimal rate ``λ = (a + √(a² + 4))/2``, accepted with probability
  ``exp(-(t - λ)²/2)``.  Its acceptance rate rises towards 1 as ``a`` grows, and nothing in it
  evaluates ``Φ`` or ``Φ⁻¹``, so ``a = 30`` (a mean 30 standard deviations below the bound)
  or ``a = 10⁴`` cost the same as ``a = 1`` and never produce ``inf`` or ``NaN``.

``a₀ = 0.45``: below it the normal proposal accepts with probability ``Φ(-a) > 0.33`` and
costs one normal draw per try; above it the exponential proposal accepts 82% of tries at
``a₀``, 88% at ``a = 1``, 96% at ``a = 3`` and 99.9% at ``a = 30`` (measured, 4·10⁵ tries).
Upper truncation ``x ≤ hi`` is the mirror image.

References
----------
C. P. Robert (1995). Simulation of truncated normal variables. *Statistics and Computing*
5(2), 121-125.
"""

from __future__ import annotations

import math

import numba

__all__ = ["std_normal_above", "truncnorm_above", "truncnorm_below"]

_SWITCH = 0.45


@numba.njit(cache=True)
def std_normal_above(rng, a):
    """A standard normal draw conditioned on ``t ≥ a`` (exact for every finite ``a``)."""
    if a < _SWITCH:
        while True:
            t = rng.standard_normal()
            if t >= a:
                return t
    lam = 0.5 * (a + math.sqrt(a * a + 4.0))
    while True:
        t = a + rng.exponential() / lam
        d = t - lam
        if rng.random() <= math.exp(-0.5 * d * d):
            return t


@numba.njit(cache=True)
def truncnorm_above(rng, mu, sd, lo):
    """A draw of ``N(mu, sd²)`` conditioned on ``x ≥ lo`` (``sd > 0``); never below ``lo``."""
    x = mu + sd * std_normal_above(rng, (lo - mu) / sd)
    return x if x >= lo else lo  # rounding of mu + sd t when |mu| >> sd t


@numba.njit(cache=True)
def truncnorm_below(rng, mu, sd, hi):
    """A draw of ``N(mu, sd²)`` conditioned on ``x ≤ hi`` (``sd > 0``); never above ``hi``."""
    x = mu - sd * std_normal_above(rng, (mu - hi) / sd)
    return x if x <= hi else hi
