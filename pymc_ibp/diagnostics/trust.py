"""Whether the chains of an IBP posterior can be trusted, in one line per problem.

PyMC's own convergence check computes R-hat per entry of ``Z`` and ``A``, which label
switching makes meaningless (see the docs page *Diagnostics*), and says nothing about the
failures that matter for latent feature models.  :func:`check_chains` looks at the
label-invariant quantities instead and reports:

* **chains that disagree**: the rank R-hat (Vehtari et al. 2021) of the log joint (or of the
  log-likelihood, or of ``K+``) above ``rhat_max``: the chains sit in different modes;
* **a binding truncation**: every one of the ``K_max`` slots in use in some draws, or every
  one of a CRP's ``l_max`` labels occupied, so the posterior is truncated;
* **duplicated features**: two columns of ``Z`` owned by exactly the same rows (a feature
  split in two, its weights shared out) in most of a chain's draws.

Each problem is one :class:`UntrustedChainsWarning` line that names what to do.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from pymc_ibp._stat_names import SEP
from pymc_ibp.diagnostics._idata import (
    _get_z,
    _k_plus,
    _posterior,
    _sample_stats,
    _scalar_stat,
)
from pymc_ibp.exceptions import UntrustedChainsWarning

__all__ = ["TrustIssue", "check_chains"]

#: the label-invariant quantities whose agreement between chains is checked, in order of
#: preference: the log joint of the collapsed steps, of the steps that keep ``A``, the
#: log-likelihood, then ``K+``
_AGREEMENT_STATS = ("ibp_log_joint", "ibp_model_logp", "ibp_log_lik", "ibp_n_active")
#: below this many draws per chain (PyMC's own limit for its R-hat check) R-hat is noisy, and
#: chains disagree only if their means are more than ``_SHORT_RUN_SDS`` within-chain standard
#: deviations apart
_SHORT_RUN = 100
_SHORT_RUN_SDS = 5.0
#: the draws per chain scanned for duplicated columns (evenly spaced over the chain's second
#: half)
_DUPLICATE_DRAWS = 100


class TrustIssue(NamedTuple):
    """One problem :func:`check_chains` found: its ``kind`` (``"disagree"``, ``"k_max"``,
    ``"l_max"`` or ``"duplicates"``), the chains it concerns, the measured ``value`` (the R-hat, the
    fraction of draws with every slot in use, the fraction of draws with duplicated columns)
    and the one-line ``message`` that says what to do."""

    kind: str
    chains: tuple[int, ...]
    value: float
    message: str


def _chain_labels(post):
    return [int(c) if np.issubdtype(np.asarray(c).dtype, np.integer) else c
            for c in post["chain"].values]


def _agreement(post, stats, Z, rhat_max):
    """The disagreement issue, if any: the first quantity of :data:`_AGREEMENT_STATS` found."""
    from arviz_stats.base import array_stats

    name, values = None, None
    for stat in _AGREEMENT_STATS:
        if stats is not None and stat in stats:
            name, values = stat, np.asarray(_scalar_stat(stats[stat]).values, dtype=float)
            break
    if values is None and Z is not None:
        name, values = "K+", np.asarray(_k_plus(Z).values, dtype=float)
    if values is None or values.shape[0] < 2 or values.shape[1] < 4:
        return None
    values = values[:, np.isfinite(values).all(axis=0)]
    if values.shape[1] < 4:
        return None
    means = values.mean(axis=1)
    with warnings.catch_warnings():  # a quantity constant in every chain: 0/0
        warnings.simplefilter("ignore", RuntimeWarning)
        r = float(array_stats.rhat(values, chain_axis=0, draw_axis=1))
    spread = float(means.max() - means.min())
    if not math.isfinite(r):  # constant within each chain: disagreement iff the means differ
        if spread == 0.0:
            return None
        r = math.inf
    if r <= rhat_max:
        return None
    if values.shape[1] < _SHORT_RUN:  # R-hat of a short run is noisy: only separate modes
        within = float(np.sqrt(values.var(axis=1, ddof=1).mean()))
        if spread <= _SHORT_RUN_SDS * within:
            return None
    labels = _chain_labels(post)
    lo, hi = labels[int(np.argmin(means))], labels[int(np.argmax(means))]
    unit = "" if name == "K+" else " nats"
    msg = (f"The chains disagree: R-hat of {name} is {r:.2f} (> {rhat_max}), their means "
           f"{spread:.4g}{unit} apart (chain {lo} lowest, chain {hi} highest), so they sit in "
           "different modes; do not report one chain: compare them with "
           "pmi.chain_summary(idata) and pmi.plot_features, and run more chains, longer.")
    return TrustIssue("disagree", tuple(labels), r, msg)


def _k_max(post, stats, Z, z_name, dim_name):
    """The binding-truncation issue, if any."""
    if Z is not None:
        k_max = Z.sizes[Z.dims[3]]
        full = np.asarray((_k_plus(Z) == k_max).values)
    elif stats is not None and "ibp_kmax_hit" in stats:
        full = np.asarray(_scalar_stat(stats["ibp_kmax_hit"]).values) > 0
        k_max = None
    else:
        return None
    frac = full.mean(axis=1)
    if not np.any(frac > 0):
        return None
    labels = _chain_labels(post)
    chains = tuple(labels[c] for c in np.flatnonzero(frac > 0))
    size = "K_max" if k_max is None else f"K_max = {k_max}"
    to = "" if k_max is None else f" to at least {2 * k_max}"
    where = (f"the length of its {dim_name!r} dim" if dim_name else
             "the last entry of its shape")
    suggested = _suggested_k_max(stats)
    if suggested:  # the step's probe with room for more features
        to = f" to at least {suggested}"
        where += "; the sampler's K_max probe suggests it, stat 'ibp_kmax_suggested'"
    msg = (f"{size} binds: every feature slot of {z_name!r} was in use in "
           f"{100 * float(frac.max()):.0f}% of the draws of chain(s) {list(chains)}, so the "
           f"posterior is truncated; raise K_max{to} ({where}) and re-run.")
    return TrustIssue("k_max", chains, float(frac.max()), msg)


def _suggested_k_max(stats):
    """The largest ``K_max`` the chains' probes suggested (the ``ibp_kmax_suggested`` stat of
    the linear-Gaussian steps, already this matrix's; 0: none ran)."""
    if stats is None or "ibp_kmax_suggested" not in stats:
        return 0
    return int(np.asarray(stats["ibp_kmax_suggested"].values).max(initial=0))


