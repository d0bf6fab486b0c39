"""Whether the user gave a chain's start: a variable's own ``initval=`` or
``pm.sample(initvals=...)``, told apart from PyMC's default start; and the check that a
given binary start is binary."""

from __future__ import annotations

import numpy as np

from pymc_ibp.exceptions import DataError

__all__ = ["StartDefaults", "check_binary_start", "initial_value_given"]


def initial_value_given(model, rvs, initial_point=None, model_point=None) -> bool:
    """Whether the user gave the initial value of any of ``rvs`` (the initialisation policy of
    the steps: a start search or fitted start replaces only PyMC's default start).

    Given means the variable's own ``initval=`` (``model.set_initval``, also used to hand over
    values between stages) or ``pm.sample(initvals=...)``: PyMC builds the steps at the first
    chain's initial point, so a value in ``initial_point`` that differs from the model's own
    initial point (``model_point``, computed when not passed) was given there.
    """
    if any(model.rvs_to_initial_values.get(rv) is not None for rv in rvs):
        return True
    if initial_point is None:
        return False
    own = model.initial_point() if model_point is None else model_point
    names = [model.rvs_to_values[rv].name for rv in rvs]
    return any(name in initial_point and not np.array_equal(np.asarray(initial_point[name]),
                                                             np.asarray(own[name]))
               for name in names)


class StartDefaults:
    """The model's own start of some variables, taken when a step is built, which of them
    have their own ``initval=``, and the first chain's start of those the user gave there:
    at a chain's first iteration :meth:`given` tells whether the user gave that chain's start
    of a variable (``pm.sample(initvals=...)`` may give one chain's start and not another's,
    while PyMC builds the steps once, at the first chain's initial point ``initial_point``).
    A value is told at the step's first update of the chain, so it must be one no other step
    has moved by then.  Used for the start of ``Z`` (and ``A``) by :class:`AcceleratedGibbs`,
    :class:`IBPGibbs` and :class:`PolyaGammaGibbs`, and for the sticks and processes of
    :class:`DependentIBPGibbs` (its own variables).  The offsets of the linear-Gaussian start
    search ask :func:`initial_value_given` at the first chain's point instead: an offset's
    own step (e.g. NUTS) may have moved it before the ``Z`` step's first update, which would
    then read as a start the user gave."""

    def __init__(self, model, rvs, initial_point=None, model_point=None):
        own = model.initial_point() if model_point is None else model_point
        names = [model.rvs_to_values[rv].name for rv in rvs]
        self.default = {name: np.array(own[name], copy=True) for name in names}
        self.initval = {name: initial_value_given(model, [rv])
                        for name, rv in zip(names, rvs, strict=True)}
        self.at_build = {
            name: (np.array(initial_point[name], copy=True)
                   if initial_point is not None and name in initial_point
                   and initial_value_given(model, [rv], initial_point, own) else None)
            for name, rv in zip(names, rvs, strict=True)}

    def given(self, point, name, looks_default=None) -> bool:
        """Whether ``point`` (a chain's initial point) holds a start of ``name`` the user
        gave: its own ``initval=``, or a value other than the model's own start (a given
        start equal to the model's own, e.g. an all-zero ``Z``, counts as not given).
        ``looks_default``: a test of further values that count as PyMC's default start (e.g.
        the support point of a per-entry prior at probabilities another step moved before
        the first update), unless the value is the first chain's start the user gave (a
        handed-over ``Z`` may be such a support point)."""
        if self.initval[name]:
            return True
        value = np.asarray(point[name])
        if np.array_equal(value, self.default[name]):
            return False
        if looks_default is not None and looks_default(value):
            at = self.at_build[name]
            return at is not None and np.array_equal(value, at)
        return True


def check_binary_start(value, name, step):
    """Raise :class:`~pymc_ibp.DataError` when the chain's start of the binary matrix ``name``
    (``value``, e.g. from ``pm.sample(initvals=...)``) has an entry other than 0 and 1; PyMC
    itself checks start values only for NUTS, and the samplers would otherwise run from a
    state of zero probability (a float such as 0.5 is cast to the matrix's integer type by
    PyMC before any step sees it)."""
    arr = np.asarray(value)
    bad = (arr != 0) & (arr != 1)
    if np.any(bad):
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"{step}: the start of {name!r} must be a binary matrix (0 or 1); entry {pos} is "
            f"{arr[pos]!r} ({int(bad.sum())} such entries). Check pm.sample(initvals=...) or "
            "the variable's initval=.")
