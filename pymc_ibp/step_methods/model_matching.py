"""Find the structure a step method needs in a PyMC model, in two independent parts.

**What prior ``Z`` has** (:func:`match_prior`, extensible through :data:`PRIOR_MATCHERS`):

* :class:`IBPPrior` — ``Z = pmi.IBP("Z", alpha, beta, dims=("obs", "feature"))``: the IBP's
  column counts and births;
* :class:`LogOddsPrior` — ``Z = pm.Bernoulli("Z", p=P, dims=("obs", "feature"))`` with ``P``
  broadcastable to ``N x K`` (e.g. ``P = pmi.IBPStickBreaking(...)``): independent entries
  with per-entry prior log-odds ``log P/(1-P)``, no births;  ``Z = pmi.DependentIBP(...)``
  (Williamson, Orbanz & Ghahramani 2010) is the same mode with ``log P = log Φ(u)`` and
  ``log(1-P) = log Φ(-u)`` evaluated in log space.

**What the likelihood is** (:func:`find_linear_gaussian`): the linear-Gaussian model the
collapsed and accelerated samplers need::

    A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))      # K x D
    pm.Normal("X", mu=Z @ A + b, sigma=sigma_x, observed=X)         # b optional

``sigma_a`` and ``sigma_x`` are scalars or one value per column (shape ``(D,)``).  One ``Z``
may feed several such observed matrices (``X1 ~ Normal(Z @ A1, s1)``,
``X2 ~ Normal(Z @ A2, s2)``, …): each is a :class:`GaussianBlock` of columns with its own
``A``, scales and offset, and the samplers see the blocks side by side.  The prior's
parameters, the scales and the offsets may be constants or free variables with any
transform; they are read from the current point at every step.  Observed arrays with NaNs
(PyMC's automatic imputation, ``X_observed`` + ``X_unobserved``) are supported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.ops import ViewOp
from pytensor.graph.basic import Constant, equal_computations
from pytensor.graph.traversal import ancestors
from pytensor.tensor.basic import Alloc
from pytensor.tensor.blas import Dot22
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.random.basic import BernoulliRV, HalfNormalRV, NormalRV
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

from pymc_ibp._pytensor_utils import compile_point_fn, constant_value
from pymc_ibp.datasets.sharded import sharded_data_of
from pymc_ibp.distributions.dependent import DependentIBPRV, dibp_log_probs
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.exceptions import DataError, ModelPatternError

__all__ = [
    "RowOffset",
    "PRIOR_MATCHERS",
    "GaussianBlock",
    "IBPPrior",
    "LinearGaussianIBP",
    "BINARY_MATRIX_OPS",
    "BernoulliLogitIBP",
    "LOGIT_PATTERN",
    "boolean_masked",
    "first_axis_index",
    "group_labels",
    "LogOddsPrior",
    "NonNegativeFeatures",
    "find_bernoulli_logit",
    "find_linear_gaussian",
    "find_nonnegative_features",
    "match_prior",
    "matched_logit_models",
    "matched_models",
    "observed_data",
    "row_constant_variable",
    "same_for_every_row",
]

PATTERN = (
    "Z = pmi.IBP('Z', alpha, dims=('obs', 'feature')) or pm.Bernoulli('Z', p=P, "
    "dims=('obs', 'feature')); "
    "A = pm.Normal('A', 0, sigma_a, dims=('feature', 'dim')); "
    "pm.Normal('X', mu=Z @ A (+ offset), sigma=sigma_x, observed=X), sigma_a and sigma_x "
    "scalars or one per column"
)


#: Random variable types of the binary matrices the samplers update
BINARY_MATRIX_OPS = (IBPRV, BernoulliRV, DependentIBPRV)


@dataclass
class IBPPrior:
    """``Z ~ pmi.IBP(alpha, beta)``: column counts with births (symbolic ``alpha``, ``beta``)."""

    alpha: object
    beta: object


@dataclass
class LogOddsPrior:
    """Independent entries: symbolic ``log P(z_nk = 1)`` and ``log P(z_nk = 0)``, each
    broadcast to the shape of ``Z`` (``pm.Bernoulli``, :class:`pymc_ibp.DependentIBP`)."""

    log_p1: object
    log_p0: object


def _match_ibp(model, z_rv):
    if isinstance(z_rv.owner.op, IBPRV):
        _, _, alpha, beta, _, _ = z_rv.owner.inputs
        return IBPPrior(alpha=alpha, beta=beta)
    return None


def _match_bernoulli(model, z_rv):
    if isinstance(z_rv.owner.op, BernoulliRV) and z_rv.ndim == 2:
        p = pt.broadcast_to(z_rv.owner.inputs[-1], z_rv.shape)
        return LogOddsPrior(log_p1=pt.log(p), log_p0=pt.log1p(-p))
    return None


def _match_dependent_ibp(model, z_rv):
    if isinstance(z_rv.owner.op, DependentIBPRV):
        log1, log0 = dibp_log_probs(*z_rv.owner.inputs[2:])
        return LogOddsPrior(log_p1=log1, log_p0=log0)
    return None


#: Functions ``(model, z_rv) -> prior or None``, tried in order by :func:`match_prior`; a new
#: prior (e.g. the dependent IBP) plugs in by appending its matcher here and a mode to
#: :mod:`pymc_ibp.step_methods.prior_modes`.
PRIOR_MATCHERS = [_match_ibp, _match_bernoulli, _match_dependent_ibp]


def match_prior(model, z_rv):
    """The prior of the binary matrix ``z_rv`` (:class:`IBPPrior` or :class:`LogOddsPrior`),
    or ``None`` if no matcher recognises it."""
    if z_rv.owner is None or z_rv.ndim != 2:
        return None
    for matcher in PRIOR_MATCHERS:
        prior = matcher(model, z_rv)
        if prior is not None:
            return prior
    return None


def side_by_side(arrays):
    """The arrays' columns side by side; a lone array itself, not a copy (``np.hstack`` would
    copy it): the caller reads it and never writes into it."""
    return arrays[0] if len(arrays) == 1 else np.hstack(arrays)


@dataclass
class GaussianBlock:
    """One observed Normal whose mean is ``Z @ A (+ offset)``: a block of columns of the data
    with its own feature matrix, scales and offset."""

    obs_rv: object  # the observed Normal (or X_observed)
    a_rv: object  # its feature matrix A (K_max x D_b)
    sigma_x: object  # symbolic noise scale, one per column (shape (D_b,)) or a scalar
    sigma_a: object  # symbolic prior scale of A, one per column or a scalar
    X: np.ndarray | None  # N x D_b with NaN at missing entries (None: sharded data)
    missing_rv: object = None  # X_unobserved free RV, or None
    missing_mask: np.ndarray | None = None  # N x D_b bool, True where missing
    offset: object = None  # symbolic terms added to Z @ A (broadcast to N x D_b), or None
    sharded: object = None  # the pmi.ShardedData behind the observed data, or None

    @property
    def shape(self):
        """``(N, D_b)``."""
        return self.sharded.shape if self.sharded is not None else self.X.shape

    @property
    def like_rvs(self):
        """The random variables whose logp holds this block's data terms."""
        return [self.obs_rv] + ([self.missing_rv] if self.missing_rv is not None else [])

    def filled(self):
        """``X`` with the missing entries set to 0: ``X`` itself (not a copy) when none are
        missing, so callers must not write into it (the imputing steps copy it first)."""
        return self.X if self.missing_mask is None else np.where(self.missing_mask, 0.0, self.X)


