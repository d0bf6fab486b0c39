"""Reading the groups of a DataTree that ``pm.sample`` returned: the posterior, the sample
stats of one feature matrix, and ``Z`` checked to be a binary (chain, draw, obs, feature)
array.  Shared by the summaries, relabelling, held-out metrics and feature plots."""

from __future__ import annotations

import numpy as np
import xarray as xr

from pymc_ibp._stat_names import SEP

_SAMPLE_DIMS = ("chain", "draw")


def _posterior(idata) -> xr.Dataset:
    """The posterior group of `idata` as an :class:`xarray.Dataset` (ValueError if missing)."""
    if isinstance(idata, xr.Dataset):
        return idata
    if isinstance(idata, xr.DataTree):
        if "posterior" not in idata.children:
            raise ValueError(
                "idata has no 'posterior' group (groups present: "
                f"{sorted(idata.children)}); pass the DataTree returned by pm.sample."
            )
        return idata["posterior"].to_dataset()
    raise TypeError(f"expected an xarray.DataTree (from pm.sample) or Dataset, got {type(idata)!r}")


def _sample_stats(idata, z_name: str | None = None) -> xr.Dataset | None:
    """The ``sample_stats`` group; with ``z_name``, the stats of that feature matrix under their
    plain names (a model sampling several matrices records ``ibp_<stat>__<matrix>``, see
    :mod:`pymc_ibp.step_methods.stats`), other matrices' stats dropped."""
    if not (isinstance(idata, xr.DataTree) and "sample_stats" in idata.children):
        return None
    ds = idata["sample_stats"].to_dataset()
    if z_name is None:
        return ds
    suffix = f"{SEP}{z_name}"
    mine = {v: v[: -len(suffix)] for v in ds.data_vars if v.endswith(suffix)}
    others = [v for v in ds.data_vars if SEP in v and v not in mine and v.startswith("ibp_")]
    return ds.drop_vars(others + [mine[v] for v in mine if mine[v] in ds]).rename(mine)


def _get_z(post: xr.Dataset, z_name: str) -> xr.DataArray:
    """Z as (chain, draw, obs, feature); ValueError if missing, of the wrong rank or not
    binary."""
    if z_name not in post:
        raise ValueError(
            f"the posterior has no variable {z_name!r} (variables: {sorted(post.data_vars)}); "
            "pass z_name= to name the binary feature-assignment matrix."
        )
    Z = post[z_name]
    if Z.dims[:2] != _SAMPLE_DIMS or Z.ndim != 4:
        raise ValueError(
            f"{z_name!r} must have dims (chain, draw, obs, feature); got {Z.dims}."
        )
    v = Z.values
    if v.size and (v.dtype.kind not in "biuf" or v.min() < 0 or v.max() > 1
                   or (v.dtype.kind == "f" and np.any((v != 0) & (v != 1)))):
        raise ValueError(
            f"{z_name!r} is not a binary matrix (its entries range over [{v.min()}, "
            f"{v.max()}]); pass z_name= to name the binary feature-assignment matrix."
        )
    return Z


def _scalar_stat(da: xr.DataArray) -> xr.DataArray:
    """A (chain, draw) version of a sample stat.  When several steps emitted the same stat it is
    stacked along ``<stat>_dim_0``; take the last entry (the state after the last step)."""
    extra = [d for d in da.dims if d not in _SAMPLE_DIMS]
    if extra:
        da = da.isel({d: -1 for d in extra})
    return da


def _k_plus(Z: xr.DataArray) -> xr.DataArray:
    """K+ of every draw of ``Z`` (chain, draw, obs, feature): its non-empty columns."""
    return (Z.sum(Z.dims[2]) > 0).sum(Z.dims[3])
