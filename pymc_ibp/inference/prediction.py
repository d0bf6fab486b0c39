"""Prediction for new rows of a linear-Gaussian IBP model (:func:`predict_rows`): rows drawn
from the model (features from the IBP's predictive given each posterior draw's feature counts,
new features included, then their data), or the features of observed new rows ("fold-in":
each row's features given the row and each posterior draw's ``A``, scales, offset and counts).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.graph.traversal import ancestors

from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.kernels.prediction import FittedDraw, fold_in_rows, predictive_rows
from pymc_ibp.matching.graph import same_for_every_row
from pymc_ibp.matching.linear_gaussian import PATTERN, matched_models
from pymc_ibp.matching.priors import IBPPrior

__all__ = ["predict_rows"]


def _spec(model, z):
    specs = [s for s in matched_models(model) if z is None or s.z_rv.name == z]
    if len(specs) != 1:
        raise ModelPatternError(
            "pmi.predict_rows needs one pmi.IBP matrix with the linear-Gaussian pattern"
            + (f" named {z!r}" if z else " (pass z='name' when the model has several)")
            + f"; found {len(specs)}. Needed pattern: {PATTERN}.")
    spec = specs[0]
    if not isinstance(spec.prior, IBPPrior):
        raise ModelPatternError(f"pmi.predict_rows needs a pmi.IBP prior on "
                                f"{spec.z_rv.name!r}.")
    if spec.sharded is not None:
        raise ModelPatternError("pmi.predict_rows reads the model's data on the driver; "
                                "sharded data are not supported.")
    for b in spec.blocks:
        if b.offset is not None and not same_for_every_row(b.offset):
            raise ModelPatternError(
                f"pmi.predict_rows: the offset of {b.obs_rv.name!r} differs between rows (one "
                "per row or per group of rows), which new rows do not have; only an offset the "
                "same for every row (b of shape (D,)) is supported.")
    return spec


def predict_rows(idata, model=None, *, X_new=None, n_new=None, z=None, sweeps=20,
                 random_seed=None):
    """New rows of a fitted linear-Gaussian IBP model, one set per posterior draw.

    Either ``X_new`` (``R x D``, NaN for a missing entry): the features ``Z_new`` of these
    observed rows, each drawn given the row and the draw's ``A``, scales, offset and feature
    counts (``sweeps`` Gibbs scans of its entries from their exact conditionals, each row as
    row ``N + 1`` of the IBP: features of the fitted rows with probability ``m_k / (N + β)``,
    new ones in the draw's free slots, whose ``A`` is the draw's); or ``n_new``: rows drawn
    from the model, ``Z_new`` from the IBP's predictive (one row after the other, new features
    included) and ``X_new ~ Normal(Z_new A + b, σx)``.

    Parameters
    ----------
    idata : xarray.DataTree
        The result of ``pm.sample`` (its ``posterior`` group holds ``Z``, ``A`` and the free
        hyperparameters).
    model : pm.Model, optional
        The model (default: the model in context).
    X_new : array_like, optional
        Observed new rows (fold-in).
    n_new : int, optional
        How many rows to draw from the model.
    z : str, optional
        The IBP variable, when the model has several.
    sweeps : int, default 20
        Gibbs scans of each new row per draw (fold-in).
    random_seed : int or Generator, optional
        Seeds the draws.

    Returns
    -------
    xarray.DataTree
        A ``predictions`` node with ``{z}_new`` (``chain, draw, row, feature``; int8) and,
        with ``n_new``, ``X_new`` (``chain, draw, row, column``): add it to the result with
        ``idata["predictions"] = ...``.
    """
    model = pm.modelcontext(model)
    if (X_new is None) == (n_new is None):
        raise ValueError("pmi.predict_rows needs X_new (features of observed rows) or n_new "
                         "(rows drawn from the model), not both.")
    spec = _spec(model, z)
    post = idata["posterior"]
    z_name = model.rvs_to_values[spec.z_rv].name
    n, d = spec.shape
    a_names = [b.a_rv.name for b in spec.blocks]
    sx, _ = spec.column_scales()
    off = pt.concatenate([pt.zeros(b.shape[1]) if b.offset is None
                          else pt.broadcast_to(b.offset, (1, b.shape[1])).reshape((b.shape[1],))
                          for b in spec.blocks])
    outs = [sx, spec.prior.alpha, spec.prior.beta, off]
    used = [rv for rv in model.free_RVs if rv in set(ancestors(outs))]
    missing = [rv.name for rv in used if rv.name not in post]
    if missing:
        raise DataError(f"pmi.predict_rows: the posterior has no draws of {missing}.")
    fn = pm.compile(used, outs, on_unused_input="ignore")
    rng = np.random.default_rng(random_seed)
    if X_new is not None:
        X_new = np.asarray(X_new, dtype=np.float64)
        if X_new.ndim != 2 or X_new.shape[1] != d:
            raise DataError(f"pmi.predict_rows: X_new must be R x {d} (the columns of the "
                            f"fitted data); got shape {X_new.shape}.")
        if np.any(np.isinf(X_new)):
            raise DataError("pmi.predict_rows: X_new contains inf.")
        rows = X_new.shape[0]
        observed = ~np.isnan(X_new)
    else:
        rows = int(n_new)
        if rows < 1:
            raise ValueError(f"n_new must be >= 1; got {n_new!r}.")
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    k_max = spec.k_max
    Z_out = np.zeros((chains, draws, rows, k_max), dtype=np.int8)
    X_out = np.zeros((chains, draws, rows, d)) if n_new is not None else None
    # the draws as arrays once (not an xarray selection per draw)
    z_all = np.asarray(post[z_name].values)
    a_all = np.concatenate([np.asarray(post[a].values, dtype=np.float64) for a in a_names],
                           axis=-1)
    used_all = [np.asarray(post[rv.name].values) for rv in used]
    for c in range(chains):
        for t in range(draws):
            Z, A = z_all[c, t], a_all[c, t]
            sx_v, alpha, beta, b = fn(*[v[c, t] for v in used_all])
            sx_v = np.broadcast_to(np.asarray(sx_v, dtype=np.float64), (d,))
            alpha, beta = float(alpha), float(beta)
            m = Z.sum(axis=0)
            if X_new is not None:
                W = np.where(observed, 1.0 / sx_v**2, 0.0)
                fit = FittedDraw(A, np.asarray(b, dtype=float), m, n, alpha, beta)
                Z_out[c, t] = fold_in_rows(rng, X_new, W, fit, int(sweeps))
            else:
                Zn = predictive_rows(rng, m, n, alpha, beta, rows)
                Z_out[c, t] = Zn
                X_out[c, t] = (Zn @ A + np.asarray(b, dtype=float)
                               + sx_v * rng.standard_normal((rows, d)))
    dims = model.named_vars_to_dims.get(spec.z_rv.name) or ()
    feature = dims[1] if len(dims) == 2 else f"{spec.z_rv.name}_feature"
    coords = {dim: (post.coords[dim].values if dim in post.coords else np.arange(size))
              for dim, size in (("chain", chains), ("draw", draws))}
    coords.update({"row": np.arange(rows), feature: np.arange(k_max)})
    data = {f"{spec.z_rv.name}_new": (("chain", "draw", "row", feature), Z_out)}
    if X_out is not None:
        coords["column"] = np.arange(d)
        data["X_new"] = (("chain", "draw", "row", "column"), X_out)
    return xr.DataTree(xr.Dataset(data, coords=coords))
