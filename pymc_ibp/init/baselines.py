"""Baselines of free offsets for the linear-Gaussian start search: the offsets ``b`` in
``Z @ A + b`` that are one free, untransformed variable, the same for every row or one row per
group of rows (``b[group]``), get a fitted baseline beside the searched ``Z`` and start at it
unless the user gave their initial value."""

from __future__ import annotations

import numpy as np

from pymc_ibp.init.given import initial_value_given
from pymc_ibp.kernels.offsets import group_row_sums
from pymc_ibp.matching.graph import (
    first_axis_index,
    row_constant_variable,
    row_indexed_variable,
    strip,
)

__all__ = ["any_grouped", "baseline", "group_values", "search_baselines"]


def search_baselines(model, spec, initial_point=None, model_point=None):
    """``(c0, c1, per_column, name, given, group)`` for each block of columns whose offset is
    one free, untransformed variable (value ``name``) of this block alone, the same for every
    row (``b`` of shape ``(D,)``, ``(1, D)`` or ``()``; ``group = None``) or one per group of
    rows (``b[group]`` with ``b`` of shape ``(G, D)``, or ``(G,)`` as ``b[group][:, None]``;
    ``group`` the symbolic group vector): the start search fits a baseline there
    (:func:`baseline`), and the chain starts that variable at its initial value plus the
    baseline unless the user ``given`` its initial value.  Without a per-group baseline the
    search explained the groups' offsets with features of its own (one per group, which
    the chain then kept beside ``b``)."""
    out = []
    rvs = []
    for blk in spec.blocks:
        rv = group = None
        if blk.offset is not None:
            rv = row_constant_variable(model, blk.offset)
            if rv is None:
                rv = row_indexed_variable(model, blk.offset, *blk.shape)
                group = None if rv is None else first_axis_index(strip(blk.offset))
        rvs.append((rv, group))
    names = [rv for rv, _ in rvs]
    for (rv, group), c0, c1 in zip(rvs, spec.cols[:-1], spec.cols[1:], strict=True):
        if rv is None or names.count(rv) > 1:
            continue
        # as broadcast against the block's N x D_b; b[group]: (G, D), not (G,) for all columns
        per_column = (rv.ndim == 2 if group is not None
                      else not (True, *rv.type.broadcastable)[-1])
        out.append((int(c0), int(c1), per_column, model.rvs_to_values[rv].name,
                    initial_value_given(model, [rv], initial_point, model_point), group))
    return tuple(out)


def any_grouped(groups):
    """Whether ``groups`` (one entry per baseline block, ``None`` for a block without a
    per-group offset; ``None``: no per-group offset at all) holds a per-group offset."""
    return groups is not None and any(g is not None for g in groups)


def baseline(R, baselines, groups=None):
    """Per block of ``baselines`` (:func:`search_baselines`) the mean of ``R`` over its rows
    (per column) or over all its entries (a scalar offset), over each group's rows for a
    per-group offset (``groups``: one entry per block, every row's group for a per-group
    offset's block and ``None`` for the others; ``None``: no per-group offset); zero
    elsewhere.  ``1 x D``, or ``N x D`` (one row per row of ``R``) with a per-group offset."""
    grouped = any_grouped(groups)
    groups = [None] * len(baselines) if groups is None else groups
    c = np.zeros((R.shape[0] if grouped else 1, R.shape[1]))
    for (c0, c1, per_column, *_), g in zip(baselines, groups, strict=True):
        if g is None:
            c[:, c0:c1] = R[:, c0:c1].mean(axis=0) if per_column else R[:, c0:c1].mean()
            continue
        _, inv, count = np.unique(g, return_inverse=True, return_counts=True)
        if per_column:  # each group's mean row, or the mean of its entries
            block, n_entries = R[:, c0:c1], count
        else:
            block, n_entries = R[:, c0:c1].sum(axis=1, keepdims=True), count * (c1 - c0)
        c[:, c0:c1] = (group_row_sums(block, inv, len(count)) / n_entries[:, None])[inv]
    return c


def group_values(base, g, c0, c1):
    """``(labels, values)``: the groups in ``g`` (every row's group) and, for each, its
    row of ``base[:, c0:c1]`` (a per-group baseline: an array with one row per row of ``g``,
    the same at every row of a group)."""
    labels, first = np.unique(g, return_index=True)
    return labels, base[first, c0:c1]
