"""CUSUM paths and the hairiness index (Brooks 1998; Brooks & Roberts 1998) for MCMC output.

Doshi-Velez ([3]_, §5.3, following [2]_ and [4]_) monitors IBP samplers with the hairiness
index of the sampled hyperparameters.  It describes the index in words ("how often the slope
of the CUSUM path changes sign"), prints a formula that counts turning points of the
statistic itself rather than of the CUSUM path, and plots 95 % bounds without giving them.
Both variants are implemented here, each with its null band derived below (and on the docs
page *Diagnostics*):

``kind="cusum"`` (default, the index of Brooks [1]_ and Brooks & Roberts [2]_)
    With :math:`\\hat\\mu` the chain median (default) or mean, the CUSUM path is
    :math:`S_t = \\sum_{i\\le t}(s_i-\\hat\\mu)`, whose slope at step :math:`t` is
    :math:`s_t-\\hat\\mu`.  The indicators
    :math:`d_t = 1[\\operatorname{sign}(s_t-\\hat\\mu)\\ne\\operatorname{sign}(s_{t+1}-\\hat\\mu)]`,
    :math:`t=1,\\dots,T-1`, mark local extrema of :math:`S`, and
    :math:`D_t = \\frac1t\\sum_{i\\le t} d_i`.  Under an i.i.d. null with
    :math:`P(s>\\hat\\mu)=\\tfrac12` the :math:`d_i` are i.i.d. Bernoulli(½), so the 95 % band is
    :math:`\\tfrac12 \\pm 1.96/(2\\sqrt t)`.

``kind="turning"`` (the formula as printed in [3]_, §5.3)
    :math:`d_\\tau = 1[\\operatorname{sign}(s_\\tau-s_{\\tau-1})\\ne
    \\operatorname{sign}(s_{\\tau+1}-s_\\tau)]` (turning points of :math:`s`), :math:`n-2`
    indicators for :math:`n` values.  Under an i.i.d. continuous null the count has mean
    :math:`\\tfrac23(n-2)` and variance :math:`(16n-29)/90` (the classical turning-point test),
    so with :math:`D=\\frac1{n-2}\\sum d` the band is
    :math:`\\tfrac23 \\pm 1.96\\sqrt{(16n-29)/90}/(n-2)`.

Ties
----
Integer-valued statistics (e.g. the number of active features :math:`K_+`) hit the centre
(``s_t == median``) or repeat the previous value very often, and :math:`\\operatorname{sign}(0)=0`
then differs from both :math:`\\pm1`.  Taking that literally (``ties="zero"``) destroys the
calibration: for i.i.d. Poisson(3) draws, median 3, :math:`P(d_t=1) = 1-(a^2+b^2+c^2) \\approx
0.65` with :math:`a=P(s>3), b=P(s<3), c=P(s=3)`, so the band is missed almost always.

The default ``ties="random"`` breaks ties **as if an infinitesimal continuous jitter had been added
to the draws**, implemented exactly with *randomised ranks* (sort by value, then by an independent
uniform key drawn from ``seed``):

* median centring: the signs are those of the randomised ranks relative to their median
  :math:`(T-1)/2`.  Draws strictly above/below the sample median keep their sign; only draws equal
  to the median are split at random between the two sides so that the sequence is balanced (the
  middle rank for odd :math:`T` gets a fair coin).
* mean centring: draws exactly equal to the mean get a fair-coin sign.
* ``kind="turning"``: turning points of the randomised ranks (ties between consecutive values are
  resolved by the uniform key).

Justification: if :math:`s_1,\\dots,s_T` are i.i.d. (any distribution, discrete or not), the
randomised ranks form a uniformly random permutation, exactly as the ordinary ranks of i.i.d.
continuous draws do.  Both indices depend on the data only through these ranks (for ``"cusum"``
with median centring), so their null distribution — and hence the band coverage — is *the same* as
in the continuous case (verified by simulation in ``tests/diagnostics/test_cusum.py``: ≈95 % for
Poisson(3)).
The alternative of assigning ties to alternate sides would make every run of tied values look like
maximal oscillation, and carrying the previous sign forward under-counts changes under the null;
neither is calibrated.  Randomisation is seeded (``seed=0`` by default) so results are
reproducible.

Caveat: the randomisation cannot create information that the statistic does not carry.  A chain
that is constant (or sits on the tie value most of the time) gets :math:`D_t\\approx\\tfrac12`
whether it is stuck or the posterior really is concentrated on one value; the fraction of tied
draws is therefore reported alongside the index by :func:`hairiness` (``<var>_tie_frac``).

References
----------
.. [1] Brooks, S. P. (1998). Quantitative convergence assessment for Markov chain Monte Carlo
   via cusums. *Statistics and Computing* 8, 267–274.
.. [2] Brooks, S. P. and Roberts, G. O. (1998). Convergence assessment techniques for Markov
   chain Monte Carlo. *Statistics and Computing* 8, 319–335.
.. [3] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and
   extensions*. MSc thesis, University of Cambridge.
.. [4] Robert, C. P. and Casella, G. (2004). *Monte Carlo Statistical Methods*, 2nd ed.
   Springer.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import xarray as xr

__all__ = ["cusum", "hairiness", "hairiness_index"]

_CENTERS = ("median", "mean")
_KINDS = ("cusum", "turning")
_TIES = ("random", "zero")
_SAMPLE_DIMS = ("chain", "draw")
#: name of the draw-like dimension of the hairiness index in :func:`hairiness` output
HAIR_DIM = "hairiness_draw"


# ------------------------------------------------------------------------------------------------
# array core (vectorised over leading axes; the draw axis is the last one)
# ------------------------------------------------------------------------------------------------
def _z(prob: float) -> float:
    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1), got {prob!r}")
    return NormalDist().inv_cdf(0.5 + prob / 2)


def _random_ranks(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Ranks 0..T-1 along the last axis, ties broken by an independent uniform key."""
    key = rng.random(x.shape)
    order = np.lexsort((key, x), axis=-1)  # primary key: x, secondary: uniform
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(x.shape[-1]), x.shape), axis=-1)
    return ranks


