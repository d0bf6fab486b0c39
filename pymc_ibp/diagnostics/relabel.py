"""Undo label switching in IBP posterior draws by Hungarian matching.

The IBP likelihood and prior are invariant to permutations of the feature slots, so within and
between chains the same feature appears under different labels: label switching, discussed for
mixture models by Stephens [1]_ and for the IBP on the docs page *Diagnostics*.
:func:`relabel` permutes the slots of every draw so that they line up with a reference, after
which per-feature summaries (posterior mean features, ``az.summary(..., var_names=["A"])``,
per-feature R-hat) are meaningful.

Matching cost
-------------
An inactive slot (an all-zero column of Z) contributes nothing to ``Z @ A``; its row of A is a
prior draw and carries no information.  The cost therefore treats every inactive slot as the
*null feature* ``(z = 0, a = 0)``.  For slot ``k`` of a draw and slot ``j`` of the reference,

.. math::

    C_{kj} = \\frac{1}{N}\\sum_n |z_{nk} - r_{nj}|
             + w\\,\\frac{\\sum_d (\\tilde a_{kd} - \\tilde b_{jd})^2}{S},

the Hamming distance between the columns as a fraction of ``N``, plus ``w`` times the squared
distance between the rows of A (with rows of inactive slots replaced by zeros, marked by the
tilde), normalised by :math:`S`, the mean squared norm of the active reference rows, so both
terms are of order one.  Only the active slots of a draw are matched
(``scipy.optimize.linear_sum_assignment`` on the rectangular active × all cost matrix); the
interchangeable inactive slots are matched last, in their original order, to the reference
slots left over.

References
----------
.. [1] Stephens, M. (2000). Dealing with label switching in mixture models. *Journal of the
   Royal Statistical Society, Series B* 62, 795–809.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.optimize import linear_sum_assignment

from pymc_ibp.diagnostics._idata import _SAMPLE_DIMS, _get_z, _posterior, _sample_stats

__all__ = ["relabel", "relabel_permutations"]


def _a_array(post: xr.Dataset, a_name: str | None, Z: xr.DataArray):
    """A as a (chain, draw, feature, ...) DataArray with the feature dim third, or None."""
    if a_name is None or a_name not in post:
        return None, None
    A = post[a_name]
    feat = Z.dims[3]
    if feat in A.dims:
        a_feat = feat
    elif A.ndim >= 3:
        a_feat = A.dims[2]  # e.g. unnamed dims: Z_dim_1 vs A_dim_0
    else:
        raise ValueError(f"{a_name!r} has dims {A.dims}; expected (chain, draw, feature, dim).")
    if A.sizes[a_feat] != Z.sizes[feat]:
        raise ValueError(
            f"{a_name!r} has {A.sizes[a_feat]} feature slots along {a_feat!r} but {Z.name!r} has "
            f"{Z.sizes[feat]}."
        )
    A = A.transpose(*_SAMPLE_DIMS, a_feat, ...)
    return A, a_feat


def _cost(z, a, act, rz, ra, scale, a_weight):
    """Cost of matching the active slots of one draw to every reference slot.

    z (N, K) draw; a (K, D) or None; act (K,) bool; rz (N, K) reference (0/1 or probabilities);
    ra (K, D) reference rows with inactive ones zeroed.  Returns (n_active, K).
    """
    zk = z[:, act].astype(float)
    n = z.shape[0]
    # sum_n |z - r| = sum_n z(1-r) + (1-z)r = sum z + sum r - 2 z.r  (z in {0,1}, r in [0,1])
    ham = zk.sum(0)[:, None] + rz.sum(0)[None, :] - 2.0 * zk.T @ rz
    cost = ham / n
    if a is not None and a_weight:
        ak = a[act]
        d2 = (ak**2).sum(1)[:, None] + (ra**2).sum(1)[None, :] - 2.0 * ak @ ra.T
        cost = cost + a_weight * np.maximum(d2, 0.0) / scale
    return cost


def _match(z, a, rz, ra, scale, a_weight):
    """Permutation ``p`` with ``new_slot_j = old_slot_p[j]`` for one draw."""
    K = z.shape[1]
    act = z.any(axis=0)
    perm = np.full(K, -1, dtype=np.int64)
    used = np.zeros(K, dtype=bool)
    if act.any():
        cost = _cost(z, a, act, rz, ra, scale, a_weight)
        rows, cols = linear_sum_assignment(cost)
        old = np.flatnonzero(act)[rows]
        perm[cols] = old
        used[old] = True
    perm[perm < 0] = np.flatnonzero(~used)  # inactive slots last, original order
    return perm


def _reference(Zv, Av, stats, reference, order="use"):
    """Reference (rz, ra) from a draw, its slots in ``order`` (:func:`relabel`); returns
    arrays and the draw's (chain, draw) position."""
    C, T = Zv.shape[:2]
    if reference is None:
        if stats is not None and "ibp_log_joint" in stats:
            lj = stats["ibp_log_joint"]
            extra = [d for d in lj.dims if d not in _SAMPLE_DIMS]
            lj = lj.isel({d: -1 for d in extra}).transpose(*_SAMPLE_DIMS).values
            lj = np.where(np.isfinite(lj), lj, -np.inf)
            c, t = np.unravel_index(np.argmax(lj), lj.shape)
        else:
            c, t = 0, T - 1
    elif isinstance(reference, str):
        if reference == "last":
            c, t = 0, T - 1
        elif reference == "map":
            if stats is None or "ibp_log_joint" not in stats:
                raise ValueError("reference='map' needs the sample stat 'ibp_log_joint'.")
            return _reference(Zv, Av, stats, None, order)
        else:
            raise ValueError(
                f"reference must be None, 'map', 'last' or (chain, draw); got {reference!r}"
            )
    else:
        try:
            c, t = (int(i) for i in reference)
        except (TypeError, ValueError):
            raise ValueError(
                f"reference must be None, 'map', 'last' or a (chain, draw) pair of integer "
                f"positions; got {reference!r}"
            ) from None
        if not (-C <= c < C and -T <= t < T):
            raise ValueError(f"reference {reference!r} out of range for {C} chains x {T} draws.")
    rz = Zv[c, t].astype(float)
    ra = None
    if Av is not None:
        ra = np.where(Zv[c, t].any(axis=0)[:, None], Av[c, t], 0.0)
    if order == "use":  # the reference's features in decreasing order of use, empty slots last
        by_use = np.argsort(-rz.sum(axis=0), kind="stable")
        rz = rz[:, by_use]
        ra = None if ra is None else ra[by_use]
    return rz, ra, (int(c) % C, int(t) % T)