@dataclass
class LinearGaussianIBP:
    """The pieces of a matched linear-Gaussian latent feature model: the binary matrix, its
    prior and the blocks of columns it explains (one per observed matrix)."""

    z_rv: object
    prior: object  # IBPPrior or LogOddsPrior
    blocks: list  # GaussianBlock, in a fixed order
    k_max: int = 0
    z_data: np.ndarray | None = None  # the known Z of an observed pmi.IBP / Bernoulli, or None

    @property
    def sharded(self):
        """The :class:`~pymc_ibp.datasets.ShardedData` of the (single) block, or ``None``: its data
        stay on their shards (only :class:`~pymc_ibp.DataParallelGibbs` reads them)."""
        return self.blocks[0].sharded

    @property
    def shape(self):
        """``(N, D)`` of the stacked data."""
        return self.blocks[0].shape[0], int(self.cols[-1])

    @property
    def X(self):
        """All blocks' data side by side, ``N x D`` (NaN at missing entries)."""
        if self.sharded is not None:
            raise ModelPatternError(
                f"The observed data of {self.blocks[0].obs_rv.name!r} is a {self.sharded!r}: "
                "it stays on its shards, and only pmi.DataParallelGibbs (with the plugin's "
                "alpha and scale steps) samples such a model.")
        return side_by_side([b.X for b in self.blocks])

    def filled(self):
        """:attr:`X` with the missing entries set to 0 (not a copy when none are missing and
        there is one block: read it, never write into it)."""
        return side_by_side([b.filled() for b in self.blocks])

    @property
    def cols(self):
        """Block boundaries in the stacked columns (length ``B + 1``)."""
        return np.concatenate([[0], np.cumsum([b.shape[1] for b in self.blocks])]).astype(int)

    def block_of(self, col):
        """``(block, column within it)`` of the stacked column ``col``."""
        cols = self.cols
        i = int(np.searchsorted(cols, col, "right")) - 1
        return self.blocks[i], int(col - cols[i])

    @property
    def missing_mask(self):
        """``N x D`` mask of the imputed entries, or ``None`` if none are imputed."""
        if all(b.missing_mask is None for b in self.blocks):
            return None
        return np.hstack([b.missing_mask if b.missing_mask is not None
                          else np.zeros(b.shape, dtype=bool) for b in self.blocks])

    @property
    def a_rvs(self):
        return [b.a_rv for b in self.blocks]

    @property
    def missing_rvs(self):
        return [b.missing_rv for b in self.blocks if b.missing_rv is not None]

    @property
    def like_rvs(self):
        return [rv for b in self.blocks for rv in b.like_rvs]

    def z_value(self, point, z_name):
        """``Z`` at ``point`` (the data when ``Z`` is observed)."""
        return self.z_data if self.z_data is not None else point[z_name]

    def column_scales(self):
        """Symbolic per-column ``(σx, σa)``, each of length ``D`` (the stacked columns)."""
        sx = [pt.broadcast_to(b.sigma_x, (b.shape[1],)) for b in self.blocks]
        sa = [pt.broadcast_to(b.sigma_a, (b.shape[1],)) for b in self.blocks]
        return pt.concatenate(sx), pt.concatenate(sa)

    def hyper_values(self, model, point=None):
        """``(σx, σa, α, β)`` at ``point`` (default the model's initial point): the scales as
        per-column float arrays of length ``D``, ``α``, ``β`` of a :class:`IBPPrior` as floats.
        Used by the fits of :mod:`pymc_ibp.inference`, which take the hyperparameters there."""
        if not isinstance(self.prior, IBPPrior):
            raise ModelPatternError(f"{self.z_rv.name!r} needs a pmi.IBP prior.")
        fn = compile_point_fn(model, model.replace_rvs_by_values(
            [*self.column_scales(), self.prior.alpha, self.prior.beta]))
        sx, sa, alpha, beta = fn(model.initial_point() if point is None else point)
        return (np.array(sx, dtype=float), np.array(sa, dtype=float),
                float(np.asarray(alpha)), float(np.asarray(beta)))

    def compile_offset(self, model, compile_kwargs=None):
        """A point function giving the blocks' offsets as a :class:`RowOffset`, or ``None``
        when no block has one.  The offsets are read as one row added to every row when every
        block's offset is the same for every row (``b``, ``b[None, :]``), as a table of one
        row per group and every row's group when they are ``b[group]`` (one index vector for
        all blocks; the others the same for every row), and as ``N x D`` otherwise.  At 10^6
        rows an ``N x D`` offset costs as much as the data, at every call."""
        if all(b.offset is None for b in self.blocks):
            return None
        index, tables = self._offset_tables()
        if index is not None:  # b[group]: a row per group, and every row's group
            g = next(t for t in tables if t is not None).shape[0]
            parts = [pt.zeros((g, b.shape[1])) if b.offset is None
                     else pt.broadcast_to(b.offset if t is None else t, (g, b.shape[1]))
                     for b, t in zip(self.blocks, tables, strict=True)]
            [off, idx] = model.replace_rvs_by_values([pt.concatenate(parts, axis=1), index])
            fn = compile_point_fn(model, [off, idx], compile_kwargs=compile_kwargs)

            def grouped(point):
                table, labels = fn(point)
                table = self._finite_offset(np.asarray(table, dtype=np.float64))
                return RowOffset(table, group_labels(labels, table.shape[0]))

            return grouped
        n = (1 if all(b.offset is None or same_for_every_row(b.offset) for b in self.blocks)
             else self.blocks[0].shape[0])
        parts = [pt.zeros((n, b.shape[1])) if b.offset is None
                 else pt.broadcast_to(b.offset, (n, b.shape[1])) for b in self.blocks]
        [off] = model.replace_rvs_by_values([pt.concatenate(parts, axis=1)])
        fn = compile_point_fn(model, off, compile_kwargs=compile_kwargs)
        return lambda point: RowOffset(self._finite_offset(np.asarray(fn(point),
                                                                      dtype=np.float64)))

    def _finite_offset(self, table):
        """``table`` (the offsets side by side, a row per group or per data row), or a
        :class:`~pymc_ibp.exceptions.DataError` naming the first entry that is not finite
        (:func:`non_finite_entry`), by its column in its own block."""
        found = non_finite_entry(table)
        if found is not None:
            (r, col), count = found
            b, c = self.block_of(col)
            raise DataError(
                f"The offset added to {self.z_rv.name} @ A in the mean of {b.obs_rv.name!r} (the "
                f"terms besides {self.z_rv.name} @ A) is {table[r, col]} at (row {r}, column {c}) "
                f"({count} non-finite entries in all); offsets must be finite.")
        return table

    def _offset_tables(self):
        """``(index, tables)`` when every block's offset is ``None``, the same for every row,
        or ``base[index]`` with one index vector for all (``b[group]`` with ``b`` of shape
        ``(G, D_b)``, ``(G, 1)``, or ``(G,)`` added as ``b[group][:, None]``): ``tables`` one
        entry per block, ``base`` as ``G x D_b`` (``G x 1``) for the indexed ones and ``None``
        for the others.  ``(None, None)`` otherwise (offsets read as ``N x D``)."""
        index, tables = None, []
        for b in self.blocks:
            if b.offset is None or same_for_every_row(b.offset):
                tables.append(None)
                continue
            term = _strip(b.offset)
            idx = first_axis_index(term)
            if idx is None or b.offset.ndim != 2 or b.offset.type.broadcastable[0]:
                return None, None
            base = term.owner.inputs[0]
            if base.ndim == 1 and b.offset.type.broadcastable[1]:  # b[group][:, None]
                table = base[:, None]
            elif base.ndim == 2 and term.ndim == 2:
                table = base
            else:
                return None, None
            if index is not None and not equal_computations([idx], [index]):
                return None, None
            index = idx
            tables.append(table)
        return (index, tables) if index is not None else (None, None)