def _coin(shape, rng: np.random.Generator) -> np.ndarray:
    return np.where(rng.random(shape) < 0.5, 1, -1)


def _slope_signs(x: np.ndarray, center: str, ties: str, rng: np.random.Generator):
    """Signs of the CUSUM slope ``s_t - mu_hat`` (in {-1, 0, 1}) and the tie fraction."""
    if center == "median":
        mu = np.median(x, axis=-1, keepdims=True)
    else:
        mu = np.mean(x, axis=-1, keepdims=True)
    raw = np.sign(x - mu).astype(np.int8)
    tie_frac = np.mean(raw == 0, axis=-1)
    if ties == "zero":
        return raw, tie_frac
    if center == "median":
        # signs of the randomised ranks about their median (T-1)/2: identical to `raw` where
        # raw != 0, balanced random assignment of the draws tied with the median.
        twice = 2 * _random_ranks(x, rng) - (x.shape[-1] - 1)
        sgn = np.sign(twice).astype(np.int8)
    else:
        sgn = raw
    zero = sgn == 0
    if zero.any():
        sgn = np.where(zero, _coin(x.shape, rng), sgn).astype(np.int8)
    return sgn, tie_frac


def _cusum_indicators(x, center, ties, rng):
    sgn, tie_frac = _slope_signs(x, center, ties, rng)
    return sgn[..., :-1] != sgn[..., 1:], tie_frac


def _turning_indicators(x, ties, rng):
    if ties == "zero":
        step = np.sign(np.diff(x, axis=-1))
    else:
        step = np.sign(np.diff(_random_ranks(x, rng), axis=-1))  # never 0
    tie_frac = np.mean(np.diff(x, axis=-1) == 0, axis=-1)
    return step[..., :-1] != step[..., 1:], tie_frac


def _band(kind: str, m: int, prob: float):
    """Band for D_t, t = 1..m (number of indicators), cut to [0, 1]: ``D_t`` is a fraction,
    and the normal approximation's band reaches past 0 and 1 at small ``t`` (at 95 %: for
    t <= 3 with the CUSUM, below 0 at t = 1 and above 1 up to t = 6 with the turning
    points); the tests ``D_t < lower``, ``D_t > upper`` decide the same with the cut band."""
    z = _z(prob)
    t = np.arange(1, m + 1, dtype=float)
    if kind == "cusum":
        centre, half = 0.5, z / (2.0 * np.sqrt(t))
    else:
        n = t + 2.0  # number of values behind t turning-point indicators
        centre, half = 2.0 / 3.0, z * np.sqrt((16.0 * n - 29.0) / 90.0) / t
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def _validate(center, kind, ties):
    if center not in _CENTERS:
        raise ValueError(f"center must be one of {_CENTERS}, got {center!r}")
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if ties not in _TIES:
        raise ValueError(f"ties must be one of {_TIES}, got {ties!r}")


