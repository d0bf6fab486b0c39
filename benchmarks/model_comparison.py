"""Model comparison on scikit-learn's wine data (178 x 13, standardised): the IBP, a
Dirichlet-process mixture (CRP), the DP-IBP and a finite Gaussian factor model, by
``pmi.compare_models`` (5-fold held-out entries; the log evidence where ``pmi.sample_smc``
applies), next to PSIS-loo on the full data (``az.loo``, one entry left out at a time) and its
share of Pareto k above 0.7.

Run from the repository root (about 30 minutes on 2 cores)::

    python -m benchmarks.model_comparison [--seed 1] [--folds 5] [--draws 500] [--smc-draws 500]

Writes ``results/model_comparison.{csv,md}``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_ibp as pmi
from benchmarks._machine import machine_info, print_table, write_results


def wine():
    from sklearn.datasets import load_wine

    X = load_wine().data
    return (X - X.mean(axis=0)) / X.std(axis=0)


def ibp(X, k_max=40):
    n, d = X.shape
    with pm.Model() as m:
        Z = pmi.IBP("Z", pm.Gamma("alpha", 1.0, 1.0), shape=(n, k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, d))
        pm.Normal("X", Z @ A, pm.HalfNormal("sigma_x", 1.0), observed=X)
    return m


def dp_mixture(X, l_max=30):
    n, d = X.shape
    with pm.Model() as m:
        c = pmi.CRP("c", pm.Gamma("alpha", 1.0, 1.0), l_max=l_max, shape=n)
        mu = pm.Normal("mu", 0.0, 1.0, shape=(l_max, d))
        pm.Normal("X", mu[c], pm.HalfNormal("sigma_x", 1.0), observed=X)
    return m


def dp_ibp(X, l_max=60, k_max=24):
    n, d = X.shape
    with pm.Model() as m:
        Z = pmi.dp_ibp("Z", pm.Gamma("alpha_c", 1.0, 1.0), pm.Gamma("alpha_m", 1.0, 1.0),
                       l_max=l_max, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, d))
        pm.Normal("X", Z @ A, pm.HalfNormal("sigma_x", 1.0), observed=X)
    return m


def factor(X, k=3):
    n, d = X.shape
    with pm.Model() as m:
        F = pm.Normal("F", 0.0, 1.0, shape=(n, k))
        W = pm.Normal("W", 0.0, 1.0, shape=(k, d))
        pm.Normal("X", F @ W, pm.HalfNormal("sigma_x", 1.0), observed=X)
    return m


MODELS = {"IBP": ibp, "DP mixture": dp_mixture, "DP-IBP": dp_ibp, "factor model, K = 3": factor}


def psis_loo(builder, X, sample_kwargs, seed):
    """elpd_loo per entry and the share of Pareto k above 0.7, from one fit to all of X."""
    with builder(X):
        idata = pm.sample(**sample_kwargs, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
        pm.compute_log_likelihood(idata, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # az.loo warns about the very k values counted here
        loo = az.loo(idata, var_name="X", pointwise=True)
    k = np.asarray(loo.pareto_k).ravel()
    return float(loo.elpd) / X.size, float(np.mean(k > 0.7))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--smc-draws", type=int, default=500)
    args = parser.parse_args()
    info = machine_info()
    X = wine()
    kw = {"tune": args.draws, "draws": args.draws, "chains": 4, "cores": 2}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pmi.TruncationWarning)  # reported in the table
        table = pmi.compare_models(MODELS, X, folds=args.folds, random_seed=args.seed,
                                   sample_kwargs=kw, smc_kwargs={"draws": args.smc_draws})
    wall = time.perf_counter() - t0
    out = []
    for name, row in table.iterrows():
        loo_entry, share = psis_loo(MODELS[name], X, kw, args.seed)
        out.append({"model": name, "elpd_entry": round(row.elpd_entry, 4),
                    "se": round(row.se, 4), "d_elpd_entry": round(row.d_elpd_entry, 4),
                    "dse": round(row.dse, 4),
                    "log_evidence": round(row.log_evidence, 1),
                    "log_evidence_se": round(row.log_evidence_se, 2),
                    "loo_elpd_entry": round(loo_entry, 4), "loo_k_above_0.7": round(share, 3),
                    "max_rhat": round(row.max_rhat, 3), "truncated": round(row.truncated, 3),
                    "note": row.note.replace(" (attrs['evidence_errors'])", "")})
    cols = list(out[0])
    print_table(out, cols)
    write_results(
        "model_comparison", out, cols,
        "Four models of the wine data (178 x 13, standardised): k-fold held-out entries, "
        "log evidence, PSIS-loo",
        [f"command: python -m benchmarks.model_comparison --seed {args.seed} --folds "
         f"{args.folds} --draws {args.draws} --smc-draws {args.smc_draws}",
         f"pm.sample: {args.draws} tuning + {args.draws} draws, 4 chains, 2 cores per fit; "
         f"compare_models wall time {wall:.0f} s",
         "elpd_entry: mean held-out log predictive density per entry (each entry held out "
         "once); d_elpd_entry, dse: difference from the best and its paired standard error",
         f"log_evidence: pmi.sample_smc, 4 runs of {args.smc_draws} particles (IBP only; NaN "
         "where it does not apply); log_evidence_se: the standard error over the runs",
         "loo_*: az.loo on a fit to all entries, one entry left out at a time; "
         "k > 0.7 marks an unreliable PSIS estimate"], info)


if __name__ == "__main__":
    main()
