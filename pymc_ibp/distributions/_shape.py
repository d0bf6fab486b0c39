"""A distribution's shape from its ``dims``: the one home of that reading for the plugin's
distributions."""

from __future__ import annotations

import pymc as pm

from pymc_ibp._pytensor_utils import dim_lengths

__all__ = ["shape_from_dims"]


def shape_from_dims(kwargs, what, min_ndim=0, too_few=None):
    """``kwargs`` with ``shape`` set from ``dims`` when ``dims`` is given without a shape:
    the lengths of the current model's coords.  ``what`` names the distribution in errors
    (e.g. ``"pmi.IBP"``); fewer than ``min_ndim`` dims raise ``ValueError(too_few)`` (a format
    string with ``{dims!r}``); dims without coords, or whose length is not fixed, raise
    ``ValueError`` naming them."""
    dims = kwargs.get("dims")
    if dims is None or kwargs.get("shape") is not None:
        return kwargs
    model = pm.modelcontext(None)
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    if len(dims) < min_ndim:
        raise ValueError(too_few.format(dims=dims))
    missing = [d for d in dims if d not in model.dim_lengths]
    if missing:
        raise ValueError(f"{what}: the model has no coords for dims {missing}.")
    try:
        shape = dim_lengths(model, dims)
    except Exception as err:  # symbolic dims
        raise ValueError(f"{what} needs fixed-length dims; {dims!r} are not.") from err
    return {**kwargs, "shape": shape}
