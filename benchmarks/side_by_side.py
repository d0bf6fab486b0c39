"""The README model's cold start and per-iteration time, this checkout beside another one.

For a change that should cost nothing (a restructuring) or at most a stated amount: both
source trees run the same script in fresh processes (``PYTHONPATH`` set to the tree),
interleaved, so that the machine's drift hits both alike.

* **cold**: the tree's numba cache deleted, then a 6-iteration run of the README model (1000
  block images, K_max = 20 or ``--k-max``, one chain): the wall time of the whole process,
  import and compiles included (PyTensor's compile cache warmed once beforehand for both
  trees);
* **warm**: the same run again, numba's cache now filled;
* **per iteration**: in one process, after a first 6-iteration run, ``pm.sample`` of 6
  iterations and then of ``--iters`` + 6 (default 400), both from the start search; the
  difference over ``--iters`` iterations.

Run from the repository root, with the other tree checked out elsewhere (e.g.
``git worktree add /tmp/base <commit>``)::

    python -m benchmarks.side_by_side --base /tmp/base [--this /tmp/head] [--reps 3] [--k-max 20]

Writes ``results/side_by_side.{csv,md}`` (``side_by_side_kmax<K>`` for another ``--k-max``:
the README model with more slots than features, whose cost should not grow with them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._machine import machine_info, print_table, write_results

HERE = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import sys, time, warnings
t0 = time.perf_counter()
warnings.simplefilter("ignore")
import logging
logging.getLogger("pymc").setLevel(logging.ERROR)
import numpy as np, pymc as pm, pymc_ibp as pmi
assert pmi.__file__.startswith(sys.argv[1]), pmi.__file__
data = pmi.datasets.block_images(1000, noise=0.5, seed=1)
coords = {"obs": range(1000), "feature": range(int(sys.argv[3])), "dim": range(36)}
def run(tune, draws):
    with pm.Model(coords=coords):
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X, dims=("obs", "dim"))
        t = time.perf_counter()
        pm.sample(tune=tune, draws=draws, chains=1, cores=1, random_seed=1,
                  progressbar=False, compute_convergence_checks=False)
        return time.perf_counter() - t
mode = sys.argv[2]
if mode == "short":
    run(3, 3)
    print("WALL", time.perf_counter() - t0)
else:
    run(3, 3)  # first calls: numba's dispatchers load their cache, PyTensor compiles
    short = run(3, 3)
    iters = int(sys.argv[4])
    long = run(3 + iters // 2, 3 + iters - iters // 2)
    print("PER_ITER", (long - short) / iters)
"""


def _clear_numba(tree):
    for p in Path(tree, "pymc_ibp").rglob("*.nb[ic]"):
        p.unlink()


def _run(tree, mode, k_max=20, iters=400):
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(tree) / "pymc_ibp"), mode,
                          str(k_max), str(iters)],
                         capture_output=True, text=True, env=env, cwd="/tmp", timeout=1800)
    wall = time.perf_counter() - t
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    for line in out.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("WALL", "PER_ITER"):
            return float(value), wall
    raise RuntimeError(out.stdout[-2000:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the other source tree (a checkout)")
    parser.add_argument("--this", default=str(HERE),
                        help="the tree to compare (default: this checkout)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--k-max", type=int, default=20, help="the model's K_max (default 20)")
    parser.add_argument("--iters", type=int, default=400,
                        help="iterations of the per-iteration measure (default 400)")
    args = parser.parse_args()
    k = args.k_max
    trees = {"base": Path(args.base).resolve(), "this": Path(args.this).resolve()}
    info = machine_info()
    base_rev, this_rev = (subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=t,
                                         capture_output=True, text=True).stdout.strip()
                          for t in (trees["base"], trees["this"]))
    for tree in trees.values():  # PyTensor's cache and numba's, once for each tree
        _run(tree, "short", k)
    res = {k: {"cold": [], "warm": [], "per_iter": []} for k in trees}
    for rep in range(args.reps):
        for name, tree in trees.items():
            _clear_numba(tree)
            res[name]["cold"].append(_run(tree, "short", k)[1])
            res[name]["warm"].append(_run(tree, "short", k)[1])
            res[name]["per_iter"].append(_run(tree, "long", k, args.iters)[0])
            print(f"rep {rep} {name}: " + ", ".join(f"{k} {v[-1]:.3f}"
                                                     for k, v in res[name].items()), flush=True)
    rows = []
    for what, unit in (("cold", "s"), ("warm", "s"), ("per_iter", "s")):
        b, t = np.median(res["base"][what]), np.median(res["this"][what])
        rows.append({"measure": what, "unit": unit,
                     "base": f"{b:.3f}", "this": f"{t:.3f}", "ratio": f"{t / b:.3f}",
                     "base_range": f"{min(res['base'][what]):.3f}-{max(res['base'][what]):.3f}",
                     "this_range": f"{min(res['this'][what]):.3f}-{max(res['this'][what]):.3f}"})
    cols = ["measure", "unit", "base", "this", "ratio", "base_range", "this_range"]
    print_table(rows, cols)
    write_results("side_by_side" if k == 20 else f"side_by_side_kmax{k}", rows, cols,
                  f"README model (K_max = {k}): {this_rev} beside {base_rev}", [
                      f"medians of {args.reps} interleaved repetitions; ratio = this / base",
                      "cold: a 6-iteration run's whole process with the tree's numba cache "
                      "deleted (PyTensor's cache warm); warm: the same with numba's cache "
                      f"filled; per_iter: ({args.iters + 6} - 6 iterations) / {args.iters} in "
                      "one process, after a first 6-iteration run",
                  ], info)


if __name__ == "__main__":
    main()
