"""The linear-Gaussian pattern the collapsed and accelerated samplers need
(:func:`find_linear_gaussian`)::

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

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import equal_computations
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import HalfNormalRV, NormalRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.datasets.sharded import sharded_data_of
from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.kernels.offsets import RowOffset, group_labels, non_finite_entry
from pymc_ibp.matching.cache import cached
from pymc_ibp.matching.graph import (
    block_data,
    column_scale,
    first_axis_index,
    is_zero_constant,
    mean_terms,
    observed_data,
    same_for_every_row,
    side_by_side,
    strip,
)
from pymc_ibp.matching.priors import IBPPrior, match_prior

__all__ = ["PATTERN", "GaussianBlock", "LinearGaussianIBP", "find_linear_gaussian",
           "matched_models"]


PATTERN = (
    "Z = pmi.IBP('Z', alpha, dims=('obs', 'feature')) or pm.Bernoulli('Z', p=P, "
    "dims=('obs', 'feature')); "
    "A = pm.Normal('A', 0, sigma_a, dims=('feature', 'dim')); "
    "pm.Normal('X', mu=Z @ A (+ offset), sigma=sigma_x, observed=X), sigma_a and sigma_x "
    "scalars or one per column"
)


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
        return self.hyper_values_fn(model)(model.initial_point() if point is None else point)

    def hyper_values_fn(self, model):
        """The compiled function of a point behind :meth:`hyper_values`, for many points."""
        if not isinstance(self.prior, IBPPrior):
            raise ModelPatternError(f"{self.z_rv.name!r} needs a pmi.IBP prior.")
        fn = compile_point_fn(model, model.replace_rvs_by_values(
            [*self.column_scales(), self.prior.alpha, self.prior.beta]))

        def values(point):
            sx, sa, alpha, beta = fn(point)
            return (np.array(sx, dtype=float), np.array(sa, dtype=float),
                    float(np.asarray(alpha)), float(np.asarray(beta)))

        return values

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
            term = strip(b.offset)
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


def find_linear_gaussian(model, z_rv, nonnegative=False) -> LinearGaussianIBP:
    """Match the linear-Gaussian pattern around ``z_rv`` or raise :class:`ModelPatternError`.

    Every Normal child whose mean is ``z_rv @ A (+ offset)`` is collected; children with the
    same ``A`` (an observed matrix and its imputed entries) form one :class:`GaussianBlock`.
    ``A`` must be ``pm.Normal(0, σa)``, or with ``nonnegative=True`` ``pm.HalfNormal(σa)``
    (the non-negative model of :func:`pymc_ibp.inference.fit_meibp`).
    """
    a_ops = (HalfNormalRV,) if nonnegative else (NormalRV,)
    a_name = "pm.HalfNormal" if nonnegative else "pm.Normal"
    # the pattern the caller needs, named in every error
    pattern = (PATTERN.replace("A = pm.Normal('A', 0, sigma_a,", "A = pm.HalfNormal('A', sigma_a,")
               if nonnegative else PATTERN)
    if z_rv.ndim != 2:
        raise ModelPatternError(
            f"{z_rv.name!r} must be a single N x K_max matrix (got ndim={z_rv.ndim})."
        )
    prior = match_prior(model, z_rv)
    if prior is None:
        raise ModelPatternError(
            f"{z_rv.name!r} is a {type(z_rv.owner.op).__name__}, not a pmi.IBP or 2-D "
            f"pm.Bernoulli variable. Needed pattern: {pattern}."
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
        mm = mean_terms(mu, left=z_rv)
        if mm is None:
            continue
        left, right, off, mask = mm
        if left is not z_rv:
            continue
        if off is not None and {z_rv, right} & set(ancestors([off])):
            raise ModelPatternError(
                f"In {rv.name!r} the mean is Z @ A plus terms that depend on Z or A; the "
                f"fast samplers need Z @ A + an offset not involving them. "
                f"Needed pattern: {pattern}."
            )
        if (right.owner is None or not isinstance(right.owner.op, a_ops)
                or right not in model.free_RVs):
            raise ModelPatternError(
                f"In {rv.name!r} the mean is Z @ {right.name or right}, "
                "but the right factor must be "
                f"a free {a_name} feature matrix. Needed pattern: {pattern}."
            )
        g = groups.setdefault(right, {"obs": [], "missing": [], "sigma": None, "offset": None})
        g["sigma"] = g["sigma"] if g["sigma"] is not None else column_scale(
            sigma, f"The noise sigma of {rv.name!r}", pattern, masked=mask is not None)
        g["offset"] = off if g["offset"] is None else g["offset"]
        g["obs" if rv in model.observed_RVs else "missing"].append((rv, mask))
    if not groups:
        raise ModelPatternError(
            f"No Normal likelihood with mean Z @ A found for {z_rv.name!r}. Needed pattern: "
            f"{pattern}. Found children: {', '.join(found) or 'none'}."
        )
    ip = model.initial_point()
    z_val = model.rvs_to_values[z_rv]
    n, k_max = (ip[z_val.name] if z_val.name in ip else observed_data(z_val)).shape
    blocks = []
    for a_rv, g in groups.items():
        _, _, a_mu, a_sigma = a_rv.owner.inputs
        if not is_zero_constant(a_mu):
            raise ModelPatternError(f"{a_rv.name!r} must have mean 0. Needed pattern: {pattern}.")
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
                sigma_a=column_scale(a_sigma, f"The sigma of {a_rv.name!r}", PATTERN), X=None,
                offset=g["offset"], sharded=sharded))
            continue
        X = block_data(model, z_rv, obs_rv, obs_mask, (n, a_shape[1]))
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
            sigma_a=column_scale(a_sigma, f"The sigma of {a_rv.name!r}", PATTERN), X=X,
            missing_rv=missing_rv, missing_mask=missing_mask, offset=g["offset"]))
    return LinearGaussianIBP(
        z_rv=z_rv, prior=prior, blocks=blocks, k_max=k_max,
        z_data=(observed_data(model.rvs_to_values[z_rv]).astype(np.int8)
                if z_rv in model.observed_RVs else None),
    )


def matched_models(model):
    """A :class:`LinearGaussianIBP` for every binary matrix of ``model`` with a known prior
    (:func:`match_prior`) and the linear-Gaussian pattern (the others are skipped), matched
    once per state of the model (:func:`pymc_ibp.matching.cache.cached`)."""
    return cached(model, "linear_gaussian", lambda m: tuple(_matched_models(m)))


def _matched_models(model):
    for z_rv in model.free_RVs + model.observed_RVs:
        if match_prior(model, z_rv) is None:
            continue
        try:
            spec = find_linear_gaussian(model, z_rv)
        except ModelPatternError:
            continue  # not this pattern; data errors (DataError) propagate
        yield spec