#: rows per chunk where an offset table is expanded (a chunk's temporary, not N x D)
_OFFSET_CHUNK = 1 << 15


class RowOffset(NamedTuple):
    """The offset added to the mean of ``N x D`` data (``b`` in ``Z @ A + b``), read as
    ``table[rows]``: ``table`` with one row per group and ``rows`` every data row's group
    (``b[group]``), or ``table`` itself when ``rows`` is ``None`` (one row added to every row,
    or ``N x D``).  The methods expand a table in chunks of rows: no ``N x D`` temporary."""

    table: np.ndarray
    rows: np.ndarray | None = None

    def subtract_from(self, X, out=None):
        """``X`` minus the offset, into ``out`` (may be ``X``; default a new array)."""
        if out is None:
            out = np.empty(X.shape, dtype=np.result_type(X, self.table))
        if self.rows is None:
            return np.subtract(X, self.table, out=out)
        for s in range(0, X.shape[0], _OFFSET_CHUNK):
            e = s + _OFFSET_CHUNK
            np.subtract(X[s:e], self.table[self.rows[s:e]], out=out[s:e])
        return out

    def add_to(self, Y, c0=0, c1=None):
        """``Y[:, c0:c1] += offset[:, c0:c1]`` (``Y``: ``N x D``; all columns by default), in
        place; returns ``Y``."""
        cols = slice(c0, c1)
        if self.rows is None:
            Y[:, cols] += self.table[:, cols]
            return Y
        for s in range(0, Y.shape[0], _OFFSET_CHUNK):
            Y[s:s + _OFFSET_CHUNK, cols] += self.table[self.rows[s:s + _OFFSET_CHUNK], cols]
        return Y

    def columns(self, c0, c1):
        """The offset's columns ``c0:c1``, as an array that broadcasts against ``N x D_b``
        (expanded to ``N`` rows for a table)."""
        part = self.table[:, c0:c1]
        return part if self.rows is None else part[self.rows]

    def dense(self, n):
        """The offset as an ``N x D`` array (``N = n``; tests and small data)."""
        return (np.broadcast_to(self.table, (n, self.table.shape[1])).copy()
                if self.rows is None else self.table[self.rows])

    def plus(self, other):
        """The offset plus another one, ``other`` (a :class:`RowOffset` of the same data; an
        ``N x D`` table of ``other`` is changed in place and returned inside the result).  Two
        tables read through different rows give one row per pair of their rows that some data
        row reads: still no ``N x D`` array."""
        if other.rows is None and other.table.shape[0] == 1:
            return RowOffset(self.table + other.table, self.rows)
        if self.rows is None and self.table.shape[0] == 1:
            return RowOffset(other.table + self.table, other.rows)
        if other.rows is None:
            if self.rows is None and self.table.shape != other.table.shape:
                raise ValueError("RowOffset.plus: the two offsets differ in shape.")
            return RowOffset(self.add_to(other.table))
        if self.rows is None:
            return RowOffset(other.add_to(np.array(self.table, dtype=np.float64)))
        if self.rows.shape != other.rows.shape:
            raise ValueError("RowOffset.plus: the two offsets cover different rows.")
        first, rows = joint_groups(self.rows, other.rows)
        return RowOffset(self.table[self.rows[first]] + other.table[other.rows[first]], rows)


def joint_groups(*labels):
    """Every row's group under several groupings at once: ``(first, index)`` with
    ``index[i]`` the number of row ``i``'s combination of labels (one label from each
    integer vector of ``labels``, all of one length; combinations numbered in sorted order)
    and ``first[c]`` a row of combination ``c``.  One pass of :func:`numpy.unique` per
    grouping, no ``N x len(labels)`` array: a table with one row per combination then holds
    what the groupings' tables add up to at every row (:meth:`RowOffset.plus`).  A grouping
    equal to an earlier one adds nothing and is skipped."""
    index, done = None, []
    for lab in labels:
        lab = np.asarray(lab, dtype=np.int64)
        if any(np.array_equal(lab, d) for d in done):
            continue
        done.append(lab)
        low = lab.min(initial=0)
        key = lab - low if low else lab  # labels from 0 (no copy when they are)
        if index is not None:
            key = index * (lab.max(initial=0) - low + 1) + key
        _, first, index = np.unique(key, return_index=True, return_inverse=True)
    return first, index.reshape(-1)