def _hairiness_core(x, center, kind, ties, rng, prob):
    """Vectorised core on the last axis: returns (D, lower, upper, tie_frac)."""
    x = np.asarray(x, dtype=float)
    if x.shape[-1] < 3:
        raise ValueError(f"the hairiness index needs at least 3 draws, got {x.shape[-1]}")
    if not np.all(np.isfinite(x)):
        raise ValueError("the hairiness index needs finite draws (found NaN or inf)")
    if kind == "cusum":
        d, tie_frac = _cusum_indicators(x, center, ties, rng)
    else:
        d, tie_frac = _turning_indicators(x, ties, rng)
    m = d.shape[-1]
    D = np.cumsum(d, axis=-1) / np.arange(1, m + 1)
    lower, upper = _band(kind, m, prob)
    return D, lower, upper, tie_frac


def hairiness_index(x, center="median", kind="cusum", *, ties="random", seed=0, prob=0.95, axis=-1):
    r"""Running hairiness index :math:`D_t` of a chain and its null band (Brooks 1998).

    Parameters
    ----------
    x : array_like
        Post-burn-in (and thinned) draws :math:`s_1,\dots,s_T` of one chain (1-D).  N-D input is
        accepted for vectorised use: the index is computed independently along `axis`.
    center : {"median", "mean"}, default "median"
        Centre :math:`\hat\mu` of the CUSUM slope (``kind="cusum"`` only; ignored for
        ``"turning"``).  The median forces :math:`P(s>\hat\mu)=\frac12` and is the calibrated
        choice; mean-centring a skewed chain moves the null centre to :math:`2p(1-p)<\frac12`.
    kind : {"cusum", "turning"}, default "cusum"
        ``"cusum"``: the index of Brooks (1998) [1]_ (see also Brooks & Roberts 1998 [2]_),
        :math:`d_t=1[\operatorname{sign}(s_t-\hat\mu)\ne\operatorname{sign}(s_{t+1}-\hat\mu)]`,
        :math:`t=1..T-1`, band :math:`\frac12\pm z/(2\sqrt t)`.
        ``"turning"``: the formula printed by Doshi-Velez (2009, §5.3) [3]_ (turning points of
        :math:`s`), :math:`T-2`
        indicators, band :math:`\frac23\pm z\sqrt{(16n-29)/90}/(n-2)` with :math:`n=t+2`.
        In both cases :math:`D_t=\frac1t\sum_{i\le t}d_i`.
    ties : {"random", "zero"}, default "random"
        ``"random"``: ties (a draw equal to the centre, or to its predecessor for ``"turning"``)
        are broken by randomised ranks, i.e. as if an infinitesimal continuous jitter had been
        added; see the module docstring for why this keeps the band's 95 % coverage for i.i.d.
        integer-valued draws.  ``"zero"``: literal :math:`\operatorname{sign}(0)=0` (not
        calibrated for discrete statistics; provided for comparison).
    seed : int, numpy.random.Generator or None, default 0
        Randomness used only for tie breaking.
    prob : float, default 0.95
        Band probability; :math:`z=\Phi^{-1}(\frac12+\frac{prob}2)` (1.96 for 0.95).
    axis : int, default -1
        Draw axis of `x`.

    Returns
    -------
    D : ndarray
        Running index, length :math:`m=T-1` (``"cusum"``) or :math:`T-2` (``"turning"``) along
        the last axis (the draw axis is moved last for N-D input).  ``D[..., -1]`` is the final
        index :math:`D_T`.
    lower, upper : ndarray, shape (m,)
        Pointwise null band for ``D[..., i]`` (based on ``i+1`` indicators), within [0, 1]
        (the normal approximation's band, cut where it passes 0 or 1 at small ``t``).

    Raises
    ------
    ValueError
        Fewer than 3 draws, non-finite draws, or an unknown option.

    Notes
    -----
    The chain is "hairy" (no evidence of poor mixing) when :math:`D_t` stays inside the band.
    :math:`D_t` well below the band means the chain stays in regimes (a smooth CUSUM path).
    The band is pointwise; checking the final value :math:`D_T` is a level-:math:`(1-prob)`
    test of the i.i.d. null.

    References
    ----------
    .. [1] Brooks, S. P. (1998). Quantitative convergence assessment for Markov chain Monte
       Carlo via cusums. *Statistics and Computing* 8, 267–274.
    .. [2] Brooks, S. P. and Roberts, G. O. (1998). Convergence assessment techniques for
       Markov chain Monte Carlo. *Statistics and Computing* 8, 319–335.
    .. [3] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and
       extensions*. MSc thesis, University of Cambridge, §5.3 (the index for IBP samplers).
    """
    _validate(center, kind, ties)
    x = np.moveaxis(np.asarray(x), axis, -1)
    D, lower, upper, _ = _hairiness_core(x, center, kind, ties, np.random.default_rng(seed), prob)
    return D, lower, upper


