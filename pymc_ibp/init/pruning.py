"""A searched start pruned to the model's potentials: the start searches
(:mod:`pymc_ibp.init.search`, :mod:`pymc_ibp.init.surrogate`) fit the likelihood and the
prior of ``Z``, not a ``pm.Potential`` on it, so under a potential that prices features
(e.g. a cap on their number) they start the chain with features the model does not want,
which the chain can then only leave by merges or by emptying a feature row by row."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["prune_features"]


def prune_features(point, z_name, score, refit, max_rounds=None):
    """Backward elimination of the features of ``point[z_name]``: each round empties, of the
    active columns, the one whose removal (then ``refit``, e.g. the other features'
    parameters at their joint mode) raises ``score`` (the model's log density with its
    potentials) the most, and stops where no removal raises it (at most ``max_rounds``
    rounds; ``None``: until then).  The baseline is the better of ``point`` and its refit
    (a start whose parameters are a draw, not their mode, would otherwise lose to every
    refitted candidate).  Deterministic; returns the point reached (``point`` itself when
    neither the refit nor a removal helps)."""
    best = float(score(point))
    fitted = refit(point)
    if (value := float(score(fitted))) > best:
        point, best = fitted, value
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        Z = np.asarray(point[z_name])
        tried = []
        for k in np.flatnonzero(Z.sum(axis=0)):
            fewer = Z.copy()
            fewer[:, k] = 0
            cand = refit({**point, z_name: fewer})
            value = float(score(cand))
            if math.isfinite(value):
                tried.append((value, int(k), cand))
        if not tried:
            return point
        value, _, cand = max(tried, key=lambda t: (t[0], -t[1]))
        if not value > best:
            return point
        best, point = value, cand
        rounds += 1
    return point
