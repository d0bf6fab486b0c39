r"""The standard normal CDF in log space and its inverse, for numba kernels.

``log_ndtr(x) = log Φ(x)`` uses ``erfc`` while it is representable (``x > -30``; for
``x > 0`` as ``log1p(-Q(x))``) and the asymptotic series
``log φ(x) - log(-x) + log(1 - 1/x² + 3/x⁴ - 15/x⁶ + 105/x⁸ - 945/x¹⁰)`` beyond, so it is
finite and accurate to double precision for every finite ``x`` (``log Φ(-40) ≈ -804.6``).

``ndtri(p) = Φ⁻¹(p)`` starts from Acklam's rational approximation (relative error below
1.2·10⁻⁹) and takes one Halley step on ``Φ(x) - p`` with ``Φ`` from ``erfc``, which brings it
to full double precision for ``p`` from 10⁻³⁰⁰ to ``1 - 10⁻¹⁶``; ``ndtri(0) = -inf`` and
``ndtri(1) = inf``.  SciPy's ``scipy.special.ndtri`` and ``log_ndtr`` are the reference in the
tests (``test_normal_math_matches_scipy_in_the_tails`` in
``tests/distributions/test_dependent_ibp.py``).

References
----------
P. J. Acklam (2003). An algorithm for computing the inverse normal cumulative distribution
function (web note; the coefficients are reproduced in many libraries).

M. Abramowitz and I. A. Stegun (1964). *Handbook of Mathematical Functions*, 26.2.12
(asymptotic expansion of the normal tail).
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["log_ndtr", "ndtr", "ndtri"]

_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
      1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
      6.680131188771972e01, -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
      -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
      3.754408661907416e00)


@numba.njit(cache=True)
def ndtr(x):
    """``Φ(x)``, accurate in both tails through ``erfc``."""
    return 0.5 * math.erfc(-x / _SQRT2)


@numba.njit(cache=True)
def log_ndtr(x):
    """``log Φ(x)``, finite and accurate for every finite ``x``."""
    if x > 0.0:
        return math.log1p(-0.5 * math.erfc(x / _SQRT2))
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    x2 = x * x
    inv = 1.0 / x2
    series = 1.0 - inv * (1.0 - 3.0 * inv * (1.0 - 5.0 * inv
                                             * (1.0 - 7.0 * inv * (1.0 - 9.0 * inv))))
    return -0.5 * x2 - _LOG_SQRT_2PI - math.log(-x) + math.log(series)


@numba.njit(cache=True)
def ndtri(p):
    """``Φ⁻¹(p)`` for ``0 <= p <= 1`` (``NaN`` outside)."""
    if not (p >= 0.0 and p <= 1.0):
        return np.nan
    if p == 0.0:
        return -np.inf
    if p == 1.0:
        return np.inf
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2.0 * math.log(p))
        x = ((((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5])
             / ((((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1.0))
    elif p <= 1.0 - lo:
        q = p - 0.5
        r = q * q
        x = ((((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]) * q
             / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1.0))
    else:
        q = math.sqrt(-2.0 * math.log1p(-p))
        x = -((((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5])
              / ((((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1.0))
    # one Halley step on f(x) = Φ(x) - p, f' = φ(x)
    if x < 0.0:
        e = ndtr(x) - p
    else:  # Φ(x) - p = (1 - p) - Q(x), Q the upper tail
        e = (1.0 - p) - 0.5 * math.erfc(x / _SQRT2)
    u = e * math.sqrt(2.0 * math.pi) * math.exp(0.5 * x * x)
    return x - u / (1.0 + 0.5 * x * u)
