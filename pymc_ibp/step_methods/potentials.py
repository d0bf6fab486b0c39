"""Steps that cannot include a model's ``pm.Potential`` in what they sample decline the
variables it depends on (:func:`refuses_potentials`), so that ``pm.sample`` gives them to a step
that does (:class:`pymc_ibp.IBPGibbs` for a binary matrix, NUTS or PyMC's samplers for the
others)."""

from __future__ import annotations

import functools
import logging
import math

import pymc as pm
import pytensor.tensor as pt
from pymc.step_methods.compound import Competence

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.matching.potentials import potential_names, potentials_on, refuse_potentials

__all__ = ["INSTEAD", "PotentialTerms", "refuses_potentials"]

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


class PotentialTerms:
    r"""The sum :math:`\phi` of a model's ``potentials`` as a function of a point, with its value
    at the state the step holds (``value``, set by :meth:`reset` and kept by :meth:`accepts`
    and :meth:`moved_to`): the term a step's Metropolis--Hastings moves add to the log
    acceptance ratios they compute without it, so that they sample the model with its
    potentials in one stage.  (A second, delayed acceptance stage (Christen & Fox 2005) is
    exact as well, but a move whose first stage sees only the likelihood is never proposed
    past it where the potential pays for what the likelihood loses, e.g. a merge of two
    features under a potential on their number.)"""

    def __init__(self, model, potentials, compile_kwargs=None):
        [phi] = model.replace_rvs_by_values([pt.add(*[pt.sum(p) for p in potentials])])
        self._fn = compile_point_fn(model, phi, compile_kwargs=compile_kwargs)
        self.names = potential_names(potentials)
        self.value = 0.0

    def __call__(self, point):
        """``φ`` at ``point``."""
        return float(self._fn(point))

    def reset(self, point):
        """Take ``point`` as the state held; returns ``φ`` there."""
        self.value = self(point)
        return self.value

    def moved_to(self, value):
        """The state held moved where ``φ`` is ``value``."""
        self.value = value

    def entry_log_odds(self, point, old):
        """``φ(z = 1) - φ(z = 0)`` of one binary entry that ``point`` holds flipped from its
        value ``old`` in the state held, and ``φ(point)`` (to pass to :meth:`moved_to` when
        the flip is kept)."""
        other = self(point)
        return (other - self.value) if old == 0 else (self.value - other), other

    def accepts(self, rng, log_r, point):
        """Metropolis--Hastings test of a move to ``point`` whose log ratio without the
        potentials is ``log_r``: ``log u < log_r + φ(point) - φ(held)`` (one uniform of
        ``rng``, drawn first as in a test without potentials).  On acceptance ``point`` is
        the state held."""
        log_u = math.log(rng.random())
        new = self(point)
        if log_u < log_r + new - self.value:
            self.value = new
            return True
        return False