def _strip(var, broadcasting=False):
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
                isinstance(op, Elemwise) and type(op.scalar_op).__name__ == "Cast")):
            break
        var = var.owner.inputs[0]
    return var


def _is_matmul(var):
    if var.owner is None:
        return False
    op = var.owner.op
    name = type(op).__name__
    return isinstance(op, (Dot, Dot22)) or name in ("Matmul", "Dot", "Dot22") or (
        name == "Blockwise" and type(op.core_op).__name__ in ("Dot", "Matmul"))


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


def _unmask(var):
    """``(var, mask)``: ``var`` stripped, and PyMC's imputation index (a constant boolean
    array) taken off it when present (``mask = None`` otherwise); ``None`` when ``var`` is
    indexed by anything else."""
    var = _strip(var)
    if var.owner is None or not isinstance(var.owner.op, AdvancedSubtensor):
        return var, None
    masked = boolean_masked(var)
    return None if masked is None else (_strip(masked[0]), masked[1])


def _mean_terms(mu, left=None):
    """Split a likelihood mean into ``(left, right, offset, mask)`` when it is
    ``left @ right (+ or - terms not involving the product)``, optionally masked by PyMC's
    imputation (a constant boolean index); ``offset`` is the sum of the other terms (or
    ``None``).  With ``left`` given, the product is the one whose left factor it is (other
    products, e.g. covariates times their weights, go to the offset).  Returns ``None`` for
    any other form."""
    unmasked = _unmask(mu)
    if unmasked is None:
        return None
    mu, mask = unmasked

    def kind(t):
        return (type(t.owner.op.scalar_op).__name__ if t.owner is not None
                and isinstance(t.owner.op, Elemwise) else None)

    terms = [mu]  # flatten sums; a difference u - v adds the term -v
    while any(kind(t) in ("Add", "Sub") for t in terms):
        flat = []
        for t in terms:
            # broadcasts that change which axis a term runs along (b[:, None]) are kept
            if kind(t) == "Add":
                flat += [_strip(u, broadcasting=True) for u in t.owner.inputs]
            elif kind(t) == "Sub":
                flat += [_strip(t.owner.inputs[0], broadcasting=True), -t.owner.inputs[1]]
            else:
                flat.append(t)
        terms = flat
    products = [t for t in terms if _is_matmul(t)
                and (left is None or _strip(t.owner.inputs[0]) is left)]
    if len(products) != 1:
        return None
    left, right = (_strip(v) for v in products[0].owner.inputs[:2])
    others = [t for t in terms if t is not products[0]]
    offset = None
    if others:
        offset = others[0] if len(others) == 1 else pt.add(*others)
    return left, right, offset, mask


def _is_scalar(var):
    return all(var.type.broadcastable)


def _scalar_of(var):
    """Peel the broadcasting wrappers PyMC adds around a scalar parameter."""
    while var.owner is not None and isinstance(
        var.owner.op, (DimShuffle, Subtensor, Alloc)
    ) and _is_scalar(var.owner.inputs[0]):
        var = var.owner.inputs[0]
    return pt.as_tensor_variable(var).squeeze() if var.ndim else var


def _is_zero_constant(var):
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


def _column_scale(sigma, what, masked=False):
    """The symbolic scale of a Normal over an ``R x D`` matrix as a scalar or one value per
    column; raises :class:`ModelPatternError` when it varies across rows.  ``masked``: the
    scale was indexed by PyMC's imputation split, whose base is the unmasked scale."""
    if masked and not _is_scalar(sigma) and sigma.owner is not None and isinstance(
            sigma.owner.op, AdvancedSubtensor):  # the split's index (a mask or its nonzero)
        sigma = sigma.owner.inputs[0]
    if _is_scalar(sigma):
        return _scalar_of(sigma)
    if sigma.ndim == 2:
        if not sigma.type.broadcastable[0]:
            raise ModelPatternError(
                f"{what} varies across rows (shape {sigma.type.shape}); the collapsed "
                f"linear-Gaussian samplers need a scalar or one value per column. "
                f"Needed pattern: {PATTERN}."
            )
        sigma = sigma[0]
    if sigma.ndim != 1:
        raise ModelPatternError(f"{what} must be a scalar or one value per column.")
    return sigma


def _block_data(model, z_rv, obs_rv, obs_mask, shape):
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


