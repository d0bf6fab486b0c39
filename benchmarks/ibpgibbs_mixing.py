"""Mixing of pmi.IBPGibbs (uncollapsed, any likelihood): where the chains start, and its
mode-crossing moves.

Model: the digits example (``examples/digits.py``): ``N`` binarised scikit-learn digits (64
pixels), ``alpha ~ Gamma(2, 1)``, ``Z ~ pmi.IBP(alpha)`` with ``K_max = 32`` (``--k-max``),
``A ~ Normal(0, 2)``, ``b ~ Normal(-1, 2)``, ``X ~ Bernoulli(logit_p = Z @ A + b)``; ``Z`` by
``pmi.IBPGibbs``, A and b by NUTS (passed explicitly: pm.sample would give them to
``pmi.PolyaGammaGibbs``, and this model's Z too; see ``benchmarks/logit_samplers.py``), alpha
by IBPAlphaGibbs.  Settings: ``start`` = ``point`` (PyMC's initial point, Z all
zeros, A = 0, ``init_z="point"``), ``surrogate`` (the initial point with
``init_z="surrogate"``, the step's default for this model: Z from a linear-Gaussian surrogate
of the data, A set given it) or ``random`` (every chain from its own random Z: half of
the slots in use, 30 % of the rows each); ``moves`` = ``none`` (``split_merge``,
``combination_moves``, ``feature_moves`` and ``feature_split_merge`` all 0), ``no_fsm`` (the
defaults but ``feature_split_merge = 0``: the moves of earlier versions) or ``default`` (5
split–merge, 5 dissolve / compose, 3 feature birth / death and 3 feature split / merge
proposals per sweep, the step's defaults).

Reported per setting: R-hat and bulk ESS (ArviZ) of K+ (``ibp_n_active``), of the log
likelihood (``ibp_log_lik``) and of the log joint (``ibp_model_logp``: the model's log density
at every draw) over the kept draws; the spread of the chains' mean log joints (max - min, nats);
the accepted proposals of each kind per iteration; the wall time of ``pm.sample``
(``cores=2``: two chains at a time).

    python -m benchmarks.ibpgibbs_mixing [--quick] [--tune T --draws D] [--replicates R]

Other chain lengths than the default 150 + 300 are saved as ``ibpgibbs_mixing_long`` with the
length appended; ``--chain-seed S`` runs the chains from seed ``S`` on the same data (appended
as ``_seedS``).
``log_joint_rhat_2nd_half`` is the log joint's R-hat over the second half of the kept draws
(do the chains come together as they run?).
``--replicates R`` runs every setting with ``R`` chain seeds (the data fixed; the first seed's
run is the single run's) and adds a table of the median and range of each statistic over the
runs (saved as ``ibpgibbs_mixing_replicates``, with the length appended when it is not the
default).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._mixing_stats import ess_bulk, replicate_summary, rhat
from benchmarks._models import digits_logit_model

COLS = ["start", "moves", "chain_seed", "N", "K_max", "chains", "tune", "draws", "K_plus_mean",
        "K_plus_rhat", "K_plus_ess", "log_lik_rhat", "log_lik_ess", "log_joint_mean",
        "log_joint_rhat", "log_joint_rhat_2nd_half", "log_joint_ess", "log_joint_chain_spread",
        "sm_accepted_per_it",
        "cm_accepted_per_it", "fm_accepted_per_it", "fsm_accepted_per_it", "wall_s"]
#: statistics summarised over replicate runs (median, min, max), with their decimals
SUMMARY = {"log_joint_mean": 0, "log_joint_rhat": 2, "log_joint_ess": 1,
           "log_joint_chain_spread": 0, "K_plus_rhat": 2, "K_plus_ess": 1, "log_lik_rhat": 2,
           "log_lik_ess": 1, "wall_s": 0}
SUMMARY_COLS = ["start", "moves", "runs", *SUMMARY]
STARTS = ["point", "surrogate", "random"]
MOVES = {"none": dict(split_merge=0, combination_moves=0, feature_moves=0,
                      feature_split_merge=0),
         "no_fsm": dict(feature_split_merge=0),
         "default": {}}


def run(n, k_max, chains, tune, draws, start, moves, seed, chain_seed=None):
    import pymc as pm
    from sklearn.datasets import load_digits

    import pymc_ibp as pmi

    digits = load_digits()
    chain_seed = seed if chain_seed is None else chain_seed
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(digits.data), size=n, replace=False)
    if chain_seed != seed:  # the same data; the chains' own random starts and draws
        rng = np.random.default_rng(chain_seed)
    X = (digits.data[rows] > 7).astype("int64")
    starts = None
    start_kw = {"init_z": {"surrogate": "surrogate", "point": "point"}.get(start, "auto")}
    if start == "random":
        starts = []
        for _ in range(chains):
            z0 = np.zeros((n, k_max), dtype="int64")
            z0[:, : k_max // 2] = rng.random((n, k_max // 2)) < 0.3
            starts.append({"Z": z0})
    model = digits_logit_model(X, k_max)
    Z, A, b = model["Z"], model["A"], model["b"]
    with model:
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=2,
                          step=[pmi.IBPGibbs([Z], **MOVES[moves], **start_kw), pm.NUTS([A, b])],
                          initvals=starts,
                          random_seed=chain_seed, compute_convergence_checks=False,
                          progressbar=False, var_names=["alpha"])
        wall = time.perf_counter() - t
    ss = idata["sample_stats"]
    kp = ss["ibp_n_active"].values
    ll = ss["ibp_log_lik"].values
    lj = ss["ibp_model_logp"].values
    return {
        "start": start, "moves": moves, "chain_seed": chain_seed, "N": n, "K_max": k_max,
        "chains": chains, "tune": tune, "draws": draws,
        "K_plus_mean": float(kp.mean()), "K_plus_rhat": rhat(kp), "K_plus_ess": ess_bulk(kp),
        "log_lik_rhat": rhat(ll), "log_lik_ess": ess_bulk(ll),
        "log_joint_mean": float(lj.mean()), "log_joint_rhat": rhat(lj),
        "log_joint_rhat_2nd_half": rhat(lj[:, lj.shape[1] // 2:]),
        "log_joint_ess": ess_bulk(lj),
        "log_joint_chain_spread": float(np.ptp(lj.mean(axis=1))),
        "sm_accepted_per_it": float(ss["ibp_split_merge_accepted"].values.mean()),
        "cm_accepted_per_it": float(ss["ibp_combination_accepted"].values.mean()),
        "fm_accepted_per_it": float(ss["ibp_feature_move_accepted"].values.mean()),
        "fsm_accepted_per_it": float(ss["ibp_feature_split_merge_accepted"].values.mean()),
        "wall_s": wall,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 100, 2 chains x (20 + 20)")
    ap.add_argument("--k-max", type=int, default=32, help="feature slots (default 32)")
    ap.add_argument("--starts", nargs="+", default=STARTS, choices=STARTS,
                    help="starts to run (default: all)")
    ap.add_argument("--moves", nargs="+", default=list(MOVES), choices=list(MOVES),
                    help="move settings to run (default: all)")
    ap.add_argument("--tune", type=int, default=150, help="tuning iterations (default 150)")
    ap.add_argument("--draws", type=int, default=300, help="kept draws per chain (default 300)")
    ap.add_argument("--settings", nargs="+", metavar="START:MOVES",
                    help="(start, moves) pairs to run instead of every start x moves, e.g. "
                         "point:none surrogate:default")
    ap.add_argument("--chain-seed", type=int, default=2026,
                    help="the (first) chain seed; the data are always the seed-2026 rows "
                         "(default 2026)")
    ap.add_argument("--replicates", type=int, default=1,
                    help="runs per setting with chain seeds seed, seed + 1, ... (default 1)")
    args = ap.parse_args()
    if args.replicates < 1:
        ap.error("--replicates must be >= 1")
    if args.settings:
        settings = [tuple(x.split(":", 1)) for x in args.settings]
        if any(len(x) != 2 or x[0] not in STARTS or x[1] not in MOVES for x in settings):
            ap.error(f"--settings takes START:MOVES pairs; got {args.settings}")
    else:
        settings = [(st, mv) for st in args.starts for mv in args.moves]
    quiet()
    info = machine_info()
    if args.quick:
        cfg = dict(n=100, k_max=10, chains=2, tune=20, draws=20, seed=1)
    else:
        cfg = dict(n=300, k_max=args.k_max, chains=4, tune=args.tune, draws=args.draws,
                   seed=2026)
    first = cfg["seed"] if args.quick else args.chain_seed
    # longer (or shorter) chains than the default go to their own table
    length = ("" if (args.tune, args.draws) == (150, 300)
              else f" --tune {args.tune} --draws {args.draws}")
    suffix = (length.replace(" --", "_").replace(" ", "")
              + (f"_seed{first}" if first != cfg["seed"] else ""))
    rows = []
    for start, moves in settings:
        for r in range(args.replicates):
            rows.append(run(start=start, moves=moves, chain_seed=first + r, **cfg))
            print_table(rows[-1:], COLS)
    print()
    print_table(rows, COLS)
    summary = (replicate_summary(rows, ["start", "moves"], SUMMARY) if args.replicates > 1
               else [])
    if summary:
        print()
        print_table(summary, SUMMARY_COLS)
    notes = [
        "Digits (scikit-learn, pixels > 7), Bernoulli likelihood with logit Z @ A + b; Z by "
        "pmi.IBPGibbs, A / b by NUTS, alpha by IBPAlphaGibbs; cores=2.  start = point: "
        "PyMC's initial point (Z = 0, A = 0), init_z='point'; surrogate: the initial point "
        "with init_z='surrogate' (the step's default for this model); random: each chain "
        "from its own random Z (16 of the slots, 30 % of the rows each).  moves = none: "
        "split_merge = combination_moves = feature_moves = feature_split_merge = 0; no_fsm: "
        "the defaults but feature_split_merge = 0; default: the step's defaults (5, 5, 3, 3).",
        "log_joint = ibp_model_logp (the model's log density at the draw, no Jacobians); "
        "log_joint_chain_spread = max - min of the chains' mean log joints (nats).",
        "R-hat and bulk ESS (ArviZ) over the kept draws of all chains; sm_accepted_per_it = "
        "accepted split–merge moves per iteration (kept draws); cm_accepted_per_it = accepted "
        "dissolve / compose moves per iteration; fm_accepted_per_it = accepted birth / death "
        "moves of a feature with its parameters per iteration; fsm_accepted_per_it = accepted "
        "split / merge moves of a feature with its parameters per iteration.",
        "Command: python -m benchmarks.ibpgibbs_mixing"
        + (" --quick" if args.quick else f" --k-max {args.k_max}")
        + (f" --settings {' '.join(args.settings)}" if args.settings else
           f" --starts {' '.join(args.starts)} --moves {' '.join(args.moves)}") + length
        + (f" --chain-seed {first}" if first != cfg["seed"] else "")
        + (f" --replicates {args.replicates}" if args.replicates > 1 else ""),
    ]
    title = "IBPGibbs mixing with and without its mode-crossing moves (digits)"
    if summary:
        notes.insert(3, f"Each setting ran {args.replicates} times on the same data with chain "
                        f"seeds {first}..{first + args.replicates - 1}; the "
                        "summary gives each statistic's median over the runs and its range "
                        "[min, max].")
        name = ("ibpgibbs_mixing_quick_replicates" if args.quick else
                "ibpgibbs_mixing_replicates" + suffix)
        write_results(name, summary, SUMMARY_COLS, title, notes, info,
                      extra_tables=[("Every run", rows, COLS)], csv_rows=rows)
        return
    name = ("ibpgibbs_mixing_quick" if args.quick
            else "ibpgibbs_mixing" + suffix if not length
            else "ibpgibbs_mixing_long" + suffix)
    write_results(name, rows, COLS, title, notes, info)


if __name__ == "__main__":
    main()