# ------------------------------------------------------------------------------------------------
# DataTree / Dataset interface
# ------------------------------------------------------------------------------------------------
def _get_group(idata, group):
    if isinstance(idata, xr.Dataset):
        return idata, None
    if isinstance(idata, xr.DataTree):
        if group not in idata.children:
            raise ValueError(f"group {group!r} not found; available: {sorted(idata.children)}")
        stats = idata["sample_stats"].to_dataset() if "sample_stats" in idata.children else None
        return idata[group].to_dataset(), stats
    raise TypeError(f"expected an xarray.DataTree (pm.sample output) or Dataset, got {type(idata)}")


def _select(idata, var_names, group) -> dict[str, xr.DataArray]:
    """Look each name up in `group` first, then in ``sample_stats``; check chain/draw dims."""
    ds, stats = _get_group(idata, group)
    if var_names is None:
        var_names = list(ds.data_vars)
    elif isinstance(var_names, str):
        var_names = [var_names]
    elif not isinstance(var_names, Sequence):
        var_names = list(var_names)
    if len(var_names) == 0:
        raise ValueError("no variables selected")
    out = {}
    for name in var_names:
        if name in ds.data_vars:
            da = ds[name]
        elif stats is not None and name in stats.data_vars:
            da = stats[name]
        else:
            where = f"{group!r}" + (" or 'sample_stats'" if stats is not None else "")
            raise ValueError(f"variable {name!r} not found in group {where}")
        missing = [d for d in _SAMPLE_DIMS if d not in da.dims]
        if missing:
            raise ValueError(f"variable {name!r} has dims {da.dims}, missing {missing}")
        if da.sizes["draw"] < 3:
            raise ValueError(
                f"variable {name!r} has {da.sizes['draw']} draws; at least 3 are needed"
            )
        out[name] = da.transpose(*_SAMPLE_DIMS, ...)
    first = next(iter(out.values()))
    for name, da in out.items():
        for dim in _SAMPLE_DIMS:
            if not np.array_equal(da[dim].values, first[dim].values):
                raise ValueError(f"{dim!r} coordinates of {name!r} differ from the other variables")
    return out


def cusum(idata, var_names=None, group="posterior", center="mean"):
    r"""CUSUM paths :math:`S_t=\sum_{i\le t}(s_i-\hat\mu)` per chain (Brooks & Roberts 1998).

    Parameters
    ----------
    idata : xarray.DataTree or xarray.Dataset
        Output of ``pm.sample`` (groups ``posterior``, ``sample_stats``; variables with dims
        ``(chain, draw, ...)``), or a single Dataset with those dims.
    var_names : str or list of str, optional
        Variables to use; looked up in `group` first, then in ``sample_stats`` (e.g. a scalar
        sampler statistic such as ``"ibp_n_active"``).  Defaults to all variables of `group`.
    group : str, default "posterior"
    center : {"mean", "median"}, default "mean"
        :math:`\hat\mu`, computed per chain (and per element of non-sample dims).  With the mean,
        :math:`S_T=0`.

    Returns
    -------
    xarray.Dataset
        One float variable per name with the same dims and coords as the input
        (``chain, draw, ...``).  ``attrs["center"]`` records the centre.

    Raises
    ------
    ValueError
        Unknown variable name, missing ``chain``/``draw`` dims, or fewer than 3 draws.
    """
    if center not in _CENTERS:
        raise ValueError(f"center must be one of {_CENTERS}, got {center!r}")
    out = {}
    for name, da in _select(idata, var_names, group).items():
        da = da.astype(float)
        mu = da.median("draw") if center == "median" else da.mean("draw")
        path = (da - mu).cumsum("draw")
        path.attrs = {"long_name": f"CUSUM of {name}"}
        out[name] = path.transpose(*da.dims)
    ref = "Brooks & Roberts (1998); Doshi-Velez (2009, §5.3)"
    return xr.Dataset(out, attrs={"center": center, "reference": ref})