def find_linear_gaussian(model, z_rv, nonnegative=False) -> LinearGaussianIBP:
    """Match the linear-Gaussian pattern around ``z_rv`` or raise :class:`ModelPatternError`.

    Every Normal child whose mean is ``z_rv @ A (+ offset)`` is collected; children with the
    same ``A`` (an observed matrix and its imputed entries) form one :class:`GaussianBlock`.
    ``A`` must be ``pm.Normal(0, σa)``, or with ``nonnegative=True`` ``pm.HalfNormal(σa)``
    (the non-negative model of :func:`pymc_ibp.inference.fit_meibp`).
    """
    a_ops = (HalfNormalRV,) if nonnegative else (NormalRV,)
    a_name = "pm.HalfNormal" if nonnegative else "pm.Normal"
    if z_rv.ndim != 2:
        raise ModelPatternError(
            f"{z_rv.name!r} must be a single N x K_max matrix (got ndim={z_rv.ndim})."
        )
    prior = match_prior(model, z_rv)
    if prior is None:
        raise ModelPatternError(
            f"{z_rv.name!r} is a {type(z_rv.owner.op).__name__}, not a pmi.IBP or 2-D "
            f"pm.Bernoulli variable. Needed pattern: {PATTERN}."
        )
    candidates = [
        rv for rv in model.observed_RVs + model.free_RVs
        if rv is not z_rv and z_rv in set(ancestors([rv]))
    ]
    groups = {}  # A -> {"obs": [(rv, mask)], "missing": [(rv, mask)], "sigma", "offset"}
    found = []
    for rv in candidates:
        found.append(f"{rv.name} ~ {type(rv.owner.op).__name__}")
        if not isinstance(rv.owner.op, NormalRV):
            continue
        _, _, mu, sigma = rv.owner.inputs
        mm = _mean_terms(mu, left=z_rv)
        if mm is None:
            continue
        left, right, off, mask = mm
        if left is not z_rv:
            continue
        if off is not None and {z_rv, right} & set(ancestors([off])):
            raise ModelPatternError(
                f"In {rv.name!r} the mean is Z @ A plus terms that depend on Z or A; the "
                f"fast samplers need Z @ A + an offset not involving them. "
                f"Needed pattern: {PATTERN}."
            )
        if (right.owner is None or not isinstance(right.owner.op, a_ops)
                or right not in model.free_RVs):
            raise ModelPatternError(
                f"In {rv.name!r} the mean is Z @ {right.name or right}, "
                "but the right factor must be "
                f"a free {a_name} feature matrix. Needed pattern: {PATTERN}."
            )
        g = groups.setdefault(right, {"obs": [], "missing": [], "sigma": None, "offset": None})
        g["sigma"] = g["sigma"] if g["sigma"] is not None else _column_scale(
            sigma, f"The noise sigma of {rv.name!r}", masked=mask is not None)
        g["offset"] = off if g["offset"] is None else g["offset"]
        g["obs" if rv in model.observed_RVs else "missing"].append((rv, mask))
    if not groups:
        raise ModelPatternError(
            f"No Normal likelihood with mean Z @ A found for {z_rv.name!r}. Needed pattern: "
            f"{PATTERN}. Found children: {', '.join(found) or 'none'}."
        )
    ip = model.initial_point()
    z_val = model.rvs_to_values[z_rv]
    n, k_max = (ip[z_val.name] if z_val.name in ip else observed_data(z_val)).shape
    blocks = []
    for a_rv, g in groups.items():
        _, _, a_mu, a_sigma = a_rv.owner.inputs
        if not _is_zero_constant(a_mu):
            raise ModelPatternError(f"{a_rv.name!r} must have mean 0. Needed pattern: {PATTERN}.")
        a_shape = tuple(int(s) for s in ip[model.rvs_to_values[a_rv].name].shape)
        if len(a_shape) != 2 or a_shape[0] != k_max:
            raise ModelPatternError(
                f"Shape mismatch: {z_rv.name!r} is {n} x {k_max} but "
                f"{a_rv.name!r} has shape {a_shape}; "
                f"A must be K_max x D = {k_max} x D."
            )
        if len(g["obs"]) != 1 or len(g["missing"]) > 1:
            raise ModelPatternError(
                f"Expected exactly one observed Normal with mean {z_rv.name} @ {a_rv.name}, "
                f"found {len(g['obs'])}."
            )
        obs_rv, obs_mask = g["obs"][0]
        sharded = sharded_data_of(model.rvs_to_values[obs_rv])
        if sharded is not None:  # the data stay on their shards: checked by the workers
            if sharded.shape != (n, a_shape[1]):
                raise ModelPatternError(
                    f"Shape mismatch: observed {obs_rv.name!r} is a {sharded!r} but "
                    f"{z_rv.name} @ A is {n} x {a_shape[1]}.")
            if len(groups) > 1 or g["missing"]:
                raise ModelPatternError(
                    f"Sharded observed data ({obs_rv.name!r}) must be the only data matrix "
                    f"explained by {z_rv.name!r}, without imputed entries.")
            blocks.append(GaussianBlock(
                obs_rv=obs_rv, a_rv=a_rv, sigma_x=g["sigma"],
                sigma_a=_column_scale(a_sigma, f"The sigma of {a_rv.name!r}"), X=None,
                offset=g["offset"], sharded=sharded))
            continue
        X = _block_data(model, z_rv, obs_rv, obs_mask, (n, a_shape[1]))
        missing_rv = missing_mask = None
        if g["missing"]:
            missing_rv, missing_mask = g["missing"][0]
            missing_mask = np.asarray(missing_mask)
            if missing_mask.shape != X.shape:
                raise ModelPatternError("Imputed entries do not index Z @ A.")
        bad = ~np.isfinite(X)
        if missing_mask is not None:
            bad &= ~missing_mask
        if bad.any():
            r, c = (int(v) for v in np.argwhere(bad)[0])
            kind = "inf" if np.isinf(X[r, c]) else "NaN that is not imputed"
            raise DataError(
                f"The observed data of {obs_rv.name!r} contains {kind} at (row {r}, column "
                f"{c}) ({int(bad.sum())} non-finite entries in all). Remove infinite values; "
                "pass missing values as NaN (or a masked array) so that PyMC imputes them."
            )
        if missing_mask is not None and missing_mask.all():
            raise DataError(
                f"Every entry of the observed data of {obs_rv.name!r} is missing (NaN): there "
                "is nothing to fit Z to.")
        blocks.append(GaussianBlock(
            obs_rv=obs_rv, a_rv=a_rv, sigma_x=g["sigma"],
            sigma_a=_column_scale(a_sigma, f"The sigma of {a_rv.name!r}"), X=X,
            missing_rv=missing_rv, missing_mask=missing_mask, offset=g["offset"]))
    return LinearGaussianIBP(
        z_rv=z_rv, prior=prior, blocks=blocks, k_max=k_max,
        z_data=(observed_data(model.rvs_to_values[z_rv]).astype(np.int8)
                if z_rv in model.observed_RVs else None),
    )


def matched_models(model):
    """Yield a :class:`LinearGaussianIBP` for every binary matrix of ``model`` with a known prior
    (:func:`match_prior`) and the linear-Gaussian pattern (the others are skipped)."""
    for z_rv in model.free_RVs + model.observed_RVs:
        if match_prior(model, z_rv) is None:
            continue
        try:
            spec = find_linear_gaussian(model, z_rv)
        except ModelPatternError:
            continue  # not this pattern; data errors (DataError) propagate
        yield spec


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
    rv = _strip(term)
    if (rv not in set(model.free_RVs) or model.rvs_to_transforms.get(rv) is not None
            or rv.ndim > 2):
        return None
    return rv if same_for_every_row(term) else None


def same_for_every_row(term):
    """Whether the mean term ``term``, as broadcast against an ``N x D`` mean, is the same for
    every row (shape ``()``, ``(D,)``, ``(1, D)``; not ``(N, 1)`` or ``b[:, None]``)."""
    return (True, True, *term.type.broadcastable)[-2]


def group_labels(group, n_groups):
    """Every row's group as ``b[group]`` reads it (``group`` may hold negative labels, counted
    from the end as numpy and PyTensor index), as ``int64`` in ``0 .. n_groups-1`` (``group``
    itself when it already is: read it, do not write it): the one home of that reading for
    the steps' per-group offsets.  A label ``b[group]`` could not read (``>= n_groups`` or
    ``< -n_groups``) raises :class:`~pymc_ibp.DataError` naming its row rather than being
    wrapped onto another group."""
    labels = np.asarray(group, dtype=np.int64)
    if labels.size == 0:
        return labels
    low, high = labels.min(), labels.max()
    if low < -n_groups or high >= n_groups:
        row = int(np.flatnonzero((labels < -n_groups) | (labels >= n_groups))[0])
        raise DataError(
            f"b[group]: group[{row}] = {labels[row]} is out of range for an offset of "
            f"{n_groups} groups (labels 0..{n_groups - 1}, or -{n_groups}..-1 counted from "
            "the end); give the offset one row per group label.")
    return labels % n_groups if low < 0 else labels