def _scale(ra, Av):
    if ra is None:
        return 1.0
    norms = (ra**2).sum(1)
    act = norms > 0
    s = norms[act].mean() if act.any() else float(np.mean((Av**2).sum(-1)))
    return s if np.isfinite(s) and s > 0 else 1.0


def relabel_permutations(
    idata,
    z_name: str = "Z",
    a_name: str | None = "A",
    reference=None,
    *,
    a_weight: float = 1.0,
    n_refine: int = 0,
    order: str = "use",
) -> xr.DataArray:
    """Slot permutations that align every draw with a reference (see :func:`relabel`).

    Returns
    -------
    xarray.DataArray
        Integer array ``perm`` with dims (chain, draw, feature): in draw ``(c, t)``, new slot
        ``j`` takes the old slot ``perm[c, t, j]``.  ``attrs["reference"]`` holds the
        (chain, draw) positions of the reference draw.
    """
    if order not in ("use", "reference"):
        raise ValueError(f"order must be 'use' or 'reference'; got {order!r}")
    if not (np.isfinite(a_weight) and a_weight >= 0):
        raise ValueError(f"a_weight must be a finite number >= 0; got {a_weight!r}.")
    if isinstance(n_refine, bool) or not float(n_refine).is_integer() or n_refine < 0:
        raise ValueError(f"n_refine must be an integer >= 0; got {n_refine!r}.")
    post = _posterior(idata)
    Z = _get_z(post, z_name)
    A, _ = _a_array(post, a_name, Z)
    Zv = np.asarray(Z.values) != 0
    C, T, N, K = Zv.shape
    Av = None
    if A is not None:
        Av = np.asarray(A.values, dtype=float).reshape(C, T, K, -1)
    rz, ra, ref_pos = _reference(Zv, Av, _sample_stats(idata, z_name), reference, order)
    scale = _scale(ra, Av)

    perm = np.empty((C, T, K), dtype=np.int64)
    for it in range(int(n_refine) + 1):
        for c in range(C):
            for t in range(T):
                perm[c, t] = _match(Zv[c, t], None if Av is None else Av[c, t], rz, ra, scale,
                                    a_weight)
        if it == n_refine:
            break
        # refine: the reference becomes the mean relabelled draw (Stephens-style), with
        # inactive slots as null features
        Zp = np.take_along_axis(Zv, perm[:, :, None, :], axis=3)
        rz = Zp.mean(axis=(0, 1))
        if Av is not None:
            Ap = np.take_along_axis(Av, perm[..., None], axis=2)
            Ap = np.where(Zp.any(axis=2)[..., None], Ap, 0.0)
            ra = Ap.mean(axis=(0, 1))
    return xr.DataArray(
        perm,
        dims=(*_SAMPLE_DIMS, Z.dims[3]),
        coords={"chain": Z["chain"].values, "draw": Z["draw"].values},
        name="perm",
        attrs={"reference": ref_pos},
    )


