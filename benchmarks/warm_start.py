"""Warm starts: do pm.sample chains reach the best-known state sooner from a variational fit?

Model and data as in benchmarks/structure.py (the README's model, ``alpha ~ Gamma(1, 1)``,
``sigma_a ~ HalfNormal(2)``, ``sigma_x ~ HalfNormal(1)``; block images N = 1000 with K_max = 20,
and the synthetic data of the accelerated-sampling paper, N = 500, with K_max = 40).  For each
data set, 8 chains of ``pm.sample(tune=T, draws=D, cores=1)`` with PyMC's own step assignment
start from:

* ``prior``: a draw of the prior (the default; the step's annealed multi-start burn-in runs in
  the first half of tuning);
* ``vi-infinite`` / ``vi-finite``: ``pmi.inference.fit_variational(model, method=...)`` fitted
  once per chain (its own seed, the default 3 restarts), passed as
  ``pm.sample(initvals=[fit.initvals() for each chain])`` (the step then starts from that Z and
  skips the multi-start burn-in);
* ``meibp`` (block images only: their features are non-negative): ``pmi.inference.fit_meibp``
  on the same data with ``A ~ HalfNormal(1)``, ``sigma_x = 0.5``, ``alpha = 1`` (the README's
  initial values), local search, 3 restarts (the default), once per chain; its ``Z`` and
  ``E[A]`` start the chain (the "ME-AIBP" of Reed 2013, §4.7).

Each draw's ``Z`` (tuning included) is scored as in structure.py: the collapsed log joint at
fixed reference hyperparameters (``kernels.log_joint_of``).  ``best`` = the highest score of the
true Z and of every draw of every chain of every start; a chain has *reached* the structure at
the first iteration whose score is within ``threshold = max(20, 0.002 |best|)`` nats of it.

Reported per start: the fit time (all chains' fits), chains that reached the structure by the
end, the median and maximum first-reach iteration among them, the final scores' gaps to
``best``, and the seconds to the last chain's first reach (fit time + sampling time up to that
iteration, at the measured seconds per iteration).

    python -m benchmarks.warm_start            # 8 chains x (100 + 100) per start (make bench);
                                               # + results/warm_start.png (score traces)
    python -m benchmarks.warm_start --tune 0   # 8 chains x (0 + 200): no burn-in at all
    python -m benchmarks.warm_start --quick    # 2 chains x (20 + 20), block images N = 200
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model, pad
from benchmarks._timing import sampling_time
from benchmarks.structure import REACH_NATS, REACH_REL, REFERENCE, SA_INIT, SX_INIT, make_data
from benchmarks.structure import score as ref_score

STARTS = ["prior", "vi-infinite", "vi-finite", "meibp"]
GRID = [("block", 1000, 20), ("icml", 500, 40)]
QUICK_GRID = [("block", 200, 20)]


class Scores:
    """pm.sample callback: the reference score of every draw's Z, per chain."""

    def __init__(self, X, ref):
        self.X, self.ref, self.by_chain = X, ref, {}

    def __call__(self, trace, draw):
        self.by_chain.setdefault(draw.chain, []).append(
            ref_score(draw.point["Z"], self.X, self.ref))


def nonneg_model(X, k_max):
    """The non-negative twin of the README's model for the MEIBP (fixed hyperparameters)."""
    import pymc as pm

    import pymc_ibp as pmi

    n, d = X.shape
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(n, k_max))
        A = pm.HalfNormal("A", SA_INIT, shape=(k_max, d))
        pm.Normal("X", Z @ A, SX_INIT, observed=X)
    return model


def run_start(start, X, k_max, ref, chains, tune, draws, seed):
    import pymc as pm

    import pymc_ibp as pmi

    initvals, fit_s = None, 0.0
    if start == "meibp":  # fitted on its own (non-negative) model, outside the one sampled
        twin = nonneg_model(X, k_max)
        t = time.perf_counter()
        fits = [pmi.inference.fit_meibp(twin, random_seed=1000 * seed + c)
                for c in range(chains)]
        fit_s = time.perf_counter() - t
        initvals = [f.initvals() for f in fits]
    with ibp_model(X, k_max, sx_init=SX_INIT, sa_init=SA_INIT) as model:
        if start not in ("prior", "meibp"):
            t = time.perf_counter()
            fits = [pmi.inference.fit_variational(model, method=start.split("-")[1],
                                                  random_seed=1000 * seed + c)
                    for c in range(chains)]
            fit_s = time.perf_counter() - t
            initvals = [f.initvals() for f in fits]
        cb = Scores(X, ref)
        idata = pm.sample(tune=tune, draws=draws, chains=chains, cores=1, random_seed=seed,
                          initvals=initvals, compute_convergence_checks=False,
                          progressbar=False, quiet=True, var_names=["alpha", "sigma_x"],
                          callback=cb)
    return np.array([cb.by_chain[c] for c in range(chains)]), fit_s, sampling_time(idata)


