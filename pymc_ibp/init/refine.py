"""Feature-drop hill climbing: the last stage of the annealed start search
(:class:`~pymc_ibp.init.search.AnnealedSearch`).

On data whose features overlap heavily (several glyphs per row sharing most of their pixels)
an annealed search often ends in a *pieces* mode: more features than the truth, each a
fractional mixture of true ones, thousands of nats below the truth, which the chain's
split–merge, birth/death and pair moves do not leave in hundreds of sweeps (a
per-entry prior's chain, e.g. the dependent IBP's, has none of them).  Emptying one feature
(or two) and re-sweeping the rows lets the other features take its part and new ones be born;
repeated while it pays, it turns such a start into the planted one in most searches
(``docs/step-methods/accelerated-gibbs.md``, "Annealed start search")."""

from __future__ import annotations

import numpy as np

__all__ = ["drop_features"]


def drop_features(rng, Z, score, resweep, max_tries):
    """Greedy refinement of ``Z`` (in place; start search only, not a Markov move): the
    features in use, in random order, are each emptied in a copy of ``Z`` that
    ``resweep(rng, copy)`` then re-sweeps in place (its rows re-assigned, new features born);
    the copy replaces ``Z`` when ``score(copy)`` is higher.  A pass tries each feature, then
    as many random pairs of them emptied together (pieces of two glyphs may need two gone at
    once; the pairs whose owners overlap most did worse than random ones).  After each
    improvement a new pass starts; the search ends after a pass without one or after
    ``max_tries`` copies.  Returns ``(score, tries, improvements)``."""
    best = float(score(Z))
    tries = kept = 0
    while tries < max_tries:
        act = rng.permutation(np.flatnonzero(Z.any(axis=0)))
        iu, ju = np.triu_indices(act.size, k=1)
        order = rng.permutation(iu.size)[:act.size]
        drops = [(k,) for k in act] + [(act[iu[p]], act[ju[p]]) for p in order]
        improved = False
        for cols in drops:
            if tries >= max_tries:
                break
            trial = Z.copy()
            trial[:, list(cols)] = 0
            resweep(rng, trial)
            tries += 1
            value = float(score(trial))
            if value > best:
                Z[:] = trial
                best, kept, improved = value, kept + 1, True
                break
        if not improved:
            break
    return best, tries, kept