def relabel(
    idata,
    z_name: str = "Z",
    a_name: str | None = "A",
    reference=None,
    *,
    a_weight: float = 1.0,
    n_refine: int = 0,
    order: str = "use",
    return_permutation: bool = False,
):
    """Permute the feature slots of every draw to match a reference draw (undo label switching).

    IBP feature slots are exchangeable, so samplers switch labels between draws and chains
    (see the docs page *Diagnostics*).  For every draw this finds the permutation of the slots
    that best matches a reference draw by Hungarian matching
    (:func:`scipy.optimize.linear_sum_assignment`) on the cost

    .. math::

        C_{kj} = \\tfrac1N\\,\\mathrm{Hamming}(z_{\\cdot k}, r_{\\cdot j})
                 + w\\,\\lVert \\tilde a_k - \\tilde b_j\\rVert^2 / S,

    where inactive slots (all-zero columns of Z) count as the null feature (their A rows,
    which are prior draws, are replaced by zeros in the cost) and :math:`S` is the mean squared
    norm of the active reference rows of A.  Only the active slots are matched; the
    interchangeable inactive slots fill the remaining reference slots last, in their original
    order.  The same permutation is applied to the feature axis of Z, of A and of every other
    posterior variable that has Z's feature dim (e.g. stick weights).

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample``; the posterior must hold `z_name` (chain, draw, obs, feature).
    z_name : str, default "Z"
    a_name : str or None, default "A"
        Feature matrix (chain, draw, feature, dim).  If None or absent, only the Hamming term
        is used.  If A's dims do not include Z's feature dim, its first non-sample dim is taken
        as the feature axis.
    reference : None, "map", "last" or (chain, draw), optional
        The draw to align to, given by integer positions.  ``None`` (default): the draw with the
        highest ``ibp_log_joint`` sample stat (``"map"``; a high-probability draw is a
        representative, well-separated labelling), or the last draw of chain 0 (``"last"``)
        when that stat is absent.
    a_weight : float, default 1.0
        Weight ``w`` of the A term relative to the normalised Hamming distance.
    n_refine : int, default 0
        Extra passes in which the reference is replaced by the mean relabelled draw (column
        means of Z and row means of A with inactive rows as zeros) and all draws are matched
        again.  Makes the result less dependent on one, possibly atypical, reference draw.
    order : {"use", "reference"}, default "use"
        Slot order of the result: ``"use"`` puts the reference's features in decreasing
        order of use (the number of rows with the feature in the reference draw) in the
        first slots and its empty slots last, so the features of a relabelled trace are in
        slots ``0 .. K+ - 1``; ``"reference"`` keeps the reference draw's own slots (a
        sampler leaves the features wherever births put them).
    return_permutation : bool, default False
        Also return the permutations (see :func:`relabel_permutations`).

    Returns
    -------
    xarray.DataTree
        A new tree; the posterior has its feature-dim variables permuted, all other groups (and
        variables without the feature dim) are unchanged.  The posterior's attrs gain
        ``relabel_reference = (chain, draw)``.  With ``return_permutation=True``, a tuple
        ``(tree, perm)``.

    Raises
    ------
    ValueError
        No posterior group, no `z_name`, inconsistent A, or an invalid `reference`.

    Notes
    -----
    Matching to a single reference is the standard pivotal relabelling; it cannot resolve draws
    where the reference's features are genuinely merged or split, and for posteriors with
    several modes of different K+ the alignment of rarely active slots is arbitrary.  Cost:
    one ``K+ x K`` assignment problem per draw.
    """
    if not isinstance(idata, xr.DataTree):
        raise ValueError(f"relabel needs an xarray.DataTree (from pm.sample); got {type(idata)!r}")
    post = _posterior(idata)
    perm = relabel_permutations(idata, z_name, a_name, reference, a_weight=a_weight,
                                n_refine=n_refine, order=order)
    Z = post[z_name]
    feat = Z.dims[3]
    A, a_feat = _a_array(post, a_name, Z)

    new_vars = {}
    for name, da in post.data_vars.items():
        if name == a_name and A is not None:
            axis_dim = a_feat
        elif feat in da.dims:
            axis_dim = feat
        else:
            continue
        if da.dims[:2] != _SAMPLE_DIMS:
            continue  # not a per-draw variable
        axis = da.dims.index(axis_dim)
        C, T, K = perm.shape
        idx = perm.values.reshape(C, T, *([1] * (axis - 2)), K, *([1] * (da.ndim - axis - 1)))
        vals = np.take_along_axis(np.asarray(da.values), np.broadcast_to(idx, da.shape), axis=axis)
        new_vars[name] = da.copy(data=vals)

    new_post = post.assign(new_vars)
    new_post.attrs = {**post.attrs, "relabel_reference": list(perm.attrs["reference"])}
    out = idata.copy()
    out["posterior"] = xr.DataTree(new_post)
    if return_permutation:
        return out, perm
    return out
