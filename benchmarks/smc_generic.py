"""What the generic kernel of ``pmi.sample_smc`` (Metropolis-within-Gibbs on the model's own
density, ``A`` integrated out where the likelihood allows; for the models without the
linear-Gaussian IBP pattern) costs and reaches: a tiny DP-IBP (the test's size), IBPs of
planted data of growing size against the accelerated kernel on the same data (4 runs of 200
particles), and a DP-IBP and an IBP of block images (2 runs of ``--particles``).  Each row:
wall time, stages, the log evidence (mean ± standard error over the runs, and the runs'
range), each run's mean K+ and whether a warning was given (runs that disagree, or a model
beyond the generic kernel's checked size).

Run from the repository root (about 10 minutes on 2 cores; nothing else running)::

    python -m benchmarks.smc_generic [--particles 100] [--rows 20]

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


def planted(n, d, seed):
    """``n`` rows of two planted features (``N(0, 1.5²)`` entries), noise 0.5."""
    rng = np.random.default_rng(seed)
    Z = (rng.random((n, 2)) < 0.5).astype(int)
    return Z @ rng.normal(0.0, 1.5, (2, d)) + 0.5 * rng.normal(size=(n, d))


def run(name, model, kernel, particles, truth, seed, runs=2):
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pmi.sample_smc(model, draws=particles, chains=runs, cores=2, kernel=kernel,
                               random_seed=seed)
    wall = time.perf_counter() - t
    st = idata["sample_stats"]
    logz = st["log_marginal_likelihood"].values
    Z = idata["posterior"]["Z"].values
    k_plus = (Z.sum(axis=2) > 0).sum(axis=-1).mean(axis=1)
    return {"model": name, "kernel": kernel, "particles": particles, "wall_s": round(wall, 1),
            "stages": int((~np.isnan(st["beta"].values)).sum(axis=1).max()),
            "log_evidence": f"{logz.mean():.2f} ± {logz.std(ddof=1) / np.sqrt(runs):.2f}",
            "runs_range": f"{logz.min():.2f} .. {logz.max():.2f}",
            "k_plus_runs": " / ".join(f"{k:.2f}" for k in k_plus), "k_plus_truth": truth,
            "warned": "; ".join(sorted({"runs disagree" if "runs disagree" in str(w.message)
                                        else "size" for w in caught
                                        if issubclass(w.category,
                                                      pmi.UntrustedChainsWarning)})) or "-"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--rows", type=int, nargs="+", default=[20])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    info = machine_info()
    rng = np.random.default_rng(0)
    tiny = rng.normal(size=(3, 2))
    # warm-up (compilation) outside the timings
    pmi.sample_smc(dp_ibp(tiny, 2, 2), draws=20, chains=2, cores=2, random_seed=0)
    out = [run("DP-IBP, N = 3, D = 2, K_max = 2, l_max = 2", dp_ibp(tiny, 2, 2), "auto",
               300, "—", args.seed)]
    for n, d, k in [(6, 4, 3), (10, 6, 4), (10, 12, 4)]:
        X = planted(n, d, args.seed)
        for kernel in ("accelerated", "gibbs"):
            out.append(run(f"IBP, planted {n} x {d}, K_max = {k}", ibp(X, k), kernel, 200, 2,
                           args.seed, runs=4))
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
         "independent runs on 2 cores (4 of 200 particles for the planted rows, 2 of "
         "--particles for the block images), after a warm-up run; sigma_x = 0.5, alpha = 1 "
         "(and alpha_c = 1) fixed; kernel auto takes the generic kernel for the DP-IBP; the "
         "generic kernel integrates A out on all of these models",
         "log_evidence: mean ± standard error over the runs; k_plus_runs: each run's mean "
         "K+ over its final particles; warned: the UntrustedChainsWarnings given (runs that "
         "disagree; a model beyond the generic kernel's checked size)"],
        info)


if __name__ == "__main__":
    main()
