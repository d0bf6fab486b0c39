"""The pattern of a dependent IBP (Williamson, Orbanz & Ghahramani 2010) that
:class:`pymc_ibp.DependentIBPGibbs` samples: sticks, Gaussian-process terms and ``Z``
(:func:`match_dependent_ibp`), and the free ``pm.MvNormal`` terms of the processes
(:func:`gp_components`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.scalar.basic import Add as ScalarAdd
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import MvNormalRV
from pytensor.tensor.shape import Reshape

from pymc_ibp.distributions.dependent import DependentIBPRV
from pymc_ibp.distributions.stick_breaking import IBPStickBreakingRV
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.graph import rv_users

__all__ = ["PATTERN", "GPComponent", "gp_components", "match_dependent_ibp",
           "triples"]


PATTERN = (
    "b = pmi.IBPStickBreaking('b', alpha, dims='feature'); "
    "g = pm.MvNormal('g', mu, cov, dims=('feature', 't')) with cov (K, T, T) or (T, T); "
    "Z = pmi.DependentIBP('Z', b, g, rho, index, dims=('obs', 'feature')) "
    "(pmi.dependent_ibp builds it), with b and g used by nothing else"
)


def triples(gp):
    return [tuple(gp[i:i + 3]) for i in range(0, len(gp), 3)]


def _strip_reshape(var):
    while var.owner is not None and isinstance(var.owner.op, Reshape):
        var = var.owner.inputs[0]
    return var


class GPComponent(NamedTuple):
    """One free ``pm.MvNormal`` term of the processes ``g`` of a DependentIBP: the random
    variable (``K x ... x T``) and, when it is read through an index on its last axis
    (``g_rv[:, idx]``), the constant index (``None``: reshaped to ``K x M`` as it is)."""

    rv: object
    index: np.ndarray | None


def _add_terms(var):
    if var.owner is not None and isinstance(var.owner.op, Elemwise) \
            and isinstance(var.owner.op.scalar_op, ScalarAdd):
        return [t for inp in var.owner.inputs for t in _add_terms(inp)]
    return [var]


def gp_components(model, g_in):
    """The free ``pm.MvNormal`` terms of ``g_in`` (a sum of processes, each reshaped to
    ``K x M`` or indexed ``rv[:, idx]`` on its last axis), or ``None`` if ``g_in`` is not of
    that form (e.g. fixed processes)."""
    comps = []
    for term in _add_terms(g_in):
        index = None
        op = term.owner.op if term.owner is not None else None
        if op is not None and type(op).__name__ == "AdvancedSubtensor" \
                and len(term.owner.inputs) == 2 and tuple(op.idx_list)[:1] == (slice(None),) \
                and isinstance(term.owner.inputs[1], Constant):
            index = np.asarray(term.owner.inputs[1].data, dtype=np.int64)
            term = term.owner.inputs[0]
        rv = _strip_reshape(term)
        if rv not in model.free_RVs or not isinstance(rv.owner.op, MvNormalRV):
            return None
        if rv.type.shape[0] is None or rv.ndim < 2 or (index is not None and rv.ndim != 2):
            raise ModelPatternError(f"{rv.name!r} needs a fixed shape (K, ..., T) (and (K, T) "
                                    "when it is indexed).")
        comps.append(GPComponent(rv, index))
    return comps


def match_dependent_ibp(model, rv):
    """``(z_rv, sticks_rv or None, components or None)`` of the dependent IBP that ``rv`` (its
    sticks or one of its processes) belongs to; raises :class:`ModelPatternError` naming the
    pattern otherwise."""
    users = rv_users(model, rv)
    z_rvs = [u for u in users if isinstance(u.owner.op, DependentIBPRV)]
    if len(z_rvs) != 1 or len(users) != 1:
        raise ModelPatternError(
            f"{rv.name!r} must enter the model only through one pmi.DependentIBP (found "
            f"{[u.name for u in users]}). Needed: {PATTERN}.")
    z_rv = z_rvs[0]
    sticks, g_in = z_rv.owner.inputs[2], z_rv.owner.inputs[3]
    comps = gp_components(model, g_in)  # None: fixed processes, only the sticks are updated
    sticks_rv = sticks if (sticks in model.free_RVs
                           and isinstance(sticks.owner.op, IBPStickBreakingRV)) else None
    comp_rvs = [c.rv for c in comps or []]
    if rv is not sticks_rv and rv not in comp_rvs:
        raise ModelPatternError(
            f"{rv.name!r} is neither the sticks (a free pmi.IBPStickBreaking) nor a process "
            f"(a free pm.MvNormal, reshaped to features x locations or indexed on its last "
            f"axis, or a sum of such) of {z_rv.name!r}. Needed: {PATTERN}.")
    for other in (sticks_rv, *comp_rvs):
        if other is not None and other is not rv and len(rv_users(model, other)) != 1:
            raise ModelPatternError(
                f"{other.name!r} must enter the model only through {z_rv.name!r}. "
                f"Needed: {PATTERN}.")
    return z_rv, sticks_rv, comps
