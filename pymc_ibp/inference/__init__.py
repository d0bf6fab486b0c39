"""Point estimates and approximate inference for IBP models (not MCMC).

* :func:`greedy_map` — iterated conditional modes with the accelerated sweep: each entry of
  ``Z`` and each row's number of new features set to its most probable value (the
  deterministic variant of the accelerated sampler, Doshi-Velez 2009, §4.5).
"""

from pymc_ibp.inference.greedy import GreedyResult, greedy_map

__all__ = ["GreedyResult", "greedy_map"]
