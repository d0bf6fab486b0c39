"""What ``pmi.sample_smc`` costs against ``pm.sample`` for the same posterior: block images
with ``alpha`` and ``sigma_x`` free, 4 independent SMC runs against 4 chains of ``pm.sample``
(both on 2 cores), compared by wall time, the agreement of the runs' (chains') means of two
label-invariant quantities (``K+`` and ``sigma_x``), and an effective sample size per second
from that agreement: ``ESS = posterior variance / variance of the run means`` per run, times
the runs.  SMC also gives the log evidence, and thermodynamic integration over the same
temperatures as a check of it.

Run from the repository root (about 5 minutes on 2 cores; nothing else running)::

    python -m benchmarks.smc_vs_sample [--rows 30] [--particles 200] [--draws 1000]
    python -m benchmarks.smc_vs_sample --readme --rows 1000 --k-max 20 --runs 2

Writes ``results/smc_vs_sample.{csv,md}``; ``--readme`` (the README's model: ``sigma_a ~
HalfNormal(2)`` free as well) writes ``results/smc_vs_sample_readme.{csv,md}``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_ibp as pmi
from benchmarks._machine import machine_info, print_table, write_results


def model(X, k_max, readme=False):
    with pm.Model() as m:
        Z = pmi.IBP("Z", pm.Gamma("alpha", 1.0, 1.0), shape=(X.shape[0], k_max))
        sigma_a = pm.HalfNormal("sigma_a", 2.0) if readme else 1.0
        A = pm.Normal("A", 0.0, sigma_a, shape=(k_max, X.shape[1]))
        pm.Normal("X", Z @ A, pm.HalfNormal("sigma_x", 1.0), observed=X)
    return m


def agreement(name, run_values):
    """Pooled mean, sd of the run means, and the between-run ESS of one quantity
    (``runs x draws``)."""
    v = np.asarray(run_values, dtype=float)
    means = v.mean(axis=1)
    var_post = v.var()
    between = means.var(ddof=1)
    ess = v.shape[0] * var_post / between if between > 0 else float("inf")
    return {f"{name}_mean": round(float(v.mean()), 4),
            f"{name}_sd_of_run_means": round(float(np.sqrt(between)), 4),
            f"{name}_ess": round(float(ess), 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--particles", type=int, default=200)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=4, help="SMC runs and pm.sample chains")
    parser.add_argument("--readme", action="store_true",
                        help="the README's model (sigma_a free too)")
    args = parser.parse_args()
    runs = args.runs
    info = machine_info()
    X = pmi.datasets.block_images(args.rows, noise=0.5, seed=args.seed).X
    out = []
    warnings.simplefilter("ignore", pmi.TruncationWarning)
    # warm the compiled kernels so neither method pays numba's cold start
    pmi.sample_smc(model(X, args.k_max, args.readme), draws=20, chains=1, random_seed=0)
    with model(X, args.k_max, args.readme):
        pm.sample(tune=20, draws=20, chains=1, progressbar=False, random_seed=0,
                  compute_convergence_checks=False)

    t = time.perf_counter()
    smc = pmi.sample_smc(model(X, args.k_max, args.readme), draws=args.particles,
                         chains=runs, cores=2, random_seed=args.seed)
    wall = time.perf_counter() - t
    post = smc["posterior"]
    kplus = (post["Z"].values.sum(axis=2) > 0).sum(axis=-1)
    row = {"method": f"pmi.sample_smc, {runs} x {args.particles} particles",
           "wall_s": round(wall, 1)}
    row.update(agreement("k_plus", kplus))
    row.update(agreement("sigma_x", post["sigma_x"].values))
    logz = smc["sample_stats"]["log_marginal_likelihood"].values
    row["log_evidence"] = f"{logz.mean():.1f} ± {logz.std(ddof=1) / np.sqrt(runs):.1f}"
    row["log_evidence_runs"] = " ".join(f"{v:.1f}" for v in logz)
    ti = smc["sample_stats"]["log_marginal_likelihood_ti"].values
    row["log_evidence_ti"] = f"{ti.mean():.1f} ± {ti.std(ddof=1) / np.sqrt(runs):.1f}"
    row["stages"] = int(np.isfinite(smc["sample_stats"]["beta"].values).sum(axis=1).mean())
    out.append(row)

    t = time.perf_counter()
    with model(X, args.k_max, args.readme):
        idata = pm.sample(tune=args.draws, draws=args.draws, chains=runs, cores=2,
                          progressbar=False, random_seed=args.seed,
                          compute_convergence_checks=False)
    wall = time.perf_counter() - t
    post = idata["posterior"]
    kplus = (post["Z"].values.sum(axis=2) > 0).sum(axis=-1)
    row = {"method": f"pm.sample, {runs} x ({args.draws} + {args.draws})",
           "wall_s": round(wall, 1)}
    row.update(agreement("k_plus", kplus))
    row.update(agreement("sigma_x", post["sigma_x"].values))
    row["log_evidence"] = row["log_evidence_ti"] = row["log_evidence_runs"] = "—"
    row["stages"] = "—"
    out.append(row)
    for r in out:
        for q in ("k_plus", "sigma_x"):
            r[f"{q}_ess_per_s"] = round(r[f"{q}_ess"] / r["wall_s"], 2)
    cols = list(out[0])
    print_table(out, cols)
    free = "alpha, sigma_a and sigma_x" if args.readme else "alpha and sigma_x"
    write_results(
        "smc_vs_sample_readme" if args.readme else "smc_vs_sample", out, cols,
        f"pmi.sample_smc against pm.sample: {args.rows} block images, K_max = {args.k_max}, "
        f"{free} free",
        [f"command: python -m benchmarks.smc_vs_sample --rows {args.rows} --k-max "
         f"{args.k_max} --particles {args.particles} --draws {args.draws} --seed {args.seed} "
         f"--runs {runs}{' --readme' if args.readme else ''}",
         "both on 2 cores after a warm-up run (numba compiled); SMC chains are independent "
         f"runs, pm.sample chains its {runs} chains",
         "log_evidence: the SMC estimate, mean ± standard error over the runs; "
         "log_evidence_ti: thermodynamic integration over the same runs' temperatures",
         f"*_sd_of_run_means: the spread of the {runs} runs' (chains') means; *_ess: "
         f"posterior variance / variance of the run means, times {runs} (an ESS that counts "
         "disagreement between runs)"], info)


if __name__ == "__main__":
    main()
