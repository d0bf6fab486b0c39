"""Chain starts shared by the steps of models that are not linear-Gaussian.

The *surrogate start* (``init_z="surrogate"`` of :class:`pymc_ibp.IBPGibbs` and
:class:`pymc_ibp.PolyaGammaGibbs`, their default for a :class:`pymc_ibp.IBP` when the user
gives no ``Z``): the data are treated as if they were linear-Gaussian, and the annealed
multi-start search of :class:`pymc_ibp.AcceleratedGibbs` followed by ``SURROGATE_SWEEPS``
accelerated sweeps on that surrogate model gives the chain's first ``Z``.  It only chooses
where a chain starts; the chain's own step then targets the model's posterior.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_ibp.exceptions import ModelPatternError

__all__ = ["SURROGATE_SIGMA_A", "SURROGATE_SIGMA_X", "SURROGATE_SWEEPS", "surrogate_starter",
           "surrogate_z"]


#: the linear-Gaussian surrogate of ``init_z="surrogate"``: noise and feature scales as
#: multiples of the standard deviation of the observed entries
SURROGATE_SIGMA_X = 1.0
SURROGATE_SIGMA_A = 2.0
#: accelerated sweeps on the surrogate after its start search
SURROGATE_SWEEPS = 50


def surrogate_starter(model, z_rv, children, shape, alpha, beta, compile_kwargs, step_name):
    """``(step, point)``: an :class:`~pymc_ibp.AcceleratedGibbs` on a linear-Gaussian surrogate
    of the model (``X ~ Normal(Z' @ A', SURROGATE_SIGMA_X s)``, ``A' ~ Normal(0,
    SURROGATE_SIGMA_A s)``, ``Z' ~ IBP(alpha, beta)``, ``s`` the standard deviation of the
    observed entries) and that model's initial point, for ``init_z="surrogate"`` of
    ``step_name`` (named in the error when the data do not fit)."""
    from pymc_ibp.distributions.ibp import IBP
    from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs
    from pymc_ibp.step_methods.model_matching import observed_data

    observed = [c for c in children if c in set(model.observed_RVs)]
    data = None
    if len(children) == 1 and len(observed) == 1:
        try:
            data = observed_data(model.rvs_to_values[observed[0]])
        except ModelPatternError:
            data = None
    n, k_max = shape
    if data is None or data.ndim != 2 or data.shape[0] != n or not np.all(np.isfinite(data)):
        raise ModelPatternError(
            f"{step_name}(init_z='surrogate') needs the likelihood of {z_rv.name!r} to be one "
            f"observed N x D matrix (N = {n} rows, one per row of {z_rv.name!r}) without "
            f"missing entries; found {[c.name for c in children]} below {z_rv.name!r}.")
    scale = float(np.std(data)) or 1.0
    with pm.Model(model=None) as surrogate:  # a model of its own, not a child of the user's
        zs = IBP("Z", alpha, beta, shape=(n, k_max))
        a_s = pm.Normal("A", 0.0, SURROGATE_SIGMA_A * scale, shape=(k_max, data.shape[1]))
        pm.Normal("X", mu=zs @ a_s, sigma=SURROGATE_SIGMA_X * scale, observed=data)
    point = surrogate.initial_point()
    step = AcceleratedGibbs([zs], model=surrogate, initial_point=point, init_z="prior",
                            compile_kwargs=compile_kwargs)
    return step, point


def surrogate_z(starter, rng):
    """The ``Z`` (int8) of a surrogate start: the accelerated step's start search and
    ``SURROGATE_SWEEPS`` sweeps on the surrogate of ``starter = surrogate_starter(...)``, with
    the chain's own ``rng`` (the same draws under any number of cores)."""
    step, s_point = starter
    step.rng = rng
    step._reset_chain(0)
    found, _ = step.step(s_point)
    for _ in range(SURROGATE_SWEEPS):
        found, _ = step.step(found)
    return np.asarray(found["Z"], dtype=np.int8)
