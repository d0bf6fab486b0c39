"""What the generic kernel of ``pmi.sample_smc`` (Metropolis-within-Gibbs on the model's own
density, for the models without the linear-Gaussian pattern) costs and reaches: a tiny DP-IBP
(the test's size) and DP-IBPs and IBPs of block images of growing size, against the
accelerated kernel on the same IBP data.  Each row: 2 independent runs; wall time, stages,
the log evidence (mean ± standard error over the runs), each run's mean K+ and whether the
runs' disagreement was flagged (``UntrustedChainsWarning``).

Run from the repository root (about 6 minutes on 2 cores; nothing else running)::

    python -m benchmarks.smc_generic [--particles 100] [--rows 20 50]

Writes ``results/smc_generic.{csv,md}``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_ibp as pmi
from benchmarks._machine import machine_info, print_table, write_results


def dp_ibp(X, k_max, l_max):
    with pm.Model() as m:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=l_max, shape=(X.shape[0], k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, X.shape[1]))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    return m


def ibp(X, k_max):
    with pm.Model() as m:
        Z = pmi.IBP("Z", 1.0, shape=(X.shape[0], k_max))
        A = pm.Normal("A", 0.0, 1.0, shape=(k_max, X.shape[1]))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    return m


def run(name, model, kernel, particles, truth, seed):
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pmi.sample_smc(model, draws=particles, chains=2, cores=2, kernel=kernel,
                               random_seed=seed)
    wall = time.perf_counter() - t
    st = idata["sample_stats"]
    logz = st["log_marginal_likelihood"].values
    Z = idata["posterior"]["Z"].values
    k_plus = (Z.sum(axis=2) > 0).sum(axis=-1).mean(axis=1)
    return {"model": name, "kernel": kernel, "particles": particles, "wall_s": round(wall, 1),
            "stages": int((~np.isnan(st["beta"].values)).sum(axis=1).max()),
            "log_evidence": f"{logz.mean():.2f} ± {logz.std(ddof=1) / np.sqrt(2):.2f}",
            "k_plus_runs": " / ".join(f"{k:.2f}" for k in k_plus), "k_plus_truth": truth,
            "runs_disagree": any("runs disagree" in str(w.message) for w in caught)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--rows", type=int, nargs="+", default=[20, 50])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    info = machine_info()
    rng = np.random.default_rng(0)
    tiny = rng.normal(size=(3, 2))
    # warm-up (compilation) outside the timings
    pmi.sample_smc(dp_ibp(tiny, 2, 2), draws=20, chains=2, cores=2, random_seed=0)
    out = [run("DP-IBP, N = 3, D = 2, K_max = 2, l_max = 2", dp_ibp(tiny, 2, 2), "auto",
               300, "—", args.seed)]
    for n in args.rows:
        dc = pmi.datasets.block_combinations(n, noise=0.5, seed=7)
        out.append(run(f"DP-IBP, block_combinations({n}), K_max = 6, l_max = 6",
                       dp_ibp(dc.X, 6, 6), "auto", args.particles, 4, args.seed))
        bi = pmi.datasets.block_images(n, noise=0.5, seed=7)
        for kernel in ("accelerated", "gibbs"):
            out.append(run(f"IBP, block_images({n}), K_max = 6", ibp(bi.X, 6), kernel,
                           args.particles, 4, args.seed))
    cols = list(out[0])
    print_table(out, cols)
    write_results(
        "smc_generic", out, cols,
        "pmi.sample_smc's generic kernel (Metropolis-within-Gibbs on the model's density) "
        "against the accelerated one",
        [f"command: python -m benchmarks.smc_generic --particles {args.particles} --rows "
         f"{' '.join(map(str, args.rows))} --seed {args.seed}",
         "2 independent runs per row on 2 cores, after a warm-up run; sigma_x = 0.5, alpha = 1 "
         "(and alpha_c = 1) fixed; kernel auto takes the generic kernel for the DP-IBP",
         "log_evidence: mean ± standard error over the 2 runs; k_plus_runs: each run's mean "
         "K+ over its final particles; runs_disagree: the UntrustedChainsWarning was given"],
        info)


if __name__ == "__main__":
    main()
