"""What prior a binary matrix ``Z`` has (:func:`match_prior`, extensible through
:data:`PRIOR_MATCHERS`).

* :class:`IBPPrior` — ``Z = pmi.IBP("Z", alpha, beta, dims=("obs", "feature"))``: the IBP's
  column counts and births;
* :class:`LogOddsPrior` — ``Z = pm.Bernoulli("Z", p=P, dims=("obs", "feature"))`` with ``P``
  broadcastable to ``N x K`` (e.g. ``P = pmi.IBPStickBreaking(...)``): independent entries
  with per-entry prior log-odds ``log P/(1-P)``, no births;  ``Z = pmi.DependentIBP(...)``
  (Williamson, Orbanz & Ghahramani 2010) is the same mode with ``log P = log Φ(u)`` and
  ``log(1-P) = log Φ(-u)`` evaluated in log space.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytensor.tensor as pt
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp.distributions.dependent import DependentIBPRV, dibp_log_probs
from pymc_ibp.distributions.ibp import IBPRV

__all__ = ["BINARY_MATRIX_OPS", "PRIOR_MATCHERS", "IBPPrior", "LogOddsPrior", "match_prior"]


#: Random variable types of the binary matrices the samplers update
BINARY_MATRIX_OPS = (IBPRV, BernoulliRV, DependentIBPRV)


@dataclass
class IBPPrior:
    """``Z ~ pmi.IBP(alpha, beta)``: column counts with births (symbolic ``alpha``, ``beta``)."""

    alpha: object
    beta: object


@dataclass
class LogOddsPrior:
    """Independent entries: symbolic ``log P(z_nk = 1)`` and ``log P(z_nk = 0)``, each
    broadcast to the shape of ``Z`` (``pm.Bernoulli``, :class:`pymc_ibp.DependentIBP`)."""

    log_p1: object
    log_p0: object


def _match_ibp(model, z_rv):
    if isinstance(z_rv.owner.op, IBPRV):
        _, _, alpha, beta, _, _ = z_rv.owner.inputs
        return IBPPrior(alpha=alpha, beta=beta)
    return None


def _match_bernoulli(model, z_rv):
    if isinstance(z_rv.owner.op, BernoulliRV) and z_rv.ndim == 2:
        p = pt.broadcast_to(z_rv.owner.inputs[-1], z_rv.shape)
        return LogOddsPrior(log_p1=pt.log(p), log_p0=pt.log1p(-p))
    return None


def _match_dependent_ibp(model, z_rv):
    if isinstance(z_rv.owner.op, DependentIBPRV):
        log1, log0 = dibp_log_probs(*z_rv.owner.inputs[2:])
        return LogOddsPrior(log_p1=log1, log_p0=log0)
    return None


#: Functions ``(model, z_rv) -> prior or None``, tried in order by :func:`match_prior`; a new
#: prior (e.g. the dependent IBP) plugs in by appending its matcher here and a mode to
#: :mod:`pymc_ibp.matching.prior_modes`.
PRIOR_MATCHERS = [_match_ibp, _match_bernoulli, _match_dependent_ibp]


def match_prior(model, z_rv):
    """The prior of the binary matrix ``z_rv`` (:class:`IBPPrior` or :class:`LogOddsPrior`),
    or ``None`` if no matcher recognises it."""
    if z_rv.owner is None or z_rv.ndim != 2:
        return None
    for matcher in PRIOR_MATCHERS:
        prior = matcher(model, z_rv)
        if prior is not None:
            return prior
    return None
