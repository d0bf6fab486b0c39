"""DataParallelGibbs on a local Dask cluster against the serial AcceleratedGibbs: seconds per
iteration with 1 and 2 worker processes, side by side in one run.

The README's model on block images (D = 36, K_max = 20, noise 0.5), the chain started at the
true Z (so every configuration sweeps the same structure), ``pm.sample(tune=0, draws=T,
chains=1, cores=1)`` with the automatic steps for alpha and the scales.  Configurations:

* ``serial``: ``pmi.AcceleratedGibbs`` with ``split_merge=0, birth_death=0`` (the moves the
  data-parallel step leaves off by default), one sweep per iteration;
* ``P=1`` / ``P=2``: ``pmi.DataParallelGibbs`` on a ``LocalCluster`` of P process workers
  (one thread each), P shards, ``inner_sweeps`` = 1 (one sweep of every row per iteration, the
  same work as ``serial``).

Reported: the median seconds per iteration from the 4th iteration on (the first ones include
each new worker process loading the numba kernels from the cache, about 0.5 s), its ratio to
``serial``, the mean over all T iterations (pm.sample's sampling time / T), the ``pm.sample``
call's wall time (the cluster's start-up and the shards' first scatter included) and the final
K+.  The
machine has 2 cores: with P = 2 the driver (PyMC, the A draw, the scale steps) shares them with
the workers.

    python -m benchmarks.data_parallel            # N = 10^4 and 10^5, T = 30
    python -m benchmarks.data_parallel --quick    # N = 10^4, T = 10
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack

import numpy as np

from benchmarks import quiet
from benchmarks._cluster import local_cluster
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model, pad
from benchmarks._timing import IterationClock

K_MAX = 20


def run(config, X, Z0, draws, seed):
    import pymc as pm

    import pymc_ibp as pmi

    with ExitStack() as stack, ibp_model(X, K_MAX, sx_init=0.5, sa_init=1.0, z_init=Z0) as model:
        if config == "serial":
            step = pmi.AcceleratedGibbs([model["Z"]], split_merge=0, birth_death=0)
        else:
            p = int(config.split("=")[1])
            client = stack.enter_context(local_cluster(p))
            step = pmi.DataParallelGibbs([model["Z"]], client=client, n_shards=p,
                                         inner_sweeps=1)
        clock = IterationClock()
        t = time.perf_counter()
        idata = pm.sample(tune=0, draws=draws, chains=1, cores=1, random_seed=seed,
                          step=[step], progressbar=False, quiet=True,
                          compute_convergence_checks=False, callback=clock,
                          var_names=["alpha", "sigma_x", "sigma_a"])
        wall = time.perf_counter() - t
    secs = float(idata["posterior"].attrs["sampling_time"])
    kplus = int(idata["sample_stats"]["ibp_n_active"].values[0, -1])
    steady = float(np.median(np.diff(clock.t)[2:]))  # from the 4th iteration on
    return dict(s_per_it=steady, mean_s_per_it=secs / draws, wall_s=wall, K_plus_final=kplus)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    quiet()
    import pymc_ibp as pmi

    info = machine_info()
    t0 = time.perf_counter()
    sizes = [10_000] if args.quick else [10_000, 100_000]
    draws = 10 if args.quick else 30
    configs = ["serial", "P=1", "P=2"]
    small = pmi.datasets.block_images(500, seed=0)
    for c in configs:  # warm-up: numba caches, PyTensor compilation, worker imports
        run(c, small.X, pad(small.Z, K_MAX), 2, 0)
    rows = []
    for n in sizes:
        data = pmi.datasets.block_images(n, noise=0.5, seed=1)
        Z0 = pad(data.Z, K_MAX).astype(np.int8)
        base = None
        for c in configs:
            print(f"N = {n}: {c}", flush=True)
            r = dict(N=n, config=c, **run(c, data.X, Z0, draws, seed=3))
            base = r["s_per_it"] if c == "serial" else base
            r["x_serial"] = r["s_per_it"] / base
            rows.append(r)
            print_table([r], list(r))
    cols = ["N", "config", "s_per_it", "x_serial", "mean_s_per_it", "wall_s", "K_plus_final"]
    print()
    print_table(rows, cols)
    notes = [
        f"pm.sample(tune=0, draws={draws}, chains=1, cores=1) from the true Z; s_per_it = "
        "median seconds per iteration from the 4th on; mean_s_per_it = sampling time / draws "
        "(first iterations included); x_serial = s_per_it / serial's (below 1: faster).",
        "serial = AcceleratedGibbs(split_merge=0, birth_death=0); P=k = DataParallelGibbs "
        "(k shards, inner_sweeps=1) on a LocalCluster of k process workers, 1 thread each; "
        "alpha and the scales by IBPAlphaGibbs / IBPScaleSlice in every configuration.",
        "wall_s includes the cluster's start-up and the scatter of the shards' data.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("data_parallel_quick" if args.quick else "data_parallel", rows, cols,
                  "DataParallelGibbs vs the serial accelerated sampler", notes, info)


if __name__ == "__main__":
    main()
