"""How many tempered replicas would the continuous digits need?  The README's linear-Gaussian
model on scikit-learn's digits as continuous pixels (1797 x 64, scaled to [0, 1] and
centred), ``sigma_x`` fixed (default 0.2) at ``--k-max`` (default 42, the K_max the step's
probe suggests there; ``results/digits_k_max.md``), ``pm.sample``'s steps.

Replica exchange between inverse temperatures ``β`` and ``β + Δβ`` swaps with mean
probability ``erfc(Δβ σ_E(β) / 2)`` when the log-likelihood ``E`` is about Gaussian with
standard deviation ``σ_E(β)`` at each (``log r = Δβ (E_hot - E_cold)`` ~
``N(-Δβ²σ²_E, 2Δβ²σ²_E)``).  For a Gaussian likelihood with a fixed ``σx``, ``σ_E(β)`` is
about ``σ_E(1) / β`` (the residuals' variance scales as ``1/β``), so a ladder with swap rate
``a`` is geometric with ratio ``1 - x_a / σ_E(1)`` (``erfc(x_a / 2) = a``) and needs
``log(1/β_min) σ_E(1) / x_a`` replicas to reach ``β_min``.  The script measures ``σ_E(1)``
(``ibp_log_lik``'s standard deviation within each chain, second half of the draws), the
spread of the chains' mean log joints (how far apart their modes are), and prints the
replicas needed for ``β_min`` = 0.9, 0.5 and 0.1 at a swap rate of 0.23.

    python -m benchmarks.tempering_ladder [--chains 2] [--tune 300] [--draws 300]

Writes ``results/tempering_ladder.{csv,md}``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model
from benchmarks.digits_k_max import digits

SWAP_RATE = 0.23


def _erfc_inverse(a):
    from scipy.special import erfcinv

    return float(erfcinv(a))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--k-max", type=int, default=42)
    parser.add_argument("--sigma-x", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    quiet()
    import pymc as pm

    info = machine_info()
    X = digits()
    n, d = X.shape
    with ibp_model(X, args.k_max, sigma_x=args.sigma_x):
        t = time.perf_counter()
        idata = pm.sample(tune=args.tune, draws=args.draws, chains=args.chains,
                          cores=min(args.chains, 2), random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t
    st = idata.sample_stats
    half = args.draws // 2
    ll = st.ibp_log_lik.values[:, half:]
    lj = st.ibp_log_joint.values[:, half:]
    sd = ll.std(axis=1, ddof=1)
    x_a = 2.0 * _erfc_inverse(SWAP_RATE)  # Δβ σ_E at the swap rate
    sigma_e = float(np.median(sd))
    rows = []
    for beta_min in (0.9, 0.5, 0.1):
        rows.append({
            "beta_min": beta_min,
            "sd_log_lik_per_chain": " ".join(f"{v:.0f}" for v in sd),
            "sd_pure_noise": f"{math.sqrt(n * d / 2):.0f}",
            "spread_log_joint": f"{lj.mean(axis=1).max() - lj.mean(axis=1).min():.0f}",
            "ratio": f"{1 - x_a / sigma_e:.4f}",
            "replicas": math.ceil(math.log(1 / beta_min) * sigma_e / x_a) + 1,
            "k_plus": " ".join(f"{v:.1f}" for v in st.ibp_n_active.values[:, half:].mean(1)),
            "wall_s": f"{wall:.0f}",
        })
    cols = list(rows[0])
    print_table(rows, cols)
    write_results("tempering_ladder", rows, cols,
                  "Replicas a tempered ladder would need on the continuous digits", [
                      f"README model, sigma_x = {args.sigma_x}, K_max = {args.k_max}, "
                      f"{args.chains} chains x ({args.tune} + {args.draws}), random_seed = "
                      f"{args.seed}; statistics over the second half of the draws",
                      "sd_log_lik_per_chain: ibp_log_lik's standard deviation within each "
                      "chain (σ_E at β = 1); sd_pure_noise: sqrt(N D / 2), that of a Gaussian "
                      "residual's log density; spread_log_joint: largest minus smallest chain "
                      f"mean; ratio: the geometric ladder's β ratio at swap rate {SWAP_RATE}; "
                      "replicas: rungs from β = 1 down to beta_min (each one accelerated "
                      "sweep per iteration)",
                      "python -m benchmarks.tempering_ladder",
                  ], info)


if __name__ == "__main__":
    main()
