"""DataParallelGibbs with the data held by the driver (``observed=X``) against the same data
as ``.npy`` shards that the workers load themselves (``observed=pmi.ShardedData(...).tensor()``):
the driver's peak memory, the workers', and seconds per iteration, side by side in one run.

Block images (D = 36, noise 0.5, K_max = 20) written as 8 ``.npy`` files, each generated on its
own so that no process of the benchmark holds the whole matrix before the ``held`` run loads
it.  Each configuration runs in a fresh process (so that its peak resident memory is its own):
``pm.sample(tune=T, draws=T, chains=1, cores=1, var_names=[alpha, sigma_x, sigma_a])`` from
PyMC's default start (the start search on 1000 rows), a LocalCluster of 2 process workers,
8 shards, ``inner_sweeps=1``.

* ``held``: ``X`` loaded from the files on the driver (``np.concatenate``), ``observed=X``,
  ``DataParallelGibbs(n_shards=8)`` scatters each shard's rows to its worker;
* ``sharded``: ``pmi.ShardedData.from_npy(files)``; ``pm.sample()`` assigns the step itself
  and each worker loads its shards.

Reported: the driver's peak resident memory (``ru_maxrss`` of its process), the largest
worker resident memory seen by the shard diagnostics, the median seconds per iteration from
the 4th on, and the final K+ and sigma_x (the truth: 4 glyphs, 0.5).

    python -m benchmarks.data_parallel_sharded            # N = 10^5 and 10^6, T = 8
    python -m benchmarks.data_parallel_sharded --quick    # N = 10^5, T = 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results

K_MAX, SHARDS = 20, 8


def write_shards(n, folder):
    import pymc_ibp as pmi

    paths = []
    for p, rows in enumerate(np.array_split(np.arange(n), SHARDS)):
        path = os.path.join(folder, f"part-{p:03d}.npy")
        np.save(path, pmi.datasets.block_images(rows.size, noise=0.5, seed=100 + p).X)
        paths.append(path)
    return paths


def child(config, paths, draws):
    """One configuration in this (fresh) process; prints a JSON line."""
    import warnings

    import pymc as pm

    import pymc_ibp as pmi
    from benchmarks._cluster import local_cluster
    from benchmarks._timing import IterationClock

    warnings.filterwarnings("ignore", "Could not extract data from symbolic observation")
    if config == "held":
        observed = np.concatenate([np.load(p) for p in paths])
    else:
        observed = pmi.ShardedData.from_npy(paths)
    n, d = observed.shape
    with local_cluster(2) as client, pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, K_MAX))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(K_MAX, d))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x,
                  observed=observed if config == "held" else observed.tensor())
        kw = {}
        if config == "held":
            step = pmi.DataParallelGibbs([model["Z"]], client=client, n_shards=SHARDS,
                                         inner_sweeps=1)
            kw["step"] = [step]
        else:
            kw["data_parallel_gibbs"] = {"client": client, "inner_sweeps": 1}
        clock = IterationClock()
        idata = pm.sample(tune=draws, draws=draws, chains=1, cores=1, random_seed=3,
                          progressbar=False, quiet=True, compute_convergence_checks=False,
                          callback=clock, var_names=["alpha", "sigma_x", "sigma_a"], **kw)
        worker_rss = max(int(v) for v in client.run(_rss).values())
    ss = idata["sample_stats"]
    out = dict(
        N=n, config=config,
        driver_peak_MB=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        worker_MB=worker_rss / 2**20,
        s_per_it=float(np.median(np.diff(clock.t)[2:])),
        K_plus_final=int(ss["ibp_n_active"].values[0, -1]),
        sigma_x_final=float(idata["posterior"]["sigma_x"].values[0, -1]),
    )
    print("RESULT " + json.dumps(out), flush=True)


def _rss():
    import psutil

    return psutil.Process().memory_info().rss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("CONFIG", "FOLDER", "DRAWS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    quiet()
    if args.child:
        config, folder, draws = args.child
        child(config, sorted(os.path.join(folder, f) for f in os.listdir(folder)), int(draws))
        return
    info = machine_info()
    t0 = time.perf_counter()
    sizes = [100_000] if args.quick else [100_000, 1_000_000]
    draws = 5 if args.quick else 8
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as folder:
            write_shards(n, folder)
            for config in ("held", "sharded"):
                print(f"N = {n}: {config}", flush=True)
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.data_parallel_sharded", "--child", config,
                     folder, str(draws)], capture_output=True, text=True, check=False)
                line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
                if out.returncode or not line:
                    raise RuntimeError(f"{config} at N = {n} failed:\n{out.stderr[-3000:]}")
                rows.append(json.loads(line[-1][len("RESULT "):]))
                print_table([rows[-1]], list(rows[-1]))
        held, sharded = rows[-2], rows[-1]
        sharded["driver_vs_held"] = sharded["driver_peak_MB"] / held["driver_peak_MB"]
        sharded["time_vs_held"] = sharded["s_per_it"] / held["s_per_it"]
    cols = ["N", "config", "driver_peak_MB", "driver_vs_held", "worker_MB", "s_per_it",
            "time_vs_held", "K_plus_final", "sigma_x_final"]
    print()
    print_table(rows, cols)
    notes = [
        f"pm.sample(tune={draws}, draws={draws}, chains=1, cores=1, var_names=[alpha, sigma_x, "
        "sigma_a]) from PyMC's default start (start search on 1000 rows); 8 shards on a "
        "LocalCluster of 2 process workers (1 thread each), inner_sweeps=1; each configuration "
        "in its own process.",
        "held: observed=X (loaded on the driver from the 8 files), DataParallelGibbs scatters "
        "the rows; sharded: observed=pmi.ShardedData.from_npy(files).tensor(), the step "
        "assigned by pm.sample and each worker loading its own shards.",
        "driver_peak_MB: ru_maxrss of the driver's process; worker_MB: the largest resident "
        "memory of a worker process at the end; s_per_it: median seconds per iteration from "
        "the 4th on; *_vs_held: ratio to the held configuration at the same N.",
        "X is N x 36 float64 (288 MB at N = 10^6); truth: 4 glyphs, sigma_x = 0.5.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("data_parallel_sharded_quick" if args.quick else "data_parallel_sharded",
                  rows, cols, "Sharded data: the driver's memory with and without X", notes,
                  info)


if __name__ == "__main__":
    main()
