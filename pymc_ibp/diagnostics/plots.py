"""Diagnostic plots built on :mod:`arviz_plots` ``PlotCollection`` (ArviZ 1.3).

Only :func:`plot_cusum` for now: CUSUM paths and the hairiness index (Brooks 1998), drawn as
in Doshi-Velez (2009, Fig. 5.6).
"""

from __future__ import annotations

import numpy as np
from arviz_base import rcParams
from arviz_base.labels import BaseLabeller
from arviz_plots import PlotCollection
from arviz_plots.plot_collection import backend_from_object
from arviz_plots.visuals import labelled_title, labelled_x, labelled_y, line, set_ylim

from pymc_ibp.diagnostics.cusum import HAIR_DIM, cusum, hairiness

__all__ = ["plot_cusum"]

#: facetting dimension separating the CUSUM row from the hairiness row
PANEL_DIM = "cusum_panel"


def _band(da, target, *, lower, upper, **kwargs):
    """Shade the null band of the hairiness index (x = the ``hairiness_draw`` coordinate)."""
    x = np.asarray(da[HAIR_DIM].values, dtype=float)
    plot_backend = backend_from_object(target)
    return plot_backend.fill_between_y(x, np.asarray(lower), np.asarray(upper), target, **kwargs)


def _hline(da, target, *, y, **kwargs):
    return backend_from_object(target).hline(float(y), target, **kwargs)


def plot_cusum(
    idata,
    var_names,
    backend=None,
    *,
    group="posterior",
    cusum_center="mean",
    center="median",
    kind="cusum",
    ties="random",
    seed=0,
    prob=0.95,
    labeller=None,
    **pc_kwargs,
):
    r"""CUSUM paths and running hairiness index with its null band (Brooks 1998).

    For every variable (and every element of its non-sample dims) one column with two panels:

    * top (``cusum_panel="cusum"``): CUSUM path :math:`S_t=\sum_{i\le t}(s_i-\hat\mu)` of each
      chain, coloured by chain (see :func:`~pymc_ibp.diagnostics.cusum`);
    * bottom (``cusum_panel="hairiness"``): running hairiness index :math:`D_t` of each chain
      with the shaded pointwise ``prob`` band and a dashed line at the null mean (½ for
      ``kind="cusum"``, ⅔ for ``"turning"``); see :func:`~pymc_ibp.diagnostics.hairiness`.

    Parameters
    ----------
    idata : xarray.DataTree or xarray.Dataset
        Output of ``pm.sample`` (variables with dims ``(chain, draw, ...)``).
    var_names : str or list of str
        Looked up in `group` first, then in ``sample_stats`` (e.g. ``"ibp_n_active"``).
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        Defaults to ``arviz_base.rcParams["plot.backend"]`` (matplotlib when it is installed).
    group : str, default "posterior"
    cusum_center : {"mean", "median"}, default "mean"
        Centre of the plotted CUSUM path (mean: the path returns to 0 at :math:`T`).
    center, kind, ties, seed, prob
        Passed to :func:`~pymc_ibp.diagnostics.hairiness`.
    labeller : arviz_base.labels labeller, optional
        Defaults to :class:`~arviz_base.labels.BaseLabeller`.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.grid` (e.g. ``figure_kwargs``, ``aes``,
        ``cols``).  Defaults: ``cols=["__variable__", *other_dims]``, ``rows=["cusum_panel"]``,
        ``aes={"color": ["chain"], "overlay": ["chain"]}``.

    Returns
    -------
    arviz_plots.PlotCollection
        Visuals are stored under ``"cusum"``, ``"hairiness"``, ``"hairiness_band"``,
        ``"null_line"`` and ``"title"``.  Save with ``pc.savefig(path)``.
    """
    if backend is None:
        backend = rcParams["plot.backend"]
    if labeller is None:
        labeller = BaseLabeller()
    cs = cusum(idata, var_names, group=group, center=cusum_center)
    hair = hairiness(idata, var_names, group=group, center=center, kind=kind, ties=ties,
                     seed=seed, prob=prob)
    names = list(cs.data_vars)
    other_dims = []
    for name in names:
        other_dims += [d for d in cs[name].dims if d not in ("chain", "draw", *other_dims)]

    pc_kwargs = dict(pc_kwargs)
    pc_kwargs.setdefault("cols", ["__variable__", *other_dims])
    pc_kwargs.setdefault("rows", [PANEL_DIM])
    aes = dict(pc_kwargs.get("aes", {}))
    aes.setdefault("color", ["chain"])
    aes.setdefault("overlay", ["chain"])
    pc_kwargs["aes"] = aes
    figure_kwargs = dict(pc_kwargs.get("figure_kwargs", {}))
    if "figsize" not in figure_kwargs:
        n_cols = sum(
            int(np.prod([cs[n].sizes[d] for d in cs[n].dims if d in other_dims], dtype=int))
            for n in names
        )
        figure_kwargs["figsize"] = (min(3.6 * n_cols, 16.0) + 0.6, 5.6)
        figure_kwargs.setdefault("figsize_units", "inches")
    if backend == "matplotlib":
        figure_kwargs.setdefault("layout", "constrained")  # no overlapping labels, legend outside
    pc_kwargs["figure_kwargs"] = figure_kwargs

    grid_data = cs.expand_dims({PANEL_DIM: ["cusum", "hairiness"]})
    pc = PlotCollection.grid(grid_data, backend=backend, **pc_kwargs)

    hair_d = hair[names]
    per_panel = hair_d.isel(chain=0, drop=True)  # one band / reference line per panel
    on_cusum = {PANEL_DIM: "cusum"}
    on_hair = {PANEL_DIM: "hairiness"}

    # D_t lies in [0, 1]; clip the (normal-approximation) band for display only
    pc.map(_band, "hairiness_band", data=per_panel, coords=on_hair, ignore_aes="all",
           lower=hair["hairiness_lower"].clip(0, 1), upper=hair["hairiness_upper"].clip(0, 1),
           color="gray", alpha=0.3, zorder=0)
    pc.map(_hline, "null_line", data=per_panel, coords=on_hair, ignore_aes="all",
           y=hair.attrs["null_mean"], color="black", linestyle="--", width=0.8)
    pc.map(_hline, "zero_line", data=cs.isel(chain=0, draw=0, drop=True), coords=on_cusum,
           ignore_aes="all", y=0.0, color="gray", linestyle=":", width=0.8)
    pc.map(line, "cusum", data=cs, coords=on_cusum, xname="draw", width=1.0)
    pc.map(line, "hairiness", data=hair_d, coords=on_hair, xname=HAIR_DIM, width=1.0)

    first = cs.isel(chain=0, draw=0, drop=True)
    pc.map(set_ylim, "ylim_hairiness", data=first, coords=on_hair, ignore_aes="all",
           store_artist=False, limits=(-0.03, 1.03))
    pc.map(labelled_title, "title", data=first, coords=on_cusum, ignore_aes="all",
           subset_info=True, labeller=labeller, size=10)
    pc.map(labelled_y, "ylabel_cusum", data=first, coords=on_cusum, ignore_aes="all",
           text=r"CUSUM $S_t$", size=9)
    label_d = r"hairiness $D_t$" if kind == "cusum" else r"turning-point $D_t$"
    pc.map(labelled_y, "ylabel_hairiness", data=first, coords=on_hair, ignore_aes="all",
           text=label_d, size=9)
    pc.map(labelled_x, "xlabel", data=first, coords=on_hair, ignore_aes="all", text="draw",
           size=9)
    if "chain" in aes.get("color", ()) and cs.sizes["chain"] > 1:
        pc.add_legend("chain")
    return pc
