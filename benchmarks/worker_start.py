"""What parallel chains cost to start: ``pm.sample(chains=2)`` in the main process
(``cores=1``) against two worker processes started by ``fork`` and by ``spawn`` (the default
on macOS and Windows, where every worker imports the packages afresh, receives the pickled
steps and loads the compiled kernels from numba's on-disk cache).

Models (20 rows, small enough for the start to dominate): ``plain`` (PyMC alone: a Bernoulli
likelihood with NUTS, the baseline of what a spawned worker costs), ``linear_gaussian`` (the
README's model: ``AcceleratedGibbs``, ``IBPAlphaGibbs``, ``IBPScaleSlice``), ``logit``
(``Z @ A + b`` in a Bernoulli-logit likelihood: ``PolyaGammaGibbs``, whose surrogate start
runs an ``AcceleratedGibbs`` search) and ``student_t`` (``IBPGibbs`` with NUTS, also with a
surrogate start).  Each model is sampled once with ``cores=1`` first (its kernels loaded in the
main process), then timed: ``cores=1``, ``fork`` and ``spawn`` (``cores=2``), best of
``--repeats`` (default 2), 10 + 10 iterations per chain.  ``spawn_minus_plain_s`` is what the
plugin adds to a spawned start beyond PyMC's own.

    python -m benchmarks.worker_start [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model

COLS = ["model", "steps", "cores1_s", "fork_s", "spawn_s", "spawn_over_cores1",
        "spawn_minus_plain_s"]


def build(name):
    import pymc as pm

    import pymc_ibp as pmi

    rng = np.random.default_rng(0)
    if name == "linear_gaussian":
        return ibp_model(rng.normal(size=(20, 8)), 6)
    with pm.Model() as model:
        if name == "plain":
            A = pm.Normal("A", 0.0, 2.0, shape=(6, 8))
            b = pm.Normal("b", -1.0, 2.0, shape=8)
            pm.Bernoulli("X", logit_p=A.sum(0) + b,
                         observed=(rng.random((20, 8)) < 0.3).astype("int64"))
        elif name == "logit":
            alpha = pm.Gamma("alpha", 2.0, 1.0)
            Z = pmi.IBP("Z", alpha, shape=(20, 6))
            A = pm.Normal("A", 0.0, 2.0, shape=(6, 8))
            b = pm.Normal("b", -1.0, 2.0, shape=8)
            pm.Bernoulli("X", logit_p=Z @ A + b,
                         observed=(rng.random((20, 8)) < 0.3).astype("int64"))
        else:
            Z = pmi.IBP("Z", 1.0, shape=(20, 6))
            A = pm.Normal("A", 0.0, 1.0, shape=(6, 8))
            pm.StudentT("X", nu=4, mu=Z @ A, sigma=0.5, observed=rng.normal(size=(20, 8)))
    return model


def timed(model, repeats, **kw):
    import pymc as pm

    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        with model:
            pm.sample(draws=10, tune=10, chains=2, random_seed=5, progressbar=False,
                              compute_convergence_checks=False, **kw)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    from pymc.sampling.mcmc import assign_step_methods

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per setting (best of)")
    args = ap.parse_args()
    quiet()
    os.environ["PYTHONWARNINGS"] = "ignore"  # the spawned workers too (they do not see quiet())
    info = machine_info()
    rows = []
    for name in ["plain", "linear_gaussian", "logit", "student_t"]:
        model = build(name)
        timed(model, 1, cores=1)  # the kernels and PyTensor functions loaded here first
        one = timed(model, args.repeats, cores=1)
        fork = timed(model, args.repeats, cores=2, mp_ctx="fork")
        spawn = timed(model, args.repeats, cores=2, mp_ctx="spawn")
        with model:
            _, selected = assign_step_methods(model)
        steps = "+".join(sorted(k.__name__ for k in selected))
        rows.append({"model": name, "steps": steps, "cores1_s": one,
                     "fork_s": fork, "spawn_s": spawn, "spawn_over_cores1": spawn / one})
        print_table(rows[-1:], COLS[:-1])
    plain = rows[0]["spawn_s"]
    for r in rows:
        r["spawn_minus_plain_s"] = r["spawn_s"] - plain
    print()
    print_table(rows, COLS)
    notes = [
        "pm.sample(draws=10, tune=10, chains=2) on 20-row models; cores1 = both chains in the "
        "main process, fork / spawn = cores=2 with that mp_ctx; best of "
        f"{args.repeats} runs after one untimed cores=1 run; seconds of wall time.",
        "spawn_minus_plain_s = the model's spawn time minus the plain PyMC model's.",
        f"Command: python -m benchmarks.worker_start --repeats {args.repeats}",
    ]
    write_results("worker_start", rows, COLS, "Starting parallel chains: cores=1, fork, spawn",
                  notes, info)


if __name__ == "__main__":
    main()
