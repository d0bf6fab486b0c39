"""Exact Gibbs update of an offset added to ``Z @ A`` in a linear-Gaussian model.

For ``X ~ Normal(Z @ A + b, σx)`` with ``b ~ Normal(μ0, s0)`` (any shape that broadcasts to
``N x D``: a scalar, one offset per dimension ``(D,)``, one per row ``(N, 1)``, …; or one per
group of rows, ``b[group]`` with ``b`` of shape ``(G, D)`` or ``(G,)`` and ``group`` a constant
or ``pm.Data`` integer vector giving every row's group) the conditional of each entry ``b_j`` is
Gaussian (conjugate normal–normal update, e.g. Gelman et al. 2013, §2.5):

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
from pymc_ibp.kernels.offsets import group_labels, group_row_sums
from pymc_ibp.matching.graph import (
    first_axis_index,
    one_value_var,
    row_indexed_variable,
    same_for_every_row,
    strip,
)
from pymc_ibp.matching.linear_gaussian import matched_models
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["IBPOffsetGibbs"]

OFFSET_PATTERN = (
    "b = pm.Normal('b', mu0, s0, shape=(D,) or () or (N, 1)); "
    "pm.Normal('X', mu=Z @ A + b, sigma=sigma_x, observed=X), b used nowhere else; "
    "or per group of rows: b of shape (G, D) (or (G,)) and mu=Z @ A + b[group] "
    "(b[group][:, None]), group a constant or pm.Data integer vector of length N"
)


def _match_offset(model, rv):
    """``(spec, block index, group index)`` of the linear-Gaussian model whose offset (of one
    observed matrix) is exactly ``rv`` (broadcast), or ``rv[group]`` (then the symbolic
    ``group`` vector is returned, else ``None``)."""
    if not isinstance(rv.owner.op, NormalRV) or model.rvs_to_transforms.get(rv) is not None:
        raise ModelPatternError(f"{rv.name!r} is not an untransformed pm.Normal.")
    for spec in matched_models(model):
        for i, blk in enumerate(spec.blocks):
            if blk.offset is None:
                continue
            group = None
            if strip(blk.offset) is not rv:
                if row_indexed_variable(model, blk.offset, *blk.shape) is not rv:
                    continue
                group = first_axis_index(strip(blk.offset))
            others = [r for r in model.basic_RVs if r is not rv]
            users = {r for r in others if rv in set(ancestors(r.owner.inputs, blockers=others))}
            if users <= set(blk.like_rvs):
                return spec, i, group
    raise ModelPatternError(
        f"{rv.name!r} is not the offset of a linear-Gaussian IBP model. Needed: {OFFSET_PATTERN}."
    )


def _sum_to_shape(R, shape):
    """Sum ``R`` (N x D) over the axes along which an array of ``shape`` is broadcast."""
    shape = (1,) * (R.ndim - len(shape)) + tuple(shape)
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and R.shape[i] != 1)
    return R.sum(axis=axes, keepdims=True)


def _residual_sums(X, Z, A, w, b_shape, group=None, per_row=False):
    """``(sums, wsum, shape)``: the precision-weighted residuals ``w_d (x_nd - z_n a_d)`` and
    the precisions ``w_d`` summed over the rows that each entry of ``b`` is added to, as an
    array that :func:`_sum_to_shape` brings to ``shape`` (``b``'s, as ``G x D``, ``G x 1``,
    ``N x 1`` or broadcast against ``1 x D``).  The rows are summed first (``Σ_n x_nd -
    m_k a_kd``, per group or per row), so no ``N x D`` array is made: at 10^6 rows each
    would cost as much as the data."""
    n = X.shape[0]
    if group is not None:  # b[group]: sums over each group's rows, b as (G, D) or (G, 1)
        G = b_shape[0]
        labels = group_labels(group, G)
        count = np.bincount(labels, minlength=G).astype(float)
        sums = (group_row_sums(X, labels, G) - group_row_sums(Z, labels, G) @ A) * w
        return sums, count[:, None] * w, b_shape if len(b_shape) == 2 else (G, 1)
    if per_row or tuple(b_shape) == (n, 1):  # one value per row: each row over its columns
        sums = X @ w - Z @ (A @ w)  # (b of shape (N,) added as b[:, None], or (N, 1))
        return sums[:, None], np.full((n, 1), w.sum()), (n, 1)
    if len(b_shape) == 2 and b_shape[0] != 1:  # one value per entry
        R = (X - Z @ A) * w
        return R, np.broadcast_to(w, R.shape), b_shape
    sums = (X.sum(axis=0) - Z.sum(axis=0, dtype=np.int64) @ A) * w
    return sums[None], (n * w)[None], b_shape


@refuses_potentials
class IBPOffsetGibbs(BlockedStep):
    r"""Exact Gibbs update of an offset ``b`` in ``X ~ Normal(Z @ A + b, σx)``.

    .. math:: b_j \mid \cdot \sim \mathcal N\Big(\frac{\mu_{0j}/s_{0j}^2 +
        \sum_{(n,d)\in j} r_{nd}/\sigma_{x,d}^2}{P_j},\ \frac{1}{P_j}\Big),\qquad
        P_j = \frac{1}{s_{0j}^2} + \sum_{(n,d)\in j} \frac{1}{\sigma_{x,d}^2},\qquad
        r = X - ZA,

    the sums running over the entries of ``X`` that ``b_j`` is added to (for ``b[group]``:
    the rows of ``b_j``'s group).  Chosen automatically for a ``pm.Normal`` offset of a model
    that :class:`pymc_ibp.AcceleratedGibbs` handles.
    """

    name = "ibp_offset_gibbs"
    default_blocked = False  # one instance per variable when PyMC assigns several
    stats_dtypes_shapes = {}
    _state_class = StepMethodState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, rv = one_value_var(vars, model, "IBPOffsetGibbs updates one offset")
        spec, i, group = _match_offset(model, rv)
        blk = spec.blocks[i]
        self.vars = [value_var]
        self.name_b = value_var.name
        _, _, mu0, s0 = rv.owner.inputs
        sx_cols = pt.broadcast_to(blk.sigma_x, (blk.X.shape[1],))
        # a pm.Data group vector is read at every step (pm.set_data may change it)
        self._grouped = group is not None
        # b of shape (N,) added as b[:, None]: one value per row, summed over its columns
        self._per_row = (not self._grouped and rv.ndim == 1
                         and not same_for_every_row(blk.offset))
        sym = model.replace_rvs_by_values([mu0, s0, sx_cols] + [group] * self._grouped)
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
        mu0, s0, sx, *group = self._params(point)
        mu0, s0, sx = (np.asarray(v, dtype=float) for v in (mu0, s0, sx))
        b = np.asarray(point[self.name_b])
        X = self._X
        if self._mask is not None:
            X = X.copy()
            X[self._mask] = point[self.miss_name]
        w = 1.0 / sx**2  # precision of each column's entries (sx: one per column)
        sums, wsum, shape = _residual_sums(
            X, self.spec.z_value(point, self.z_name), np.asarray(point[self.a_name], float), w,
            b.shape, group[0] if self._grouped else None, self._per_row)
        sums = _sum_to_shape(sums, shape).reshape(b.shape)
        prec = (1.0 / np.broadcast_to(s0, b.shape) ** 2
                + _sum_to_shape(wsum, shape).reshape(b.shape))
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
