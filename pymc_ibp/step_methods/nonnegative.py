r"""Exact Gibbs updates of non-negative features in a linear-Gaussian model.

For ``X ~ Normal(Z @ A (+ b), σx)`` with ``a_kd ≥ 0`` under an exponential prior
``a_kd ~ Exp(λ_kd)`` (the exponential-Gaussian likelihood of Doshi-Velez 2009, App. A, used by
the correlated models of its ch. 7) or a half-normal prior ``a_kd ~ HalfNormal(σa)`` (the
non-negative model of Reed 2013), the full conditional of one element is a Gaussian truncated
to ``a ≥ 0``:

.. math::

    p(a_{kd}\mid\cdot) \propto \exp\Big(-\frac{1}{2\sigma_{x,d}^2}\sum_{n:z_{nk}=1}
        (e_{nd} - a_{kd})^2 - \lambda_{kd} a_{kd} - \frac{a_{kd}^2}{2\sigma_{a,kd}^2}\Big)
        \,\mathbb 1[a_{kd}\ge 0],\qquad e_{nd} = r_{nd} + a_{kd},

with ``r = X - b - Z A`` the residual, i.e. precision ``P = m_k/σx,d² + 1/σa,kd²`` and mean
``(Σ_n e_nd/σx,d² - λ_kd)/P`` (with ``λ = 0`` for the half-normal prior and ``1/σa² = 0`` for
the exponential one).  An unused feature (``m_k = 0``) is drawn from its prior.  The step keeps
the residual up to date after every element (``O(m_k)`` each, ``O(N K D)`` to form it once
per step), so a sweep over all of ``A`` costs ``O(N K D)``; the truncated draws are exact at
any distance of the mean from the bound (:mod:`pymc_ibp.kernels.truncnorm`).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pymc as pm
from pymc.logprob.transforms import LogTransform
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.tensor.random.basic import ExponentialRV, HalfNormalRV

from pymc_ibp._numba_utils import column_rows, interrupt_safe
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.kernels.truncnorm import truncnorm_above
from pymc_ibp.matching.features_given_z import find_nonnegative_features
from pymc_ibp.matching.graph import one_value_var
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["NonNegativeFeatureGibbs", "nonnegative_feature_sweep"]


@numba.njit(cache=True)
def nonnegative_feature_sweep(rng, Z, A, R, inv_s2, rate, prec_a):
    """One Gibbs scan of every element of ``A`` (``K x D``, in place) given ``Z`` (``N x K``),
    keeping the residual ``R = X - b - Z A`` (``N x D``) up to date.  ``inv_s2``: ``1/σx²`` per
    column; ``rate`` and ``prec_a`` (``K x D``): the prior's ``λ`` and ``1/σa²`` (one of them 0).
    Returns the number of elements of active features that moved to the bound's neighbourhood
    (``a < 1e-12``), a cheap sign of features the data push to zero."""
    n, k_max = Z.shape
    d = A.shape[1]
    rows = np.empty(n, dtype=np.int64)
    at_zero = 0
    for k in range(k_max):
        m = column_rows(Z, k, rows)
        for j in range(d):
            old = A[k, j]
            prec = m * inv_s2[j] + prec_a[k, j]
            if m == 0 and prec_a[k, j] == 0.0:
                new = rng.exponential() / rate[k, j]
            else:
                s = 0.0
                for t in range(m):
                    s += R[rows[t], j]
                s += m * old
                new = truncnorm_above(rng, (s * inv_s2[j] - rate[k, j]) / prec,
                                      1.0 / math.sqrt(prec), 0.0)
                if m > 0 and new < 1e-12:
                    at_zero += 1
            delta = new - old
            for t in range(m):
                R[rows[t], j] -= delta
            A[k, j] = new
    return at_zero


@dataclass_state
class NonNegativeFeatureGibbsState(StepMethodState):
    """``rng`` only: the step keeps no other changing state."""


@refuses_potentials
class NonNegativeFeatureGibbs(BlockedStep):
    r"""Exact element-wise Gibbs for a non-negative feature matrix ``A`` in
    ``X ~ Normal(Z @ A (+ b), σx)``, ``A ~ Exponential(λ)`` or ``A ~ HalfNormal(σa)``.

    Each element is drawn from its full conditional, a Gaussian truncated to ``a ≥ 0``:

    .. math:: a_{kd}\mid\cdot \sim \mathcal N^{+}\Big(\frac{\sum_{n:z_{nk}=1}e_{nd}/\sigma_{x,d}^2
        - \lambda_{kd}}{P_{kd}},\ \frac1{P_{kd}}\Big),\qquad
        P_{kd} = \frac{m_k}{\sigma_{x,d}^2} + \frac{1}{\sigma_{a,kd}^2},

    with ``e = X - b - Z A + z_k a_kd`` the residual without element ``(k, d)``, ``λ = 0`` for
    the half-normal prior and ``1/σa² = 0`` for the exponential one; an unused feature is drawn
    from its prior.  ``Z`` may be any binary matrix in the model: a ``pmi.IBP``, a Bernoulli
    matrix, or a deterministic such as the DP-IBP's ``M[c]`` (:func:`pymc_ibp.dp_ibp`); it and
    the scales are read from the current point.  One sweep costs ``O(N K D)``.  Missing entries
    of ``X`` (PyMC's imputed ``X_unobserved``) enter with their current values.

    Chosen automatically (IDEAL) for a 2-D ``pm.Exponential`` or ``pm.HalfNormal`` matrix
    whose only child is such a likelihood; the value is written in the variable's own space
    (``log A`` under PyMC's default log transform).

    Notes
    -----
    Stat ``ibp_features_at_zero``: elements of used features drawn within ``1e-12`` of the
    bound (0 unless the data push a feature's weight onto the boundary).

    References
    ----------
    F. Doshi-Velez (2009). *The Indian Buffet Process: Scalable Inference and Extensions.*
    MSc thesis, University of Cambridge, App. A (exponential-Gaussian likelihood) and ch. 7.

    C. Reed (2013). *Submodular MAP Inference for Scalable Latent Feature Models.* MPhil thesis,
    University of Cambridge (non-negative linear-Gaussian model).

    C. P. Robert (1995). Simulation of truncated normal variables. *Statistics and Computing*
    5(2), 121-125.
    """

    name = "ibp_nonnegative_gibbs"
    default_blocked = False
    _state_class = NonNegativeFeatureGibbsState
    stats_dtypes_shapes = {"ibp_features_at_zero": (np.int64, [])}

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, a_rv = one_value_var(vars, model,
                                        "NonNegativeFeatureGibbs updates one feature matrix")
        self.spec = find_nonnegative_features(model, a_rv)
        transform = model.rvs_to_transforms.get(a_rv)
        if transform is not None and not isinstance(transform, LogTransform):
            raise ModelPatternError(
                f"{a_rv.name!r} has the transform {type(transform).__name__}; "
                "NonNegativeFeatureGibbs writes A itself (transform=None) or log A (PyMC's "
                "default LogTransform).")
        self.log_space = transform is not None
        self.vars = [value_var]
        self.a_name = value_var.name
        self._data = self.spec.point_data(model)
        self._params = self.spec.compile(model, compile_kwargs=compile_kwargs)
        self.rng = get_random_generator(rng)

    @interrupt_safe  # the kernel takes the step's Generator (see _numba_utils)
    def step(self, point):
        Z, scale, sx, off = self._params(point)
        Z = self.spec.binary_z(Z, "NonNegativeFeatureGibbs")
        scale = np.asarray(scale, dtype=float)
        a_val = np.asarray(point[self.a_name], dtype=float)
        A = np.exp(a_val) if self.log_space else a_val.copy()
        X = self._data(point)
        R = X - np.asarray(off, dtype=float) - Z @ A
        inv_s2 = 1.0 / np.asarray(sx, dtype=float) ** 2
        if self.spec.prior == "exponential":
            rate, prec_a = 1.0 / scale, np.zeros_like(scale)
        else:
            rate, prec_a = np.zeros_like(scale), 1.0 / scale**2
        at_zero = nonnegative_feature_sweep(self.rng, Z, A, R, inv_s2, rate, prec_a)
        if self.log_space:
            # the exact draw is > 0; a value that underflows log stays at the smallest normal
            A = np.log(np.maximum(A, np.finfo(float).tiny))
        new = dict(point)
        new[self.a_name] = A.astype(a_val.dtype if a_val.dtype.kind == "f" else float)
        return new, [{"ibp_features_at_zero": int(at_zero)}]

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or not isinstance(var.owner.op, (ExponentialRV, HalfNormalRV)):
            return Competence.INCOMPATIBLE
        try:
            find_nonnegative_features(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
