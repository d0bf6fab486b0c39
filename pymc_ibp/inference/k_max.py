"""How many feature slots a linear-Gaussian IBP posterior wants when ``K_max`` binds: the
sampler's own kernels run from the chain's state with room for more features.

A chain whose ``K_max`` slots are all in use cannot show how many features the posterior
would use: every birth a row asks for is refused (the sweep counts them,
:attr:`~pymc_ibp.kernels.SweepStats.births_denied`).  :func:`probe_k_max` gives the chain room:
it copies ``Z`` into a wider matrix and runs accelerated sweeps (Doshi-Velez & Ghahramani
2009) and the split–merge, birth/death and pair-swap moves on it, adding a quarter of ``K_max``
slots whenever all but one are in use (a few at a time, so that features emerge largest first
rather than as fragments of one crowded sweep).  Free scales are re-estimated after each sweep from
the data given ``Z`` (the start search's estimates) and a free ``α`` by its maximum-likelihood
value ``K+ / S_N(β)``, an empirical-Bayes stand-in for their Gibbs updates.  ``K+`` at the end
of the probe is an estimate of the posterior's number of features, not a draw from the
posterior: it says how large ``K_max`` should be.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pymc_ibp import kernels
from pymc_ibp.distributions.ibp_math import harmonic_mass

__all__ = ["KMaxProbe", "probe_k_max"]

#: the probe's moves after each sweep (those of the linear-Gaussian steps' defaults)
PROBE_MOVES = kernels.Moves(split_merge=5, birth_death=3, pair_swaps=3)


class KMaxProbe(NamedTuple):
    """What :func:`probe_k_max` saw: ``K+`` after each sweep, the slots it ended with, whether
    ``K+`` was still rising at the end (the last third of the sweeps above the middle one),
    and the ``K_max`` it suggests: half as much again as the mean ``K+`` of the last third
    (:attr:`reached`)."""

    k_plus: np.ndarray
    width: int
    growing: bool
    suggested: int

    @property
    def reached(self):
        """The mean ``K+`` of the last third of the sweeps, rounded up."""
        return _reached(self.k_plus)

    def advice(self):
        """One sentence for a warning: what the probe reached and the ``K_max`` to use."""
        more = ", and still rising" if self.growing else ""
        return (f"with room for more features the sampler reached K+ = {self.reached} "
                f"in {self.k_plus.size} sweeps{more}; use K_max >= {self.suggested}")


def _reached(k_plus):
    third = max(1, k_plus.size // 3)
    return math.ceil(float(k_plus[-third:].mean())) if k_plus.size else 0


def probe_k_max(rng, Z, X, noise, alpha, beta, *, sweeps=30, estimate_noise=None,
                free_alpha=False, max_width=None):
    """Run the linear-Gaussian kernels from ``Z`` (``N x K_max``) with room for more features
    (module docstring) and return a :class:`KMaxProbe`.

    ``X``: the data the sweeps see (imputed entries filled in, offsets removed); ``noise``: a
    :class:`~pymc_ibp.kernels.Noise` at the chain's current scales; ``alpha``, ``beta``: the
    IBP's parameters; ``estimate_noise(Z, X, m, noise)``: the scales given ``Z`` (free ones
    re-estimated; ``None``: kept); ``free_alpha``: re-estimate ``α``; ``max_width``: the most
    slots the probe widens to (default ``max(2 K_max, min(N, 16 K_max))``)."""
    n, k_max = Z.shape
    step = max(2, math.ceil(k_max / 4))
    cap = max(2 * k_max, min(n, 16 * k_max)) if max_width is None else int(max_width)
    width = min(k_max + step, max(cap, k_max + 1))
    Zp = np.zeros((n, width), dtype=np.int8)
    Zp[:, :k_max] = Z != 0
    refresh = kernels.refresh_interval(n)
    mass = harmonic_mass(float(beta), n)
    seen = np.zeros(int(sweeps), dtype=np.int64)
    for s in range(int(sweeps)):
        m = Zp.sum(axis=0).astype(np.int64)
        kernels.accelerated_sweep(rng, Zp, X, m, noise,
                                  kernels.SweepPrior.counts(float(alpha), float(beta)), refresh)
        kernels.linear_gaussian_moves(rng, Zp, X, m, noise, float(alpha), float(beta),
                                      kernels.block_sq_norms(X, noise), PROBE_MOVES)
        k = int(np.count_nonzero(m))
        seen[s] = k
        if estimate_noise is not None:
            noise = estimate_noise(Zp, X, m, noise)
        if free_alpha and k > 0:
            alpha = k / mass
        if k >= width - 1 and width < cap:  # (nearly) full: a few more slots, as features
            width = min(width + step, cap)  # emerge largest first
            Zp = np.concatenate([Zp, np.zeros((n, width - Zp.shape[1]), dtype=np.int8)], axis=1)
    third = max(1, seen.size // 3)
    growing = bool(seen.size >= 3 and seen[-third:].mean() > seen[-2 * third:-third].mean() + 0.5)
    suggested = max(k_max + 1, math.ceil(1.5 * _reached(seen)))
    return KMaxProbe(seen, int(width), growing, int(suggested))
