"""Seconds per Z sweep (plus the A draw) of AcceleratedGibbs and CollapsedGibbs vs N.

Block images (D = 36), sigma_x = 0.5, sigma_a = 1, alpha = 1, K_max = 20, started from the true
Z (4 features) so every N is timed at the same K.  Kernels are warmed up first (numba compile
excluded).  Prints a table, writes CSV + markdown to benchmarks/results/, and the log-log slope.

    python benchmarks/sweep_scaling.py [--quick]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from pymc_ibp.datasets import block_images
from pymc_ibp.step_methods import kernels

RESULTS = Path(__file__).parent / "results"


def time_sweeps(kind, n, reps, k_max=20, seed=0):
    data = block_images(n, noise=0.5, seed=seed)
    rng = np.random.default_rng(seed)
    Z = np.zeros((n, k_max), dtype=np.int64)
    Z[:, :4] = data.Z
    X = data.X
    times = []
    for _ in range(reps):
        m = Z.sum(axis=0).astype(np.int64)
        t = time.perf_counter()
        if kind == "accelerated":
            kernels.accelerated_sweep(rng, Z, X, m, 0.25, 1.0, 1.0, 1.0, max(5, n // 10), False)
        else:
            kernels.collapsed_sweep(rng, Z, X, m, 0.25, 1.0, 1.0, 1.0, float((X * X).sum()))
        kernels.draw_features(rng, Z, X, 0.25, 1.0)
        times.append(time.perf_counter() - t)
    k = int((Z.sum(axis=0) > 0).sum())
    return float(np.median(times)), float(np.min(times)), float(np.max(times)), k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    grid = [1000, 3000, 10000] if args.quick else [1000, 3000, 10000, 30000, 100000]
    time_sweeps("accelerated", 50, 1)  # compile / load cache
    time_sweeps("collapsed", 50, 1)
    rows = []
    for n in grid:
        reps = 5 if n <= 10000 else 3
        med, lo, hi, k = time_sweeps("accelerated", n, reps)
        rows.append(("accelerated", n, med, lo, hi, k))
        print(f"accelerated N={n:>6}  median {med * 1e3:9.2f} ms  [{lo * 1e3:.2f}, {hi * 1e3:.2f}]  K+={k}")
    for n in [1000] if args.quick else [1000, 3000]:
        med, lo, hi, k = time_sweeps("collapsed", n, 3)
        rows.append(("collapsed", n, med, lo, hi, k))
        print(f"collapsed   N={n:>6}  median {med * 1e3:9.2f} ms  [{lo * 1e3:.2f}, {hi * 1e3:.2f}]  K+={k}")
    acc = [(r[1], r[2]) for r in rows if r[0] == "accelerated"]
    slope = np.polyfit(np.log([a[0] for a in acc]), np.log([a[1] for a in acc]), 1)[0]
    ratio = [r[2] for r in rows if r[0] == "collapsed" and r[1] == 1000][0] / acc[0][1]
    RESULTS.mkdir(exist_ok=True)
    name = "sweep_scaling_quick" if args.quick else "sweep_scaling"
    with open(RESULTS / f"{name}.csv", "w") as f:
        f.write("sampler,N,median_s,min_s,max_s,K_plus\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    md = [f"# Sweep time vs N (block images, D=36, K_max=20)\n",
          f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}\n",
          "| sampler | N | median ms | min ms | max ms | K+ |", "|---|---|---|---|---|---|"]
    md += [f"| {r[0]} | {r[1]} | {r[2] * 1e3:.2f} | {r[3] * 1e3:.2f} | {r[4] * 1e3:.2f} | {r[5]} |" for r in rows]
    md += ["", f"accelerated log-log slope (time vs N): {slope:.3f}",
           f"collapsed / accelerated at N=1000: {ratio:.1f}x"]
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"\nlog-log slope {slope:.3f}; collapsed/accelerated at N=1000: {ratio:.1f}x")


if __name__ == "__main__":
    main()
