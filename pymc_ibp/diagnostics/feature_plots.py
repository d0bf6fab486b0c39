"""Pictures of IBP posterior features and assignments (matplotlib, Agg-compatible).

* :func:`plot_features` — posterior-mean features, after undoing label switching with
  :func:`~pymc_ibp.diagnostics.relabel.relabel`, shown as images, optionally above
  the true features of a synthetic data set.
* :func:`plot_assignments` — one draw of Z as an observations × active-features heat map.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from pymc_ibp.diagnostics._idata import _get_z, _posterior

__all__ = ["plot_assignments", "plot_features", "posterior_features"]


def posterior_features(idata, z_name="Z", a_name="A", relabel_first=True, min_active_frac=0.5,
                       n_features=None, **relabel_kwargs):
    """Posterior-mean features of an IBP fit, ordered by posterior mean feature size.

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample`` with `z_name` (chain, draw, obs, feature) and `a_name`
        (chain, draw, feature, dim) in the posterior.
    relabel_first : bool, default True
        Align the slots of all draws first (:func:`~pymc_ibp.diagnostics.relabel.relabel`).
        Without it, averaging a slot over draws mixes different features whenever labels switch.
    min_active_frac : float, default 0.5
        Keep slots that are active (non-empty column of Z) in at least this fraction of draws.
    n_features : int, optional
        Keep at most this many (the largest).
    **relabel_kwargs
        Passed to :func:`~pymc_ibp.diagnostics.relabel.relabel`.

    Returns
    -------
    dict
        ``features`` (n, D): mean of the A row over the draws in which the slot is active
        (inactive draws hold prior draws of A and are excluded); ``mean_size`` (n,): mean
        column sum of Z over all draws; ``active_frac`` (n,); ``slots`` (n,): slot indices
        in the (relabelled) posterior.
    """
    if relabel_first:
        from pymc_ibp.diagnostics.relabel import relabel

        idata = relabel(idata, z_name=z_name, a_name=a_name, **relabel_kwargs)
    post = _posterior(idata)
    Z = _get_z(post, z_name)
    if a_name not in post:
        raise ValueError(f"the posterior has no feature matrix {a_name!r}; pass a_name=.")
    A = post[a_name]
    feat = Z.dims[3] if Z.dims[3] in A.dims else A.dims[2]
    A = A.transpose("chain", "draw", feat, ...)
    Zv = np.asarray(Z.values)
    C, T, N, K = Zv.shape
    Av = np.asarray(A.values, dtype=float).reshape(C, T, K, -1)
    m = Zv.sum(axis=2).reshape(C * T, K)
    act = m > 0
    frac = act.mean(axis=0)
    mean_size = m.mean(axis=0)
    Af = Av.reshape(C * T, K, -1)
    with np.errstate(invalid="ignore"):
        feats = (Af * act[..., None]).sum(0) / act.sum(0)[:, None]
    keep = np.flatnonzero((frac >= min_active_frac) & (frac > 0))
    keep = keep[np.argsort(-mean_size[keep], kind="stable")]
    if n_features is not None:
        keep = keep[: int(n_features)]
    return {"features": feats[keep], "mean_size": mean_size[keep], "active_frac": frac[keep],
            "slots": keep}


def _match_true(est, true):
    """Order of the rows of `true` that best matches the rows of `est` (squared distance);
    unmatched true rows are appended."""
    if len(est) == 0:
        return np.arange(len(true))
    d2 = ((est[:, None, :] - true[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(d2)
    order = list(cols[np.argsort(rows)])
    order += [j for j in range(len(true)) if j not in set(order)]
    return np.asarray(order, dtype=int)


def plot_features(idata, image_shape, true_features=None, n_features=None, relabel_first=True,
                  ax=None, *, z_name="Z", a_name="A", min_active_frac=0.5, cmap="gray",
                  **relabel_kwargs):
    """Posterior-mean features as images, optionally above the true features.

    The feature slots are first aligned across draws and chains with
    :func:`~pymc_ibp.diagnostics.relabel.relabel` (undoing label switching); then each
    slot active in at least `min_active_frac` of the draws is averaged over the draws in which
    it is active and shown as an image of `image_shape`, ordered by posterior mean feature size
    :math:`\\bar m_k` (largest first; the title gives :math:`\\bar m_k` and the fraction of draws
    in which the slot is active).

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample`` with Z and A in the posterior.
    image_shape : tuple of int
        Shape of one feature image; ``prod(image_shape)`` must equal the number of columns of A.
    true_features : array_like (K_true, D), optional
        Shown in a second row, ordered to match the posterior features (Hungarian matching on
        squared distance; unmatched true features last).
    n_features : int, optional
        Show at most this many posterior features.
    relabel_first : bool, default True
        Relabel before averaging (see :func:`posterior_features`).
    ax : matplotlib Axes or array of Axes, optional
        A single Axes: all features are tiled into one mosaic image drawn there.  An array of
        Axes: one feature per Axes (first row posterior, second row true features; needs
        enough Axes).  Default: a new figure with a grid of subplots.
    z_name, a_name : str
    min_active_frac : float, default 0.5
    cmap : str, default "gray"
        Colour map; the posterior row and the true row each share one colour scale.
    **relabel_kwargs
        Passed to :func:`~pymc_ibp.diagnostics.relabel.relabel`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    image_shape = tuple(int(s) for s in np.atleast_1d(image_shape))
    res = posterior_features(idata, z_name, a_name, relabel_first, min_active_frac, n_features,
                             **relabel_kwargs)
    feats = res["features"]
    D = int(np.prod(image_shape))
    n_dim = _posterior(idata)[a_name].shape[-1] if feats.size == 0 else feats.shape[1]
    if n_dim != D:
        raise ValueError(f"image_shape {image_shape} has {D} pixels but A has {n_dim} columns.")
    true = None
    if true_features is not None:
        true = np.asarray(true_features, dtype=float)
        if true.ndim != 2 or true.shape[1] != D:
            raise ValueError(f"true_features must be (K_true, {D}); got shape {true.shape}.")
        true = true[_match_true(feats, true)]

    n_rows = 1 if true is None else 2
    n_cols = max(len(feats), 0 if true is None else len(true), 1)
    titles = [f"m={s:.3g}\n{100 * f:.0f}% draws"
              for s, f in zip(res["mean_size"], res["active_frac"], strict=True)]

    def _lim(x):
        if x is None or x.size == 0:
            return None, None
        return float(np.nanmin(x)), float(np.nanmax(x))

    if ax is not None and not isinstance(ax, (np.ndarray, list, tuple)):
        # one Axes: mosaic of tiles separated by NaN gaps (per-row colour scales not possible)
        h, w = image_shape if len(image_shape) == 2 else (1, D)
        mosaic = np.full((n_rows * (h + 1) - 1, n_cols * (w + 1) - 1), np.nan)
        for r, rowf in enumerate([feats] + ([] if true is None else [true])):
            for j, f in enumerate(rowf):
                mosaic[r * (h + 1): r * (h + 1) + h, j * (w + 1): j * (w + 1) + w] = f.reshape(h, w)
        ax.imshow(mosaic, cmap=cmap, interpolation="nearest")
        ax.set_axis_off()
        ax.set_title("posterior features" + ("" if true is None else " (top), true (bottom)"))
        return ax.figure

    if ax is None:
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(1.7 * n_cols + 0.4, 2.0 * n_rows + 0.5),
                                 squeeze=False, layout="constrained")
    else:
        axes = np.asarray(ax, dtype=object)
        axes = axes.reshape(n_rows, -1) if axes.ndim == 1 else axes
        if axes.shape[0] < n_rows or axes.shape[1] < n_cols:
            raise ValueError(f"ax must hold at least {n_rows} x {n_cols} Axes; got {axes.shape}.")
        fig = axes[0, 0].figure

    def _show(a, img, lims, title):
        if len(image_shape) == 1:
            img = img.reshape(1, -1)
        else:
            img = img.reshape(image_shape)
        a.imshow(img, cmap=cmap, vmin=lims[0], vmax=lims[1], interpolation="nearest")
        a.set_title(title, fontsize=8)

    lims = _lim(feats)
    for j in range(axes.shape[1]):
        a = axes[0, j]
        a.set_axis_off()
        if j < len(feats):
            _show(a, feats[j], lims, titles[j])
        elif j == 0:
            a.text(0.5, 0.5, "no feature active in\n"
                   f"{100 * min_active_frac:.0f}% of draws", ha="center", va="center", fontsize=8)
    if true is not None:
        tl = _lim(true)
        for j in range(axes.shape[1]):
            a = axes[1, j]
            a.set_axis_off()
            if j < len(true):
                _show(a, true[j], tl, f"true {j}")
    if ax is None:
        fig.suptitle("Posterior-mean features (relabelled)" if relabel_first
                     else "Posterior-mean features", fontsize=10)
    return fig