def row_indexed_variable(model, term, n_rows, n_cols):
    """The variable ``rv`` when the mean term ``term`` (casts and broadcasts stripped) is
    ``rv[index]``: a free, untransformed variable with one row per group, indexed along its
    first axis by a constant (or ``pm.Data``) integer vector ``index`` giving the group of
    every row of an ``N x D`` mean (``N = n_rows``), e.g. the offset ``b[group]`` in
    ``Z @ A + b[group]`` with ``b`` of shape ``(G, D)``, or ``(G,)`` as ``b[group][:, None]``
    (``term`` may come with that broadcast already stripped; with ``N = D = n_cols`` a
    stripped ``b[group]`` could run along the columns, so it is not taken).  A start may set
    each group's row from a fitted offset.  ``None`` otherwise."""
    index = first_axis_index(_strip(term))
    if index is None:
        return None
    rv = _strip(term).owner.inputs[0]
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


def slot_dim(model, z_name):
    """The name of the dim of ``z_name``'s feature slots (its last dim; e.g. ``'feature'``, or
    ``'Z_category'`` for the category matrix of :func:`pymc_ibp.ibp_ibp`), or ``None`` when
    the variable has no dims: where a :class:`~pymc_ibp.TruncationWarning` says to raise
    ``K_max``."""
    dims = model.named_vars_to_dims.get(z_name)
    return dims[-1] if dims else None


def non_finite_entry(table):
    """``((row, column), count)``: the first entry of the 2-D array ``table`` that is NaN or
    infinite and how many are, or ``None`` when all are finite.  One sum tells (a NaN or inf
    makes it non-finite), so a step checking an ``N x D`` table at every call makes no
    ``N x D`` temporary; the entries are looked at only when the sum is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf + (-inf), a sum past 1.8e308
        total = table.sum()
    if np.isfinite(total):
        return None
    bad = ~np.isfinite(table)
    if not bad.any():  # the sum overflowed
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0]), int(bad.sum())


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


NONNEGATIVE_PATTERN = (
    "A = pm.Exponential('A', lam, shape=(K, D)) or pm.HalfNormal('A', sigma_a, shape=(K, D)); "
    "pm.Normal('X', mu=Z @ A (+ offset), sigma=sigma_x, observed=X) with Z any binary matrix "
    "(pmi.IBP, a Bernoulli matrix, M[c], ...), sigma_x a scalar or one per column, and no other "
    "variable depending on A"
)


@dataclass
class NonNegativeFeatures:
    """A non-negative feature matrix ``A`` (K x D) whose only child is a linear-Gaussian
    likelihood ``X ~ Normal(Z @ A (+ offset), σx)`` with ``Z`` any binary-valued expression."""

    a_rv: object
    prior: str  # "exponential" (rate = 1/scale) or "halfnormal" (scale = sigma_a)
    scale: object  # symbolic prior scale of A, broadcast to K x D
    z: object  # symbolic Z (in the model's random variables)
    block: GaussianBlock  # the likelihood (sigma_a unused)

    def compile(self, model, compile_kwargs=None):
        """Point function giving ``(Z, prior scale K x D, σx per column, offset N x D)``."""
        b = self.block
        n, d = b.shape
        k = int(model.initial_point()[model.rvs_to_values[self.a_rv].name].shape[0])
        off = pt.zeros((n, d)) if b.offset is None else pt.broadcast_to(b.offset, (n, d))
        outs = model.replace_rvs_by_values([
            self.z, pt.broadcast_to(self.scale, (k, d)), pt.broadcast_to(b.sigma_x, (d,)), off])
        return compile_point_fn(model, outs, compile_kwargs=compile_kwargs)


def find_nonnegative_features(model, a_rv) -> NonNegativeFeatures:
    """Match the non-negative linear-Gaussian pattern around the feature matrix ``a_rv``
    (``pm.Exponential`` or ``pm.HalfNormal``, K x D) or raise :class:`ModelPatternError`."""
    from pytensor.tensor.random.basic import ExponentialRV

    op = a_rv.owner.op if a_rv.owner is not None else None
    if not isinstance(op, (ExponentialRV, HalfNormalRV)) or a_rv.ndim != 2:
        raise ModelPatternError(
            f"{a_rv.name!r} is not a 2-D pm.Exponential or pm.HalfNormal feature matrix. "
            f"Needed pattern: {NONNEGATIVE_PATTERN}.")
    if a_rv not in model.free_RVs:
        raise ModelPatternError(f"{a_rv.name!r} is observed; nothing to sample.")
    if isinstance(op, HalfNormalRV):
        _, _, loc, scale = a_rv.owner.inputs
        if not _is_zero_constant(loc):
            raise ModelPatternError(f"{a_rv.name!r} must be a HalfNormal with loc 0. Needed "
                                    f"pattern: {NONNEGATIVE_PATTERN}.")
        prior = "halfnormal"
    else:
        _, _, scale = a_rv.owner.inputs
        prior = "exponential"
    children = [rv for rv in model.basic_RVs if rv is not a_rv and a_rv in set(ancestors([rv]))]
    obs, missing, z, sigma, offset = [], [], None, None, None
    for rv in children:
        mm = _mean_terms(rv.owner.inputs[2]) if isinstance(rv.owner.op, NormalRV) else None
        if mm is None or mm[1] is not a_rv or a_rv in set(ancestors([mm[0]])) or (
                mm[2] is not None and a_rv in set(ancestors([mm[2]]))):
            raise ModelPatternError(
                f"{rv.name!r} ({type(rv.owner.op).__name__}) depends on {a_rv.name!r} other "
                f"than through a Normal mean Z @ {a_rv.name}. Needed pattern: "
                f"{NONNEGATIVE_PATTERN}.")
        left, _, off, mask = mm
        if not left.type.dtype.startswith(("int", "uint", "bool")):
            raise ModelPatternError(
                f"In {rv.name!r} the left factor of Z @ {a_rv.name} has dtype "
                f"{left.type.dtype}; it must be a binary (integer) matrix. Needed pattern: "
                f"{NONNEGATIVE_PATTERN}.")
        z = left if z is None else z
        sigma = sigma if sigma is not None else _column_scale(
            rv.owner.inputs[3], f"The noise sigma of {rv.name!r}", masked=mask is not None)
        offset = off if offset is None else offset
        (obs if rv in model.observed_RVs else missing).append((rv, mask))
    if len(obs) != 1 or len(missing) > 1:
        raise ModelPatternError(
            f"Expected exactly one observed Normal with mean Z @ {a_rv.name}, found "
            f"{len(obs)}. Needed pattern: {NONNEGATIVE_PATTERN}.")
    ip = model.initial_point()
    a_shape = ip[model.rvs_to_values[a_rv].name].shape
    z_shape = tuple(z.type.shape)
    if None in z_shape:  # no static shape: evaluate Z once (this runs in competence too)
        [z_val] = model.replace_rvs_by_values([z])
        z_shape = compile_point_fn(model, z_val)(ip).shape
    if len(z_shape) != 2 or z_shape[1] != a_shape[0]:
        raise ModelPatternError(f"Shape mismatch: Z is {z_shape} but {a_rv.name!r} is "
                                f"{a_shape}; A must be K x D with K the columns of Z.")
    obs_rv, obs_mask = obs[0]
    X = _block_data(model, a_rv, obs_rv, obs_mask, (z_shape[0], a_shape[1]))
    missing_rv, missing_mask = missing[0] if missing else (None, None)
    bad = ~np.isfinite(X) & (True if missing_mask is None else ~np.asarray(missing_mask))
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(f"The observed data of {obs_rv.name!r} contains {X[r, c]} at (row {r}, "
                        f"column {c}); pass missing values as NaN so that PyMC imputes them.")
    block = GaussianBlock(obs_rv=obs_rv, a_rv=a_rv, sigma_x=sigma, sigma_a=None, X=X,
                          missing_rv=missing_rv,
                          missing_mask=None if missing_mask is None else np.asarray(missing_mask),
                          offset=offset)
    return NonNegativeFeatures(a_rv=a_rv, prior=prior, scale=scale, z=z, block=block)


LOGIT_PATTERN = (
    "Z = pmi.IBP('Z', alpha, dims=('obs', 'feature')) or pm.Bernoulli('Z', p=P, "
    "dims=('obs', 'feature')); A = pm.Normal('A', 0, sigma_a, dims=('feature', 'dim')); "
    "pm.Bernoulli('X', logit_p=Z @ A (+ offset), observed=X), sigma_a a scalar or one per "
    "column, the offset e.g. b = pm.Normal('b', mu, sigma, dims='dim') or b[group] with b of "
    "shape (G, D)"
)


@dataclass
class BernoulliLogitIBP:
    """A matched Bernoulli-logit latent feature model ``X ~ Bernoulli(σ(Z A + offset))``: the
    binary matrix, its prior, the feature matrix and the data (one observed matrix)."""

    z_rv: object
    prior: object  # IBPPrior or LogOddsPrior
    obs_rv: object  # the observed Bernoulli (or X_observed)
    a_rv: object  # K_max x D, pm.Normal(0, sigma_a)
    sigma_a: object  # symbolic, one per column (D,)
    X: np.ndarray  # N x D, 0/1 with NaN at missing entries
    k_max: int
    missing_rv: object = None  # X_unobserved free RV, or None
    missing_mask: np.ndarray | None = None  # N x D bool, True where missing
    b_rv: object = None  # an offset pm.Normal updated with A, or None
    b_mu: object = None  # its symbolic mean, shaped as b: (D,), (G, D), () or (G,)
    b_sigma: object = None  # its symbolic scale, shaped as b_mu
    b_group: object = None  # the symbolic group of every row when the offset is b[group]
    b_tied: bool = False  # one value for all columns: a scalar b, or b[group][:, None]
    offset: object = None  # other symbolic terms added to Z @ A (+ b), or None

    @property
    def shape(self):
        return self.X.shape

    @property
    def rvs(self):
        """The variables the Pólya-Gamma step updates: ``Z``, ``A``, ``b``, imputed ``X``."""
        return [rv for rv in (self.z_rv, self.a_rv, self.b_rv, self.missing_rv)
                if rv is not None]


def _logit_of(p):
    """``(logit, mask)`` of a Bernoulli probability ``sigmoid(logit)`` (PyMC's
    ``logit_p=``), optionally indexed by PyMC's imputation mask; ``None`` otherwise."""
    unmasked = _unmask(p)
    if unmasked is None:
        return None
    p, mask = unmasked
    if not (p.owner is not None and isinstance(p.owner.op, Elemwise)
            and type(p.owner.op.scalar_op).__name__ == "Sigmoid"):
        return None
    return p.owner.inputs[0], mask


