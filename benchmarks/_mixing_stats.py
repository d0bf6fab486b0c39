"""Label-invariant statistics of sampler output: the collapsed log joint of a ``Z`` (the one
formula, :func:`pymc_ibp.kernels.log_joint_of`), traces of K+ / the log joint /
the hyperparameters per draw, ESS (ArviZ bulk and BDA-2) and R-hat.
"""

from __future__ import annotations

import math

import numpy as np


def collapsed_log_joint(Z, X, sigma_x, sigma_a, alpha, beta=1.0, prior=True, miss=None):
    """``log p(X | Z) + log P(Z)``: A integrated out (Griffiths & Ghahramani 2011, §5, with the
    trace of the exponent) and the truncated IBP
    pmf of :class:`pymc_ibp.IBP`; the same number as the ``ibp_log_joint`` stat.
    ``prior=False``: the collapsed log-likelihood ``log p(X | Z)`` alone.  ``miss`` (an
    ``N x D`` boolean mask): the likelihood of the other entries alone,
    :func:`pymc_ibp.kernels.observed_loglik`."""
    from pymc_ibp import kernels

    sx2, sa2 = float(sigma_x) ** 2, float(sigma_a) ** 2
    joint, ll = kernels.log_joint_of(Z, X, sx2, sa2, alpha, beta)
    if miss is not None:
        obs = kernels.observed_loglik(Z, X, miss, kernels.noise_blocks(sx2, sa2, X.shape[1]))
        joint, ll = joint - ll + obs, obs
    return float(joint if prior else ll)


def traces(idata, X):
    """Label-invariant traces of every draw, each ``(chains, draws)``: K+, the collapsed log
    joint and log-likelihood (:func:`collapsed_log_joint`, the same function for every sampler),
    alpha and the scales."""
    post = idata["posterior"]
    Z = post["Z"].values
    sx, sa, al = (post[v].values for v in ("sigma_x", "sigma_a", "alpha"))
    c, d = Z.shape[:2]
    kplus = (Z.sum(axis=2) > 0).sum(axis=-1)
    lj = np.empty((c, d))
    ll = np.empty((c, d))
    for i in range(c):
        for j in range(d):
            lj[i, j] = collapsed_log_joint(Z[i, j], X, sx[i, j], sa[i, j], al[i, j])
            ll[i, j] = collapsed_log_joint(Z[i, j], X, sx[i, j], sa[i, j], al[i, j],
                                           prior=False)
    return {"K_plus": kplus.astype(int), "log_joint": lj, "log_lik": ll,
            "sigma_x": np.asarray(sx, float), "alpha": np.asarray(al, float),
            "sigma_a": np.asarray(sa, float)}


def ess_bulk(x) -> float:
    """ArviZ bulk ESS of a (chains, draws) array; NaN when constant."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    if np.ptp(x) == 0:
        return float("nan")
    return float(az.ess(x, method="bulk"))


def ess_bda2(x) -> float:
    """BDA-2 (Gelman et al. 2003) ``n_eff = m n var+/B``, capped at ``m n``."""
    x = np.asarray(x, dtype=float)
    if np.ptp(x) == 0:
        return float("nan")
    m, n = x.shape
    means = x.mean(axis=1)
    B = n * means.var(ddof=1)
    W = x.var(axis=1, ddof=1).mean()
    var_plus = (n - 1) / n * W + B / n
    if B <= 0:
        return float(m * n)
    return float(min(m * n, m * n * var_plus / B))


def rhat(x) -> float:
    """``az.rhat`` over chains, nan for a constant statistic."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    if np.ptp(x) == 0:
        return float("nan")
    r = float(az.rhat(x))
    return r if math.isfinite(r) else float("nan")


def replicate_summary(rows, keys, stats):
    """Per setting (the distinct values of the columns ``keys``, in order of appearance):
    each statistic of ``stats`` (column -> decimals) as ``"median [min, max]"`` over its runs,
    with the number of runs."""
    out = []
    for setting in dict.fromkeys(tuple(r[k] for k in keys) for r in rows):
        runs = [r for r in rows if tuple(r[k] for k in keys) == setting]
        row = {**dict(zip(keys, setting, strict=True)), "runs": len(runs)}
        for c, dec in stats.items():
            v = np.array([r[c] for r in runs], dtype=float)
            row[c] = f"{np.median(v):.{dec}f} [{v.min():.{dec}f}, {v.max():.{dec}f}]"
        out.append(row)
    return out
