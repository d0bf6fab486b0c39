r"""Exact draws from the Pólya-Gamma distribution ``PG(1, c)`` (numba).

``ω ~ PG(b, c)`` is the law of :math:`\frac{1}{2\pi^2}\sum_{k\ge1}
\frac{g_k}{(k-1/2)^2 + c^2/(4\pi^2)}` with ``g_k ~ Gamma(b, 1)`` independent.  Its use
(Polson, Scott & Windle 2013, eq. 3): for every ``ψ``

.. math:: \frac{(e^{\psi})^{x}}{1 + e^{\psi}} = \tfrac12\, e^{\kappa\psi}
    \int_0^\infty e^{-\omega\psi^2/2}\, p_{PG}(\omega \mid 1, 0)\, d\omega,
    \qquad \kappa = x - \tfrac12,

so given ``ω`` a Bernoulli-logit likelihood is Gaussian in its linear predictor ``ψ``
(pseudo-observation ``κ/ω`` with precision ``ω``), and ``ω | ψ ~ PG(1, ψ)``.

The sampler is the exact accept–reject algorithm of Polson, Scott & Windle (2013, §4, after
Devroye 1986): ``PG(1, c) = J*(1, c/2)/4``; a draw of ``J*(1, z)`` is proposed from a
two-piece mixture (an exponential right of ``t = 0.64``, an inverse-Gaussian truncated to
``(0, t]`` left of it) and accepted by the alternating series of the density, whose partial
sums bound it from above and below.  The expected number of proposals is below 1.001 for
every ``c``, so a draw costs about one exponential or inverse-Gaussian variate.  Large
``|c|`` only shrinks the draw (``E ω = tanh(c/2)/(2c)``); no step evaluates a quantity that
overflows (the mixture weight is formed in log space with :func:`log_ndtr`).

References
----------
N. G. Polson, J. G. Scott and J. Windle (2013). Bayesian inference for logistic models using
Pólya-Gamma latent variables. *Journal of the American Statistical Association* 108(504),
1339-1349.

L. Devroye (1986). *Non-Uniform Random Variate Generation*, Springer (ch. IV.5, the
alternating series method).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_ibp.distributions.normal_math import log_ndtr

__all__ = ["pg_mean", "polya_gamma", "polya_gamma_matrix"]

_T = 0.64  # the split point of the two proposal pieces (Devroye's choice)
_PI2_8 = math.pi * math.pi / 8.0


@numba.njit(cache=True)
def _series_term(n, x):
    """Term ``a_n(x)`` of the alternating series of the ``J*(1, 0)`` density (its left
    expansion below ``t``, its right expansion above)."""
    k = (n + 0.5) * math.pi
    if x > _T:
        return k * math.exp(-0.5 * k * k * x)
    if x > 0.0:
        return math.exp(-1.5 * (math.log(0.5 * math.pi) + math.log(x)) + math.log(k)
                        - 2.0 * (n + 0.5) * (n + 0.5) / x)
    return 0.0


@numba.njit(cache=True)
def _exponential_mass(z):
    """Probability of the exponential piece of the proposal, ``p / (p + q)`` with the
    inverse-Gaussian piece's mass ``q`` relative to ``p`` formed in log space."""
    fz = _PI2_8 + 0.5 * z * z
    root = math.sqrt(1.0 / _T)
    x0 = math.log(fz) + fz * _T
    xb = x0 - z + log_ndtr(root * (_T * z - 1.0))
    xa = x0 + z + log_ndtr(-root * (_T * z + 1.0))
    return 1.0 / (1.0 + 4.0 / math.pi * (math.exp(xb) + math.exp(xa)))


@numba.njit(cache=True)
def _truncated_inverse_gaussian(rng, z):
    """An inverse-Gaussian draw ``IG(1/z, 1)`` truncated to ``(0, t]``."""
    if z < 1.0 / _T:  # the mean 1/z lies beyond t: a scaled inverse chi-square proposal
        while True:
            e1 = rng.standard_exponential()
            e2 = rng.standard_exponential()
            while e1 * e1 > 2.0 * e2 / _T:
                e1 = rng.standard_exponential()
                e2 = rng.standard_exponential()
            x = 1.0 + e1 * _T
            x = _T / (x * x)
            if rng.random() <= math.exp(-0.5 * z * z * x):
                return x
    mu = 1.0 / z
    while True:  # Michael, Schucany & Haas (1976), rejected beyond t
        y = rng.standard_normal()
        y = mu * y * y
        x = mu + 0.5 * mu * y - 0.5 * mu * math.sqrt(4.0 * y + y * y)
        if rng.random() > mu / (mu + x):
            x = mu * mu / x
        if x <= _T:
            return x


@numba.njit(cache=True)
def polya_gamma(rng, c):
    """One exact draw of ``ω ~ PG(1, c)`` (``FloatingPointError`` for a ``c`` that is not
    finite: no proposal would ever be accepted)."""
    if not math.isfinite(c):
        raise FloatingPointError("polya_gamma: PG(1, c) with c not finite (NaN or inf in the "
                                 "linear predictor: an offset, A or the data's parameters)")
    z = 0.5 * abs(c)
    fz = _PI2_8 + 0.5 * z * z
    p_exp = _exponential_mass(z)
    while True:
        if rng.random() < p_exp:
            x = _T + rng.standard_exponential() / fz
        else:
            x = _truncated_inverse_gaussian(rng, z)
        s = _series_term(0, x)
        y = rng.random() * s
        n = 0
        while True:
            n += 1
            if n % 2 == 1:
                s -= _series_term(n, x)
                if y <= s:
                    return 0.25 * x
            else:
                s += _series_term(n, x)
                if y > s:
                    break


@numba.njit(cache=True)
def polya_gamma_matrix(rng, psi, observed):
    """``ω_ij ~ PG(1, ψ_ij)`` for every ``observed`` entry (0 elsewhere), row-major."""
    n, d = psi.shape
    out = np.zeros((n, d))
    for i in range(n):
        for j in range(d):
            if observed[i, j]:
                out[i, j] = polya_gamma(rng, psi[i, j])
    return out


@numba.njit(cache=True)
def pg_mean(c):
    """``E[ω]`` for ``ω ~ PG(1, c)``: ``tanh(c/2)/(2c)`` (``1/4`` at ``c = 0``)."""
    if abs(c) < 1e-6:
        return 0.25 - c * c / 48.0
    return math.tanh(0.5 * c) / (2.0 * c)
