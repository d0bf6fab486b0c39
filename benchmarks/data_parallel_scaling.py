"""The thesis's §5.3 in our terms: the synchronous data-parallel sampler with P = 1 … 127
shards on 10,000 block images, against the serial sampler, and a cost model fitted to the
timings (Doshi-Velez 2009, §5.3).

Training data: ``block_images(10000, noise=0.5, seed=1)``; test data: 5000 further images
(``seed=2``).  The README's model (K_max = 20), ``pm.sample(tune=20, draws=40, chains=1,
cores=1)`` from a prior draw of Z; ``serial`` = ``pmi.AcceleratedGibbs(split_merge=0,
birth_death=0)`` with 5 sweeps per iteration's worth of work replaced by one sweep (so its
iterations are 5× cheaper: reported per sweep below), ``P=k`` = ``pmi.DataParallelGibbs``
(k shards, ``inner_sweeps=5``) on a ``LocalCluster`` of 2 process workers (so for k > 2
several shards share a worker, as in the thesis's simulated processors).

Reported per configuration: the median seconds per outer iteration and per sweep of all the
rows, the test log-likelihood per entry (as in data_parallel_modes.py, last 20 draws), K+ and
the final hairiness index of the log joint's trace with its 95% band (Brooks 1998; the thesis
found it inside the band for every P).  A second table: ESS of the log joint and of K+ against
the number of inner sweeps (1, 5, 10) at P = 7 (the thesis's §5.3: ESS against inner sweeps).

Cost model, fitted by least squares to the P=k timings:
``t(P, W) = a + s · inner · N / min(P, W) + c · P`` (driver overhead, the slowest shard's
sweeps on W workers, per-shard messaging).  It is printed with its predictions for P = W = 16 …
1024 workers at N = 10^7, and the speed-up over one worker, beside the thesis's 16-processor
figures (14× Gibbs speed-up; message passing 0.1–7% of the Gibbs time; asynchronous mode
1.64× faster than synchronous).

    python -m benchmarks.data_parallel_scaling [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._cluster import local_cluster
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._mixing_stats import ess_bulk
from benchmarks._models import ibp_model
from benchmarks._timing import IterationClock
from benchmarks.data_parallel_modes import test_metrics

K_MAX, WORKERS, INNER = 20, 2, 5


def run(config, X, X_test, tune, draws, client, seed, inner=INNER):
    import pymc as pm

    import pymc_ibp as pmi

    with ibp_model(X, K_MAX, sx_init=0.5, sa_init=1.0) as model:
        if config == "serial":
            step = pmi.AcceleratedGibbs([model["Z"]], split_merge=0, birth_death=0)
        else:
            step = pmi.DataParallelGibbs([model["Z"]], client=client,
                                         n_shards=int(config.split("=")[1]),
                                         inner_sweeps=inner, split_merge=0, birth_death=0)
        clock = IterationClock()
        idata = pm.sample(tune=tune, draws=draws, chains=1, cores=1, random_seed=seed,
                          step=[step], progressbar=False, quiet=True, callback=clock,
                          compute_convergence_checks=False)
    import pymc_ibp as pmi

    s_it = float(np.median(np.diff(clock.t)[2:]))
    sweeps = 1 if config == "serial" else inner
    lj = idata["sample_stats"]["ibp_log_joint"].values[0]
    kp = idata["sample_stats"]["ibp_n_active"].values[0]
    D, lo, hi = pmi.hairiness_index(lj)
    _, ll = test_metrics(idata, X_test, X.shape[0])
    secs = float(idata["posterior"].attrs["sampling_time"]) * draws / (tune + draws)
    ess_lj, ess_k = ess_bulk(lj[None]), ess_bulk(kp[None])
    return dict(config=config, P=0 if config == "serial" else int(config.split("=")[1]),
                inner=sweeps, s_per_outer=s_it, s_per_sweep=s_it / sweeps, test_loglik=ll,
                K_plus_final=int(kp[-1]), hairiness=float(D[-1]), band_lo=float(lo[-1]),
                band_hi=float(hi[-1]), ess_log_joint=ess_lj, ess_K_plus=ess_k,
                ess_log_joint_per_s=ess_lj / secs)


def fit_cost(rows, n):
    P = np.array([r["P"] for r in rows], float)
    t = np.array([r["s_per_outer"] for r in rows])
    M = np.column_stack([np.ones_like(P), INNER * n / np.minimum(P, WORKERS), P])
    coef, *_ = np.linalg.lstsq(M, t, rcond=None)
    return coef  # a, s, c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    quiet()
    import pymc_ibp as pmi

    info = machine_info()
    t0 = time.perf_counter()
    n = 2000 if args.quick else 10_000
    X = pmi.datasets.block_images(n, noise=0.5, seed=1).X
    X_test = pmi.datasets.block_images(n // 2, noise=0.5, seed=2).X
    tune, draws = (5, 10) if args.quick else (20, 40)
    shards = [1, 2, 7] if args.quick else [1, 2, 7, 31, 127]
    with local_cluster(WORKERS) as client:
        run("P=2", X[:300], X_test[:50], 0, 4, client, 0)  # warm-up: imports, numba caches
        rows = []
        for config in ["serial"] + [f"P={p}" for p in shards]:
            print(config, flush=True)
            r = run(config, X, X_test, tune, draws, client, seed=3)
            rows.append(r)
            print_table([r], list(r))
        # the thesis's §5.3: mixing against the number of inner sweeps, at P = 7
        inner_rows = []
        for inner in (1, 5, 10):
            print(f"P=7, inner_sweeps={inner}", flush=True)
            r = run("P=7", X, X_test, tune, 2 * draws, client, seed=4, inner=inner)
            inner_rows.append(r)
            print_table([r], list(r))
    a, s, c = fit_cost([r for r in rows if r["P"] > 0], n)
    big = 10_000_000
    preds = []
    for w in (16, 64, 256, 1024):
        t_w = a + s * INNER * big / w + c * w
        t_1 = a + s * INNER * big + c
        preds.append(dict(workers=w, N=big, predicted_s_per_outer=t_w,
                          speedup_vs_1_worker=t_1 / t_w, messaging_share=c * w / t_w))
    cols = ["config", "P", "s_per_outer", "s_per_sweep", "test_loglik", "K_plus_final",
            "hairiness", "band_lo", "band_hi"]
    icols = ["config", "inner", "s_per_outer", "ess_log_joint", "ess_K_plus",
             "ess_log_joint_per_s", "test_loglik", "hairiness", "band_lo", "band_hi"]
    print()
    print_table(rows, cols)
    pcols = ["workers", "N", "predicted_s_per_outer", "speedup_vs_1_worker", "messaging_share"]
    print_table(preds, pcols)
    notes = [
        f"N = {n} training images, {n // 2} test images; pm.sample(tune={tune}, draws={draws}); "
        f"LocalCluster of {WORKERS} process workers; inner_sweeps = {INNER}; serial = "
        "AcceleratedGibbs (split_merge 0, birth_death 0), one sweep per iteration.",
        "s_per_outer: median seconds per pm.sample iteration from the 4th on (alpha and scale "
        "steps included); s_per_sweep = s_per_outer / sweeps of every row per iteration.",
        "hairiness: final Brooks (1998) index of the ibp_log_joint trace (tuning excluded) and "
        "its 95% band.",
        f"Inner sweeps table: P = 7, pm.sample(tune={tune}, draws={2 * draws}), seed 4; "
        "ess_*: ArviZ bulk ESS of the one chain's ibp_log_joint / ibp_n_active (post-tuning "
        "draws); ess_log_joint_per_s divides by the post-tuning share of the sampling time.",
        f"Cost model t = a + s * inner * N / min(P, W) + c * P fitted to the P rows: a = "
        f"{a:.4g} s, s = {s:.4g} s per row-sweep, c = {c:.4g} s per shard.  The second table "
        "predicts P = W workers at N = 10^7 (messaging_share = c P / t).  Thesis, 16 "
        "processors: 14x Gibbs speed-up, message passing 0.1-7% of the Gibbs time, "
        "asynchronous 1.64x faster than synchronous (ours: benchmarks/data_parallel_modes.py).",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("data_parallel_scaling_quick" if args.quick else "data_parallel_scaling",
                  rows, cols, "Data-parallel sampler: shards, test likelihood, cost model",
                  notes, info, extra_tables=[("Mixing against inner sweeps (P = 7)", inner_rows,
                                              icols),
                                             ("Cost model predictions", preds, pcols)])


if __name__ == "__main__":
    main()
