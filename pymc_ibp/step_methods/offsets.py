"""Exact Gibbs update of an offset added to ``Z @ A`` in a linear-Gaussian model.

For ``X ~ Normal(Z @ A + b, σx)`` with ``b ~ Normal(μ0, s0)`` (any shape that broadcasts to
``N x D``: a scalar, one offset per dimension ``(D,)``, one per row ``(N, 1)``, …) the
conditional of each entry ``b_j`` is Gaussian (conjugate normal–normal update, e.g. Gelman et
al. 2013, §2.5):

    precision  P_j = 1/s0_j² + Σ_{(n,d) ∈ j} 1/σx_d²,
    mean       (μ0_j/s0_j² + Σ_{(n,d) ∈ j} r_nd/σx_d²) / P_j,

with ``r = X - Z A`` (imputed entries filled in) and the sums over the entries of ``X`` that
``b_j`` is added to (``σx_d`` the noise scale of column ``d``: a scalar or one per column).
One draw costs ``O(N D)``; no gradients.  With several observed matrices sharing ``Z``, the
offset belongs to one of them.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.util import get_random_generator
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.step_methods.model_matching import _strip, matched_models, one_value_var

__all__ = ["IBPOffsetGibbs"]

OFFSET_PATTERN = (
    "b = pm.Normal('b', mu0, s0, shape=(D,) or () or (N, 1)); "
    "pm.Normal('X', mu=Z @ A + b, sigma=sigma_x, observed=X), b used nowhere else"
)


def _match_offset(model, rv):
    """``(spec, block index)`` of the linear-Gaussian model whose offset (of one observed
    matrix) is exactly ``rv`` (broadcast)."""
    if not isinstance(rv.owner.op, NormalRV) or model.rvs_to_transforms.get(rv) is not None:
        raise ModelPatternError(f"{rv.name!r} is not an untransformed pm.Normal.")
    for spec in matched_models(model):
        for i, blk in enumerate(spec.blocks):
            if blk.offset is None or _strip(blk.offset) is not rv:
                continue
            others = [r for r in model.basic_RVs if r is not rv]
            users = {r for r in others if rv in set(ancestors(r.owner.inputs, blockers=others))}
            if users <= set(blk.like_rvs):
                return spec, i
    raise ModelPatternError(
        f"{rv.name!r} is not the offset of a linear-Gaussian IBP model. Needed: {OFFSET_PATTERN}."
    )


def _sum_to_shape(R, shape):
    """Sum ``R`` (N x D) over the axes along which an array of ``shape`` is broadcast."""
    shape = (1,) * (R.ndim - len(shape)) + tuple(shape)
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and R.shape[i] != 1)
    return R.sum(axis=axes, keepdims=True)


class IBPOffsetGibbs(BlockedStep):
    r"""Exact Gibbs update of an offset ``b`` in ``X ~ Normal(Z @ A + b, σx)``.

    .. math:: b_j \mid \cdot \sim \mathcal N\Big(\frac{\mu_{0j}/s_{0j}^2 +
        \sum_{(n,d)\in j} r_{nd}/\sigma_{x,d}^2}{P_j},\ \frac{1}{P_j}\Big),\qquad
        P_j = \frac{1}{s_{0j}^2} + \sum_{(n,d)\in j} \frac{1}{\sigma_{x,d}^2},\qquad
        r = X - ZA,

    the sums running over the entries of ``X`` that ``b_j`` is added to.  Chosen automatically
    for a ``pm.Normal`` offset of a model that :class:`pymc_ibp.AcceleratedGibbs` handles.
    """

    name = "ibp_offset_gibbs"
    default_blocked = False  # one instance per variable when PyMC assigns several
    stats_dtypes_shapes = {}
    _state_class = StepMethodState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, rv = one_value_var(vars, model, "IBPOffsetGibbs updates one offset")
        spec, i = _match_offset(model, rv)
        blk = spec.blocks[i]
        self.vars = [value_var]
        self.name_b = value_var.name
        _, _, mu0, s0 = rv.owner.inputs
        sx_cols = pt.broadcast_to(blk.sigma_x, (blk.X.shape[1],))
        sym = model.replace_rvs_by_values([mu0, s0, sx_cols])
        self._params = compile_point_fn(model, sym, compile_kwargs=compile_kwargs)
        self.spec = spec
        self.z_name = model.rvs_to_values[spec.z_rv].name
        self.a_name = model.rvs_to_values[blk.a_rv].name
        self.miss_name = (model.rvs_to_values[blk.missing_rv].name
                          if blk.missing_rv is not None else None)
        self._X = blk.filled()  # read only
        self._mask = blk.missing_mask
        self.rng = get_random_generator(rng)

    def step(self, point):
        mu0, s0, sx = (np.asarray(v, dtype=float) for v in self._params(point))
        b = np.asarray(point[self.name_b])
        X = self._X
        if self._mask is not None:
            X = X.copy()
            X[self._mask] = point[self.miss_name]
        R = X - self.spec.z_value(point, self.z_name) @ point[self.a_name]
        w = np.broadcast_to(1.0 / sx**2, R.shape)  # precision of each entry
        sums = _sum_to_shape(R * w, b.shape).reshape(b.shape)
        prec = (1.0 / np.broadcast_to(s0, b.shape) ** 2
                + _sum_to_shape(w, b.shape).reshape(b.shape))
        mean = (np.broadcast_to(mu0, b.shape) / np.broadcast_to(s0, b.shape) ** 2 + sums) / prec
        new = dict(point)
        new[self.name_b] = (mean + self.rng.standard_normal(b.shape) / np.sqrt(prec)).astype(
            b.dtype)
        return new, [{}]  # one (empty) stats slot per step, as PyMC expects

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if not isinstance(var.owner.op, NormalRV):
            return Competence.INCOMPATIBLE
        try:
            _match_offset(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
