"""The thesis's Table 5.1 in our terms: the synchronous and asynchronous data-parallel sampler
against the exact parallel Metropolis–Hastings mode (Doshi-Velez 2009, §5.3), on 1000 block
images in 5 shards.

Training data: ``block_images(1000, noise=0.5, seed=1)``; test data: 200 further images
(``seed=2``).  Model: the README's (K_max = 20, alpha ~ Gamma(1, 1), sigma_a ~ HalfNormal(2),
sigma_x ~ HalfNormal(1)), ``pm.sample(tune=0, draws=T, chains=1, cores=1)`` from a prior
draw of Z (the step's default start; no tuning, so no multi-start), ``pmi.DataParallelGibbs`` with
5 shards on a ``LocalCluster`` of 2 process workers; alpha and the scales by their usual steps.
Configurations:

* ``sync``: ``inner_sweeps=5``, T = 100 (500 sweeps of every shard, the thesis's 500 x 5);
* ``async``: ``mode="async"``, ``inner_sweeps=5``, T = 100 iterations, each folding in the
  shards that have finished (``shard_rounds`` = shard reports / 5 counts the work done);
* ``exact n``: ``mode="exact"``, ``exact_rows=n`` (n = 1, 5, 10), ``inner_sweeps=1``, T = 500.

Reported: wall time of the sampling, ``s_per_round`` = sampling time per round of all 5
shards' sweeps (the per-iteration time for sync and exact), the acceptance rate of the exact
mode, K+ at the end, and
on the 200 test images, with the last 20 draws: ``test_l2``, the mean squared error per entry of
the best reconstruction ``z* A`` (``z*`` the most probable binary row given the draw's ``A``,
``sigma_x`` and the feature frequencies ``m_k / N``, by enumeration over the active features),
and ``test_loglik``, the mean per entry of ``log Σ_z P(z) N(x; z A, sigma_x² I)`` with
``P(z) = Π_k (m_k/N)^{z_k} (1 - m_k/N)^{1 - z_k}`` (no new features).

    python -m benchmarks.data_parallel_modes [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from scipy.special import logsumexp

from benchmarks import quiet
from benchmarks._cluster import local_cluster
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model

K_MAX, SHARDS, WORKERS, LAST = 20, 5, 2, 20


def test_metrics(idata, X_test, n_train):
    post = idata["posterior"]
    l2s, lls = [], []
    for j in range(max(0, post.sizes["draw"] - LAST), post.sizes["draw"]):
        Z = post["Z"].values[0, j]
        A = post["A"].values[0, j]
        sx = float(post["sigma_x"].values[0, j])
        m = Z.sum(axis=0)
        act = np.flatnonzero(m > 0)
        p = np.clip(m[act] / n_train, 1e-12, 1 - 1e-12)
        zs = np.array(list(itertools.product([0, 1], repeat=act.size)), dtype=float)
        logp = zs @ np.log(p) + (1 - zs) @ np.log1p(-p)  # (2^K,)
        mean = zs @ A[act]  # (2^K, D)
        sq = ((X_test[:, None, :] - mean[None]) ** 2).sum(axis=2)  # (n_test, 2^K)
        d = X_test.shape[1]
        ll = logp[None] - 0.5 * sq / sx**2 - 0.5 * d * np.log(2 * np.pi * sx**2)
        lls.append(logsumexp(ll, axis=1).mean() / d)
        best = np.argmax(ll, axis=1)
        l2s.append(sq[np.arange(len(X_test)), best].mean() / d)
    return float(np.mean(l2s)), float(np.mean(lls))


def run(config, X, X_test, draws, client, seed):
    import pymc as pm

    import pymc_ibp as pmi

    kw = dict(n_shards=SHARDS, client=client)
    if config in ("sync", "async"):
        kw.update(inner_sweeps=5, mode=config)
    else:
        kw.update(mode="exact", exact_rows=int(config.split()[1]), inner_sweeps=1)
    with ibp_model(X, K_MAX) as model:
        step = pmi.DataParallelGibbs([model["Z"]], **kw)
        t = time.perf_counter()
        idata = pm.sample(tune=0, draws=draws, chains=1, cores=1, random_seed=seed,
                          step=[step], progressbar=False, quiet=True,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t
    ss = idata["sample_stats"]
    l2, ll = test_metrics(idata, X_test, X.shape[0])
    secs = float(idata["posterior"].attrs["sampling_time"])
    rounds = (float(step.shard_diagnostics()["reported"].sum()) / SHARDS
              if config == "async" else float(draws))
    return dict(config=config, iterations=draws, wall_s=wall, s_per_it=secs / draws,
                shard_rounds=rounds, s_per_round=secs / rounds,
                acceptance=(float(ss["ibp_exact_accepted"].values.mean())
                            if config.startswith("exact") else float("nan")),
                K_plus_final=int(ss["ibp_n_active"].values[0, -1]),
                test_l2=l2, test_loglik=ll)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    quiet()
    import pymc_ibp as pmi

    info = machine_info()
    t0 = time.perf_counter()
    X = pmi.datasets.block_images(1000, noise=0.5, seed=1).X
    X_test = pmi.datasets.block_images(200, noise=0.5, seed=2).X
    scale = 10 if args.quick else 1
    configs = [("sync", 100 // scale), ("async", 100 // scale)] + [
        (f"exact {n}", 500 // scale) for n in (1, 5, 10)]
    with local_cluster(WORKERS) as client:
        run("sync", X[:200], X_test, 5, client, 0)  # warm-up: worker imports and numba caches
        rows = []
        for config, draws in configs:
            print(config, flush=True)
            r = run(config, X, X_test, draws, client, seed=3)
            rows.append(r)
            print_table([r], list(r))
    cols = ["config", "iterations", "wall_s", "s_per_it", "shard_rounds", "s_per_round",
            "acceptance", "K_plus_final", "test_l2", "test_loglik"]
    print()
    print_table(rows, cols)
    notes = [
        f"1000 training block images in {SHARDS} shards on a LocalCluster of {WORKERS} process "
        "workers; chains from a prior draw of Z, no tuning; sync and async: inner_sweeps 5; "
        "async: each iteration folds in the shards that have finished; exact n: "
        "exact_rows n, inner_sweeps "
        "1, exact_flip 0.01.",
        f"test_l2 / test_loglik: 200 test images, last {LAST} draws, per entry (see the "
        "script's docstring).  The thesis's Table 5.1 reports the same quantities for its "
        "approximate and exact samplers.",
        "wall_s: the pm.sample call; s_per_it: its sampling time / iterations.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("data_parallel_modes_quick" if args.quick else "data_parallel_modes", rows,
                  cols, "Data-parallel sampler: synchronous, asynchronous and exact MH "
                  "(Table 5.1)", notes, info)


if __name__ == "__main__":
    main()
