"""Keep large variables (the binary matrix ``Z``) at every k-th draw only.

At ``N = 10^6`` rows one draw of ``Z`` (``N x K_max`` ``int8``) takes ``N K_max`` bytes: 20 MB at
``K_max = 20``, 20 GB over 1000 draws.  ``pm.sample`` keeps every draw of every variable it
traces and has no thinning, so the large variables are left out of its trace with
``var_names`` and a :class:`KeepEvery` callback stores them at every k-th kept draw::

    keep = pmi.KeepEvery(10, var_names=["Z"])
    idata = pm.sample(var_names=["alpha", "sigma_x", "sigma_a", "A"], callback=keep)
    thinned = keep.thin(idata)  # every 10th draw of everything, with Z

The callback works with ``cores=1`` and with several processes (PyMC passes every draw's point
to it in the main process).  ``thin`` returns the ``DataTree`` that ``pm.sample`` returns, with
its ``posterior`` and ``sample_stats`` restricted to the kept draws and the kept variables added
to the posterior (with the model's dims), so :func:`pymc_ibp.summary`,
:func:`pymc_ibp.plot_features` and :func:`pymc_ibp.heldout_metrics` read it as they read a full
trace.  See the docs page *Large data sets*.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KeepEvery"]


class KeepEvery:
    """``pm.sample`` callback keeping ``var_names`` at every ``every``-th kept (post-tuning) draw
    of every chain (draws ``0, every, 2 every, …``).

    Parameters
    ----------
    every : int
        The thinning interval, ``>= 1``.
    var_names : sequence of str, default ``("Z",)``
        Variables of the model to keep; they must be untransformed (``Z``, ``A``: their values
        are what the sampler's points hold).
    model : pm.Model, optional
        The model (default: the one in context when the callback is created); gives the dims.
    """

    def __init__(self, every, var_names=("Z",), model=None):
        import pymc as pm

        every = int(every)
        if every < 1:
            raise ValueError(f"KeepEvery needs every >= 1; got {every}.")
        self.every = every
        self.var_names = [var_names] if isinstance(var_names, str) else list(var_names)
        model = pm.modelcontext(model)
        self._dims = {}
        for name in self.var_names:
            if name not in model.named_vars:
                raise ValueError(f"KeepEvery: {name!r} is not a variable of the model.")
            rv = model[name]
            value = model.rvs_to_values.get(rv)
            if value is None or value.name != name:
                raise ValueError(
                    f"KeepEvery keeps untransformed random variables (such as Z or A); "
                    f"{name!r} is {'transformed' if value is not None else 'not free'}: keep "
                    f"it in pm.sample's trace (var_names) instead.")
            self._dims[name] = model.named_vars_to_dims.get(name)
        self._seen = {}  # chain -> number of post-tuning draws seen
        self._kept = {}  # chain -> list of (draw index, {name: array})

    def __call__(self, trace, draw):
        if draw.tuning:
            return
        c = draw.chain
        i = self._seen.get(c, 0)
        self._seen[c] = i + 1
        if i % self.every:
            return
        self._kept.setdefault(c, []).append(
            (i, {name: np.array(draw.point[name], copy=True) for name in self.var_names}))

    def draws(self):
        """The kept draw indices (positions in the posterior's ``draw`` dim)."""
        if not self._kept:
            return np.zeros(0, dtype=np.int64)
        lengths = {c: len(v) for c, v in self._kept.items()}
        n = min(lengths.values())
        return np.array([i for i, _ in next(iter(self._kept.values()))[:n]], dtype=np.int64)

    def thin(self, idata):
        """``idata`` (``pm.sample``'s result) at the kept draws, with the kept variables added
        to its ``posterior``."""
        import xarray as xr

        if not self._kept:
            raise ValueError("KeepEvery has kept nothing: pass it to pm.sample(callback=...).")
        post = idata["posterior"].to_dataset()
        chains = list(post["chain"].values)
        missing = [c for c in chains if c not in self._kept]
        if missing:
            raise ValueError(f"KeepEvery has no draws of chains {missing}.")
        idx = self.draws()
        n = idx.size
        draw_coord = post["draw"].values[idx]
        new = {}
        for name in self.var_names:
            arr = np.stack([np.stack([v[name] for _, v in self._kept[c][:n]]) for c in chains])
            dims = self._dims[name] or [f"{name}_dim_{j}" for j in range(arr.ndim - 2)]
            new[name] = xr.DataArray(arr, dims=("chain", "draw", *dims),
                                     coords={"chain": chains, "draw": draw_coord})
        out = idata.copy()
        thinned = post.isel(draw=idx)
        for name, da in new.items():
            thinned[name] = da
        out["posterior"] = thinned
        if "sample_stats" in idata.children:
            out["sample_stats"] = idata["sample_stats"].to_dataset().isel(draw=idx)
        return out
