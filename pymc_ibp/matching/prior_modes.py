"""How the prior of ``Z`` enters the linear-Gaussian samplers: one class per prior mode.

The sweeps of :mod:`pymc_ibp.kernels.sweeps` need only one thing from the prior of
``Z``: either the IBP's column counts (with births of new features), or one prior log-odds per
entry (no births).  A mode turns the current values of the prior's parameters into what the
kernels take, draws ``Z`` from the prior (chain starts, multi-start burn-in), and evaluates
``log P(Z)`` for the ``ibp_log_joint`` stat.  The model matcher
(:func:`pymc_ibp.matching.priors.match_prior`) says which prior a model has;
:func:`prior_mode` maps it to its mode.
"""

from __future__ import annotations

import numpy as np

from pymc_ibp import kernels
from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.matching.priors import IBPPrior, LogOddsPrior

__all__ = ["IBPMode", "LogOddsMode", "prior_mode"]


class IBPMode:
    """:class:`pymc_ibp.IBP` prior: column counts with births; ``params = (alpha, beta)``."""

    counts = True

    def __init__(self, prior, n, k_max):
        self.symbolic = [prior.alpha, prior.beta]
        self.n, self.k_max = n, k_max
        self.alpha = self.beta = 1.0

    def set_params(self, alpha, beta):
        self.alpha, self.beta = float(np.asarray(alpha)), float(np.asarray(beta))

    @property
    def logodds(self):
        return kernels.NO_LOGODDS

    @property
    def sweep_prior(self):
        """The prior as the sweeps take it (:class:`pymc_ibp.kernels.SweepPrior`)."""
        return kernels.SweepPrior.counts(self.alpha, self.beta)

    def draw(self, rng):
        return ibp_draw_core(rng, self.alpha, self.beta, self.n, self.k_max)

    def is_support_point(self, Z):
        """Whether ``Z`` is PyMC's default start for this prior (all zeros)."""
        return not np.any(Z)

    def log_joint(self, G, RX, Z, m, act, trXX, noise):
        """``(log p(X | Z) + log P(Z), log p(X | Z))`` (the one home:
        :func:`pymc_ibp.kernels.collapsed_log_joint`) for the rows of ``Z``: all
        ``N`` of them, or the subset a start search runs on (scored as an IBP of that many
        rows; at ``N`` the search's candidates were compared under a prior for rows they do
        not have)."""
        return kernels.collapsed_log_joint(G, RX, m[act].astype(np.int64), trXX, Z.shape[0],
                                           noise, self.alpha, self.beta, self.k_max)


class LogOddsMode:
    """Independent Bernoulli entries with per-entry prior probabilities, given in log space as
    ``params = (log P(z=1), log P(z=0))`` broadcast to ``N x K``: the stick-breaking IBP of
    Teh, Görür & Ghahramani (2007) (``P = π_k``) and the dependent IBP of Williamson, Orbanz &
    Ghahramani (2010) (``P = Φ(u)``, whose log-odds stay finite where ``P`` rounds to 0 or 1)."""

    counts = False

    def __init__(self, prior, n, k_max):
        self.symbolic = [prior.log_p1, prior.log_p0]
        self.n, self.k_max = n, k_max
        half = np.full((n, k_max), np.log(0.5))
        self.set_params(half, half)

    def set_params(self, log_p1, log_p0):
        shape = (self.n, self.k_max)
        log1 = np.broadcast_to(np.asarray(log_p1, dtype=np.float64), shape)
        log0 = np.broadcast_to(np.asarray(log_p0, dtype=np.float64), shape)
        if np.any(np.isnan(log1)) or np.any(log1 > 1e-12) or np.any(log0 > 1e-12):
            raise ValueError("The Bernoulli probabilities of Z must lie in [0, 1].")
        self._log1, self._log0 = log1, log0
        self._logodds = np.ascontiguousarray(log1 - log0)

    @property
    def p(self):
        return np.exp(self._log1)

    @property
    def logodds(self):
        return self._logodds

    @property
    def sweep_prior(self):
        """The prior as the sweeps take it (:class:`pymc_ibp.kernels.SweepPrior`)."""
        return kernels.SweepPrior.entries(self._logodds)

    def draw(self, rng):
        return (rng.random((self.n, self.k_max)) < self.p).astype(np.int8)

    def search_mass(self):
        """The IBP mass at which the start search of the linear-Gaussian steps looks for
        features under this prior: the mean number of features per row, ``E[Σ_k z_nk]``
        (the IBP's ``α``), at the current probabilities, kept in ``[0.5, K_max/2]``."""
        mass = float(self.p.sum(axis=1).mean())
        return min(max(mass, 0.5), max(0.5, self.k_max / 2))

    def is_support_point(self, Z):
        """Whether ``Z`` is PyMC's default start for this prior (each entry at its more
        probable value, Bernoulli's support point) at the current probabilities."""
        return bool(np.array_equal(Z, (self._logodds >= 0).astype(Z.dtype)))

    def log_prior(self, Z):
        """``Σ log Bernoulli(z_nk; p_nk)`` at the current probabilities (``-inf`` when ``Z``
        has an entry of probability 0, e.g. a noisy-or feature with no active cause)."""
        return float(np.where(Z != 0, self._log1, self._log0).sum())

    def log_joint(self, G, RX, Z, m, act, trXX, noise):
        """``(log p(X | Z) + Σ log Bernoulli(z_nk; p_nk), log p(X | Z))``."""
        loglik = kernels.collapsed_loglik(G, RX, trXX, Z.shape[0], noise)
        return loglik + self.log_prior(Z), loglik


def prior_mode(prior, n, k_max):
    """The mode of a matched prior (:class:`IBPMode` or :class:`LogOddsMode`)."""
    if isinstance(prior, IBPPrior):
        return IBPMode(prior, n, k_max)
    if isinstance(prior, LogOddsPrior):
        return LogOddsMode(prior, n, k_max)
    raise TypeError(f"No prior mode for {type(prior).__name__}.")
