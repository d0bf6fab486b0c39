"""Chain starts shared by the steps of models that are not linear-Gaussian.

The *surrogate start* (``init_z="surrogate"`` of :class:`pymc_ibp.IBPGibbs` and
:class:`pymc_ibp.PolyaGammaGibbs`, their default for a :class:`pymc_ibp.IBP` when the user
gives no ``Z``): the data are treated as if they were linear-Gaussian, and the annealed
multi-start search of :class:`pymc_ibp.AcceleratedGibbs` followed by ``SURROGATE_SWEEPS``
sweeps on that surrogate model gives the chain's first ``Z``.  On continuous data the
surrogate's noise and feature scales are free (half-normal priors at the data's spread): the
search estimates them and an :class:`pymc_ibp.IBPScaleSlice` step updates them between the
sweeps.  On 0/1 data they are fixed multiples of the data's spread (a 0/1 entry has no noise
scale to learn).  Where the continuous likelihood's mean is ``Z @ A`` plus other terms, the
surrogate has a free offset per column (fitted beside ``Z`` by the search, then updated by
an :class:`pymc_ibp.IBPOffsetGibbs`), and a model's offset that is one free untransformed
variable the same for every row starts at the surrogate's, and so does every group's row of
one indexed by the rows' groups (``b[group]``), unless the user gave it.  It only
chooses where a chain starts; the chain's own step then targets the model's posterior.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pymc as pm
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp.distributions.ibp import IBP
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.init.given import initial_value_given
from pymc_ibp.matching.graph import (
    mean_terms,
    observed_data,
    row_constant_variable,
    row_indexed_variable,
)
from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs
from pymc_ibp.step_methods.offsets import IBPOffsetGibbs
from pymc_ibp.step_methods.scales import IBPScaleSlice

__all__ = ["SURROGATE_SIGMA_A", "SURROGATE_SIGMA_B", "SURROGATE_SIGMA_X", "SURROGATE_SWEEPS",
           "SurrogateDraw", "SurrogateStart", "surrogate_starter", "surrogate_z"]


#: the linear-Gaussian surrogate of ``init_z="surrogate"``: noise and feature scales as
#: multiples of the standard deviation of the observed entries (on 0/1 data the scales
#: themselves, on continuous data the scales of their half-normal priors)
SURROGATE_SIGMA_X = 1.0
SURROGATE_SIGMA_A = 2.0
#: the prior scale of the surrogate's offset (centred at the data's mean), as a multiple of
#: the spread of the observed entries about zero
SURROGATE_SIGMA_B = 10.0
#: sweeps on the surrogate after its start search
SURROGATE_SWEEPS = 50


class SurrogateStart(NamedTuple):
    """What :func:`surrogate_starter` builds: the surrogate's ``steps`` (an
    :class:`~pymc_ibp.AcceleratedGibbs` first) and initial ``point``; ``offset``: the value
    name of the model's offset that starts at the surrogate's, or ``None``; ``binary``:
    whether the data are 0/1 (fixed scales, no offset, no rows of ``A`` on the data's
    scale); ``groups``: whether that offset is indexed by the rows' groups (``b[group]``)."""

    steps: list
    point: dict
    offset: str | None
    binary: bool
    groups: bool = False


class SurrogateDraw(NamedTuple):
    """What :func:`surrogate_z` returns: ``z`` (int8) the chain's first ``Z``; ``offsets``
    ``{name: value}`` for the model's offset that starts at the surrogate's (else empty);
    ``features`` the surrogate's ``A`` (``K_max x D``, on the data's scale) on continuous
    data, ``None`` on 0/1 data."""

    z: np.ndarray
    offsets: dict
    features: np.ndarray | None


def _mean_offset(model, z_rv, like_rv):
    """The terms a likelihood's location parameter adds to ``Z @ A`` (symbolic; ``None`` when
    there are none or the location is not of that form)."""
    if like_rv.owner is None or not isinstance(like_rv.owner.op, RandomVariable):
        return None
    for param in like_rv.owner.inputs[2:]:  # after rng and size
        if z_rv in set(ancestors([param])):
            terms = mean_terms(param, left=z_rv)
            if terms is not None:
                return terms[2]
    return None


def _offset_handover(model, offset, initial_point, shape):
    """``(name, groups)`` for ``offset`` when it is one free untransformed variable whose
    initial value the user did not give, with ``name`` its value's name: the same for every
    row (:func:`~pymc_ibp.matching.graph.row_constant_variable`; ``groups`` is
    ``False``), it starts at the surrogate's offset; indexed by the rows' groups
    (:func:`~pymc_ibp.matching.graph.row_indexed_variable`, ``b[group]``;
    ``groups`` is ``True``), every group's row starts there.  ``(None, False)`` otherwise."""
    rv = row_constant_variable(model, offset)
    groups = rv is None
    if groups:
        rv = row_indexed_variable(model, offset, *shape)
    if rv is None or initial_value_given(model, [rv], initial_point):
        return None, False
    return model.rvs_to_values[rv].name, groups