def _l_max(post, idata):
    """The binding-CRP-truncation issue, if any: every one of the ``l_max`` labels of a
    :class:`~pymc_ibp.CRP` (a DP mixture's, the DP-IBP's categories) occupied in some draws
    (the ``ibp_lmax_hit`` stat of :class:`~pymc_ibp.CRPGibbs`, one per CRP)."""
    stats = _sample_stats(idata)
    if stats is None:
        return None
    names = [v for v in stats.data_vars if v == "ibp_lmax_hit" or v.startswith(
        f"ibp_lmax_hit{SEP}")]
    if not names:
        return None
    frac, which = None, []
    for v in names:
        da = stats[v]
        extra = [d for d in da.dims if d not in ("chain", "draw")]
        hit = np.asarray((da.max(extra) if extra else da).values) > 0
        f = hit.mean(axis=1)
        if np.any(f > 0):
            which.append(v[len(f"ibp_lmax_hit{SEP}"):] if SEP in v else "")
            frac = f if frac is None else np.maximum(frac, f)
    if frac is None:
        return None
    labels = _chain_labels(post)
    chains = tuple(labels[c] for c in np.flatnonzero(frac > 0))
    of = f" of {', '.join(repr(w) for w in which if w)}" if any(which) else ""
    msg = (f"l_max binds: every label{of} was occupied in {100 * float(frac.max()):.0f}% of "
           f"the draws of chain(s) {list(chains)}, so the number of categories is truncated; "
           "raise l_max= (of pmi.CRP, pmi.dp_ibp or pmi.ibp_ibp), e.g. to twice its value, "
           "and re-run.")
    return TrustIssue("l_max", chains, float(frac.max()), msg)