def hairiness(idata, var_names=None, group="posterior", center="median", kind="cusum", *,
              ties="random", seed=0, prob=0.95):
    r"""Running hairiness index per chain with its 95 % band (Brooks 1998).

    See :func:`hairiness_index` for the definition of :math:`D_t`, the band and the tie
    handling; the index is computed independently for every chain (and every element of a
    non-scalar variable).

    Parameters
    ----------
    idata : xarray.DataTree or xarray.Dataset
        Output of ``pm.sample``, or a Dataset with ``(chain, draw, ...)`` variables.
    var_names : str or list of str, optional
        Looked up in `group` first, then ``sample_stats`` (e.g. ``"ibp_n_active"``).
        Defaults to all variables of `group`.
    group : str, default "posterior"
    center : {"median", "mean"}, default "median"
    kind : {"cusum", "turning"}, default "cusum"
    ties : {"random", "zero"}, default "random"
    seed : int, numpy.random.Generator or None, default 0
        Tie-breaking randomness; one generator is used for the variables in the given order.
    prob : float, default 0.95

    Returns
    -------
    xarray.Dataset
        With ``m = T-1`` (cusum) or ``T-2`` (turning) and ``H = "hairiness_draw"``:

        * ``<var>`` — :math:`D_t`, dims ``(chain, H, ...)`` (the variable's other dims follow);
        * ``<var>_final`` — :math:`D_T` per chain, dims ``(chain, ...)``;
        * ``<var>_outside`` — bool, :math:`D_T` outside the band (evidence of poor mixing);
        * ``<var>_tie_frac`` — fraction of draws tied with the centre (cusum) or with the
          previous draw (turning); near 1 the index is uninformative;
        * ``hairiness_lower``, ``hairiness_upper`` — the band, dims ``(H,)``.

        Coordinates: ``chain``, the variables' own coords, ``H`` = the ``draw`` coordinate of
        the last draw entering :math:`D_t` (``draw[1:]`` or ``draw[2:]``), and the non-index
        coordinate ``hairiness_t`` = number of indicators :math:`t=1..m` on ``H``.
        ``attrs``: ``kind``, ``center``, ``ties``, ``prob``, ``null_mean`` (½ or ⅔).

    Raises
    ------
    ValueError
        Unknown variable name or option, missing ``chain``/``draw`` dims, fewer than 3 draws,
        non-finite draws.
    """
    _validate(center, kind, ties)
    rng = np.random.default_rng(seed)
    sel = _select(idata, var_names, group)
    lag = 1 if kind == "cusum" else 2
    draw = next(iter(sel.values()))["draw"].values
    m = len(draw) - lag
    coords = {HAIR_DIM: draw[lag:], "hairiness_t": (HAIR_DIM, np.arange(1, m + 1))}
    out = {}
    lower = upper = None
    for name, da in sel.items():
        other = [d for d in da.dims if d not in _SAMPLE_DIMS]
        arr = np.moveaxis(da.values, 1, -1)  # (chain, *other, draw)
        D, lower, upper, tie_frac = _hairiness_core(arr, center, kind, ties, rng, prob)
        var_coords = {k: v for k, v in da.coords.items() if "draw" not in v.dims}
        Dda = xr.DataArray(np.moveaxis(D, -1, 1), dims=("chain", HAIR_DIM, *other),
                           coords={**var_coords, **coords})
        final = D[..., -1]
        out[name] = Dda
        out[f"{name}_final"] = xr.DataArray(final, dims=("chain", *other), coords=var_coords)
        out[f"{name}_outside"] = xr.DataArray((final < lower[-1]) | (final > upper[-1]),
                                              dims=("chain", *other), coords=var_coords)
        out[f"{name}_tie_frac"] = xr.DataArray(tie_frac, dims=("chain", *other),
                                               coords=var_coords)
    out["hairiness_lower"] = xr.DataArray(lower, dims=(HAIR_DIM,), coords=coords)
    out["hairiness_upper"] = xr.DataArray(upper, dims=(HAIR_DIM,), coords=coords)
    attrs = {"kind": kind, "center": center, "ties": ties, "prob": prob,
             "null_mean": 0.5 if kind == "cusum" else 2.0 / 3.0,
             "reference": "Brooks (1998); Brooks & Roberts (1998); Doshi-Velez (2009, §5.3)"}
    return xr.Dataset(out, attrs=attrs)