def surrogate_starter(model, z_rv, children, shape, alpha, beta, compile_kwargs, step_name,
                      initial_point=None):
    """A :class:`SurrogateStart` for ``init_z="surrogate"`` of ``step_name`` (named in the
    error when the data do not fit): an :class:`~pymc_ibp.AcceleratedGibbs` on a
    linear-Gaussian surrogate of the model, ``X ~ Normal(Z' @ A' (+ b'), σx)``,
    ``A' ~ Normal(0, σa)``, ``Z' ~ IBP(alpha, beta)``, and that model's initial point.  With
    ``s`` the standard deviation of the observed entries: on 0/1 data ``σx =
    SURROGATE_SIGMA_X s`` and ``σa = SURROGATE_SIGMA_A s`` are fixed; on other data they are
    free, ``σx ~ HalfNormal(SURROGATE_SIGMA_X s)``, ``σa ~ HalfNormal(SURROGATE_SIGMA_A s)``,
    and an :class:`~pymc_ibp.IBPScaleSlice` updates them; and where the likelihood's location is
    ``Z @ A`` plus other terms, a per-column offset ``b' ~ Normal(mean, SURROGATE_SIGMA_B
    s0)`` (``s0`` the entries' root mean square) that the search fits beside ``Z`` and an
    :class:`~pymc_ibp.IBPOffsetGibbs` updates (measurements: docs page "IBPGibbs")."""
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
    binary = bool(np.all((data == 0) | (data == 1)))
    offset = None if binary else _mean_offset(model, z_rv, observed[0])
    with pm.Model(model=None) as surrogate:  # a model of its own, not a child of the user's
        zs = IBP("Z", alpha, beta, shape=(n, k_max))
        if binary:
            sigma_a, sigma_x = SURROGATE_SIGMA_A * scale, SURROGATE_SIGMA_X * scale
        else:
            sigma_a = pm.HalfNormal("sigma_a", SURROGATE_SIGMA_A * scale)
            sigma_x = pm.HalfNormal("sigma_x", SURROGATE_SIGMA_X * scale)
        a_s = pm.Normal("A", 0.0, sigma_a, shape=(k_max, data.shape[1]))
        mu = zs @ a_s
        if offset is not None:
            b_s = pm.Normal("b", float(np.mean(data)),
                            SURROGATE_SIGMA_B * float(np.sqrt(np.mean(data ** 2))),
                            shape=data.shape[1])
            mu = mu + b_s
        pm.Normal("X", mu=mu, sigma=sigma_x, observed=data)
    point = surrogate.initial_point()
    steps = [AcceleratedGibbs([zs], model=surrogate, initial_point=point, init_z="prior",
                              compile_kwargs=compile_kwargs)]
    if not binary:
        steps.append(IBPScaleSlice([sigma_x, sigma_a], model=surrogate, initial_point=point,
                                   compile_kwargs=compile_kwargs))
    if offset is not None:
        steps.append(IBPOffsetGibbs([b_s], model=surrogate, initial_point=point,
                                    compile_kwargs=compile_kwargs))
    handover, groups = ((None, False) if offset is None
                        else _offset_handover(model, offset, initial_point, data.shape))
    return SurrogateStart(steps, point, handover, binary, groups)


def surrogate_z(starter, rng, point=None):
    """The :class:`SurrogateDraw` of a surrogate start: the state after the accelerated step's
    start search and ``SURROGATE_SWEEPS`` sweeps of the surrogate's steps on the surrogate of
    ``starter = surrogate_starter(...)``, with the chain's own ``rng`` (the same draws under
    any number of cores); the offset is shaped as ``point[name]``."""
    found = starter.point
    for step in starter.steps:
        step.setup_chain(rng, 0, SURROGATE_SWEEPS)
    starter.steps[0].warned = True  # the surrogate never warns (e.g. all K_max slots in use)
    for _ in range(SURROGATE_SWEEPS + 1):
        for step in starter.steps:
            found, _ = step.step(found)
    offsets = {}
    name = starter.offset
    if name is not None and point is not None:
        b, v = np.asarray(found["b"], dtype=np.float64), np.asarray(point[name])
        if starter.groups:  # b[group]: every group's row (or value) at the surrogate's
            b = np.tile(b if v.size == v.shape[0] * b.size else b.mean(), v.shape[0])
        offsets[name] = (b.reshape(v.shape) if v.size == b.size else np.asarray(b.mean())
                         ).astype(v.dtype)
    return SurrogateDraw(np.asarray(found["Z"], dtype=np.int8), offsets,
                         None if starter.binary else np.asarray(found["A"], dtype=np.float64))
