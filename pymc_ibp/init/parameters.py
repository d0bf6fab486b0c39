"""The parameters of a binary matrix's prior checked at a chain's start: a ``pm.Data``
parameter changed by ``pm.set_data`` after the model was built can put the prior outside its
support, where its log-probability is ``-inf``.  PyMC checks the start only for its own
gradient samplers, so the plugin's steps check it at each chain's first step
(:class:`StartCheck`) and name the parameter and its value."""

from __future__ import annotations

import numpy as np
from pytensor.graph.traversal import ancestors

from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.distributions.stick_breaking import IBPStickBreakingRV
from pymc_ibp.exceptions import DataError

__all__ = ["PARAMETERS", "StartCheck"]

#: per prior: its name and its positive parameters (input position after rng and size, name)
PARAMETERS = {
    IBPRV: ("pmi.IBP", ((0, "alpha"), (1, "beta"))),
    IBPStickBreakingRV: ("pmi.IBPStickBreaking", ((0, "alpha"),)),
    CRPRV: ("pmi.CRP", ((0, "alpha"),)),
}


def _shown(value):
    """``value`` as a message shows it: one number for a value broadcast to an array."""
    v = np.asarray(value)
    if v.size and np.all((v == v.flat[0]) | (np.isnan(v) & np.isnan(v.flat[0]))):
        return v.flat[0].item()
    return v.tolist()


class StartCheck:
    """At a chain's first step (:meth:`check`), whether the parameters of ``z_rv``'s prior,
    and of the plugin priors it depends on (e.g. the sticks of a stick-breaking matrix), are
    in their support at the chain's start; otherwise a
    :class:`~pymc_ibp.exceptions.DataError` from ``who`` naming each parameter and its value
    (also those a builder tags on ``z_rv`` as ``tag.positive_parameters``, ``(what, name,
    value)`` triples)
    (as PyMC's "Initial evaluation of model at starting point failed" does for its own
    samplers).  Compiled at the first check; nothing to check without such a prior."""

    def __init__(self, model, z_rv, who):
        self.model, self.who = model, who
        above = set(ancestors([z_rv]))
        self.params = [(PARAMETERS[type(rv.owner.op)][0], rv.name, name, rv.owner.inputs[2 + i])
                       for rv in model.basic_RVs
                       if (rv is z_rv or rv in above) and type(rv.owner.op) in PARAMETERS
                       for i, name in PARAMETERS[type(rv.owner.op)][1]]
        # parameters a builder tagged on the matrix (e.g. pmi.dependent_ibp's length scale,
        # which reaches Z only through its processes' covariance)
        self.params += [(what, z_rv.name, name, value) for what, name, value
                        in getattr(z_rv.tag, "positive_parameters", ())]
        self._fn = None

    def check(self, point):
        """Raise unless every parameter is finite and positive at ``point``."""
        if not self.params:
            return
        if self._fn is None:
            model = self.model
            outs = model.replace_rvs_by_values([v for *_, v in self.params])
            self._fn = model.compile_fn(outs, inputs=model.value_vars,
                                        on_unused_input="ignore")
        bad = [f"{what} {rv_name!r}: {name} = {_shown(v)!r} (it must be > 0)"
               for (what, rv_name, name, _), v in zip(self.params, self._fn(point), strict=True)
               if not (np.all(np.isfinite(v)) and np.all(np.asarray(v) > 0))]
        if bad:
            raise DataError(
                f"{self.who}: a prior's parameter is outside its support at the chain's start "
                "(the model's log-probability is -inf there, or the model is not the one "
                "written), " + "; ".join(bad) + ". A parameter given with pm.Data and changed "
                "with pm.set_data must stay in its support: set it to a valid value.")
