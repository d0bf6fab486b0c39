"""The offset of a Bernoulli-logit IBP model under pmi.PolyaGammaGibbs, with and without the
slice update of ``b`` given ``Z`` and ``A`` (``offset_sweeps``).

Given the Pólya-Gamma variables, the draws of an offset entry whose rows are (nearly) all
zeros or all ones move slowly (Johndrow et al. 2019); ``offset_sweeps = 1`` (the default)
adds one slice-sampling update of every entry of ``b`` under the exact likelihood after the
draw of ``(A, b)``.  Data: 300 binarised scikit-learn digits (64 pixels), ``K_max = 32``;
models: ``X ~ Bernoulli(logit_p = Z @ A + b)`` with ``b`` one offset per pixel (``per_pixel``,
shape ``(64,)``) or one per class and pixel (``per_class``, ``b[digit]`` of shape
``(10, 64)``), ``b ~ Normal(-1, 2)``, ``A ~ Normal(0, 2)``, ``alpha ~ Gamma(2, 1)``.

Reported per setting: wall time of ``pm.sample`` (``cores=2``: two chains at a time), the
bulk ESS of ``b``'s entries (median and 10 % quantile over the entries) and their R-hat
(median, max), and R-hat and bulk ESS of the log-likelihood and of the log joint.

    python -m benchmarks.logit_offsets [--quick] [--tune T --draws D] [--chain-seed S]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import digits

COLS = ["b", "offset_sweeps", "N", "K_max", "chains", "tune", "draws", "wall_s",
        "b_ess_median", "b_ess_q10", "b_rhat_median", "b_rhat_max", "log_lik_rhat",
        "log_lik_ess", "log_joint_mean", "log_joint_rhat", "log_joint_ess"]


def run(kind, sweeps, n, k_max, chains, tune, draws, seed):
    import arviz as az
    import pymc as pm

    import pymc_ibp as pmi

    X, digit = digits(n, 2026, labels=True)
    with pm.Model():
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 2.0, shape=(k_max, X.shape[1]))
        if kind == "per_class":
            b = pm.Normal("b", -1.0, 2.0, shape=(10, X.shape[1]))
            mu = Z @ A + b[digit]
        else:
            b = pm.Normal("b", -1.0, 2.0, shape=X.shape[1])
            mu = Z @ A + b
        pm.Bernoulli("X", logit_p=mu, observed=X)
        step = pmi.PolyaGammaGibbs(offset_sweeps=sweeps)
        t0 = time.perf_counter()
        idata = pm.sample(tune=tune, draws=draws, chains=chains, cores=2, step=[step],
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    stats = idata["sample_stats"]
    ll, lj = stats["ibp_log_lik"], stats["ibp_model_logp"]
    bv = idata["posterior"]["b"].values.reshape(chains, draws, -1)
    ess = np.array([float(az.ess(bv[:, :, j])) for j in range(bv.shape[-1])])
    rhat = np.array([float(az.rhat(bv[:, :, j])) for j in range(bv.shape[-1])])
    return {"b": kind, "offset_sweeps": sweeps, "N": n, "K_max": k_max, "chains": chains,
            "tune": tune, "draws": draws, "wall_s": wall, "b_ess_median": np.median(ess),
            "b_ess_q10": np.quantile(ess, 0.1), "b_rhat_median": np.median(rhat),
            "b_rhat_max": rhat.max(), "log_lik_rhat": float(az.rhat(ll)),
            "log_lik_ess": float(az.ess(ll)), "log_joint_mean": float(lj.mean()),
            "log_joint_rhat": float(az.rhat(lj)), "log_joint_ess": float(az.ess(lj))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 rows, 2 chains x (20 + 20)")
    ap.add_argument("--tune", type=int, default=200)
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--chain-seed", type=int, default=1)
    args = ap.parse_args()
    quiet()
    info = machine_info()
    n, chains, tune, draws = ((100, 2, 20, 20) if args.quick
                              else (300, 4, args.tune, args.draws))
    rows = []
    for kind in ["per_class", "per_pixel"]:
        for sweeps in [0, 1]:
            rows.append(run(kind, sweeps, n, 32, chains, tune, draws, args.chain_seed))
            print_table(rows[-1:], COLS)
    print()
    print_table(rows, COLS)
    command = ("python -m benchmarks.logit_offsets --quick" if args.quick else
               f"python -m benchmarks.logit_offsets --tune {tune} --draws {draws} "
               f"--chain-seed {args.chain_seed}")
    notes = [
        "Digits (scikit-learn, pixels > 7), X ~ Bernoulli(logit_p = Z @ A + b); b per pixel "
        "(64,) or per class and pixel, b[digit] (10, 64); Z, A, b by pmi.PolyaGammaGibbs("
        "offset_sweeps=0 or 1), alpha by IBPAlphaGibbs; cores=2, one chain seed.",
        "b_ess = bulk ESS of each entry of b (median, 10 % quantile over the entries); b_rhat "
        "= its R-hat (median, max); log_lik / log_joint = the ibp_log_lik / ibp_model_logp "
        "stats (R-hat, bulk ESS over all chains' kept draws).",
        f"Command: {command}",
    ]
    write_results("logit_offsets_quick" if args.quick else "logit_offsets", rows, COLS,
                  "PolyaGammaGibbs: the offset with and without its slice update", notes, info)


if __name__ == "__main__":
    main()
