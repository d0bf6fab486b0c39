"""Arithmetic throughput of the accelerated sweep, as a fraction of one core's dgemm rate.

Times ``kernels.accelerated_sweep`` (the numba kernel of ``pmi.AcceleratedGibbs``: one Z sweep
with A integrated out, refresh every ``max(5, N/10)`` rows as in the step) and divides the
number of floating-point operations the algorithm performs by the measured time.  The
reference rate is a numpy matrix product (OpenBLAS dgemm, 1 thread) measured in the same run.

Flop count of one sweep (counted from the code of ``kernels.accelerated_sweep``; a multiply-add
is 2 flops, ``log``/``exp``/division 1 flop each).  Symbols: ``N`` rows, ``D`` dimensions,
``k`` active features (the mean of K+ before and after the sweep), ``K_max`` slots, ``n_i``
ones in row ``i``, ``S1 = sum n_i`` and ``S2 = sum n_i^2`` before (``b``) and after (``a``) the
sweep, ``T = N k`` flip tests (an upper bound: a row's own singletons are not tested),
``F`` flips actually made (the kernel's return value), ``r`` the refresh interval::

    rank-one down/updates (row_update x 2 per row):
        N * 2 (2k^2 + 2kD + 4k + 2D) + (k + D)(S1b + S1a)   # Sigma, mu, v = Sigma z, x - z mu
    statistics G = Z'Z, RX = Z'X (row out and back in):
        D (S1b + S1a) + (S2b + S2a)
    Gibbs row set-up (v = Sigma z, residual):      N (2k + 2D) + (k + D) S1b
    flip tests (r'mu_a, |mu_a|^2, two log-densities): T (4D + 20)
    flips (residual and v updates):                 F (2D + 2k)
    prior log-odds and the birth count:             N (3k + 8 (K_max - k + 1))  (an upper
                                                    bound: the count stops at negligible terms)
    refreshes (P, Cholesky, inverse, mu = Sigma RX): ceil(N/r) (4/3 k^3 + 2 k^2 D + k^2)
    initial statistics:                             D S1b + S2b

The leading term is ``N (4k^2 + 8kD)``: the O(N(K^2 + KD)) of Doshi-Velez & Ghahramani (2009, §4).
The achieved rate
is low by construction: the kernel is scalar loops over short vectors (k ~ 4-12, D = 36 or
161) with a data-dependent branch per entry, which cannot use the wide vector units dgemm
saturates.

    python -m benchmarks.throughput [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import pad, timing_data
from benchmarks._timing import spread

K_MAX = 20


def sweep_flops(N, D, k, k_max, S1b, S1a, S2b, S2a, flips, refresh):
    """The counting formula of the module docstring."""
    T = N * k
    return (N * 2 * (2 * k * k + 2 * k * D + 4 * k + 2 * D) + (k + D) * (S1b + S1a)
            + D * (S1b + S1a) + (S2b + S2a)
            + N * (2 * k + 2 * D) + (k + D) * S1b
            + T * (4 * D + 20)
            + flips * (2 * D + 2 * k)
            + N * (3 * k + 8 * (k_max - k + 1))
            + math.ceil(N / refresh) * (4 / 3 * k ** 3 + 2 * k * k * D + k * k)
            + D * S1b + S2b)


def dgemm_rate(size=1500, reps=5):
    """Best and median GFLOP/s of a size x size numpy matrix product (1 BLAS thread)."""
    import contextlib

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # OMP/OPENBLAS_NUM_THREADS=1 are set by benchmarks/__init__.py
        def threadpool_limits(_):
            return contextlib.nullcontext()

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    rates = []
    with threadpool_limits(1):
        a @ b
        for _ in range(reps):
            t = time.perf_counter()
            a @ b
            rates.append(2.0 * size ** 3 / (time.perf_counter() - t) / 1e9)
    return max(rates), float(np.median(rates))


def measure(kind, n, reps, seed=0):
    from pymc_ibp import kernels

    data, sa = timing_data(kind, n, K_MAX, seed=seed)
    sa2 = sa * sa
    X = data.X
    D = X.shape[1]
    Z = pad(data.Z, K_MAX)
    sx2 = data.sigma_x ** 2
    refresh = max(5, n // 10)
    noise = kernels.noise_blocks(sx2, sa2, D)
    rng = np.random.default_rng(seed)

    def one():
        m = Z.sum(axis=0).astype(np.int64)
        rs = Z.sum(axis=1)
        kb, S1b, S2b = int((m > 0).sum()), float(rs.sum()), float((rs * rs).sum())
        t = time.perf_counter()
        flips, births, deaths, *_ = kernels.accelerated_sweep(
            rng, Z, X, m, noise, kernels.SweepPrior.counts(1.0, 1.0), refresh)
        dt = time.perf_counter() - t
        rs = Z.sum(axis=1)
        ka, S1a, S2a = int((Z.sum(axis=0) > 0).sum()), float(rs.sum()), float((rs * rs).sum())
        k = 0.5 * (kb + ka)
        fl = sweep_flops(n, D, k, K_MAX, S1b, S1a, S2b, S2a, flips, refresh)
        return dt, fl, flips, births + deaths, k

    one()  # warm-up (numba cache load) and settle
    res = [one() for _ in range(reps)]
    dts = [r[0] for r in res]
    flops = float(np.median([r[1] for r in res]))
    row = dict(data=kind, N=n, D=D, K_plus=float(np.median([r[4] for r in res])),
               flips_per_sweep=float(np.median([r[2] for r in res])),
               births_deaths=float(np.median([r[3] for r in res])),
               mflop_per_sweep=flops / 1e6, **spread(dts))
    rates = np.array([r[1] / r[0] for r in res]) / 1e9
    row["gflops_median"] = float(np.median(rates))
    row["gflops_min"] = float(rates.min())
    row["gflops_max"] = float(rates.max())
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    info = machine_info()
    t0 = time.perf_counter()
    grid = [("block", 1000), ("synthetic", 1000)] if args.quick else [
        ("block", 1000), ("block", 10000), ("block", 100000),
        ("synthetic", 1000), ("synthetic", 10000)]
    reps = 5 if args.quick else 7
    peak_before = dgemm_rate()
    rows = []
    for kind, n in grid:
        rows.append(measure(kind, n, reps))
        print_table([rows[-1]], ["data", "N", "K_plus", "mflop_per_sweep", "median_s",
                                 "gflops_median"])
    peak_after = dgemm_rate()
    peak = max(peak_before[0], peak_after[0])
    for r in rows:
        r["dgemm_gflops"] = peak
        r["fraction_of_dgemm"] = r["gflops_median"] / peak
        r["fraction_min"] = r["gflops_min"] / peak
        r["fraction_max"] = r["gflops_max"] / peak
    cols = ["data", "N", "D", "K_plus", "flips_per_sweep", "mflop_per_sweep", "median_s",
            "min_s", "max_s", "gflops_median", "fraction_of_dgemm", "fraction_min",
            "fraction_max"]
    print()
    print_table(rows, cols)
    print(f"\none-core dgemm (1500^3, 1 thread): best {peak:.1f} GFLOP/s "
          f"(before {peak_before[0]:.1f}/median {peak_before[1]:.1f}, "
          f"after {peak_after[0]:.1f}/median {peak_after[1]:.1f})")
    notes = [
        f"Reference: numpy dgemm 1500x1500, 1 BLAS thread, best of 5 before and after the "
        f"sweeps: {peak:.1f} GFLOP/s (medians {peak_before[1]:.1f} / {peak_after[1]:.1f}).",
        "Sweep = kernels.accelerated_sweep alone (no A draw, no hyperparameters), started at the "
        f"true Z (K_max = {K_MAX}), true sigmas, alpha = 1; median over {reps} sweeps after a "
        "warm-up; fraction_min/max from the slowest/fastest sweep.",
        "Flop counting formula (constants) in the docstring of benchmarks/throughput.py; flips "
        "are the kernel's own counts.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("throughput_quick" if args.quick else "throughput", rows, cols,
                  "Accelerated sweep: flops / time vs one core's dgemm rate", notes, info)


if __name__ == "__main__":
    main()
