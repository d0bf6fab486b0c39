"""Samplers for a Bernoulli-logit IBP model side by side: pmi.PolyaGammaGibbs (what pm.sample
picks) against pmi.IBPGibbs with NUTS or with Pólya-Gamma draws for A and b.

Model: the digits example (``examples/digits.py``): ``N = 300`` binarised scikit-learn digits
(64 pixels), ``alpha ~ Gamma(2, 1)``, ``Z ~ pmi.IBP(alpha)`` with ``K_max = 32``,
``A ~ Normal(0, 2)``, ``b ~ Normal(-1, 2)``, ``X ~ Bernoulli(logit_p = Z @ A + b)``; 4 chains,
``cores=2``, alpha by IBPAlphaGibbs throughout.  Samplers:

* ``polya_gamma`` — ``pmi.PolyaGammaGibbs`` on Z, A and b (pm.sample's choice): Pólya-Gamma
  augmentation, Z with A and b integrated out, exact (A, b) draws, one sweep of Z given A
  (exact likelihood); surrogate start;
* ``polya_gamma_collapsed`` — the same without the sweep of Z given A
  (``feature_sweeps=0``);
* ``polya_gamma_no_offset_slice`` — the same without the slice update of b given A
  (``offset_sweeps=0``; not run by default);
* ``ibpgibbs_nuts`` — ``pmi.IBPGibbs`` on Z (uncollapsed, with its mode-crossing moves and
  surrogate start) and NUTS on A and b (pm.sample's choice before PolyaGammaGibbs existed);
* ``ibpgibbs_pg`` — ``pmi.IBPGibbs`` on Z and ``pmi.PolyaGammaGibbs`` on A and b only (what
  pm.sample assigns them next to an explicit IBPGibbs).

Reported: R-hat and bulk ESS (ArviZ) of K+, of the log-likelihood and of the log joint
(``ibp_model_logp``, the model's log density at each draw), the spread of the chains' mean
log joints, R-hat of the five largest feature sizes (the sorted column sums of ``Z``,
label-invariant: do the chains hold the same features?), the wall time of ``pm.sample`` and
the log joint's bulk ESS per second.  A second table gives each slow quantity's integrated
autocorrelation time in iterations, ``tau = chains x draws / bulk ESS`` (the number of
iterations per independent draw), and the mean log joint over each third of the kept draws
(is it still rising?).

    python -m benchmarks.logit_samplers [--quick] [--tune T --draws D] [--chains C]
        [--samplers ...] [--replicates R]

Other chain lengths than the default 150 + 300 are saved as ``logit_samplers_long``; with
another number of chains than 4 (``--chains C``) the length and chains are appended to the name.
On this posterior one run's R-hat says little: with the same data and sampler, runs that differ
only in the chains' seeds gave log-joint R-hats from 1.12 to 1.65 (4 x (150 + 300)).
``--replicates R`` runs every sampler with ``R`` chain seeds (the data fixed) and adds a table of
the median and range of each statistic over the runs (saved as ``logit_samplers_replicates``,
with the length appended when it is not the default).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._mixing_stats import ess_bulk, replicate_summary, rhat
from benchmarks._models import digits, digits_logit_model

COLS = ["sampler", "chain_seed", "N", "K_max", "chains", "tune", "draws", "K_plus_mean",
        "K_plus_rhat", "K_plus_ess", "log_lik_mean", "log_lik_rhat", "log_lik_ess",
        "log_joint_mean", "log_joint_rhat", "log_joint_ess", "log_joint_chain_spread",
        "size1_rhat", "size2_rhat", "sizes_rhat_max", "size2_chain_means", "wall_s",
        "log_joint_ess_per_s"]
#: the sorted feature sizes m_(1) >= m_(2) >= ... whose R-hat is reported (label-invariant)
SIZE_RANKS = 5
#: the autocorrelation table: tau = chains x draws / bulk ESS of each quantity
TAU_COLS = ["sampler", "chain_seed", "chains", "tune", "draws", "ones_tau", "size1_tau",
            "size2_tau", "K_plus_tau", "alpha_tau", "log_lik_tau", "log_joint_tau",
            "log_joint_thirds"]
SAMPLERS = ["polya_gamma", "polya_gamma_collapsed", "ibpgibbs_nuts", "ibpgibbs_pg"]
#: run only when asked for (--samplers)
EXTRA = ["polya_gamma_no_offset_slice"]
#: statistics summarised over replicate runs (median, min, max), with their decimals
SUMMARY = {"log_joint_rhat": 2, "log_joint_ess": 1, "K_plus_rhat": 2, "K_plus_ess": 1,
           "log_lik_rhat": 2, "log_lik_ess": 1, "log_lik_mean": 0, "size2_rhat": 2,
           "sizes_rhat_max": 2, "wall_s": 0,
           "log_joint_ess_per_s": 3}
SUMMARY_COLS = ["sampler", "runs", *SUMMARY]


def run(sampler, n, k_max, chains, tune, draws, seed, chain_seed=None):
    """One ``pm.sample`` run: the data drawn with ``seed``, the chains with ``chain_seed``
    (default ``seed``)."""
    import pymc as pm

    import pymc_ibp as pmi

    chain_seed = seed if chain_seed is None else chain_seed
    model = digits_logit_model(digits(n, seed), k_max)
    Z, A, b = model["Z"], model["A"], model["b"]
    with model:
        step = {"polya_gamma": lambda: None,
                "polya_gamma_collapsed": lambda: [pmi.PolyaGammaGibbs([Z], feature_sweeps=0)],
                "polya_gamma_no_offset_slice": lambda: [pmi.PolyaGammaGibbs([Z],
                                                                            offset_sweeps=0)],
                "ibpgibbs_nuts": lambda: [pmi.IBPGibbs([Z]), pm.NUTS([A, b])],
                "ibpgibbs_pg": lambda: [pmi.IBPGibbs([Z]), pmi.PolyaGammaGibbs([A, b])]
                }[sampler]()
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=2, step=step,
                          random_seed=chain_seed, compute_convergence_checks=False,
                          progressbar=False, var_names=["alpha", "Z"])
        wall = time.perf_counter() - t
    # the chains' feature sets, label-invariant: the r-th largest column sum of Z in each draw
    sizes = pmi.diagnostics.sorted_feature_sizes(idata, "Z", k=SIZE_RANKS).values
    size_rhat = [rhat(sizes[..., r].astype(float)) for r in range(SIZE_RANKS)]
    ss = idata["sample_stats"]
    kp, ll, lj = (ss[k].values for k in ("ibp_n_active", "ibp_log_lik", "ibp_model_logp"))
    post = idata["posterior"]
    # bulk ESS once per quantity: the ESS columns and tau = chains x draws / ESS (iterations
    # per independent draw) both read it
    ess = {name: ess_bulk(x) for name, x in (
        ("ones", post["Z"].values.sum(axis=(2, 3))), ("size1", sizes[..., 0]),
        ("size2", sizes[..., 1]), ("K_plus", kp), ("alpha", post["alpha"].values),
        ("log_lik", ll), ("log_joint", lj))}
    return {
        "sampler": sampler, "chain_seed": chain_seed, "N": n, "K_max": k_max, "chains": chains,
        "tune": tune, "draws": draws, "K_plus_mean": float(kp.mean()), "K_plus_rhat": rhat(kp),
        "K_plus_ess": ess["K_plus"], "log_lik_mean": float(ll.mean()),
        "log_lik_rhat": rhat(ll), "log_lik_ess": ess["log_lik"],
        "log_joint_mean": float(lj.mean()), "log_joint_rhat": rhat(lj),
        "log_joint_ess": ess["log_joint"],
        "log_joint_chain_spread": float(np.ptp(lj.mean(axis=1))),
        "size1_rhat": size_rhat[0], "size2_rhat": size_rhat[1],
        "sizes_rhat_max": float(np.max(size_rhat)),
        "size2_chain_means": "/".join(f"{v:.0f}" for v in sizes[..., 1].mean(axis=1)),
        "wall_s": wall, "log_joint_ess_per_s": ess["log_joint"] / wall,
        **{f"{name}_tau": chains * draws / e for name, e in ess.items()},
        "log_joint_thirds": " / ".join(f"{v.mean():.0f}"
                                       for v in np.array_split(lj, 3, axis=1)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 100, 2 chains x (20 + 20)")
    ap.add_argument("--samplers", nargs="+", default=SAMPLERS, choices=SAMPLERS + EXTRA)
    ap.add_argument("--tune", type=int, default=150, help="tuning iterations (default 150)")
    ap.add_argument("--draws", type=int, default=300, help="kept draws per chain (default 300)")
    ap.add_argument("--chains", type=int, default=4, help="chains per run (default 4)")
    ap.add_argument("--replicates", type=int, default=1,
                    help="runs per sampler with chain seeds seed, seed + 1, ... (default 1)")
    args = ap.parse_args()
    if args.replicates < 1:
        ap.error("--replicates must be >= 1")
    quiet()
    info = machine_info()
    if args.quick:
        cfg = dict(n=100, k_max=10, chains=2, tune=20, draws=20, seed=1)
    else:
        cfg = dict(n=300, k_max=32, chains=args.chains, tune=args.tune, draws=args.draws,
                   seed=2026)
    length = ("" if (args.tune, args.draws) == (150, 300)
              else f" --tune {args.tune} --draws {args.draws}")
    length += "" if args.chains == 4 else f" --chains {args.chains}"
    rows = []
    for sampler in args.samplers:
        for r in range(args.replicates):
            rows.append(run(sampler, **cfg, chain_seed=cfg["seed"] + r))
            print_table(rows[-1:], COLS)
    print()
    print_table(rows, COLS)
    summary = replicate_summary(rows, ["sampler"], SUMMARY) if args.replicates > 1 else []
    if summary:
        print()
        print_table(summary, SUMMARY_COLS)
    notes = [
        "Digits (scikit-learn, pixels > 7), Bernoulli likelihood with logit Z @ A + b, "
        f"K_max = 32, alpha ~ Gamma(2, 1) by IBPAlphaGibbs; {cfg['chains']} chains, cores=2.  "
        "polya_gamma: "
        "pmi.PolyaGammaGibbs on Z, A, b (pm.sample's choice); polya_gamma_collapsed: the "
        "same with feature_sweeps=0 (no sweep of Z given A); polya_gamma_no_offset_slice: "
        "the same with offset_sweeps=0 (no slice update of b given A); ibpgibbs_nuts: "
        "pmi.IBPGibbs on Z, NUTS on A and b; ibpgibbs_pg: pmi.IBPGibbs on Z, "
        "pmi.PolyaGammaGibbs on A and b.  "
        "Every chain from the step's default start (the surrogate start).",
        "log_joint = ibp_model_logp (the model's log density at the draw, no Jacobians); "
        "log_lik = ibp_log_lik (the log-likelihood of X at the draw); "
        "R-hat and bulk ESS (ArviZ) over the kept draws of all chains; "
        "log_joint_chain_spread = max - min of the chains' mean log joints (nats); "
        "size1_rhat, size2_rhat, sizes_rhat_max: R-hat of the largest, the second largest "
        f"and the worst of the {SIZE_RANKS} largest feature sizes m_(r) (the number of rows "
        "of the r-th largest feature in each draw, label-invariant): how far the chains agree "
        "on the features themselves; size2_chain_means: each chain's mean m_(2); "
        "log_joint_ess_per_s = bulk ESS of the log joint / wall time of pm.sample "
        "(compilation included).",
        "Autocorrelation table: tau = chains x draws / bulk ESS (ArviZ), the integrated "
        "autocorrelation time in iterations, of the number of ones in Z (ones), the sizes of "
        "the largest and second largest features (size1, size2), K+, alpha, the log-likelihood "
        "and the log joint (with few effective draws each tau is rough, within a factor of "
        "about 2); log_joint_thirds: the mean log joint over the first, second and last third "
        "of the kept draws (all chains).",
        "Command: python -m benchmarks.logit_samplers"
        + (" --quick" if args.quick else "")
        + f" --samplers {' '.join(args.samplers)}" + length
        + (f" --replicates {args.replicates}" if args.replicates > 1 else ""),
    ]
    if summary:
        notes.insert(2, f"Each sampler ran {args.replicates} times on the same data with chain "
                        f"seeds {cfg['seed']}..{cfg['seed'] + args.replicates - 1}; the "
                        "summary gives each statistic's median over the runs and its range "
                        "[min, max].")
    title = "Samplers for a Bernoulli-logit IBP model (digits)"
    if args.quick:
        name = "logit_samplers_quick"
    elif summary:
        name = "logit_samplers_replicates" + length.replace(" --", "_").replace(" ", "")
    else:
        name = "logit_samplers" if not length else "logit_samplers_long" + (
            "" if args.chains == 4 else length.replace(" --", "_").replace(" ", ""))
    taus = ("Integrated autocorrelation times (iterations)", rows, TAU_COLS)
    if summary:  # the summary first, every run below it and in the CSV
        write_results(name, summary, SUMMARY_COLS, title, notes, info,
                      extra_tables=[("Every run", rows, COLS), taus], csv_rows=rows)
    else:
        write_results(name, rows, COLS, title, notes, info, extra_tables=[taus])


if __name__ == "__main__":
    main()
