"""Cost of one pmi.PolyaGammaGibbs step against the number of rows N (Bernoulli-logit model).

Data: binary block images generated from the model (``pmi.datasets.binary_block_images``:
``logit = 4 Z G - 2`` with the four glyphs ``G``, D = 36), N = 10^3, 10^4, 10^5 (``--large``:
also 10^6).  Model:
``Z ~ pmi.IBP(2)`` with ``K_max = 16``, ``A ~ Normal(0, 3)``, ``b ~ Normal(-2, 2)``,
``X ~ Bernoulli(logit_p = Z @ A + b)``.  The step is driven by hand (``init_z="point"``, from
the true Z so that every N starts from the same four features; the table gives K+ after the
steps): ``WARMUP`` steps, then the median wall time of
``REPS`` steps, split into the Pólya-Gamma draws, the Z sweep with A and b integrated out,
the (A, b) draw and the sweep of Z given A (timed with the same kernels on the same state);
peak resident memory of the process after the steps at each N (before the parts are timed;
sizes run in increasing order, so it is the peak up to that N) and the log-log slope of the
step time against N.

    python -m benchmarks.logit_scaling [--quick] [--large]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results

COLS = ["N", "D", "K_max", "K_plus", "step_s", "pg_draws_s", "z_sweep_s", "weights_s",
        "feature_sweep_s",
        "s_per_million_entries", "peak_rss_mb"]
K_MAX, WARMUP, REPS = 16, 1, 3


def data(n, seed=0):
    import pymc_ibp as pmi

    blocks = pmi.datasets.binary_block_images(n, seed=seed)
    return blocks.X, blocks.Z  # X: int8


def run(n):
    import pymc as pm

    import pymc_ibp as pmi
    from pymc_ibp import kernels

    X, z_true = data(n)
    d = X.shape[1]
    with pm.Model() as model:
        Z = pmi.IBP("Z", 2.0, shape=(n, K_MAX))
        pm.Normal("A", 0.0, 3.0, shape=(K_MAX, d))
        pm.Normal("b", -2.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=Z @ model["A"] + model["b"], observed=X)
        step = pmi.PolyaGammaGibbs([Z], init_z="point")
    point = model.initial_point()
    z0 = np.zeros((n, K_MAX), dtype=point["Z"].dtype)
    z0[:, : z_true.shape[1]] = z_true
    point["Z"] = z0
    step.setup_chain(np.random.default_rng(1), tune=0, draws=WARMUP + REPS)
    for _ in range(WARMUP):
        point, _ = step.step(point)
    times = []
    for _ in range(REPS):
        t = time.perf_counter()
        point, [stats] = step.step(point)
        times.append(time.perf_counter() - t)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # before the parts
    # the parts, on the state reached (each kernel called once before it is timed), with the
    # step's own kernels for its N x D arrays (no offset besides b, which is integrated out)
    rng = np.random.default_rng(2)
    Zc = np.array(point["Z"], dtype=np.int8)
    A = np.ascontiguousarray(point["A"], dtype=np.float64)
    b = np.asarray(point["b"], dtype=np.float64)
    no_off = np.zeros((1, d))
    psi = kernels.logit_linear_predictor(Zc, A, b, no_off, kernels.NO_ROWS,
                                         np.empty((n, d)))
    obs = np.ones(X.shape, dtype=bool)
    sa2 = np.full(d, 9.0)

    def timed(fn):
        fn()
        t = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t

    W, t_pg = timed(lambda: kernels.polya_gamma_matrix(rng, psi, obs))
    # b integrated out: its prior mean -2 moved into Y
    Y = kernels.logit_targets(X, obs, W, np.full(d, -2.0), no_off, kernels.NO_ROWS, True,
                              np.empty((n, d)))
    Zb = np.concatenate([Zc, np.ones((n, 1), dtype=np.int8)], axis=1)
    V = np.column_stack([np.repeat(sa2[:, None], K_MAX, axis=1), np.full(d, 4.0)])
    _, t_sweep = timed(lambda: kernels.logit_collapsed_sweep(
        rng, Zb.copy(), Y, W, V, Zc.sum(axis=0).astype(np.int64),
        kernels.SweepPrior.counts(2.0, 1.0), 1))
    kappa = kernels.logit_targets(X, obs, W, np.zeros(d), no_off, kernels.NO_ROWS, False, Y)
    b_mean = np.column_stack([np.zeros((d, K_MAX)), np.full(d, -2.0)])
    _, t_w = timed(lambda: kernels.draw_logit_weights(rng, Zb, kappa, W, V, b_mean))
    _, t_f = timed(lambda: kernels.logit_feature_sweep(
        rng, Zc.copy(), X, obs, psi.copy(), A, Zc.sum(axis=0).astype(np.int64),
        kernels.SweepPrior.counts(1.0, 1.0)))
    step_s = float(np.median(times))
    return {"N": n, "D": d, "K_max": K_MAX, "K_plus": int(stats["ibp_n_active"]),
            "step_s": step_s, "pg_draws_s": t_pg, "z_sweep_s": t_sweep, "weights_s": t_w,
            "feature_sweep_s": t_f,
            "s_per_million_entries": step_s / (n * d) * 1e6,
            "peak_rss_mb": peak_mb}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 10^3, 10^4 only")
    ap.add_argument("--large", action="store_true", help="also N = 10^6")
    args = ap.parse_args()
    quiet()
    info = machine_info()
    sizes = [1000, 10000] if args.quick else [1000, 10000, 100000]
    if args.large:
        sizes.append(1000000)
    rows = []
    for n in sizes:
        rows.append(run(n))
        print_table(rows[-1:], COLS)
    slope = float(np.polyfit(np.log([r["N"] for r in rows]),
                             np.log([r["step_s"] for r in rows]), 1)[0])
    print()
    print_table(rows, COLS)
    print(f"log-log slope of step_s against N: {slope:.2f}")
    notes = [
        "Binary block images from the model (logit 4 Z A - 2, D = 36); pmi.PolyaGammaGibbs on "
        "Z, A, b with K_max = 16, started at the true Z (init_z='point'); step_s = median of "
        f"{REPS} steps after {WARMUP} warm-up step(s), one process, one core for the kernels.",
        "pg_draws_s, z_sweep_s, weights_s, feature_sweep_s: the step's four kernels timed "
        "once each (after one untimed call) on the state reached (Pólya-Gamma draws, Z sweep "
        "with A and b integrated out, (A, b) draw, sweep of Z given A); "
        "peak_rss_mb: the process's peak resident memory after the steps at that size (before "
        "the parts are timed; sizes run in increasing order), data and model included.",
        f"log-log slope of step_s against N: {slope:.2f}.",
        "Command: python -m benchmarks.logit_scaling" + (" --quick" if args.quick else "")
        + (" --large" if args.large else ""),
    ]
    name = "logit_scaling_quick" if args.quick else "logit_scaling"
    write_results(name, rows, COLS, "PolyaGammaGibbs: cost of a step against N", notes, info)


if __name__ == "__main__":
    main()
