"""A Gaussian likelihood whose feature matrix can be integrated out, whatever the prior of the
matrix it multiplies: ``X ~ Normal(W @ A, σx)`` with ``A ~ Normal(0, σa)`` a free variable used
nowhere else (:func:`collapsible_gaussian`).  ``W`` may be any expression of other variables:
``M[c]`` of the DP-IBP, the Bernoulli matrix of a stick-breaking IBP, a finite factor matrix.
Then ``p(X | W) = Π_d Normal(x_d; 0, σa_d² W Wᵀ + σx_d² I)`` (Doshi-Velez & Ghahramani 2009,
eq. 3, for any ``W``)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.graph import column_scale, is_zero_constant, mean_terms, observed_data

__all__ = ["CollapsibleGaussian", "collapsible_gaussian"]

PATTERN = ("pm.Normal('X', mu=W @ A, sigma=sigma_x, observed=X) with A = pm.Normal('A', 0, "
           "sigma_a) a free K x D matrix used nowhere else, W any N x K expression not "
           "involving A, the scales scalars or one per column, no offset or missing entries")


class CollapsibleGaussian(NamedTuple):
    """The matched likelihood: its observed variable, ``A``, the expression ``W``, the
    per-column scales (symbolic, length ``D``) and the data ``X``."""

    obs_rv: object
    a_rv: object
    W: object
    sigma_x: object
    sigma_a: object
    X: np.ndarray


def collapsible_gaussian(model):
    """The one :class:`CollapsibleGaussian` of ``model``, or a
    :class:`~pymc_ibp.exceptions.ModelPatternError` saying why there is none."""
    found = []
    for obs in model.observed_RVs:
        if not isinstance(obs.owner.op, NormalRV):
            continue
        _, _, mu, sigma = obs.owner.inputs
        terms = mean_terms(mu)
        if terms is None:
            continue
        W, A, offset, mask = terms
        if A not in model.free_RVs or not isinstance(A.owner.op, NormalRV):
            continue
        if offset is not None or mask is not None:
            raise ModelPatternError(f"the mean of {obs.name!r} has an offset or imputed "
                                    f"entries. Needed pattern: {PATTERN}.")
        found.append((obs, W, A, sigma))
    if len(found) != 1:
        raise ModelPatternError(f"found {len(found)} Normal likelihoods with mean W @ A. "
                                f"Needed pattern: {PATTERN}.")
    obs, W, A, sigma = found[0]
    _, _, a_mu, a_sigma = A.owner.inputs
    if not is_zero_constant(a_mu):
        raise ModelPatternError(f"{A.name!r} must have mean 0. Needed pattern: {PATTERN}.")
    others = [*(rv for rv in model.basic_RVs if rv is not obs and rv is not A),
              *model.potentials, *model.deterministics, W, sigma, a_sigma]
    users = [v.name or str(v) for v in others if A in set(ancestors([v]))]
    if users:
        raise ModelPatternError(f"{A.name!r} is also used by {users}. Needed pattern: "
                                f"{PATTERN}.")
    X = np.asarray(observed_data(model.rvs_to_values[obs]), dtype=np.float64)
    if X.ndim != 2 or W.ndim != 2 or A.ndim != 2 or not np.all(np.isfinite(X)):
        raise ModelPatternError(f"{obs.name!r} must be a finite N x D matrix. Needed "
                                f"pattern: {PATTERN}.")
    d = X.shape[1]
    sx = pt.broadcast_to(column_scale(sigma, f"The noise sigma of {obs.name!r}", PATTERN),
                         (d,))
    sa = pt.broadcast_to(column_scale(a_sigma, f"The sigma of {A.name!r}", PATTERN), (d,))
    return CollapsibleGaussian(obs, A, W, sx, sa, X)
