"""Cost of column blocks with their own scales in the accelerated sampler, and what the fast
path saves against the uncollapsed fallback.

Given ``Z`` the columns of ``X`` are independent, so one ``Z`` shared by several observed
matrices (each with its own ``A``, ``sigma_x``, ``sigma_a``) or a noise scale per dimension is a
set of ``B`` column blocks, each with its own feature posterior (``kernels.Noise``).  The sweep
then costs ``O(N(B K^2 + K D))`` instead of ``O(N(K^2 + K D))``.

Part 1 (kernel): one Z step of ``pmi.AcceleratedGibbs`` (accelerated sweep + 5 split-merge +
3 birth/death proposals) on block images (D = 36, K_max = 20, started at the true Z) with
``B = 1`` (scalar scales), ``B = 2`` (two observed matrices of 18 columns with their own
scales) and ``B = 36`` (a distinct noise scale per dimension), the scales close to the data's so
that the state stays at the truth's structure; median over repetitions and the ratio to
``B = 1``, all in one run.

Part 2 (``pm.sample``): the two-observed-matrices model with the automatic steps
(``AcceleratedGibbs`` for ``Z``, ``A1``, ``A2``; ``IBPScaleSlice`` for the four scales) against
the same model with ``pmi.IBPGibbs`` on ``Z`` and NUTS on ``A1``, ``A2`` and the scales (what
PyMC assigned to this model before the block kernels), one chain each from the same seed:
seconds per iteration and the answer (large features, posterior mean of ``sigma_x1``,
``sigma_x2`` against the truth 0.5 and 0.25).

    python -m benchmarks.column_blocks [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import pad
from benchmarks._timing import IterationClock

K_MAX = 20


def kernel_rows(n, reps):
    import pymc_ibp as pmi
    from pymc_ibp import kernels

    data = pmi.datasets.block_images(n, noise=0.5, seed=1)
    X, d = data.X, data.X.shape[1]
    Z0 = pad(data.Z, K_MAX)
    layouts = {
        "scalar (B=1)": (np.full(d, 0.25), np.full(d, 1.0)),
        # distinct scales close to the data's (noise 0.5, features of size 1), so that every
        # layout sees the same posterior structure and only the cost of the blocks differs
        "two matrices (B=2)": (np.repeat([0.25, 0.24], d // 2), np.repeat([1.0, 1.1], d // 2)),
        "per dimension (B=36)": (np.linspace(0.2, 0.3, d), np.full(d, 1.0)),
    }
    rows = []
    for name, (sx2, sa2) in layouts.items():
        noise = kernels.noise_blocks(sx2, sa2, d)
        trXX = kernels.block_sq_norms(X, noise)
        times = {"sweep": [], "moves": []}
        for rep in range(reps + 1):
            rng = np.random.default_rng(rep)
            Z = Z0.copy()
            m = Z.sum(axis=0).astype(np.int64)
            t0 = time.perf_counter()
            kernels.accelerated_sweep(rng, Z, X, m, noise, kernels.SweepPrior.counts(1.0, 1.0),
                                      max(5, n // 10))
            t1 = time.perf_counter()
            kernels.sequential_split_merge(rng, Z, X, m, noise, 1.0, 1.0, 5, trXX)
            kernels.sequential_birth_death(rng, Z, X, m, noise, 1.0, 1.0, 3, 64, trXX)
            t2 = time.perf_counter()
            if rep:  # the first repetition loads the numba cache
                times["sweep"].append(t1 - t0)
                times["moves"].append(t2 - t1)
        sweep, moves = (float(np.median(times[k])) for k in ("sweep", "moves"))
        rows.append(dict(N=n, layout=name, B=len(noise.sx2), sweep_ms=1e3 * sweep,
                         moves_ms=1e3 * moves, z_step_ms=1e3 * (sweep + moves)))
    base = rows[0]["z_step_ms"]
    for r in rows:
        r["ratio_to_B1"] = r["z_step_ms"] / base
    return rows


def two_matrix_model(n, k_max):
    import pymc as pm

    import pymc_ibp as pmi

    data = pmi.datasets.block_images(n, noise=0.5, seed=11)
    rng = np.random.default_rng(21)
    A1, A2 = data.A[:, :18], 2.0 * data.A[:, 18:]
    X1 = data.Z @ A1 + 0.5 * rng.standard_normal((n, 18))
    X2 = data.Z @ A2 + 0.25 * rng.standard_normal((n, 18))
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        sa1 = pm.HalfNormal("sigma_a1", 2.0)
        sa2 = pm.HalfNormal("sigma_a2", 4.0)
        B1 = pm.Normal("A1", 0.0, sa1, shape=(k_max, 18))
        B2 = pm.Normal("A2", 0.0, sa2, shape=(k_max, 18))
        pm.Normal("X1", mu=Z @ B1, sigma=pm.HalfNormal("sigma_x1", 1.0), observed=X1)
        pm.Normal("X2", mu=Z @ B2, sigma=pm.HalfNormal("sigma_x2", 1.0), observed=X2)
    return model


def sample_rows(n, tune, draws):
    import pymc as pm

    import pymc_ibp as pmi

    rows = []
    for label in ("automatic (AcceleratedGibbs)", "IBPGibbs on Z + NUTS (before)"):
        model = two_matrix_model(n, 12)
        clock = IterationClock()
        with model:
            step = None
            if label.startswith("IBPGibbs"):  # before the block kernels: IBPGibbs + NUTS
                rest = [model[v] for v in ("A1", "A2", "sigma_a1", "sigma_a2", "sigma_x1",
                                           "sigma_x2")]
                step = [pmi.IBPGibbs([model["Z"]]), pm.NUTS(rest)]
            t0 = time.perf_counter()
            idata = pm.sample(tune=tune, draws=draws, chains=1, cores=1, random_seed=3,
                              step=step, progressbar=False, compute_convergence_checks=False,
                              callback=clock)
            wall = time.perf_counter() - t0
        post = idata["posterior"]
        Z = post["Z"].values[0]
        large = np.array([int((z.sum(axis=0) > n // 15).sum()) for z in Z[-draws // 2:]])
        rows.append(dict(N=n, steps=label, s_per_iteration=clock.per_iteration(),
                         wall_s=wall, large_features=float(np.median(large)),
                         sigma_x1=float(post["sigma_x1"].mean()),
                         sigma_x2=float(post["sigma_x2"].mean())))
        print_table(rows[-1:], list(rows[-1]))
    rows[1]["slowdown"] = rows[1]["s_per_iteration"] / rows[0]["s_per_iteration"]
    rows[0]["slowdown"] = 1.0
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    info = machine_info()
    t0 = time.perf_counter()
    krows = []
    for n in ([1000] if args.quick else [1000, 10000]):
        krows += kernel_rows(n, 5 if args.quick else 15)
    kcols = ["N", "layout", "B", "sweep_ms", "moves_ms", "z_step_ms", "ratio_to_B1"]
    print_table(krows, kcols)
    n, tune, draws = (300, 30, 30) if args.quick else (1000, 100, 100)
    srows = sample_rows(n, tune, draws)
    scols = ["N", "steps", "s_per_iteration", "slowdown", "wall_s", "large_features",
             "sigma_x1", "sigma_x2"]
    print()
    print_table(srows, scols)
    notes = [
        "Kernel table: medians over repetitions of one Z step from the true Z (K_max = 20); "
        "B = 2: noise variances 0.25 / 0.24 and feature variances 1 / 1.1; B = 36: distinct "
        "per-dimension noise variances 0.2..0.3 (data: noise 0.5).",
        f"Sampling table: one chain, tune = {tune}, draws = {draws}, random_seed = 3; "
        "s_per_iteration = median post-tuning iteration (pm.sample callback); large_features ="
        " median over the second half of the draws of the number of columns owned by more "
        "than N/15 rows (truth: 4); the true sigma_x1, sigma_x2 are 0.5 and 0.25.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("column_blocks_quick" if args.quick else "column_blocks", krows, kcols,
                  "Column blocks (several observed matrices, per-dimension scales)", notes,
                  info, extra_tables=[("pm.sample: fast path vs uncollapsed fallback", srows,
                                       scols)])


if __name__ == "__main__":
    main()
