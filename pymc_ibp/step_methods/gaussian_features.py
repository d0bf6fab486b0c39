r"""Exact Gibbs draws of a Gaussian feature matrix given any binary ``Z``.

For ``X ~ Normal(Z @ A (+ b), σx)`` and ``A ~ Normal(0, σa)`` the full conditional of each
column of ``A`` is Gaussian (Doshi-Velez & Ghahramani 2009, eq. 6):

.. math::

    a_{\cdot d}\mid Z, X \sim \mathcal N\big(P_d^{-1} Z^\top (x_{\cdot d} - b_d)/\sigma_{x,d}^2,
        \ P_d^{-1}\big),\qquad P_d = Z^\top Z/\sigma_{x,d}^2 + I/\sigma_{a,d}^2,

over the features in use; an unused feature is drawn from its prior.  The linear-Gaussian
IBP samples ``A`` with ``Z`` in :class:`pymc_ibp.AcceleratedGibbs`; this step serves the
models whose ``Z`` is not a ``pmi.IBP`` the collapsed samplers match: the DP-IBP's
``Z = M[c]``, the IBP-IBP's ``Z = 1[C M > 0]``, a fixed or Bernoulli matrix.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.kernels.gaussian import draw_features
from pymc_ibp.matching.features_given_z import find_gaussian_features
from pymc_ibp.matching.graph import one_value_var
from pymc_ibp.matching.linear_gaussian import matched_models
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["GaussianFeatureGibbs"]


@dataclass_state
class GaussianFeatureGibbsState(StepMethodState):
    """``rng`` only: the step keeps no other changing state."""


@refuses_potentials
class GaussianFeatureGibbs(BlockedStep):
    r"""Exact Gibbs draw of a feature matrix ``A ~ Normal(0, σa)`` in
    ``X ~ Normal(Z @ A (+ b), σx)`` given any binary matrix ``Z``.

    Each column of ``A`` is drawn jointly from its Gaussian full conditional,

    .. math:: a_{\cdot d}\mid\cdot \sim \mathcal N\Big(P_d^{-1}\frac{Z^\top(x_{\cdot d} - b_d)}
        {\sigma_{x,d}^2},\ P_d^{-1}\Big),\qquad
        P_d = \frac{Z^\top Z}{\sigma_{x,d}^2} + \frac{I}{\sigma_{a,d}^2},

    by one Cholesky factor of ``P_d`` per run of columns with equal scales (never an
    inverse); a feature no row uses is drawn from its prior.  ``Z``, ``σx`` (a scalar or one
    per column), ``σa`` (a scalar, one per column, one per feature of shape ``(K, 1)``, or
    one per entry; the diagonal above is then ``1/σa_{kd}²``) and the offset ``b`` are read
    from the current point, so ``Z`` may be any binary expression in the model: the DP-IBP's
    ``M[c]`` (:func:`pymc_ibp.dp_ibp`), the IBP-IBP's ``1[C M > 0]``
    (:func:`pymc_ibp.ibp_ibp`), a Bernoulli matrix.  One draw costs ``O(N K^2 + D K^2 +
    K^3)``.  Missing entries of ``X`` (PyMC's imputed ``X_unobserved``) enter with their
    current values.

    Use it for the feature matrix of a linear-Gaussian model the collapsed samplers do not
    take (a ``Z`` built from other variables, or per-feature scales; otherwise
    :class:`pymc_ibp.AcceleratedGibbs` samples ``A`` with ``Z``): the
    draw is exact in one step, where NUTS must adapt to a posterior whose rows change owners
    whenever ``Z`` moves.  Chosen automatically (IDEAL) for such a ``pm.Normal`` matrix.

    Notes
    -----
    Stat ``ibp_features_drawn``: the features in use, drawn from their conditional (the rest
    from the prior).

    References
    ----------
    F. Doshi-Velez and Z. Ghahramani (2009). Accelerated sampling for the Indian buffet
    process. *ICML*, eq. 6.
    """

    name = "ibp_gaussian_features"
    default_blocked = False
    _state_class = GaussianFeatureGibbsState
    stats_dtypes_shapes = {"ibp_features_drawn": (np.int64, [])}

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, a_rv = one_value_var(vars, model,
                                        "GaussianFeatureGibbs updates one feature matrix")
        if model.rvs_to_transforms.get(a_rv) is not None:
            raise ModelPatternError(
                f"{a_rv.name!r} has a transform; GaussianFeatureGibbs writes A itself.")
        self.spec = find_gaussian_features(model, a_rv)
        self.vars = [value_var]
        self.a_name = value_var.name
        self._data = self.spec.point_data(model)
        self._params = self.spec.compile(model, compile_kwargs=compile_kwargs)
        self.rng = get_random_generator(rng)

    def step(self, point):
        Z, scale, sx, off = self._params(point)
        Z = self.spec.binary_z(Z, "GaussianFeatureGibbs")
        X = self._data(point)
        A = draw_features(self.rng, Z, np.ascontiguousarray(X - np.asarray(off, float)),
                          np.asarray(sx, dtype=float) ** 2, np.asarray(scale, dtype=float) ** 2)
        new = dict(point)
        new[self.a_name] = A.astype(np.asarray(point[self.a_name]).dtype)
        return new, [{"ibp_features_drawn": int((Z.sum(axis=0) > 0).sum())}]

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or not isinstance(var.owner.op, NormalRV) or var.ndim != 2:
            return Competence.INCOMPATIBLE
        try:
            model = pm.modelcontext(None)
            if any(var in spec.a_rvs for spec in matched_models(model)):
                return Competence.INCOMPATIBLE  # AcceleratedGibbs samples it with Z
            find_gaussian_features(model, var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
