"""Seconds per full sampler iteration vs N, for the three IBP samplers side by side.

One iteration is what ``pm.sample`` does per draw: the CompoundStep

    IBPAlphaGibbs [alpha]  ->  Z step (+ A)  ->  IBPScaleSlice [sigma_a, sigma_x]

driven by hand on a PyMC model (``alpha ~ Gamma(1, 1)``, ``sigma_a ~ HalfNormal(2)``,
``sigma_x ~ HalfNormal(1)``, ``K_max = 20``), where the Z step is

* ``accelerated``: ``pmi.AcceleratedGibbs`` (Z sweep with A integrated out, then the A draw);
* ``collapsed``:   ``pmi.CollapsedGibbs`` (same, with p(X | Z) recomputed per element);
* ``ibpgibbs+conjA``: ``pmi.IBPGibbs`` on Z (uncollapsed, K_max + 1 likelihood evaluations of
  the compiled PyMC model) followed by a *conjugate* draw of A | Z, X (the ConjugateA helper of
  ``_models.py``, the A update of the uncollapsed sampler of Doshi-Velez (2009, §3.1)).  NUTS on A
  is not
  timed here (its cost depends on its adaptation; it appears in mixing.py).

Data: block images (D = 36, ``pmi.datasets.block_images``, noise 0.5, K = 4) and synthetic
linear-Gaussian data (D = 161, ``pmi.datasets.ibp_linear_gaussian(N, 161, alpha=1,
sigma_x=0.5, sigma_a=1)``, K+ ~ Poisson(H_N) grows with log N).  Every chain starts at the true
Z, A and sigmas and takes one untimed warm-up iteration; then the samplers are timed
*interleaved* (rep 1 of every sampler, rep 2 of every sampler, ...) so they share the machine's
load.  Reported: median, min and max over the reps, and the log-log slope of the median time vs
N per sampler.  A sampler is dropped once an iteration exceeds 60 s or the extrapolation
``t(N_next) = t(N) (N_next/N)^max(1, local slope)`` says it would.

    python -m benchmarks.scaling [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ConjugateA, ibp_model, pad, timing_data
from benchmarks._timing import loglog_slope, spread

SAMPLERS = ["accelerated", "collapsed", "ibpgibbs+conjA"]
LIMIT_S = 60.0
K_MAX = 20


def make_data(kind, n):
    return timing_data(kind, n, K_MAX, seed=0)


def build_chain(sampler, data, sa, seed):
    """(model, [steps], initial point) for one sampler, started at the truth."""
    import pymc_ibp as pmi

    X = data.X
    model = ibp_model(X, K_MAX, sx_init=data.sigma_x, sa_init=sa, z_init=pad(data.Z, K_MAX),
                      a_init=pad(data.A, K_MAX))
    with model:
        Z, A = model["Z"], model["A"]
        if sampler == "accelerated":
            zsteps = [pmi.AcceleratedGibbs([Z], init_z="point")]
        elif sampler == "collapsed":
            zsteps = [pmi.CollapsedGibbs([Z], init_z="point")]
        else:
            zsteps = [pmi.IBPGibbs([Z]), ConjugateA([A], X=X)]
        steps = [pmi.IBPAlphaGibbs([model["alpha"]]), *zsteps,
                 pmi.IBPScaleSlice([model["sigma_a"], model["sigma_x"]])]
    rng = np.random.default_rng(seed)
    for s, r in zip(steps, rng.spawn(len(steps)), strict=True):
        s.setup_chain(r, tune=0, draws=100)
    return model, steps, model.initial_point()


def iterate(steps, point):
    """One CompoundStep iteration, timed: (point, total s, Z-step(+A) s)."""
    tz = 0.0
    t0 = time.perf_counter()
    for s in steps:
        t = time.perf_counter()
        point, _ = s.step(point)
        if not type(s).__name__.startswith(("IBPAlpha", "IBPScale")):
            tz += time.perf_counter() - t
    return point, time.perf_counter() - t0, tz


def run(kind, grid, reps_max, budget_s):
    rows = []
    alive = list(SAMPLERS)
    history = {s: [] for s in SAMPLERS}
    for n in grid:
        # drop by extrapolation
        for s in list(alive):
            h = history[s]
            if h:
                slope = 1.0
                if len(h) >= 2:
                    slope = max(1.0, np.log(h[-1][1] / h[-2][1]) / np.log(h[-1][0] / h[-2][0]))
                pred = h[-1][1] * (n / h[-1][0]) ** slope
                if pred > LIMIT_S:
                    print(f"  {kind} N={n}: dropping {s} (predicted {pred:.0f} s per iteration)")
                    rows.append(dict(data=kind, sampler=s, N=n,
                                     note=f"dropped: predicted {pred:.0f} s"))
                    alive.remove(s)
        if not alive:
            break
        data, sa = make_data(kind, n)
        chains = {}
        warm = {}
        times = {s: [] for s in alive}
        ztimes = {s: [] for s in alive}
        for i, s in enumerate(alive):
            t = time.perf_counter()
            chains[s] = list(build_chain(s, data, sa, seed=n + i))
            tb = time.perf_counter() - t
            _, steps, point = chains[s]
            # one untimed warm-up iteration (first-call costs), unless a sweep is known to be
            # slow (> 5 s): then the numba kernels are long loaded and the first rep counts
            h = history[s]
            if h and h[-1][1] * n / h[-1][0] > 5.0:
                point, tw, tz = iterate(steps, point)
                times[s].append(tw)
                ztimes[s].append(tz)
                label = "first timed iteration"
            else:
                point, tw, _ = iterate(steps, point)
                label = "warm-up iteration"
            chains[s][2] = point
            warm[s] = tw
            print(f"  {kind} N={n} {s}: build {tb:.1f} s, {label} {tw:.3f} s", flush=True)
        # reps from the budget: about budget_s seconds per (N, sampler), at least 2
        reps = {s: int(np.clip(budget_s / max(warm[s], 1e-3), 2, reps_max)) for s in alive}
        for _ in range(max(reps.values())):
            for s in alive:
                if len(times[s]) >= reps[s]:
                    continue
                _, steps, point = chains[s]
                point, t, tz = iterate(steps, point)
                chains[s][2] = point
                times[s].append(t)
                ztimes[s].append(tz)
        for s in list(alive):
            point = chains[s][2]
            kplus = int((np.asarray(point["Z"]).sum(axis=0) > 0).sum())
            sp = spread(times[s])
            row = dict(data=kind, sampler=s, N=n, D=data.d, K_plus=kplus, **sp,
                       z_step_median_s=float(np.median(ztimes[s])))
            rows.append(row)
            history[s].append((n, sp["median_s"]))
            if sp["median_s"] > LIMIT_S:
                alive.remove(s)
        acc = [r for r in rows
               if r.get("N") == n and r["sampler"] == "accelerated" and "median_s" in r]
        for r in rows:
            if r.get("N") == n and "median_s" in r and acc:
                r["x_accelerated"] = r["median_s"] / acc[0]["median_s"]
                r["z_x_accelerated"] = r["z_step_median_s"] / acc[0]["z_step_median_s"]
        print_table([r for r in rows if r.get("N") == n and "median_s" in r],
                    ["sampler", "N", "K_plus", "median_s", "min_s", "max_s", "reps",
                     "x_accelerated", "z_step_median_s", "z_x_accelerated"])
        del chains
    slopes = []
    for s in SAMPLERS:
        h = history[s]
        if len(h) >= 2:
            slopes.append(dict(data=kind, sampler=s, N_range=f"{h[0][0]}-{h[-1][0]}",
                               slope=loglog_slope([a for a, _ in h], [b for _, b in h]),
                               slope_N_ge_1000=loglog_slope([a for a, _ in h if a >= 1000],
                                                            [b for a, b in h if a >= 1000])))
    return rows, slopes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N up to 1000 (block) / 300 (D=161)")
    args = ap.parse_args()
    quiet()  # truncation / imputation warnings are not timing concerns
    info = machine_info()
    t0 = time.perf_counter()
    if args.quick:
        grids = {"block": [100, 300, 1000], "synthetic": [100, 300]}
        reps_max, budget = 3, 1.0
    else:
        full = [100, 300, 1000, 3000, 10_000, 30_000, 100_000]
        grids = {"block": full, "synthetic": full}
        reps_max, budget = 7, 4.0
    for s in SAMPLERS:  # load / compile the numba kernels once, before any timing
        data, sa = make_data("block", 50)
        _, steps, point = build_chain(s, data, sa, seed=0)
        iterate(steps, point)
    rows, slopes = [], []
    for kind, grid in grids.items():
        r, s = run(kind, grid, reps_max, budget)
        rows += r
        slopes += s
    print("\nlog-log slopes of the median iteration time vs N:")
    print_table(slopes, ["data", "sampler", "N_range", "slope", "slope_N_ge_1000"])
    name = "scaling_quick" if args.quick else "scaling"
    notes = [
        "One iteration = IBPAlphaGibbs + Z step (+ A) + IBPScaleSlice (one pm.sample draw), "
        "driven by hand; K_max = 20; chains start at the true Z, A, sigmas; samplers timed "
        "interleaved; `x_accelerated` = median time / accelerated median time at that N.",
        "`ibpgibbs+conjA`: pmi.IBPGibbs on Z plus a conjugate Gaussian draw of A | Z, X "
        "(benchmarks/_models.py::ConjugateA), not NUTS.",
        "`z_step_median_s`: the Z step (+ A draw) alone; the rest is alpha + the two scales "
        "(IBPScaleSlice computes ||X - ZA||^2, O(N K_max D)); `z_x_accelerated` is its ratio "
        "to the accelerated Z step.",
        f"Dropped once an iteration exceeds {LIMIT_S:.0f} s or is predicted to.",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    cols = ["data", "sampler", "N", "D", "K_plus", "median_s", "min_s", "max_s", "reps",
            "x_accelerated", "z_step_median_s", "z_x_accelerated", "note"]
    write_results(name, rows, cols, "Seconds per sampler iteration vs N", notes, info,
                  extra_tables=[("log-log slopes (median time vs N)", slopes,
                                 ["data", "sampler", "N_range", "slope", "slope_N_ge_1000"])])


if __name__ == "__main__":
    main()