def _offset_vector(model, off, likelihood, n, d, ip):
    """``(b, mu_b, sigma_b, group, tied)`` when the offset term ``off`` is a free
    ``pm.Normal`` that only this likelihood uses, with one value per column (shape ``(D,)``;
    ``group = None``), one per group of rows and column (``b[group]`` with ``b`` of shape
    ``(G, D)``; ``group`` the symbolic index), or one value for all columns (``tied``): a
    scalar ``b``, or one per group, ``b[group][:, None]`` with ``b`` of shape ``(G,)``.
    ``mu_b`` and ``sigma_b`` broadcast to ``b``'s shape; else ``None``."""
    b, group = _strip(off), None
    if row_indexed_variable(model, off, n, d) is not None:
        b, group = _strip(off).owner.inputs[0], first_axis_index(_strip(off))
    elif not same_for_every_row(off):  # e.g. b[:, None]: one value per row
        return None
    shape = ip[model.rvs_to_values[b].name].shape if b in model.free_RVs else None
    tied = b.ndim == (0 if group is None else 1)
    if not (b.owner is not None and isinstance(b.owner.op, NormalRV) and b in model.free_RVs
            and shape is not None and (tied or (shape[-1:] == (d,) and b.ndim == (
                1 if group is None else 2)))):
        return None
    deps = [r for r in model.basic_RVs if r is not b and b in set(ancestors([r]))]
    if not set(deps) <= set(likelihood):
        return None
    _, _, mu, sigma = b.owner.inputs
    return b, pt.broadcast_to(mu, shape), pt.broadcast_to(sigma, shape), group, tied


