r"""Exact Gibbs updates of binary feature–dimension links under a binary likelihood, on cached
counts (Doshi-Velez 2009, App. A.3 and §7.3).

In the binary likelihoods of the thesis — the leaky noisy-or
:func:`pymc_ibp.likelihoods.leaky_noisy_or` and the noisy tag detection
:func:`pymc_ibp.likelihoods.noisy_detection` — the probability of ``x_nd = 1`` depends on the
links ``A`` (``K x D``, binary) only through the count ``s_nd = (Z A)_nd`` of active parents,
and on the dimension's own parameters:

.. math:: P(x_{nd}=1\mid Z, A) = p_d(s_{nd}),\qquad s_{nd} = \sum_k z_{nk} a_{kd}.

Flipping ``a_kd`` changes ``s_nd`` by one in the ``m_k`` rows that own feature ``k`` and
nowhere else, so its exact full conditional is

.. math:: \log\frac{P(a_{kd}=1\mid\cdot)}{P(a_{kd}=0\mid\cdot)} = \operatorname{logit} p^A_{kd}
    + \sum_{n:\,z_{nk}=1}\Big[\ell_d(x_{nd}, s^{(1)}_{nd}) - \ell_d(x_{nd}, s^{(0)}_{nd})\Big],

with ``ℓ_d(x, s) = log p_d(s)^x (1 - p_d(s))^{1-x}`` read from a table over ``s = 0..K``
(one evaluation of the model's own probability graph per step) and ``S`` kept up to date
after every element: ``O(m_k)`` per element, ``O(N K D)`` per sweep, instead of the whole
model per element that PyMC's ``BinaryGibbsMetropolis`` evaluates.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.util import get_random_generator
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.kernels.binary_features import binary_feature_sweep
from pymc_ibp.matching.binary_features import (
    BinaryFeatureLikelihood,
    binary_features_of,
)
from pymc_ibp.matching.graph import one_value_var
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["BinaryFeatureGibbs", "binary_feature_sweep"]


@refuses_potentials
class BinaryFeatureGibbs(BlockedStep):
    r"""Exact element-wise Gibbs sampler of a binary feature–dimension matrix ``A`` under a
    binary likelihood whose success probability depends on ``A`` only through the counts
    ``S = Z @ A`` (:func:`pymc_ibp.likelihoods.leaky_noisy_or`,
    :func:`pymc_ibp.likelihoods.noisy_detection`; Doshi-Velez 2009, App. A.3, §7.3).

    Each ``a_kd`` is drawn from

    .. math:: \log\frac{P(a_{kd}=1\mid\cdot)}{P(a_{kd}=0\mid\cdot)} =
        \operatorname{logit} p^A_{kd} + \sum_{n:\,z_{nk}=1}
        \big[\ell_d(x_{nd}, s_{nd}^{(1)}) - \ell_d(x_{nd}, s_{nd}^{(0)})\big]

    with ``S`` kept up to date (``O(m_k)`` per element, ``O(NKD)`` per sweep) and
    ``ℓ_d(x, s)`` tabulated over ``s = 0..K`` from the model's own probability graph once per
    step.  ``Z`` may be any binary matrix expression (a ``pmi.IBP``, ``M[c]`` of
    :func:`pymc_ibp.dp_ibp`, ``1[C M > 0]`` of :func:`pymc_ibp.ibp_ibp`, …); ``A``'s prior
    probability may be a constant or a variable (e.g. ``pm.Beta``).  Chosen automatically for
    such an ``A`` (PyMC's ``BinaryGibbsMetropolis`` otherwise, which evaluates the whole
    model per element).  The pattern (probability a function of ``S`` element-wise, with
    parameters constant along the rows) is checked numerically at construction.  Stat
    ``ibp_link_flips``.
    """

    name = "ibp_binary_feature_gibbs"
    default_blocked = False
    stats_dtypes_shapes = {"ibp_link_flips": (np.int64, [])}
    _state_class = StepMethodState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        a_val, a_rv = one_value_var(vars, model, "BinaryFeatureGibbs updates one matrix A")
        self.vars = [a_val]
        self.a_name = a_val.name
        #: the likelihood as the sweep reads it
        #: (:class:`~pymc_ibp.matching.binary_features.BinaryFeatureLikelihood`)
        self.likelihood = BinaryFeatureLikelihood(model, a_rv, initial_point, compile_kwargs)
        self.k_max, self.d = self.likelihood.k_max, self.likelihood.d
        self.rng = get_random_generator(rng)

    def tables(self, point):
        """``(log p_d(s), log(1 - p_d(s)))`` for ``s = 0..K`` (rows) and every column."""
        return self.likelihood.tables(point)

    @interrupt_safe
    def step(self, point):
        lik = self.likelihood
        Z = np.asarray(lik.z(point))
        if Z.ndim != 2 or Z.shape[1] != self.k_max:
            raise ModelPatternError(f"Z has shape {Z.shape}; expected (N, {self.k_max}).")
        Z = Z.astype(np.int8)
        A = np.array(point[self.a_name], dtype=np.int64)
        S = (Z.astype(np.int64) @ A).astype(np.int64)
        log_p1, log_p0 = lik.tables(point)
        lo = np.broadcast_to(np.asarray(lik.prior_lo(point), dtype=float),
                             A.shape).astype(float)
        X = lik.x
        if lik.missing is not None:  # the imputed entries at their current values
            mask, name = lik.missing
            X = X.copy()
            X[mask] = np.asarray(point[name]).astype(np.int8)
        flips = binary_feature_sweep(self.rng, Z, A, S, X, log_p1, log_p0, lo)
        new = dict(point)
        new[self.a_name] = A.astype(point[self.a_name].dtype)
        return new, [{"ibp_link_flips": int(flips)}]

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or not isinstance(var.owner.op, BernoulliRV) or var.ndim != 2:
            return Competence.INCOMPATIBLE
        try:  # the whole check, numerical part included, once per model (cached)
            found = binary_features_of(pm.modelcontext(None), var)
        except TypeError:
            return Competence.INCOMPATIBLE
        if isinstance(found, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