def plot(traces, path):
    """One panel per data set: each chain's score minus ``best`` against the iteration
    (symmetric-log scale), coloured by start, with the reach threshold dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(traces), figsize=(6.5 * len(traces), 4), squeeze=False)
    colors = dict(zip(STARTS, ["0.4", "tab:blue", "tab:green", "tab:red"], strict=True))
    for ax, (title, (by_start, best, threshold, tune)) in zip(axes[0], traces.items(),
                                                              strict=True):
        for start, sc in by_start.items():
            for c, row in enumerate(sc):
                ax.plot(row - best, color=colors[start], lw=0.8, alpha=0.7,
                        label=start if c == 0 else None)
        ax.axhline(-threshold, color="k", ls="--", lw=0.8)
        if tune:
            ax.axvline(tune, color="k", ls=":", lw=0.8)
        ax.set_yscale("symlog", linthresh=10.0)
        ax.set(title=title, xlabel="iteration (tuning included)", ylabel="score - best (nats)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tune", type=int, default=None,
                    help="tuning iterations (default 100; the draws make up 200 in all); "
                         "results go to warm_start_tune<T>.*")
    args = ap.parse_args()
    quiet()
    info = machine_info()
    t0 = time.perf_counter()
    chains, tune, draws = (2, 20, 20) if args.quick else (8, 100, 100)
    if args.tune is not None:
        tune, draws = args.tune, tune + draws - args.tune
    grid = QUICK_GRID if args.quick else GRID
    # warm-up (numba cache, PyTensor compilation) outside the timings
    import pymc as pm

    import pymc_ibp as pmi

    pmi.inference.fit_meibp(nonneg_model(make_data("block", 50).X, 8), max_iters=2)
    with ibp_model(make_data("block", 50).X, 8):
        pmi.inference.fit_variational(random_seed=0, max_iters=5, restarts=1)
        pmi.inference.fit_variational(method="finite", random_seed=0, max_iters=5, restarts=1)
        pm.sample(tune=3, draws=3, chains=1, cores=1, progressbar=False, quiet=True,
                  compute_convergence_checks=False)
    rows, traces = [], {}
    for kind, n, k_max in grid:
        data = make_data(kind, n, k_max)
        X, ref = data.X, REFERENCE[kind]
        true_score = ref_score(pad(data.Z, k_max), X, ref)
        results = {}
        for start in STARTS:
            if start == "meibp" and kind != "block":
                continue  # the MEIBP needs non-negative features
            print(f"{kind} N={n}: {start}", flush=True)
            results[start] = run_start(start, X, k_max, ref, chains, tune, draws, seed=7)
        best = max(true_score, max(r[0].max() for r in results.values()))
        threshold = max(REACH_NATS, REACH_REL * abs(best))
        traces[f"{kind} N={n}"] = ({k: v[0] for k, v in results.items()}, best, threshold,
                                   tune)
        for start, (sc, fit_s, samp_s) in results.items():
            ok = sc >= best - threshold
            first = [int(np.argmax(row)) for row in ok if row.any()]
            final_reached = int(ok[:, -1].sum())
            s_per_it = samp_s / (chains * (tune + draws))
            last_first = max(first) if len(first) == chains else None
            rows.append(dict(
                data=kind, N=n, K_max=k_max, start=start, chains=chains, tune=tune,
                draws=draws, fit_s=fit_s, reached_final=f"{final_reached}/{chains}",
                ever_reached=f"{len(first)}/{chains}",
                first_reach_median=float(np.median(first)) if first else float("nan"),
                first_reach_max=max(first) if first else float("nan"),
                gap_final=" ".join(f"{g:.0f}" for g in sc[:, -1] - best),
                gap_true_minus_best=true_score - best,
                s_per_it=s_per_it,
                s_to_all_reached=(fit_s + chains * (last_first + 1) * s_per_it
                                  if last_first is not None else float("nan")),
                total_s=fit_s + samp_s))
        print_table([r for r in rows if r["data"] == kind],
                    ["start", "fit_s", "reached_final", "ever_reached", "first_reach_median",
                     "first_reach_max", "gap_final", "s_to_all_reached", "total_s"])
    cols = ["data", "N", "K_max", "start", "chains", "tune", "draws", "fit_s", "reached_final",
            "ever_reached", "first_reach_median", "first_reach_max", "gap_final",
            "gap_true_minus_best", "s_per_it", "s_to_all_reached", "total_s"]
    print()
    print_table(rows, cols)
    notes = [
        "Starts: prior = the step's default (prior draw + annealed multi-start burn-in in the "
        "first half of tuning); vi-* = pmi.inference.fit_variational(method=*) per chain "
        "(default settings: 3 restarts, 150 annealed iterations), passed as pm.sample initvals; "
        "meibp = pmi.inference.fit_meibp (local search) on the non-negative twin model "
        "(A ~ HalfNormal(1), sigma_x 0.5, alpha 1), block images only.",
        "Score of a draw = collapsed log joint of its Z at fixed reference hyperparameters "
        "(block: sigma_x 0.5, sigma_a 1, alpha 1; icml: 0.2, 2, 2); best = max over the true Z "
        "and all draws of all starts; reached = score >= best - max(20, 0.002 |best|).",
        "first_reach_* = iteration (tuning included, from 0) of a chain's first reached draw, "
        "over the chains that reached; gap_final = final score - best per chain; "
        "gap_true_minus_best = score(true Z) - best.",
        "fit_s = wall time of all chains' fits (one process, sequential); s_to_all_reached = "
        "fit_s + chains x (last first-reach iteration + 1) x s_per_it; total_s = fit_s + "
        "pm.sample's sampling_time.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    name = "warm_start_quick" if args.quick else "warm_start"
    if args.tune is not None:
        name += f"_tune{args.tune}"
    plot(traces, Path(__file__).parent / "results" / f"{name}.png")
    write_results(name, rows, cols,
                  "Warm starts: pm.sample chains started from the prior and from variational "
                  "fits", notes, info)


if __name__ == "__main__":
    main()