def find_bernoulli_logit(model, z_rv) -> BernoulliLogitIBP:
    """Match the Bernoulli-logit pattern around ``z_rv`` (:data:`LOGIT_PATTERN`) or raise
    :class:`ModelPatternError` (:class:`DataError` for data that are not 0/1)."""
    if z_rv.ndim != 2:
        raise ModelPatternError(
            f"{z_rv.name!r} must be a single N x K_max matrix (got ndim={z_rv.ndim}).")
    prior = match_prior(model, z_rv)
    if prior is None:
        raise ModelPatternError(
            f"{z_rv.name!r} is a {type(z_rv.owner.op).__name__}, not a pmi.IBP or 2-D "
            f"pm.Bernoulli variable. Needed pattern: {LOGIT_PATTERN}.")
    children = [rv for rv in model.observed_RVs + model.free_RVs
                if rv is not z_rv and z_rv in set(ancestors([rv]))]
    matched, other = [], []
    for rv in children:
        form = _logit_of(rv.owner.inputs[-1]) if isinstance(rv.owner.op, BernoulliRV) else None
        terms = _mean_terms(form[0], left=z_rv) if form is not None else None
        if terms is None or terms[0] is not z_rv:
            other.append(f"{rv.name} ~ {type(rv.owner.op).__name__}")
            continue
        matched.append((rv, form[1], terms))
    if not matched:
        raise ModelPatternError(
            f"No Bernoulli likelihood with logit_p = {z_rv.name} @ A found for {z_rv.name!r}. "
            f"Needed pattern: {LOGIT_PATTERN}. Found children: {', '.join(other) or 'none'}.")
    if other:
        raise ModelPatternError(
            f"{z_rv.name!r} also reaches {other}; the Pólya-Gamma sampler needs the Bernoulli "
            f"likelihood to be the only variable depending on it. Needed pattern: "
            f"{LOGIT_PATTERN}.")
    a_rvs = {terms[1] for _, _, terms in matched}
    if len(a_rvs) != 1:
        raise ModelPatternError(
            f"{z_rv.name!r} reaches {len(matched)} Bernoulli likelihoods with different "
            f"feature matrices; the Pólya-Gamma sampler takes one. Needed pattern: "
            f"{LOGIT_PATTERN}.")
    [a_rv] = a_rvs
    likelihood = [rv for rv, _, _ in matched]
    observed = [(rv, mask) for rv, mask, _ in matched if rv in model.observed_RVs]
    missing = [(rv, mask) for rv, mask, _ in matched if rv not in model.observed_RVs]
    if len(observed) != 1 or len(missing) > 1:
        raise ModelPatternError(
            f"Expected exactly one observed Bernoulli with logit_p = {z_rv.name} @ "
            f"{a_rv.name}, found {len(observed)}.")
    (obs_rv, obs_mask), off = observed[0], matched[0][2][2]
    if (a_rv.owner is None or not isinstance(a_rv.owner.op, NormalRV)
            or a_rv not in model.free_RVs):
        raise ModelPatternError(
            f"In {obs_rv.name!r} logit_p is {z_rv.name} @ {a_rv.name or a_rv}, but the right "
            f"factor must be a free pm.Normal feature matrix. Needed pattern: {LOGIT_PATTERN}.")
    deps = [r for r in model.basic_RVs if r is not a_rv and a_rv in set(ancestors([r]))]
    if not set(deps) <= set(likelihood):
        raise ModelPatternError(
            f"{a_rv.name!r} also reaches {[r.name for r in deps if r not in likelihood]}; the "
            f"Pólya-Gamma sampler draws it from its conditional given the likelihood alone.")
    if off is not None and {z_rv, a_rv} & set(ancestors([off])):
        raise ModelPatternError(
            f"In {obs_rv.name!r} logit_p is {z_rv.name} @ {a_rv.name} plus terms that depend on "
            f"them; the Pólya-Gamma sampler needs an offset not involving them. Needed "
            f"pattern: {LOGIT_PATTERN}.")
    _, _, a_mu, a_sigma = a_rv.owner.inputs
    if not _is_zero_constant(a_mu):
        raise ModelPatternError(
            f"{a_rv.name!r} must have mean 0. Needed pattern: {LOGIT_PATTERN}.")
    ip = model.initial_point()
    n, k_max = ip[model.rvs_to_values[z_rv].name].shape
    a_shape = tuple(int(s) for s in ip[model.rvs_to_values[a_rv].name].shape)
    if len(a_shape) != 2 or a_shape[0] != k_max:
        raise ModelPatternError(
            f"Shape mismatch: {z_rv.name!r} is {n} x {k_max} but {a_rv.name!r} has shape "
            f"{a_shape}; A must be K_max x D = {k_max} x D.")
    d = a_shape[1]
    X = _block_data(model, z_rv, obs_rv, obs_mask, (n, d))
    missing_rv = missing_mask = None
    if missing:
        missing_rv, missing_mask = missing[0][0], np.asarray(missing[0][1])
        if missing_mask.shape != X.shape:
            raise ModelPatternError("Imputed entries do not index Z @ A.")
    seen = ~np.isnan(X) if missing_mask is None else ~missing_mask
    bad = seen & ~np.isin(np.nan_to_num(X, nan=-1.0), (0.0, 1.0))
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(
            f"The observed data of {obs_rv.name!r} (a pm.Bernoulli likelihood) contains "
            f"{X[r, c]} at (row {r}, column {c}); {int(bad.sum())} value(s) other than 0 and 1 "
            "in all. Binarise the data first (e.g. X > threshold); pass missing values as NaN "
            "so that PyMC imputes them.")
    sigma_a = pt.broadcast_to(_column_scale(a_sigma, f"The sigma of {a_rv.name!r}"), (d,))
    b_rv = b_mu = b_sigma = b_group = None
    b_tied = False
    if off is not None:
        terms = [off]
        if off.owner is not None and isinstance(off.owner.op, Elemwise) and type(
                off.owner.op.scalar_op).__name__ == "Add":
            terms = list(off.owner.inputs)
        for i, t in enumerate(terms):
            found = _offset_vector(model, t, likelihood, n, d, ip)
            if found is not None:
                b_rv, b_mu, b_sigma, b_group, b_tied = found
                rest = terms[:i] + terms[i + 1:]
                off = None if not rest else (rest[0] if len(rest) == 1 else pt.add(*rest))
                break
    return BernoulliLogitIBP(
        z_rv=z_rv, prior=prior, obs_rv=obs_rv, a_rv=a_rv, sigma_a=sigma_a, X=X, k_max=k_max,
        missing_rv=missing_rv, missing_mask=missing_mask, b_rv=b_rv, b_mu=b_mu,
        b_sigma=b_sigma, b_group=b_group, b_tied=b_tied, offset=off)


def matched_logit_models(model):
    """Yield a :class:`BernoulliLogitIBP` for every free binary matrix of ``model`` with a
    known prior and the Bernoulli-logit pattern (the others are skipped)."""
    for z_rv in model.free_RVs:
        if match_prior(model, z_rv) is None:
            continue
        try:
            spec = find_bernoulli_logit(model, z_rv)
        except ModelPatternError:
            continue
        yield spec
