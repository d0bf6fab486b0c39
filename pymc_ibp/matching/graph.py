"""PyTensor graph utilities shared by the model matchers: peeling casts, views and broadcasts,
recognising ``Z @ A`` and PyMC's imputation split, splitting a likelihood mean into its
product and offset, and reading observed data and per-column scales.  Ops are recognised by
``isinstance``."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.ops import ViewOp
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.scalar.basic import Add, Cast, Sub
from pytensor.tensor.basic import Alloc
from pytensor.tensor.blas import Dot22
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

from pymc_ibp._pytensor_utils import constant_value
from pymc_ibp.datasets.sharded import sharded_data_of
from pymc_ibp.exceptions import ModelPatternError


def side_by_side(arrays):
    """The arrays' columns side by side; a lone array itself, not a copy (``np.hstack`` would
    copy it): the caller reads it and never writes into it."""
    return arrays[0] if len(arrays) == 1 else np.hstack(arrays)


def strip(var, broadcasting=False):
    """Remove what does not change values: casts, ``pm.Deterministic`` (a ``ViewOp``) and
    dimshuffles that only add or drop broadcastable axes (not transpositions).  With
    ``broadcasting``, only the dimshuffles that broadcasting against a larger array does by
    itself (adding or dropping leading axes, as for ``b`` in ``Z @ A + b``): ``b[:, None]``
    keeps its trailing axis, which makes ``b`` run along the rows."""
    while var.owner is not None:
        op = var.owner.op
        if isinstance(op, DimShuffle):
            order = list(op.new_order)
            kept = [i for i in order if i != "x"]
            if kept != sorted(kept):
                break
            n_new = len(order) - len(kept)
            if broadcasting and (order[:n_new] != ["x"] * n_new or kept != list(
                    range(op.input_ndim - len(kept), op.input_ndim))):
                break
        elif not (isinstance(op, ViewOp) or (
                isinstance(op, Elemwise) and isinstance(op.scalar_op, Cast))):
            break
        var = var.owner.inputs[0]
    return var


def is_matmul(var):
    """Whether ``var`` is a matrix product: ``pt.dot`` (``Dot``, ``Dot22`` after rewrites) or
    ``@`` / ``pt.matmul`` (a ``Blockwise`` of ``Dot``)."""
    if var.owner is None:
        return False
    op = var.owner.op
    return isinstance(op, (Dot, Dot22)) or (
        isinstance(op, Blockwise) and isinstance(op.core_op, Dot))


def boolean_masked(var):
    """``(base, mask)`` when ``var`` is ``base[mask]`` with a constant boolean array ``mask``
    (how PyMC splits data with NaN entries into ``X_observed`` and ``X_unobserved``: each side's
    parameters are the full parameters indexed by its mask), else ``None``."""
    node = var.owner
    if node is None or not isinstance(node.op, AdvancedSubtensor) or len(node.inputs) != 2:
        return None
    base, index = node.inputs
    if not isinstance(index, Constant) or index.type.dtype != "bool":
        return None
    return base, np.asarray(index.data)


def first_axis_index(var):
    """``index`` when ``var`` is ``base[index]`` or ``base[index, :]`` with a 1-D integer
    vector ``index`` (a variable or a constant) on the first axis only, e.g. ``M[c]`` (a
    category's row for every observation) or ``b[group]``; else ``None``."""
    node = var.owner
    if node is None or not isinstance(node.op, AdvancedSubtensor) or len(node.inputs) != 2:
        return None
    idx_list = getattr(node.op, "idx_list", ())
    index = node.inputs[1]
    if (not idx_list or idx_list[0] != 0
            or not all(isinstance(e, slice) and e == slice(None) for e in idx_list[1:])
            or index.ndim != 1 or not index.type.dtype.startswith(("int", "uint"))):
        return None
    return index


def unmask(var):
    """``(var, mask)``: ``var`` stripped, and PyMC's imputation index (a constant boolean
    array) taken off it when present (``mask = None`` otherwise); ``None`` when ``var`` is
    indexed by anything else."""
    var = strip(var)
    if var.owner is None or not isinstance(var.owner.op, AdvancedSubtensor):
        return var, None
    masked = boolean_masked(var)
    return None if masked is None else (strip(masked[0]), masked[1])


def mean_terms(mu, left=None):
    """Split a likelihood mean into ``(left, right, offset, mask)`` when it is
    ``left @ right (+ or - terms not involving the product)``, optionally masked by PyMC's
    imputation (a constant boolean index); ``offset`` is the sum of the other terms (or
    ``None``).  With ``left`` given, the product is the one whose left factor it is (other
    products, e.g. covariates times their weights, go to the offset).  Returns ``None`` for
    any other form."""
    unmasked = unmask(mu)
    if unmasked is None:
        return None
    mu, mask = unmasked

    def kind(t):
        if t.owner is None or not isinstance(t.owner.op, Elemwise):
            return None
        return {Add: "Add", Sub: "Sub"}.get(type(t.owner.op.scalar_op))

    terms = [mu]  # flatten sums; a difference u - v adds the term -v
    while any(kind(t) in ("Add", "Sub") for t in terms):
        flat = []
        for t in terms:
            # broadcasts that change which axis a term runs along (b[:, None]) are kept
            if kind(t) == "Add":
                flat += [strip(u, broadcasting=True) for u in t.owner.inputs]
            elif kind(t) == "Sub":
                flat += [strip(t.owner.inputs[0], broadcasting=True), -t.owner.inputs[1]]
            else:
                flat.append(t)
        terms = flat
    products = [t for t in terms if is_matmul(t)
                and (left is None or strip(t.owner.inputs[0]) is left)]
    if len(products) != 1:
        return None
    left, right = (strip(v) for v in products[0].owner.inputs[:2])
    others = [t for t in terms if t is not products[0]]
    offset = None
    if others:
        offset = others[0] if len(others) == 1 else pt.add(*others)
    return left, right, offset, mask


def linked_mean_terms(param, var, left=None):
    """``(terms, links)``: :func:`mean_terms` of ``param`` (with ``left``) or, through
    element-wise links with one input depending on ``var`` (``exp``, ``sigmoid``, ...), of the
    linear predictor below them, and the scalar ops of those links, outermost first
    (``(None, links)`` when there is no such predictor)."""
    links = []
    while True:
        terms = mean_terms(param, left=left)
        if terms is not None:
            return terms, links
        node = param.owner
        if node is None or not isinstance(node.op, Elemwise):
            return None, links
        inputs = [v for v in node.inputs if var in set(ancestors([v]))]
        if len(inputs) != 1:
            return None, links
        links.append(node.op.scalar_op)
        param = inputs[0]


def is_scalar(var):
    return all(var.type.broadcastable)


def scalar_of(var):
    """Peel the broadcasting wrappers PyMC adds around a scalar parameter."""
    while var.owner is not None and isinstance(
        var.owner.op, (DimShuffle, Subtensor, Alloc)
    ) and is_scalar(var.owner.inputs[0]):
        var = var.owner.inputs[0]
    return pt.as_tensor_variable(var).squeeze() if var.ndim else var


def is_zero_constant(var):
    try:
        val = pt.get_underlying_scalar_constant_value(var)
    except Exception:  # noqa: BLE001 - pytensor raises NotScalarConstantError
        try:
            if not [v for v in ancestors([var]) if v.owner is None and not isinstance(v, Constant)]:
                val = constant_value(var)
                return bool(np.all(val == 0))
        except Exception:  # noqa: BLE001
            return False
        return False
    return float(val) == 0.0


def observed_data(value_var):
    """The values of an observed variable's (or a constant's) data as a float array; a
    :class:`~pymc_ibp.datasets.ShardedData` raises :class:`ModelPatternError` (its data stay on
    their shards)."""
    sharded = sharded_data_of(value_var)
    if sharded is not None:
        raise ModelPatternError(
            f"{value_var.name or 'The observed data'} is a {sharded!r}: it "
            "stays on its shards, and only pmi.DataParallelGibbs (with the plugin's alpha and "
            "scale steps) samples a linear-Gaussian IBP model with sharded data.")
    if isinstance(value_var, Constant):
        return np.asarray(value_var.data, dtype=float)
    if hasattr(value_var, "get_value"):
        return np.asarray(value_var.get_value(), dtype=float)
    return np.asarray(constant_value(value_var), dtype=float)


def column_scale(sigma, what, pattern, masked=False):
    """The symbolic scale of a Normal over an ``R x D`` matrix as a scalar or one value per
    column; raises :class:`ModelPatternError` when it varies across rows.  ``masked``: the
    scale was indexed by PyMC's imputation split, whose base is the unmasked scale."""
    if masked and not is_scalar(sigma) and sigma.owner is not None and isinstance(
            sigma.owner.op, AdvancedSubtensor):  # the split's index (a mask or its nonzero)
        sigma = sigma.owner.inputs[0]
    if is_scalar(sigma):
        return scalar_of(sigma)
    if sigma.ndim == 2:
        if not sigma.type.broadcastable[0]:
            raise ModelPatternError(
                f"{what} varies across rows (shape {sigma.type.shape}); the collapsed "
                f"linear-Gaussian samplers need a scalar or one value per column. "
                f"Needed pattern: {pattern}."
            )
        sigma = sigma[0]
    if sigma.ndim != 1:
        raise ModelPatternError(f"{what} must be a scalar or one value per column.")
    return sigma


def block_data(model, z_rv, obs_rv, obs_mask, shape):
    """The data of ``obs_rv`` as an ``N x D_b`` float array (NaN where PyMC imputes).  Without
    imputed entries it is the model's own array when that is already float64 and C-ordered
    (no copy: at 10^6 rows each copy costs as much as the data; the steps only read it)."""
    n, d = shape
    data = observed_data(model.rvs_to_values[obs_rv])
    if obs_mask is None:
        if data.shape != (n, d):
            raise ModelPatternError(
                f"Shape mismatch: observed {obs_rv.name!r} has shape {data.shape} "
                f"but {z_rv.name} @ A is {n} x {d}."
            )
        return np.ascontiguousarray(data, dtype=np.float64)
    if obs_mask.shape != (n, d):
        raise ModelPatternError(
            f"Mask shape {obs_mask.shape} does not match {z_rv.name} @ A ({n} x {d})."
        )
    X = np.full((n, d), np.nan)
    X[obs_mask] = data
    return X


def one_value_var(vars, model, updates):
    """``(value_var, rv)`` of the single variable a step updates, or
    :class:`ModelPatternError` saying ``"<updates>; got [...]"`` (e.g. ``"IBPGibbs updates one
    binary matrix at a time"``)."""
    from pymc.util import get_value_vars_from_user_vars

    value_vars = get_value_vars_from_user_vars(vars, model)
    if len(value_vars) != 1:
        raise ModelPatternError(f"{updates}; got {[v.name for v in value_vars]}.")
    [value_var] = value_vars
    return value_var, model.values_to_rvs[value_var]


def row_constant_variable(model, term):
    """The free, untransformed variable that the mean term ``term`` is (casts and broadcasts
    stripped) when it is the same for every row of an ``N x D`` mean (shape ``()``, ``(D,)``,
    ``(1, D)``, …): an offset ``b`` in ``Z @ A + b`` that a start may set from a fitted
    baseline.  ``None`` otherwise."""
    rv = strip(term)
    if (rv not in set(model.free_RVs) or model.rvs_to_transforms.get(rv) is not None
            or rv.ndim > 2):
        return None
    return rv if same_for_every_row(term) else None


def same_for_every_row(term):
    """Whether the mean term ``term``, as broadcast against an ``N x D`` mean, is the same for
    every row (shape ``()``, ``(D,)``, ``(1, D)``; not ``(N, 1)`` or ``b[:, None]``)."""
    return (True, True, *term.type.broadcastable)[-2]


def row_indexed_variable(model, term, n_rows, n_cols):
    """The variable ``rv`` when the mean term ``term`` (casts and broadcasts stripped) is
    ``rv[index]``: a free, untransformed variable with one row per group, indexed along its
    first axis by a constant (or ``pm.Data``) integer vector ``index`` giving the group of
    every row of an ``N x D`` mean (``N = n_rows``), e.g. the offset ``b[group]`` in
    ``Z @ A + b[group]`` with ``b`` of shape ``(G, D)``, or ``(G,)`` as ``b[group][:, None]``
    (``term`` may come with that broadcast already stripped; with ``N = D = n_cols`` a
    stripped ``b[group]`` could run along the columns, so it is not taken).  A start may set
    each group's row from a fitted offset.  ``None`` otherwise."""
    index = first_axis_index(strip(term))
    if index is None:
        return None
    rv = strip(term).owner.inputs[0]
    if (rv not in set(model.free_RVs) or model.rvs_to_transforms.get(rv) is not None
            or rv.ndim not in (1, 2)):
        return None
    if isinstance(index, Constant):
        value = np.asarray(index.data)
    elif hasattr(index, "get_value"):  # pm.Data
        value = np.asarray(index.get_value())
    else:
        return None
    if value.shape[0] != n_rows:
        return None
    if rv.ndim == 1:  # one value per group: rv[index][:, None], N x 1
        rows = (term.ndim == 2 and term.type.broadcastable[1]) or (
            term.ndim == 1 and n_rows != n_cols)
    else:
        rows = term.ndim == 2
    return rv if rows else None  # else not one group per row of the N x D mean


def slot_knob(model, z_name):
    """What a :class:`~pymc_ibp.TruncationWarning` for ``z_name`` says to raise: the length of
    its last dim (e.g. ``'feature'``), the last entry of ``shape=`` without dims, and for the
    category matrix of :func:`pymc_ibp.ibp_ibp` / :func:`pymc_ibp.noisy_or_ibp_ibp` their
    ``l_max=`` (the builder tags the matrix with ``tag.slot_knob``)."""
    dim = slot_dim(model, z_name)
    knob = getattr(model[z_name].tag, "slot_knob", None)
    if dim is None:
        return knob or "the last entry of shape="
    where = f"the length of the {dim!r} dim"
    return f"{knob}, {where}" if knob else where


def slot_dim(model, z_name):
    """The name of the dim of ``z_name``'s feature slots (its last dim; e.g. ``'feature'``, or
    ``'Z_category'`` for the category matrix of :func:`pymc_ibp.ibp_ibp`), or ``None`` when
    the variable has no dims: where a :class:`~pymc_ibp.TruncationWarning` says to raise
    ``K_max``."""
    dims = model.named_vars_to_dims.get(z_name)
    return dims[-1] if dims else None


def rv_users(model, rv):
    """The random variables whose parameters depend on ``rv`` other than through another RV."""
    others = [r for r in model.basic_RVs if r is not rv]
    return [r for r in others if rv in set(ancestors(r.owner.inputs, blockers=others))]


def fixed_normal_scale(model, var):
    """``σ`` when ``var`` is a free ``pm.Normal(0, σ)`` variable of ``model`` with ``σ`` one
    number fixed by the model (no free variable below it), else ``None``."""
    if var is None or var not in set(model.free_RVs) or var.owner is None:
        return None
    if not isinstance(var.owner.op, NormalRV):
        return None
    mu, sigma = var.owner.inputs[-2:]
    free = set(model.free_RVs) | set(model.value_vars)
    if not is_zero_constant(mu) or any(v in free for v in ancestors([sigma])):
        return None
    try:
        value = np.asarray(constant_value(sigma), dtype=float)
    except Exception:  # noqa: BLE001 - a graph PyTensor cannot evaluate without inputs
        return None
    if value.size == 0 or not np.all(value == value.flat[0]) or not value.flat[0] > 0:
        return None
    return float(value.flat[0])