def _duplicates(post, Z, z_name, min_rows):
    """The duplicated-features issue, if any: per chain, the fraction of (up to
    :data:`_DUPLICATE_DRAWS`) draws of its second half in which two columns of ``Z`` with at
    least ``min_rows`` owners are identical."""
    if Z is None:
        return None
    n_chains, n_draws, n = Z.shape[0], Z.shape[1], Z.shape[2]
    if n_draws == 0:
        return None
    thr = max(2, int(min_rows) if min_rows is not None else math.ceil(0.02 * n))
    idx = np.unique(np.linspace(n_draws // 2, n_draws - 1, min(_DUPLICATE_DRAWS, n_draws),
                                dtype=np.int64))
    frac = np.zeros(n_chains)
    sizes = np.zeros(n_chains, dtype=np.int64)
    for c in range(n_chains):
        block = np.asarray(Z.isel({Z.dims[0]: c, Z.dims[1]: idx}).values) != 0
        hits = 0
        for t in range(block.shape[0]):
            z = block[t]
            m = z.sum(axis=0)
            cols = np.flatnonzero(m >= thr)
            if cols.size < 2:
                continue
            packed = np.packbits(z[:, cols].T, axis=1)
            _, first, counts = np.unique(packed, axis=0, return_index=True, return_counts=True)
            if np.any(counts > 1):
                hits += 1
                sizes[c] = max(sizes[c], int(m[cols[first[counts > 1]]].max()))
        frac[c] = hits / block.shape[0]
    bad = np.flatnonzero(frac >= 0.5)
    if bad.size == 0:
        return None
    labels = _chain_labels(post)
    chains = tuple(labels[c] for c in bad)
    msg = (f"Duplicated features: in {100 * float(frac[bad].max()):.0f}% of the draws of "
           f"chain(s) {list(chains)} two columns of {z_name!r} are owned by the same rows (up "
           f"to {int(sizes[bad].max())} rows), one feature split in two with its weights shared "
           "out; the chain did not merge them: count them as one feature, and run more chains, "
           "longer, to see whether the posterior holds the split.")
    return TrustIssue("duplicates", chains, float(frac[bad].max()), msg)


def check_chains(idata, z_name: str = "Z", *, rhat_max: float = 1.05,
                 min_rows: int | None = None, warn: bool = True) -> list[TrustIssue]:
    """Whether the chains of an IBP posterior can be trusted: one line per problem.

    Checks, on label-invariant quantities only:

    1. **agreement**: the rank R-hat of the log joint (``ibp_log_joint`` or
       ``ibp_model_logp``; else ``ibp_log_lik``; else ``K+``) across chains is at most
       ``rhat_max`` (chains constant within themselves agree only if they are equal); with
       fewer than 100 draws per chain, where R-hat is noisy, the chains' means must also be
       more than 5 within-chain standard deviations apart;
    2. **truncation**: no draw uses every one of the ``K_max`` slots of ``z_name`` (from
       ``Z``, or the ``ibp_kmax_hit`` stat when ``Z`` is not in the trace), and no draw
       has every ``l_max`` label of a CRP occupied (the ``ibp_lmax_hit`` stat);
    3. **duplicated features**: in less than half of a chain's draws (up to 100, from its
       second half) two columns of ``Z`` with at least ``min_rows`` owners (default 2% of
       the rows, at least 2) are identical.

    Parameters
    ----------
    idata : xarray.DataTree
        Output of ``pm.sample``.
    z_name : str, default "Z"
        The binary feature-assignment matrix.
    rhat_max : float, default 1.05
        The largest R-hat of the log joint that counts as agreement.
    min_rows : int, optional
        The fewest owners of a column checked for duplicates.
    warn : bool, default True
        Emit each problem as an :class:`~pymc_ibp.UntrustedChainsWarning`.

    Returns
    -------
    list of TrustIssue
        Empty when every check passes, and for the draws of a variational fit
        (:meth:`pymc_ibp.inference.VariationalResult.sample`: independent draws from ``q``,
        whose every slot is in use somewhere).
    """
    post = _posterior(idata)
    if str(post.attrs.get("inference", "")).startswith("pymc_ibp.fit_variational"):
        return []  # independent draws from a variational q: nothing to agree or to mix
    stats = _sample_stats(idata, z_name)
    Z = _get_z(post, z_name) if z_name in post else None  # checked once
    dims = Z.dims if Z is not None else ()
    dim_name = dims[3] if len(dims) == 4 and not dims[3].startswith(f"{z_name}_dim_") else None
    issues = [issue for issue in (_agreement(post, stats, Z, rhat_max),
                                  _k_max(post, stats, Z, z_name, dim_name),
                                  _l_max(post, idata),
                                  _duplicates(post, Z, z_name, min_rows)) if issue is not None]
    if warn:
        for issue in issues:
            warnings.warn(issue.message, UntrustedChainsWarning, stacklevel=2)
    return issues
