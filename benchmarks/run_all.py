"""Run every benchmark script in sequence and refresh the tables in benchmarks/README.md.

    python -m benchmarks.run_all            # make bench        (< 30 min on a 2-core sandbox)
    python -m benchmarks.run_all --quick    # make bench-quick  (5-15 min: benchmarks/README.md)
    python -m benchmarks.run_all --only mixing scaling
    python -m benchmarks.run_all --only mixing_long     # make bench-long  (~1 h: PyMC's default)

Each script runs in its own process as ``python -m benchmarks.<name>`` from the repository root
(``--quick`` is passed through), prints its table and writes
``results/<name>[_quick].{csv,md}``.  Afterwards the README's generated sections (between
``<!-- results:NAME -->`` markers) are replaced by the latest full-run markdown (or the quick
one when no full run exists yet).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent  # the scripts run as modules of the benchmarks package from here
SCRIPTS = ["scaling", "mixing", "throughput", "reproduce_icml", "structure", "column_blocks",
           "warm_start", "meibp_study"]
# run only when named with --only
LONG = ["mixing_long", "vi_vs_gibbs", "large_n", "data_parallel", "data_parallel_modes",
        "data_parallel_scaling", "data_parallel_sharded", "ibpgibbs_mixing", "ibpgibbs_split",
        "logit_samplers", "logit_scaling", "point_functions", "worker_start", "ibpgibbs_sweep",
        "logit_offsets", "dibp_speed",
        "dibp_heldout", "correlated_heldout"]


def update_readme():
    readme = HERE / "README.md"
    if not readme.exists():
        return
    text = readme.read_text()
    for name in SCRIPTS + LONG:
        start, end = f"<!-- results:{name} -->", f"<!-- /results:{name} -->"
        if start not in text or end not in text:
            continue
        full, quick = HERE / "results" / f"{name}.md", HERE / "results" / f"{name}_quick.md"
        src = full if full.exists() else quick if quick.exists() else None
        if src is None:
            continue
        body = src.read_text().strip().splitlines()
        if body and body[0].startswith("# "):  # the README has its own heading
            body = body[1:]
        label = f"_From `results/{src.name}`{' (quick run)' if src is quick else ''}:_"
        block = "\n".join([start, label, *body, end])
        i, j = text.index(start), text.index(end) + len(end)
        text = text[:i] + block + text[j:]
    readme.write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", choices=SCRIPTS + LONG)
    ap.add_argument("--readme-only", action="store_true",
                    help="only refresh README.md from results/*.md")
    args = ap.parse_args()
    if args.readme_only:
        update_readme()
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    failed = []
    for name in args.only or SCRIPTS:
        quick = ["--quick"] if args.quick and name not in LONG else []
        cmd = [sys.executable, "-m", f"benchmarks.{name}"] + quick
        print(f"\n=== {' '.join(cmd[1:])}", flush=True)
        t = time.perf_counter()
        rc = subprocess.call(cmd, env=env, cwd=ROOT)
        print(f"=== {name}: {time.perf_counter() - t:.0f} s (exit {rc})", flush=True)
        if rc:
            failed.append(name)
    update_readme()
    print(f"\nall benchmarks: {time.perf_counter() - t0:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
