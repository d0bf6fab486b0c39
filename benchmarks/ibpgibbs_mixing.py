"""Mixing of pmi.IBPGibbs (uncollapsed, any likelihood) with and without its mode-crossing moves.

Model: the digits example (``examples/digits.py``): ``N`` binarised scikit-learn digits (64
pixels), ``alpha ~ Gamma(2, 1)``, ``Z ~ pmi.IBP(alpha)`` with ``K_max = 32`` (``--k-max``),
``A ~ Normal(0, 2)``, ``b ~ Normal(-1, 2)``, ``X ~ Bernoulli(logit_p = Z @ A + b)``; ``Z`` by
``pmi.IBPGibbs`` (``split_merge`` = 0 or the default 5 split–merge proposals per sweep;
``combination_moves`` = 0 or the default 5 dissolve / compose proposals; ``feature_moves`` = 0 or
the default 3 birth / death proposals of a feature with its row of ``A``, for features of one
row or of up to ``feature_rows`` = 10 rows), everything else by
NUTS.  Every chain
starts from its own random ``Z`` (half of the slots in use, 30 % of the rows each).

Reported per setting: R-hat and bulk ESS (ArviZ) of K+ (``ibp_n_active``) and of the log
likelihood (``ibp_log_lik``) over the kept draws, the accepted split–merge and
dissolve / compose and feature birth / death proposals per iteration, and the wall time of
``pm.sample`` (``cores=2``: two chains at a time).

    python -m benchmarks.ibpgibbs_mixing [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._mixing_stats import ess_bulk, rhat

COLS = ["split_merge", "combination_moves", "feature_moves", "feature_rows", "N", "K_max",
        "chains", "tune", "draws", "K_plus_mean", "K_plus_rhat", "K_plus_ess", "log_lik_rhat",
        "log_lik_ess", "sm_accepted_per_it", "cm_accepted_per_it", "fm_accepted_per_it",
        "wall_s"]


def run(n, k_max, chains, tune, draws, split_merge, combination_moves, feature_moves,
        feature_rows, seed):
    import pymc as pm
    from sklearn.datasets import load_digits

    import pymc_ibp as pmi

    digits = load_digits()
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(digits.data), size=n, replace=False)
    X = (digits.data[rows] > 7).astype("int64")
    d = X.shape[1]
    starts = []
    for _ in range(chains):
        z0 = np.zeros((n, k_max), dtype="int64")
        z0[:, : k_max // 2] = rng.random((n, k_max // 2)) < 0.3
        starts.append({"Z": z0})
    with pm.Model():
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 2.0, shape=(k_max, d))
        b = pm.Normal("b", -1.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=2,
                          step=[pmi.IBPGibbs([Z], split_merge=split_merge,
                                             combination_moves=combination_moves,
                                             feature_moves=feature_moves,
                                             feature_rows=feature_rows)],
                          initvals=starts,
                          random_seed=seed, compute_convergence_checks=False,
                          progressbar=False, var_names=["alpha"])
        wall = time.perf_counter() - t
    ss = idata["sample_stats"]
    kp = ss["ibp_n_active"].values
    ll = ss["ibp_log_lik"].values
    return {
        "split_merge": split_merge, "combination_moves": combination_moves,
        "feature_moves": feature_moves, "feature_rows": feature_rows, "N": n,
        "K_max": k_max, "chains": chains, "tune": tune,
        "draws": draws,
        "K_plus_mean": float(kp.mean()), "K_plus_rhat": rhat(kp), "K_plus_ess": ess_bulk(kp),
        "log_lik_rhat": rhat(ll), "log_lik_ess": ess_bulk(ll),
        "sm_accepted_per_it": float(ss["ibp_split_merge_accepted"].values.mean()),
        "cm_accepted_per_it": float(ss["ibp_combination_accepted"].values.mean()),
        "fm_accepted_per_it": float(ss["ibp_feature_move_accepted"].values.mean()),
        "wall_s": wall,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 100, 2 chains x (20 + 20)")
    ap.add_argument("--k-max", type=int, default=32, help="feature slots (default 32)")
    args = ap.parse_args()
    quiet()
    info = machine_info()
    if args.quick:
        cfg = dict(n=100, k_max=10, chains=2, tune=20, draws=20, seed=1)
    else:
        cfg = dict(n=300, k_max=args.k_max, chains=4, tune=150, draws=300, seed=2026)
    rows = []
    for sm, cm, fm, fr in ((0, 0, 0, 1), (5, 5, 0, 1), (5, 5, 3, 1), (5, 5, 3, 10)):
        rows.append(run(split_merge=sm, combination_moves=cm, feature_moves=fm,
                        feature_rows=fr, **cfg))
        print_table(rows[-1:], COLS)
    print()
    print_table(rows, COLS)
    notes = [
        "Digits (scikit-learn, pixels > 7), Bernoulli likelihood with logit Z @ A + b; Z by "
        "pmi.IBPGibbs, alpha / A / b by NUTS; cores=2; each chain from its own random Z.",
        "R-hat and bulk ESS (ArviZ) over the kept draws of all chains; sm_accepted_per_it = "
        "accepted split–merge moves per iteration (kept draws); cm_accepted_per_it = accepted "
        "dissolve / compose moves per iteration; fm_accepted_per_it = accepted birth / death "
        "moves of a feature with its parameters per iteration.",
        "Command: python -m benchmarks.ibpgibbs_mixing"
        + (" --quick" if args.quick else f" --k-max {args.k_max}"),
    ]
    write_results("ibpgibbs_mixing_quick" if args.quick else "ibpgibbs_mixing", rows, COLS,
                  "IBPGibbs mixing with and without its mode-crossing moves (digits)", notes, info)


if __name__ == "__main__":
    main()