def _lex_order(Zd):
    """Row order sorting binary rows lexicographically, first column most significant, ones
    first (the 'left-ordered' look)."""
    if Zd.shape[1] == 0:
        return np.arange(Zd.shape[0])
    keys = [-Zd[:, k] for k in range(Zd.shape[1] - 1, -1, -1)]  # lexsort: last key is primary
    return np.lexsort(keys)


def plot_assignments(idata, chain=0, draw=-1, sort=True, ax=None, *, z_name="Z", cmap="Greys"):
    """Heat map of one draw of Z: observations × active features.

    Only the active (non-empty) columns are shown, ordered by feature size (largest first).
    With ``sort=True`` the rows are sorted lexicographically (ones first, first column most
    significant), which turns the matrix into its left-ordered staircase form and makes shared
    feature patterns visible; the y tick labels then no longer follow observation order.

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample`` with `z_name` (chain, draw, obs, feature) in the posterior.
    chain, draw : int, default 0 and -1
        Integer positions of the draw to show.
    sort : bool, default True
    ax : matplotlib Axes, optional
        Draw here; default: a new figure.
    z_name : str, default "Z"
    cmap : str, default "Greys"

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    Z = _get_z(_posterior(idata), z_name)
    for name, i in (("chain", chain), ("draw", draw)):
        size = Z.sizes[name]
        if not isinstance(i, (int, np.integer)) or not -size <= i < size:
            raise ValueError(f"plot_assignments: {name}={i!r} is not a position among the "
                             f"{size} {name}s of {z_name!r} (0..{size - 1}, or negative from "
                             "the end).")
    Zd = np.asarray(Z.isel(chain=chain, draw=draw).values) != 0
    m = Zd.sum(axis=0)
    cols = np.flatnonzero(m > 0)
    cols = cols[np.argsort(-m[cols], kind="stable")]
    Zd = Zd[:, cols].astype(float)
    rows = _lex_order(Zd) if sort else np.arange(Zd.shape[0])
    Zd = Zd[rows]

    if ax is None:
        fig, ax = plt.subplots(figsize=(min(2.5 + 0.4 * max(len(cols), 1), 12.0), 4.5),
                               layout="constrained")
    else:
        fig = ax.figure
    chain_lab = Z["chain"].values[chain]
    draw_lab = Z["draw"].values[draw]
    if len(cols) == 0:
        ax.text(0.5, 0.5, "no active features", ha="center", va="center")
        ax.set_axis_off()
    else:
        im = ax.imshow(Zd, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_xticks(np.arange(len(cols)))
        ax.set_xticklabels([f"{c}\n({m[c]})" for c in cols], fontsize=7)
        ax.set_xlabel("feature slot (size)")
        ax.set_ylabel("observation" + (" (sorted)" if sort else ""))
        fig.colorbar(im, ax=ax, ticks=[0, 1], fraction=0.05)
    ax.set_title(f"Z, chain {chain_lab}, draw {draw_lab}: K+ = {len(cols)}", fontsize=10)
    return fig
