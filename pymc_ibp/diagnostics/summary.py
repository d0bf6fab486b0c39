"""Label-invariant posterior summary for IBP latent feature models.

The feature slots of an IBP posterior are exchangeable: the likelihood and the prior are
unchanged when the columns of ``Z`` (and the rows of ``A``) are permuted, so a sampler visits all
``K!`` relabellings of a mode, and different chains settle on different labellings ("label
switching").  Per-slot statistics such as the R-hat of ``A[k, d]`` or ``Z[n, k]`` are then
meaningless (R-hats of 1.6–2.4 for ``A`` and up to 1e16 for ``Z`` have been seen on a perfectly
mixed run; see the docs page *Diagnostics*).  :func:`summary` therefore reports ArviZ's summary
(mean, sd, interval, ESS bulk/tail, R-hat, MCSE) only for quantities that do not depend on the
labelling:

* the sampler's scalar statistics ``ibp_n_active`` (the number of active features
  :math:`K_+`) and ``ibp_log_joint`` (:math:`\\log p(X, Z, \\ldots)`), when present;
* the scalar posterior variables (``alpha``, ``sigma_x``, ``sigma_a``, ...);
* the sorted feature sizes :math:`m_{(1)} \\ge m_{(2)} \\ge \\dots`, where
  :math:`m_k = \\sum_n z_{nk}` is the number of observations that own feature ``k``.

For per-feature summaries, relabel the draws first (:func:`pymc_ibp.diagnostics.relabel.relabel`)
and pass ``var_names=["A"]``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import xarray as xr

from pymc_ibp.diagnostics._idata import (
    _SAMPLE_DIMS,
    _get_z,
    _k_plus,
    _posterior,
    _sample_stats,
    _scalar_stat,
)
from pymc_ibp.diagnostics.trust import check_chains

__all__ = ["chain_summary", "feature_sizes", "sorted_feature_sizes", "summary"]

#: the label-invariant sample stats summarised by default (when present): K+, the log joint
#: (``ibp_log_joint``: the collapsed steps; ``ibp_model_logp``: the steps that keep A) and the
#: log-likelihood
DEFAULT_STATS = ("ibp_n_active", "ibp_log_joint", "ibp_model_logp", "ibp_log_lik")
#: name of the rank dimension of the sorted feature sizes (row labels ``m_sorted[0]``, ...)
RANK_DIM = "m_sorted_dim_0"


def feature_sizes(idata, z_name: str = "Z") -> xr.DataArray:
    """Feature sizes :math:`m_k = \\sum_n z_{nk}` per draw, shape (chain, draw, feature).

    The values depend on the labelling of the slots; see :func:`sorted_feature_sizes` for the
    label-invariant version.
    """
    Z = _get_z(_posterior(idata), z_name)
    return Z.sum(Z.dims[2]).rename("m")


def sorted_feature_sizes(idata, z_name: str = "Z", k: int | None = None) -> xr.DataArray:
    """Feature sizes sorted in decreasing order in every draw, shape (chain, draw, K).

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample`` (or a posterior Dataset) containing `z_name`.
    z_name : str, default "Z"
    k : int, optional
        Number of ranks to keep.  Default: the largest number of active features :math:`K_+`
        over all draws, so that every kept rank is non-zero in at least one draw.

    Returns
    -------
    xarray.DataArray
        ``m_sorted`` with dims (chain, draw, ``m_sorted_dim_0``); entry ``r`` is the
        ``r``-th largest column sum of Z, :math:`m_{(r+1)}`.  Invariant to permutations of the
        feature slots, so its R-hat/ESS are meaningful under label switching.
    """
    m = feature_sizes(idata, z_name).values
    m_sorted = -np.sort(-m, axis=-1)
    if k is None:
        k = int((m > 0).sum(axis=-1).max()) if m.size else 0
    m_sorted = m_sorted[..., :k]
    post = _posterior(idata)
    return xr.DataArray(
        m_sorted,
        dims=(*_SAMPLE_DIMS, RANK_DIM),
        coords={"chain": post["chain"].values, "draw": post["draw"].values,
                RANK_DIM: np.arange(m_sorted.shape[-1])},
        name="m_sorted",
    )


def _label_invariant(idata, var_names, z_name, stat_names, ranks=None,
                     ones=False) -> xr.Dataset:
    """The label-invariant quantities of :func:`summary` as (chain, draw) variables: the sample
    stats of ``stat_names`` (K+ from Z when absent), the scalar posterior variables (or
    ``var_names``), with ``ones`` the number of ones in Z (``n_ones``), and the sorted feature
    sizes ``m_sorted`` (``ranks`` of them; default every rank that is non-zero in some draw).
    A trace that holds no binary matrix at all (``Z`` left out, e.g. beside
    :class:`pymc_ibp.KeepEvery`) gives the sample stats alone, without ``n_ones`` and
    ``m_sorted``; one that holds it under another name than ``z_name`` is an error, as is a
    trace without the matrix and without the stats."""
    post = _posterior(idata)
    stats = _sample_stats(idata, z_name)
    left_out = (z_name not in post and stats is not None
                and any(n in stats for n in stat_names)
                and not any(da.ndim == 4 and da.dtype.kind in "biu"
                            for da in post.data_vars.values()))
    Z = None if left_out else _get_z(post, z_name)  # ValueError naming the variables

    out: dict[str, xr.DataArray] = {}
    for name in stat_names:
        if stats is not None and name in stats:
            out[name] = _scalar_stat(stats[name])
        elif name == "ibp_n_active" and Z is not None:
            out[name] = _k_plus(Z).astype(np.int64)

    if var_names is None:
        var_names = [
            v for v, da in post.data_vars.items() if v != z_name and da.dims == _SAMPLE_DIMS
        ]
    else:
        var_names = [var_names] if isinstance(var_names, str) else list(var_names)
        missing = [v for v in var_names if v not in post]
        if missing:
            raise ValueError(
                f"var_names {missing} not in the posterior (variables: {sorted(post.data_vars)})."
            )
    for v in var_names:
        if v in out:
            raise ValueError(f"posterior variable {v!r} clashes with the sample stat of that name.")
        out[v] = post[v]

    if ones and Z is not None:
        out["n_ones"] = Z.sum((Z.dims[2], Z.dims[3]))
    if Z is not None:
        m_sorted = sorted_feature_sizes(post, z_name, k=ranks)
        if m_sorted.sizes[RANK_DIM] > 0:
            out["m_sorted"] = m_sorted

    return xr.Dataset(
        {k: v.reset_coords(drop=True) for k, v in out.items()},
        coords={"chain": post["chain"].values, "draw": post["draw"].values},
    )


# ------------------------------------------------------------------------------------------------
# public
# ------------------------------------------------------------------------------------------------
def summary(
    idata,
    var_names: Sequence[str] | None = None,
    z_name: str = "Z",
    *,
    stat_names: Sequence[str] = DEFAULT_STATS,
    check: bool = True,
    **summary_kwargs,
):
    """ArviZ summary of the label-invariant quantities of an IBP posterior.

    Because IBP feature slots are exchangeable, samplers switch labels between draws and
    chains, and the per-slot R-hat/ESS of ``Z`` and ``A`` are meaningless.  This function
    collects quantities that are invariant to permutations of the slots and passes them to
    :func:`arviz.summary` (mean, sd, credible interval, ``ess_bulk``, ``ess_tail``, ``r_hat``,
    ``mcse_mean``, ``mcse_sd``):

    1. the sample stats in `stat_names` that exist in ``idata["sample_stats"]`` (by default
       ``ibp_n_active`` = :math:`K_+`, the log joint — ``ibp_log_joint`` of the collapsed
       steps such as :class:`~pymc_ibp.AcceleratedGibbs`, ``ibp_model_logp`` of the steps that
       keep ``A`` such as :class:`~pymc_ibp.IBPGibbs` and :class:`~pymc_ibp.PolyaGammaGibbs`
       — and the log-likelihood ``ibp_log_lik``; chains can agree on K+ and disagree on
       these, e.g. on the digits model of ``docs/step-methods/polya-gamma-gibbs.md``).  If
       ``ibp_n_active`` is requested but absent it is computed from Z as the number of
       non-empty columns;
    2. the posterior variables with no dims besides (chain, draw), e.g. ``alpha``,
       ``sigma_x``, ``sigma_a`` — or exactly `var_names` when given (these may have extra dims,
       e.g. ``var_names=["A"]`` after :func:`~pymc_ibp.diagnostics.relabel.relabel`);
    3. the sorted feature sizes ``m_sorted[r]`` :math:`= m_{(r+1)}`, the column sums of Z
       sorted in decreasing order within each draw, for ranks ``r < K`` with
       :math:`K = \\max_{\\text{draws}} K_+` (see :func:`sorted_feature_sizes`).

    A trace that leaves the binary matrix out (``pm.sample(var_names=...)``, e.g. beside
    :class:`pymc_ibp.KeepEvery`) gets 1 and 2 from every draw, without 3.

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample`` with a ``posterior`` group holding `z_name` with dims
        (chain, draw, obs, feature), or without any such binary matrix but with the IBP
        steps' sample stats.  A ``sample_stats`` group is optional when `z_name` is there.
    var_names : sequence of str, optional
        Posterior variables to include instead of the automatically selected scalars.
    z_name : str, default "Z"
        Name of the binary feature-assignment matrix.
    stat_names : sequence of str, optional
        Sample stats to include when present; default ``("ibp_n_active", "ibp_log_joint",
        "ibp_model_logp", "ibp_log_lik")``.
    check : bool, default True
        Also run :func:`~pymc_ibp.check_chains`: one
        :class:`~pymc_ibp.UntrustedChainsWarning` line for chains that disagree, a binding
        truncation or duplicated features.
    **summary_kwargs
        Passed to :func:`arviz.summary` (e.g. ``kind=``, ``ci_prob=``, ``round_to="none"``).

    Returns
    -------
    pandas.DataFrame
        ArviZ's summary table; rows are the sample stats (``ibp_n_active``, ``ibp_log_joint``
        or ``ibp_model_logp``, ``ibp_log_lik``, those present), the scalar variables, then
        ``m_sorted[0]``, ``m_sorted[1]``, ...

    Raises
    ------
    ValueError
        If `idata` has no posterior group, the posterior has no `z_name` (unless it holds
        no binary matrix at all and the sample stats are there), or a name in
        `var_names` is not in the posterior.

    See Also
    --------
    chain_summary : each chain's means of the same quantities, to see where chains that
        disagree (R-hat above 1.01) sit.

    Notes
    -----
    Quantities that are constant over all draws (e.g. :math:`K_+` in a short, stuck run) get
    ``r_hat = NaN``; ArviZ's 0/0 RuntimeWarnings for them are suppressed here.

    With ArviZ's default ``round_to="auto"`` the table displays each row's interval bounds to
    the precision of its ``sd`` (ArviZ's two significant figures would show a log joint near
    -29244 as ``-29000  -29000``); the numbers in the table are not rounded.
    """
    ds = _label_invariant(idata, var_names, z_name, stat_names)
    import arviz as az

    if check:
        check_chains(idata, z_name)

    with warnings.catch_warnings():
        # constant quantities: 0/0 in R-hat / MCSE (documented above)
        warnings.filterwarnings("ignore", message="invalid value encountered",
                                category=RuntimeWarning)
        warnings.filterwarnings("ignore", message="divide by zero encountered",
                                category=RuntimeWarning)
        warnings.filterwarnings("ignore", message="Degrees of freedom", category=RuntimeWarning)
        table = az.summary(ds, **summary_kwargs)
    _interval_digits(table)
    return table


def _interval_digits(table):
    """Show the credible-interval bounds of ArviZ's table to the ``sd``'s precision.

    With ``round_to="auto"`` ArviZ displays an interval's bounds to two significant figures, so
    a log joint near -29244 with ``sd`` 53 reads ``-29000  -29000``.  Here each row's bounds get
    the decimals that show its ``sd`` to two significant figures (``-29327  -29162``), never
    fewer digits than ArviZ's.  Only the display changes (ArviZ's ``SummaryDataFrame`` keeps
    the raw numbers); other ``round_to`` settings are left as they are.  A constant's bounds
    (``sd`` 0: e.g. a feature used by 394 rows in every draw, which ArviZ shows as ``390``, or
    a variational fit's point value, whose ``sd`` of about ``1e-16`` gave 18 digits) are shown
    as its mean is.
    """
    fmt = getattr(table, "_fmt_map", None)  # ArviZ's display strings (round_to="auto")
    if not isinstance(fmt, dict) or "sd" not in table.columns:
        return
    bounds = [c for c in table.columns if c.endswith(("_lb", "_ub")) and c in fmt]
    for idx, sd in table["sd"].items():
        mean = table.at[idx, "mean"] if "mean" in table.columns else np.nan
        constant = np.isfinite(sd) and sd <= 1e-12 * max(1.0, abs(mean))  # 0 up to rounding
        if constant and "mean" in fmt and idx in fmt["mean"]:  # its bounds are the mean,
            for col in bounds:  # shown as the mean is (ArviZ: 2 figures, or 18 at sd ~ 1e-16)
                if np.isclose(table.at[idx, col], table.at[idx, "mean"], rtol=1e-12, atol=0):
                    fmt[col][idx] = fmt["mean"][idx]
            continue
        if not (np.isfinite(sd) and sd > 0):
            continue
        decimals = max(0, 1 - int(np.floor(np.log10(sd))))
        for col in bounds:
            val = table.at[idx, col]
            try:
                err = abs(float(fmt[col][idx]) - val)
            except (KeyError, ValueError):
                continue
            if np.isfinite(val) and err > 0.5 * 10.0**-decimals:  # ArviZ's string is coarser
                shown = f"{val:.{decimals}f}"
                fmt[col][idx] = shown.rstrip("0").rstrip(".") if "." in shown else shown


def chain_summary(
    idata,
    var_names: Sequence[str] | None = None,
    z_name: str = "Z",
    *,
    stat_names: Sequence[str] = DEFAULT_STATS,
    ranks: int = 5,
):
    """Each chain's means of the label-invariant quantities of :func:`summary`: where chains
    that disagree sit.

    When :func:`summary` gives R-hats above 1.01 for the log joint, the log-likelihood or the
    sorted feature sizes, the chains are in different places, and this table says which chain
    is where: one row per chain, the mean over its draws of

    * the sample stats of `stat_names` (K+, the log joint ``ibp_log_joint`` or
      ``ibp_model_logp``, the log-likelihood ``ibp_log_lik``, those present; K+ from Z when
      the stat is absent), the scalar posterior variables (or exactly `var_names`);
    * ``n_ones``, the number of ones in Z, :math:`\\sum_{n,k} z_{nk}` (with Z in the trace);
    * the `ranks` largest sorted feature sizes ``m_sorted[r]`` :math:`= m_{(r+1)}`;
    * ``log_joint_gap``: the chain's mean log joint minus the highest chain's (nats; 0 for
      the highest chain), when the sample stats hold a log joint.

    Chains whose ``m_sorted`` differ by many rows hold different sets of features (different
    decompositions of the data), and their log joints say how well each decomposition
    explains the data. A chain's mean log joint is not its mode's posterior mass, so do not
    keep only the best chain as "the" posterior: run more chains (or longer) and compare,
    e.g. with :func:`pymc_ibp.plot_features` of each chain.

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample`` with `z_name` in its posterior (without it: the sample stats
        and scalar variables alone, as :func:`summary`).
    var_names, z_name, stat_names
        As in :func:`summary`.
    ranks : int, default 5
        How many of the largest feature sizes to report (at most ``K_max``).

    Returns
    -------
    pandas.DataFrame
        Indexed by chain; columns as listed above (a variable with more dimensions than
        (chain, draw), e.g. ``var_names=["A"]`` after :func:`~pymc_ibp.relabel`, gets a column
        per entry, ``A[k, d]``).

    Raises
    ------
    ValueError
        As :func:`summary`, and if `ranks` is not a positive integer.

    See Also
    --------
    summary : the same quantities over all chains, with R-hat and ESS.
    """
    import pandas as pd

    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer; got {ranks!r}.")
    ds = _label_invariant(idata, var_names, z_name, stat_names, ranks=int(ranks), ones=True)
    means = ds.mean("draw")
    columns = {}
    for name, da in means.data_vars.items():
        values = np.asarray(da.transpose("chain", ...).values, dtype=float)
        if values.ndim == 1:
            columns[name] = values
            continue
        for idx in np.ndindex(*values.shape[1:]):
            columns[f"{name}[{', '.join(str(i) for i in idx)}]"] = values[(slice(None), *idx)]
    table = pd.DataFrame(columns, index=pd.Index(means["chain"].values, name="chain"))
    joint = next((s for s in ("ibp_log_joint", "ibp_model_logp") if s in table), None)
    if joint is not None:
        table["log_joint_gap"] = table[joint] - table[joint].max()
    return table
