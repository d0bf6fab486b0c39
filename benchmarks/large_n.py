"""Large data on one machine: the README's model through ``pm.sample`` from 10^3 to 10^6 rows.

Block images (D = 36, noise 0.5, K = 4 true features), ``K_max = 20``, the README's model
(``alpha ~ Gamma(1, 1)``, ``sigma_a ~ HalfNormal(2)`` initval 1, ``sigma_x ~ HalfNormal(1)``
initval 0.5), one chain, ``cores=1``, ``tune=100, draws=50``, automatic step assignment.  As
the docs page *Large data sets* recommends, ``Z`` is left out of ``pm.sample``'s trace
(``var_names`` = the scalars and ``A``) and kept at every 10th draw by ``pmi.KeepEvery``.  With
``--traced`` a second run at N = 10^5 keeps ``Z`` in the trace (every draw), for the memory it
costs.

Each size runs in its own process, so its peak resident memory (``ru_maxrss``) is its own.
Reported per size: the ``pm.sample`` call's wall time (model compilation and step set-up
included) and its sampling time, seconds per iteration (sampling time / 150), peak memory, the
size of the data and of one draw of ``Z``, the final K+, and the gap of the final ``Z``'s
collapsed log joint (fixed sigma_x 0.5, sigma_a 1, alpha 1) to the true ``Z``'s; and the
log-log slope of seconds per iteration against N.

    python -m benchmarks.large_n              # N = 10^3, 10^4, 10^5, 10^6  (~20 min)
    python -m benchmarks.large_n --quick      # N = 10^3, 10^4
    python -m benchmarks.large_n --traced     # + N = 10^5 with Z in the trace
    python -m benchmarks.large_n --offsets [N]  # memory of an offset beside Z @ A (~4 min)

``--offsets`` measures what an offset beside ``Z @ A`` costs at ``N`` rows (default 10^6):
the same data through ``Z @ A`` (no offset), ``Z @ A + b`` (``b`` per column) and
``Z @ A + b[group]`` (3 groups, ``b`` of shape ``(3, 36)``), each shifted by its offset, one
chain of ``pm.sample(tune=2, draws=2)`` in its own process; reported: the peak resident memory
during ``pm.sample`` above the process's size just before it (the kernel's high-water mark,
reset through ``/proc/self/clear_refs``; Linux), the data's size, ``pm.sample``'s wall time
(the start search included) and the final K+.  Saved as ``large_n_offsets``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._timing import loglog_slope

K_MAX = 20
TUNE, DRAWS, EVERY = 100, 50, 10
SCALARS = ["alpha", "sigma_x", "sigma_a"]
REF = {"sigma_x": 0.5, "sigma_a": 1.0, "alpha": 1.0}


def one_size(n: int, traced: bool) -> dict:
    """Run in a child process: one pm.sample at ``n`` rows; returns the measurements."""
    import resource

    import pymc as pm

    import pymc_ibp as pmi
    from benchmarks._mixing_stats import collapsed_log_joint
    from benchmarks._models import ibp_model, pad

    quiet()
    data = pmi.datasets.block_images(n, noise=0.5, seed=1)
    X = data.X
    t = time.perf_counter()
    with ibp_model(X, K_MAX, sx_init=0.5, sa_init=1.0):
        keep = None if traced else pmi.KeepEvery(EVERY, var_names=["Z"])
        idata = pm.sample(tune=TUNE, draws=DRAWS, chains=1, cores=1, random_seed=n,
                          progressbar=False, quiet=True, compute_convergence_checks=False,
                          var_names=None if traced else SCALARS + ["A"], callback=keep)
    wall = time.perf_counter() - t
    if keep is not None:
        idata = keep.thin(idata)
    Z = idata["posterior"]["Z"].values[0, -1]
    score = collapsed_log_joint(Z, X, REF["sigma_x"], REF["sigma_a"], REF["alpha"])
    true = collapsed_log_joint(pad(data.Z, K_MAX), X, REF["sigma_x"], REF["sigma_a"],
                               REF["alpha"])
    secs = float(idata["posterior"].attrs["sampling_time"])
    zpost = idata["posterior"]["Z"]
    return dict(
        N=n, Z_in_trace="every draw" if traced else f"every {EVERY}th (KeepEvery)",
        wall_s=wall, sampling_s=secs, s_per_it=secs / (TUNE + DRAWS),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        X_mb=X.nbytes / 2**20, Z_draw_mb=zpost.values[0, 0].nbytes / 2**20,
        Z_kept_mb=zpost.values.nbytes / 2**20, Z_dtype=str(zpost.dtype),
        K_plus_final=int((Z.sum(axis=0) > 0).sum()), true_K=int(data.k),
        gap_to_truth=float(score - true),
        kmax_hit=float(idata["sample_stats"]["ibp_kmax_hit"].values.mean()),
    )


OFFSETS = {"none": "Z @ A", "per_column": "Z @ A + b, b of shape (36,)",
           "per_group": "Z @ A + b[group], b of shape (3, 36)"}


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no {key} in /proc/self/status")


def one_offset(n: int, kind: str) -> dict:
    """Run in a child process: ``pm.sample(tune=2, draws=2)`` on ``n`` rows with the offset
    ``kind``; the peak resident memory during it above the size before it."""
    import gc

    import numpy as np
    import pymc as pm

    import pymc_ibp as pmi

    quiet()
    G = 3
    data = pmi.datasets.block_images(n, noise=0.5, seed=1)
    rng = np.random.default_rng(0)
    group = rng.integers(0, G, n)
    X = data.X
    if kind == "per_group":
        X = X + rng.normal(0.0, 2.0, (G, X.shape[1]))[group]
    elif kind == "per_column":
        X = X + rng.normal(0.0, 2.0, X.shape[1])
    del data
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, K_MAX))
        mean = Z @ pm.Normal("A", 0.0, 1.0, shape=(K_MAX, X.shape[1]))
        if kind == "per_group":
            mean = mean + pm.Normal("b", 0.0, 3.0, shape=(G, X.shape[1]))[group]
        elif kind == "per_column":
            mean = mean + pm.Normal("b", 0.0, 3.0, shape=X.shape[1])
        pm.Normal("X", mean, 0.5, observed=X)
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the high-water mark (VmHWM) back to the current size
        before = _status_mb("VmRSS")
        t = time.perf_counter()
        idata = pm.sample(tune=2, draws=2, chains=1, cores=1, random_seed=1,
                          progressbar=False, quiet=True, compute_convergence_checks=False,
                          var_names=["alpha"])
        wall = time.perf_counter() - t
    peak = _status_mb("VmHWM")
    return dict(N=n, offset=kind, mean=OFFSETS[kind], X_mb=X.nbytes / 2**20,
                rss_before_mb=before, peak_mb=peak, peak_above_mb=peak - before,
                wall_s=wall,
                K_plus_final=int(idata["sample_stats"]["ibp_n_active"].values[0, -1]))


def offsets(n: int) -> None:
    info = machine_info()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "benchmarks.large_n", "--offset-child", "2000",
                    "per_group"], check=True, capture_output=True,
                   cwd=Path(__file__).parent.parent)  # warm-up: numba and PyTensor caches
    rows = []
    for kind in OFFSETS:
        out = subprocess.run([sys.executable, "-m", "benchmarks.large_n", "--offset-child",
                              str(n), kind], check=True, capture_output=True, text=True,
                             cwd=Path(__file__).parent.parent)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print_table(rows[-1:], list(rows[-1]))
    cols = ["N", "offset", "mean", "X_mb", "rss_before_mb", "peak_mb", "peak_above_mb",
            "wall_s", "K_plus_final"]
    print()
    print_table(rows, cols)
    notes = [
        "Block images (D = 36, noise 0.5, seed 1) shifted by the offset (per column: N(0, 2) "
        "per column; per group: N(0, 2) per group and column, 3 groups); alpha ~ Gamma(1, 1), "
        f"Z ~ pmi.IBP(alpha) with K_max = {K_MAX}, A ~ Normal(0, 1), b ~ Normal(0, 3), "
        "X ~ Normal(mean, 0.5); pm.sample(tune=2, draws=2, chains=1, cores=1), automatic steps "
        "(AcceleratedGibbs [Z, A], IBPAlphaGibbs, IBPOffsetGibbs [b]), var_names=['alpha'].",
        "peak_above_mb: the process's peak resident memory during pm.sample (VmHWM, reset "
        "through /proc/self/clear_refs just before) minus its size then (VmRSS): what the "
        "steps, their start search and PyMC's sampling loop add to the model and its data; "
        "each offset in its own process, numba and PyTensor caches warm.",
        f"Command: python -m benchmarks.large_n --offsets {n}.  Total script time "
        f"{time.perf_counter() - t0:.0f} s.",
    ]
    write_results("large_n_offsets", rows, cols,
                  "Memory of an offset beside Z @ A at large N", notes, info)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--traced", action="store_true", help="add N = 10^5 with Z traced")
    ap.add_argument("--offsets", nargs="?", type=int, const=1_000_000, metavar="N",
                    help="only the memory of an offset beside Z @ A at N rows")
    ap.add_argument("--child", nargs=2, metavar=("N", "TRACED"), help=argparse.SUPPRESS)
    ap.add_argument("--offset-child", nargs=2, metavar=("N", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_size(int(args.child[0]), args.child[1] == "1")))
        return
    if args.offset_child:
        print(json.dumps(one_offset(int(args.offset_child[0]), args.offset_child[1])))
        return
    if args.offsets:
        offsets(args.offsets)
        return
    info = machine_info()
    t0 = time.perf_counter()
    sizes = [(1000, False), (10_000, False)]
    if not args.quick:
        sizes += [(100_000, False), (1_000_000, False)]
    if args.traced:
        sizes.append((100_000, True))
    # warm-up (numba and PyTensor caches) so that the first size's wall time is not cold
    subprocess.run([sys.executable, "-m", "benchmarks.large_n", "--child", "200", "0"],
                   check=True, capture_output=True, cwd=Path(__file__).parent.parent)
    rows = []
    for n, traced in sizes:
        print(f"N = {n}{' (Z traced)' if traced else ''}", flush=True)
        out = subprocess.run([sys.executable, "-m", "benchmarks.large_n", "--child", str(n),
                              "1" if traced else "0"], check=True, capture_output=True,
                             text=True, cwd=Path(__file__).parent.parent)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print_table([r], list(r))
    cols = ["N", "Z_in_trace", "wall_s", "sampling_s", "s_per_it", "peak_rss_mb", "X_mb",
            "Z_draw_mb", "Z_kept_mb", "Z_dtype", "K_plus_final", "true_K", "gap_to_truth",
            "kmax_hit"]
    thin = [r for r in rows if not r["Z_in_trace"].startswith("every draw")]
    slope = loglog_slope([r["N"] for r in thin], [r["s_per_it"] for r in thin])
    print()
    print_table(rows, cols)
    print(f"log-log slope of s_per_it vs N: {slope:.3f}")
    notes = [
        f"Log-log slope of seconds per iteration against N ({thin[0]['N']}–{thin[-1]['N']}): "
        f"{slope:.3f}.",
        "Model: the README's (K_max = 20); block_images(N, noise=0.5, seed=1); pm.sample(tune="
        f"{TUNE}, draws={DRAWS}, chains=1, cores=1), automatic steps (AcceleratedGibbs [Z, A], "
        "IBPAlphaGibbs, IBPScaleSlice); var_names = alpha, sigma_x, sigma_a, A and "
        f"pmi.KeepEvery({EVERY}) for Z, unless Z_in_trace says 'every draw'.",
        "wall_s: the pm.sample call (model compilation and step set-up included; numba caches "
        "warm); sampling_s: its sampling time; s_per_it = sampling_s / (tune + draws).",
        "peak_rss_mb: ru_maxrss of the process running that size alone (Python, PyMC, the data "
        "and the trace).  Z_draw_mb: one draw of Z (int8); Z_kept_mb: all kept draws of Z.",
        "gap_to_truth: collapsed log joint of the final Z minus the true Z's, at sigma_x 0.5, "
        "sigma_a 1, alpha 1 (positive: the chain's Z scores higher than the truth).",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("large_n_quick" if args.quick else "large_n", rows, cols,
                  "Large data on one machine: pm.sample from 10^3 to 10^6 rows", notes, info)


if __name__ == "__main__":
    main()
