"""The start search with and without its last stage, feature-drop hill climbing
(:mod:`pymc_ibp.init.refine`), on data whose features overlap heavily.

For each data seed, the right-answers benchmark's dependent-IBP model on
``pmi.datasets.dependent_glyphs`` (eight 8x8 glyphs sharing most of their pixels, about 4.4
per row, 800 rows, K_max = 20) and the step ``pm.sample`` gives its ``Z``
(``pmi.AcceleratedGibbs``): ``--chains`` chain starts (the best of ``init_restarts`` = 4
searches, as a chain gets) and as many single searches, each with the stage on and off, from
the same generator seeds.  Each start is scored against the truth as in
:mod:`benchmarks.right_answers` (found: every glyph one to one with Jaccard >= 0.8, nothing
spurious), with its collapsed log joint under the search's prior, and timed.  The README's
model (1000 block images, four glyphs) gives the stage's cost where it changes nothing.

    python -m benchmarks.start_refine                     # data seeds 2 3 4, 6 chains each
    python -m benchmarks.start_refine --seeds 4 --chains 3

Writes ``results/start_refine.{csv,md}``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results


def _search_of(model):
    import pymc_ibp as pmi

    with model:
        step = pmi.AcceleratedGibbs([model["Z"], model["A"]])
        noise = step.update.noise(model.initial_point())
    return step.search, noise


def _runs(label, search, noise, X, truth, chains, score):
    from pymc_ibp import kernels

    rows = []
    trXX = kernels.block_sq_norms(X, noise)
    for restarts, kind in ((search.init_restarts, "chain start (best of 4)"), (1, "one search")):
        for refine in (False, True):
            search.refines = refine
            found, k_plus, joints, secs = [], [], [], []
            for c in range(chains):
                rng = np.random.default_rng(1000 + c)
                t0 = time.perf_counter()
                Z, _, fit = search.search(rng, X, noise, restarts=restarts)
                secs.append(time.perf_counter() - t0)
                rec, spurious, dup, kp, _ = score(Z, truth)
                found.append(rec == truth.shape[1] and spurious == 0 and dup == 0)
                k_plus.append(kp)
                joints.append(search.log_joint(Z, X, trXX, noise, search.search_prior())[0])
            rows.append({"data": label, "start": kind, "refine": refine,
                         "found": f"{sum(found)}/{chains}",
                         "k_plus": " ".join(map(str, k_plus)),
                         "log_joint_median": float(np.median(joints)),
                         "s_per_start": float(np.mean(secs))})
    search.refines = True
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--chains", type=int, default=6)
    args = parser.parse_args()
    quiet()
    import pymc_ibp as pmi
    from benchmarks._models import ibp_model
    from benchmarks.right_answers import CASES, score_draw

    info = machine_info()
    rows = []
    for seed in args.seeds:
        model, truth = CASES["dependent_gaussian"](seed)
        search, noise = _search_of(model)
        X = np.asarray(pmi.datasets.dependent_glyphs(seed=seed).X, dtype=np.float64)
        rows += _runs(f"dependent_glyphs seed {seed}", search, noise, X, np.asarray(truth),
                      args.chains, score_draw)
        print_table(rows[-4:], list(rows[0]))
    data = pmi.datasets.block_images(1000, noise=0.5, seed=1)
    search, noise = _search_of(ibp_model(data.X, 20))
    rows += _runs("README model (block_images 1000)", search, noise,
                  np.asarray(data.X, dtype=np.float64), np.asarray(data.Z),
                  min(args.chains, 3), score_draw)
    cols = list(rows[0])
    print_table(rows, cols)
    write_results(
        "start_refine", rows, cols,
        "The start search with and without feature-drop hill climbing", [
            "start: a chain's start (the best of init_restarts = 4 annealed searches, each "
            "refined when refine is True) or a single search; the same generator seeds "
            "(1000 + chain) with and without the stage.",
            "found: starts whose features are the planted ones (one to one, Jaccard of owners "
            ">= 0.8, nothing spurious or duplicated: benchmarks.right_answers.score_draw); "
            "k_plus: each start's features in use; log_joint_median: the collapsed log joint "
            "under the search's IBP prior at the model's initial scales; s_per_start: wall "
            "time of a start (one process, numba compiled).",
            "python -m benchmarks.start_refine" + (
                f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds != [2, 3, 4] else "")
            + (f" --chains {args.chains}" if args.chains != 6 else ""),
        ], info)


if __name__ == "__main__":
    main()
