"""The model's ``pm.Potential`` terms that depend on given variables: a step that updates such
a variable must include them in what it samples (:class:`pymc_ibp.IBPGibbs` does) or decline
the variable (every other step of the plugin)."""

from __future__ import annotations

from pytensor.graph.traversal import ancestors

from pymc_ibp.exceptions import ModelPatternError

__all__ = ["potential_names", "potentials_on", "refuse_potentials"]


def potentials_on(model, rvs):
    """The potentials of ``model`` whose density depends on the value of any of the random
    variables ``rvs`` (in the model's value graph, where every random variable is its value:
    a potential on a child ``Z`` of ``M`` depends on ``Z``'s value, not on ``M``)."""
    values = {model.rvs_to_values[rv] for rv in rvs if rv in model.rvs_to_values}
    found = []
    for p in model.potentials:
        [graph] = model.replace_rvs_by_values([p])
        if values & set(ancestors([graph])):
            found.append(p)
    return found


def potential_names(potentials):
    """``'a', 'b'``: the potentials' names, for messages."""
    return ", ".join(repr(p.name) if p.name else "(unnamed)" for p in potentials)


def refuse_potentials(model, value_vars, who, instead):
    """A :class:`~pymc_ibp.exceptions.ModelPatternError` when a potential of ``model`` depends
    on a variable that ``who`` updates (``value_vars``): ``who`` samples without it, which
    would change the model.  ``instead``: the steps that include potentials."""
    rvs = [model.values_to_rvs[v] for v in value_vars if v in model.values_to_rvs]
    for rv in rvs:
        found = potentials_on(model, [rv])
        if found:
            raise ModelPatternError(
                f"{who} cannot include the model's pm.Potential {potential_names(found)}, "
                f"which depends on {rv.name!r}: it would sample {rv.name!r} without it. Leave "
                f"{rv.name!r} to {instead} (pm.sample assigns them by itself), or drop the "
                "potential.")
