"""Seconds per sweep of the dependent IBP's samplers against the number of covariate values M
and of rows N (Williamson, Orbanz & Ghahramani 2010; cost model O(NK + KM + KM^3) for
DependentIBPGibbs plus the Z step).

Data: pmi.datasets.dependent_glyphs-style images (8 glyphs, 8x8, noise 0.5) spread evenly
over M covariate values; model pmi.dependent_ibp (squared-exponential kernel, fixed length
scale so that only the plugin's steps run), K = 20, A ~ Normal(0, 1), X ~ Normal(Z @ A, 0.5).
Each step method is timed on its own over --sweeps sweeps after 3 warm-up sweeps (numba
compiled), from the same state.  Peak resident memory of the process is reported at the end.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from benchmarks._machine import machine_info, print_table, write_results

COLS = ["N", "M", "dibp_gibbs_s", "no_joint_s", "accelerated_s", "sweep_s", "dibp_share"]


def build(n, m, k, seed):
    import pymc as pm

    import pymc_ibp as pmi

    rng = np.random.default_rng(seed)
    A = pmi.datasets.GLYPHS_8X8.astype(float)
    t = np.repeat(np.arange(m, dtype=float), int(np.ceil(n / m)))[:n]
    Z = (rng.random((n, 8)) < 0.3).astype(float)
    X = Z @ A + 0.5 * rng.standard_normal((n, 64))
    with pm.Model(coords={"obs": range(n), "feature": range(k), "dim": range(64)}) as model:
        dibp = pmi.dependent_ibp("Z", t, alpha=2.0, length_scale=max(2.0, m / 8),
                                 dims=("obs", "feature"))
        Av = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Normal("X", mu=dibp.Z @ Av, sigma=0.5, observed=X, dims=("obs", "dim"))
        steps = [pmi.DependentIBPGibbs([dibp.sticks, dibp.g], joint_moves=True),
                 pmi.AcceleratedGibbs([dibp.Z, Av]),
                 pmi.DependentIBPGibbs([dibp.sticks, dibp.g], joint_moves=False)]
    return model, steps


def time_steps(n, m, k, sweeps, seed):
    model, steps = build(n, m, k, seed)
    rng = np.random.default_rng(seed)
    for s in steps:
        s.setup_chain(rng, tune=0, draws=sweeps)
    point = model.initial_point()
    for _ in range(3):
        for s in steps[:2]:
            point, _ = s.step(point)
    steps[2].step(point)  # compile / warm up the variant without joint moves
    out = []
    for s in steps:
        t0 = time.perf_counter()
        p = dict(point)
        for _ in range(sweeps):
            p, _ = s.step(p)
        out.append((time.perf_counter() - t0) / sweeps)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    info = machine_info()
    grid = [(1000, 10), (1000, 40), (1000, 160), (1000, 640),
            (10_000, 40), (100_000, 40), (100_000, 640)]
    if args.quick:
        grid, args.sweeps = [(500, 10), (500, 40)], 5
    rows = []
    for n, m in grid:
        g, a, g0 = time_steps(n, m, args.k, args.sweeps, seed=n + m)
        rows.append({"N": n, "M": m, "dibp_gibbs_s": g, "no_joint_s": g0, "accelerated_s": a,
                     "sweep_s": g + a, "dibp_share": g / (g + a)})
        print_table(rows[-1:], COLS)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print_table(rows, COLS)
    print(f"peak RSS {peak_mb:.0f} MB")
    notes = [
        f"K = {args.k}, D = 64; seconds per sweep, mean over {args.sweeps} sweeps after 3 "
        "warm-up sweeps; each step timed alone from the same state; length scales fixed "
        "(the HMC / NUTS update of the length scales is not included).",
        "dibp_gibbs_s: DependentIBPGibbs (sticks, joint moves of g_k and column k of Z: 2K "
        "row-likelihood evaluations and elliptical slice sampling, h for all N K entries, K "
        "Cholesky factors of M x M); no_joint_s: the same with joint_moves=False; "
        "accelerated_s: AcceleratedGibbs for Z and A with the dIBP's per-entry prior "
        "log-odds; sweep_s = dibp_gibbs_s + accelerated_s.",
        f"Peak resident memory of the run (largest size last): {peak_mb:.0f} MB.",
        "Command: python -m benchmarks.dibp_speed" + (" --quick" if args.quick else ""),
    ]
    write_results("dibp_speed_quick" if args.quick else "dibp_speed", rows, COLS,
                  "Dependent IBP: seconds per sweep against M and N", notes, info)


if __name__ == "__main__":
    main()
