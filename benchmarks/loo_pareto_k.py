"""How often PSIS-loo's Pareto k flags the README model: ``az.loo`` leaving out one entry of
``X`` at a time, and leaving out whole rows (the entries of a row summed first).

Run from the repository root (about 4 minutes on 2 cores)::

    python -m benchmarks.loo_pareto_k [--seed 1]

Writes ``results/loo_pareto_k.{csv,md}``.
"""

from __future__ import annotations

import argparse
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_ibp as pmi
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    info = machine_info()
    data = pmi.datasets.block_images(1000, noise=0.5, seed=1)
    with ibp_model(data.X, 20):  # the README model
        idata = pm.sample(chains=2, cores=1, random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False)
        pm.compute_log_likelihood(idata, progressbar=False)
    ll = idata["log_likelihood"]["X"]
    rows_idata = idata.copy()
    rows_idata["log_likelihood"] = idata["log_likelihood"].to_dataset().assign(
        X=ll.sum(ll.dims[-1]))  # each row's entries summed: one row left out at a time
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # az.loo warns about the very k values counted here
        for left_out, tree in (("one entry", idata), ("one row", rows_idata)):
            k = np.asarray(az.loo(tree, var_name="X", pointwise=True).pareto_k).ravel()
            out.append({"left_out": left_out, "points": k.size,
                        "share_k_above_0.7": round(float(np.mean(k > 0.7)), 3),
                        "share_k_above_1": round(float(np.mean(k > 1.0)), 3)})
    cols = ["left_out", "points", "share_k_above_0.7", "share_k_above_1"]
    print_table(out, cols)
    write_results("loo_pareto_k", out, cols,
                  "PSIS-loo Pareto k on the README model (pm.sample defaults, 2 chains)",
                  [f"seed {args.seed}; command: python -m benchmarks.loo_pareto_k "
                   f"--seed {args.seed}",
                   "k > 0.7: the PSIS estimate of that point's left-out density is unreliable "
                   "(Vehtari et al. 2024)"], info)


if __name__ == "__main__":
    main()
