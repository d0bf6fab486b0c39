"""Steps that cannot include a model's ``pm.Potential`` in what they sample decline the
variables it depends on (:func:`refuses_potentials`), so that ``pm.sample`` gives them to a step
that does (:class:`pymc_ibp.IBPGibbs` for a binary matrix, NUTS or PyMC's samplers for the
others)."""

from __future__ import annotations

import functools
import logging

import pymc as pm
from pymc.step_methods.compound import Competence

from pymc_ibp.matching.potentials import potential_names, potentials_on, refuse_potentials

__all__ = ["INSTEAD", "refuses_potentials"]

_log = logging.getLogger("pymc")
_told = set()

#: the steps that include potentials, named in the messages
INSTEAD = "pmi.IBPGibbs (a binary feature matrix) or PyMC's samplers (NUTS, Metropolis)"


def refuses_potentials(cls):
    """Class decorator of a step that samples from conditionals it computes itself: its
    ``competence`` is ``INCOMPATIBLE`` for a variable a potential depends on (with one log
    line saying why), and building it for such a variable raises a
    :class:`~pymc_ibp.exceptions.ModelPatternError`."""
    competence = cls.competence
    init = cls.__init__

    @staticmethod
    @functools.wraps(competence)
    def declining(var, has_grad):
        found = competence(var, has_grad)
        if found == Competence.INCOMPATIBLE:
            return found
        try:
            model = pm.modelcontext(None)
        except TypeError:
            return found
        scope = getattr(cls, "potential_scope", None)
        pots = potentials_on(model, [var] if scope is None else scope(model, var))
        if not pots:
            return found
        key = (id(model), cls.__name__, var.name)
        if key not in _told:
            _told.add(key)
            _log.info(f"{cls.__name__} declines {var.name!r}: the model's pm.Potential "
                      f"{potential_names(pots)} depends on it, and {cls.__name__} would "
                      "sample without it")
        return Competence.INCOMPATIBLE

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        refuse_potentials(pm.modelcontext(kwargs.get("model")), self.vars, type(self).__name__,
                          INSTEAD)

    cls.competence = declining
    cls.__init__ = checked
    return cls
