"""Long-run effective samples per second of K+: the accelerated sampler vs PyMC's default.

Model (block images, ``pmi.datasets.block_images(N, noise=0.5, seed=1)``, D = 36, K_max = 12),
the same as benchmarks/mixing.py::

    alpha ~ Gamma(1, 1);  Z ~ pmi.IBP(alpha)  (N x K_max)
    sigma_a ~ HalfNormal(2, initval=1);  A ~ Normal(0, sigma_a)  (K_max x D)
    sigma_x ~ HalfNormal(1, initval=0.5 std(X));  X ~ Normal(Z @ A, sigma_x)

Samplers (both under ``pm.sample()``'s own step assignment, 4 chains, ``cores=1``, chains in
sequence):

* ``accelerated``:  the model above; pm.sample picks IBPAlphaGibbs + AcceleratedGibbs [Z, A] +
  IBPScaleSlice [sigma_a, sigma_x].  Default tune = 500, draws = 2000 per chain.
* ``pymc_default``: the finite Beta-Bernoulli model (``pi_k ~ Beta(alpha/K_max, 1)``,
  ``Z ~ Bernoulli(pi)``, same priors, likelihood and initial values); pm.sample picks
  BinaryGibbsMetropolis [Z] + NUTS [alpha, pi, sigma_a, A, sigma_x].  Default tune = 100 and
  draws sized so that the 4 chains' tune + draws fit ``--budget-s`` (default 3000 s) at the
  measured time per iteration, at least 50 draws.

What is measured, per sampler:

1. a short warm-up ``pm.sample`` (1 chain, 3 + 3 iterations: PyTensor compilation, numba cache);
2. a separate *timing run* (1 chain; pymc_default 10 tune + 10 draws, accelerated 100 + 100)
   with nothing else computed, timing every iteration with a pm.sample callback; ``s_per_it`` =
   median wall time of its post-tuning iterations;
3. the *long run* (4 chains, var_names alpha, sigma_x, sigma_a, Z).  Per draw: K+ (number of
   non-empty columns of Z), the collapsed log joint ``log p(X | Z, sigma_x, sigma_a) +
   log IBP(Z | alpha)`` (benchmarks/_mixing_stats.py::collapsed_log_joint, the same function for
   both samplers; for the finite model it is a label-invariant statistic of its Z draws, not
   that model's own density) and sigma_x.  For each: bulk ESS (``az.ess(method="bulk")``) over the 4
   chains, the single-chain bulk ESS of every chain and their sum, and R-hat.  For K+ also: the
   fraction of draws with K+ = K_max, its histogram, and how often it changes value per chain.

ESS/s = (ESS / (4 x draws)) / s_per_it, i.e. ESS per draw of the long run times the draws per
second of the quiet timing run (tuning excluded); ``ess_per_s_raw`` = ESS / the long run's
``sampling_time`` (tune + draws of the 4 chains) is reported beside it.

Constant chains: if K+ never changes within any chain, its ESS is undefined (``ess = nan``).
Convention: a chain whose K+ never leaves its first value carries at most one effective sample
of K+, so the sampler's ``ess_upper`` = sum over chains of max(1, that chain's single-chain
bulk ESS), a constant chain counting 1 (4 when every chain is constant).  Where the ESS is
undefined, ESS/draw, ESS/s and the ratio accelerated / pymc_default use ``ess_upper``; a ratio
with an upper bound in its denominator is a lower bound on the true ratio (``ratio_kind``).

Each sampler's summary (numbers, git hash, date, the K+ / log joint / sigma_x traces) is saved
to ``results/mixing_long_<sampler>_N<n>.json``, so the samplers can run at different times;
the table ``results/mixing_long.{csv,md}`` is then assembled from whichever json files exist::

    nice -n 10 python -m benchmarks.mixing_long                       # both samplers, N = 1000
    nice -n 10 python -m benchmarks.mixing_long --sampler accelerated # one sampler (+ assemble)
    python -m benchmarks.mixing_long --assemble                       # only rebuild the table
    python -m benchmarks.mixing_long --n 300 --draws 40 --tune 20     # a quick smoke test

Expected run time at N = 1000 on a 2-core 2.8 GHz Xeon: accelerated ~3 min (4 x 2500
iterations at ~10 ms); pymc_default ~55 min (the 3000 s budget at ~1.7 s per iteration, plus
~2 min of warm-up and timing run); the post-processing (log joint of every draw) takes seconds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import time
from pathlib import Path

import numpy as np

from benchmarks import quiet
from benchmarks._machine import RESULTS, machine_info, print_table, write_results
from benchmarks._mixing_stats import ess_bulk, rhat, traces
from benchmarks._models import sample_block_model
from benchmarks._timing import IterationClock, sampling_time

K_MAX = 12
CHAINS = 4
SAMPLERS = ["accelerated", "pymc_default"]
DEFAULTS = {"accelerated": {"tune": 500, "draws": 2000},
            "pymc_default": {"tune": 100, "draws": None}}  # None: sized from --budget-s
TIMING = {"accelerated": (100, 100), "pymc_default": (10, 10)}  # timing run (tune, draws)
MIN_DRAWS = 50
STATS = [("K_plus", "K+"), ("log_joint", "log joint"), ("sigma_x", "sigma_x")]


def sample(sampler, X, tune, draws, chains, seed, callback=None):
    return sample_block_model(sampler, X, K_MAX, tune, draws, chains, seed, callback=callback,
                              quiet=True)


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------
def ess_summary(x) -> dict:
    """Bulk ESS over the chains, per-chain bulk ESS, their sum, the constant-chain upper bound
    and R-hat of a (chains, draws) array (see the module docstring for the convention)."""
    x = np.asarray(x, dtype=float)
    chain_ess = [ess_bulk(x[i:i + 1]) for i in range(x.shape[0])]  # nan for a constant chain
    constant = [bool(np.ptp(x[i]) == 0) for i in range(x.shape[0])]
    if all(constant):  # no chain ever moves: ESS undefined
        ess = float("nan")
    else:
        ess = ess_bulk(x)
        ess = ess if math.isfinite(ess) else float("nan")
    finite = [e for e in chain_ess if math.isfinite(e)]
    upper = float(sum(1.0 if not math.isfinite(e) else max(1.0, e) for e in chain_ess))
    return {"ess": ess, "ess_chains": chain_ess, "ess_chain_sum": float(sum(finite)) if finite
            else float("nan"), "ess_upper": upper, "constant_chains": int(sum(constant)),
            "rhat": rhat(x)}


def summarise(sampler, n, tune, draws, seconds, s_per_it, s_per_it_long, tr, extra) -> dict:
    kplus = tr["K_plus"]
    vals, counts = np.unique(kplus, return_counts=True)
    out = {
        "sampler": sampler, "N": n, "K_max": K_MAX, "chains": int(kplus.shape[0]),
        "tune": tune, "draws": draws, "seconds": seconds, "s_per_it": s_per_it,
        "s_per_it_long": s_per_it_long,
        "K_plus_mean": float(kplus.mean()), "K_plus_sd": float(kplus.std()),
        "at_K_max": float((kplus == K_MAX).mean()),
        "K_plus_hist": {"values": vals.tolist(), "counts": counts.tolist()},
        "K_plus_changes": np.sum(np.diff(kplus, axis=1) != 0, axis=1).tolist(),
        "K_plus_first": kplus[:, 0].tolist(),
        "log_joint_mean": float(tr["log_joint"].mean()),
        "log_lik_mean": float(tr["log_lik"].mean()),
        "alpha_mean": float(tr["alpha"].mean()), "sigma_x_mean": float(tr["sigma_x"].mean()),
        "sigma_a_mean": float(tr["sigma_a"].mean()),
        "stats": {key: ess_summary(tr[key]) for key, _ in STATS},
        "traces": {"K_plus": kplus.tolist(),
                   "log_joint": np.round(tr["log_joint"], 4).tolist(),
                   "sigma_x": np.round(tr["sigma_x"], 6).tolist()},
    }
    out.update(extra)
    return out


# ---------------------------------------------------------------------------------------------
# json in / out (NaN stored as null)
# ---------------------------------------------------------------------------------------------
def _to_json(x):
    if isinstance(x, dict):
        return {k: _to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_json(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(float(x)) else None
    return x


def json_path(sampler, n):
    return RESULTS / f"mixing_long_{sampler}_N{n}.json"


def load_summaries() -> list[dict]:
    out = []
    for p in sorted(RESULTS.glob("mixing_long_*_N*.json")):
        if not re.fullmatch(r"mixing_long_(" + "|".join(SAMPLERS) + r")_N\d+\.json", p.name):
            continue
        out.append(json.loads(p.read_text()))
    return out


def pymc_ibp_source(info) -> str:
    """``info['git']`` when pymc_ibp is this repository's; otherwise (e.g. a snapshot put first
    on PYTHONPATH) the benchmarks' commit and the directory pymc_ibp was imported from."""
    import pymc_ibp

    pkg = Path(pymc_ibp.__file__).resolve().parent
    if pkg == Path(__file__).resolve().parent.parent / "pymc_ibp":
        return info.get("git", "?")
    return f"{info.get('git', '?').split()[0]} (benchmarks); pymc_ibp imported from {pkg}"


def _f(x):
    return float("nan") if x is None else float(x)


# ---------------------------------------------------------------------------------------------
# one sampler
# ---------------------------------------------------------------------------------------------
def run_sampler(sampler, n, args) -> dict:
    import pymc_ibp as pmi

    X = pmi.datasets.block_images(n, noise=0.5, seed=1).X
    info = machine_info()  # git hash and load at the start of this sampler's run
    t0 = time.perf_counter()
    sample(sampler, X, tune=3, draws=3, chains=1, seed=99)
    t_warm = time.perf_counter() - t0
    t_tune, t_draws = TIMING[sampler]
    clock = IterationClock()
    t0 = time.perf_counter()
    timing = sample(sampler, X, tune=t_tune, draws=t_draws, chains=1, seed=98, callback=clock)
    t_timing = time.perf_counter() - t0
    s_per_it = clock.per_iteration()
    del timing

    tune = args.tune if args.tune is not None else DEFAULTS[sampler]["tune"]
    draws = args.draws if args.draws is not None else DEFAULTS[sampler]["draws"]
    sized = draws is None
    if sized:
        draws = max(MIN_DRAWS, int(args.budget_s / (CHAINS * s_per_it)) - tune)
    print(f"N={n} {sampler}: warm-up {t_warm:.1f} s, timing run {t_timing:.1f} s "
          f"({s_per_it:.4g} s/iteration); long run {CHAINS} x ({tune} + {draws})"
          + (f", sized to {args.budget_s:.0f} s" if sized else "")
          + f", expected ~{CHAINS * (tune + draws) * s_per_it:.0f} s", flush=True)

    long_clock = IterationClock()
    idata = sample(sampler, X, tune=tune, draws=draws, chains=CHAINS,
                   seed=args.seed + 1000 * SAMPLERS.index(sampler), callback=long_clock)
    seconds = sampling_time(idata)
    t0 = time.perf_counter()
    tr = traces(idata, X)
    del idata
    summary = summarise(
        sampler, n, tune, draws, seconds, s_per_it, long_clock.per_iteration(), tr,
        extra={"warmup_s": t_warm, "timing_run": {"tune": t_tune, "draws": t_draws,
                                                 "seconds": t_timing},
               "budget_s": args.budget_s if sized else None, "draws_sized_by_budget": sized,
               "seed": args.seed + 1000 * SAMPLERS.index(sampler),
               "postprocess_s": time.perf_counter() - t0,
               "git": pymc_ibp_source(info), "pymc_ibp_file": pmi.__file__,
               "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
               "machine": info})
    RESULTS.mkdir(exist_ok=True)
    json_path(sampler, n).write_text(json.dumps(_to_json(summary)))
    print(f"wrote {json_path(sampler, n)}")
    print_table([sampler_row(summary)], SAMPLER_COLS)
    return summary


# ---------------------------------------------------------------------------------------------
# table
# ---------------------------------------------------------------------------------------------
SAMPLER_COLS = ["N", "sampler", "tune", "draws", "seconds", "s_per_it", "s_per_it_long",
                "K_plus_mean", "at_K_max", "K_plus_changes", "K_plus_hist", "log_lik_mean",
                "log_joint_mean", "sigma_x_mean", "alpha_mean", "git", "date"]
MAIN_COLS = ["N", "statistic", "sampler", "draws", "ess", "ess_kind", "ess_upper",
             "ess_chain_sum", "rhat", "ess_per_draw", "s_per_it", "ess_per_s", "ess_per_s_raw",
             "acc_over_default", "ratio_kind"]


def sampler_row(s) -> dict:
    h = s["K_plus_hist"]
    return {
        "N": s["N"], "sampler": s["sampler"], "tune": s["tune"], "draws": s["draws"],
        "seconds": _f(s["seconds"]), "s_per_it": _f(s["s_per_it"]),
        "s_per_it_long": _f(s["s_per_it_long"]), "K_plus_mean": _f(s["K_plus_mean"]),
        "K_plus_sd": _f(s["K_plus_sd"]), "at_K_max": _f(s["at_K_max"]),
        "K_plus_changes": "/".join(str(c) for c in s["K_plus_changes"]),
        "K_plus_hist": " ".join(f"{v}:{c}" for v, c in zip(h["values"], h["counts"], strict=True)),
        "log_lik_mean": _f(s["log_lik_mean"]), "log_joint_mean": _f(s["log_joint_mean"]),
        "sigma_x_mean": _f(s["sigma_x_mean"]), "alpha_mean": _f(s["alpha_mean"]),
        "git": s.get("git", "?"), "date": s.get("date", "?"),
    }


def stat_rows(s) -> list[dict]:
    rows = []
    total = s["chains"] * s["draws"]
    for key, label in STATS:
        st = s["stats"][key]
        ess, upper = _f(st["ess"]), _f(st["ess_upper"])
        used, kind = (ess, "estimate") if math.isfinite(ess) else (upper, "upper bound")
        rows.append({
            "N": s["N"], "statistic": label, "sampler": s["sampler"], "draws": s["draws"],
            "ess": ess, "ess_kind": kind, "ess_upper": upper,
            "ess_chain_sum": _f(st["ess_chain_sum"]), "rhat": _f(st["rhat"]),
            "constant_chains": st["constant_chains"],
            "ess_per_draw": used / total, "s_per_it": _f(s["s_per_it"]),
            "ess_per_s": used / total / _f(s["s_per_it"]),
            "ess_per_s_raw": used / _f(s["seconds"]),
            "tune": s["tune"], "chains": s["chains"], "seconds": _f(s["seconds"]),
            "K_plus_mean": _f(s["K_plus_mean"]), "at_K_max": _f(s["at_K_max"]),
            "K_plus_changes": "/".join(str(c) for c in s["K_plus_changes"]),
            "git": s.get("git", "?"), "date": s.get("date", "?"),
        })
    return rows


def assemble(info) -> None:
    summaries = load_summaries()
    if not summaries:
        print(f"no {RESULTS}/mixing_long_*_N*.json yet: nothing to assemble")
        return
    summaries.sort(key=lambda s: (s["N"], SAMPLERS.index(s["sampler"])))
    srows = [sampler_row(s) for s in summaries]
    rows = [r for s in summaries for r in stat_rows(s)]
    for r in rows:
        acc = [a for a in rows if a["N"] == r["N"] and a["statistic"] == r["statistic"]
               and a["sampler"] == "accelerated"]
        dft = [a for a in rows if a["N"] == r["N"] and a["statistic"] == r["statistic"]
               and a["sampler"] == "pymc_default"]
        if not (acc and dft):
            r["acc_over_default"], r["ratio_kind"] = None, "-"
            continue
        a, d = acc[0], dft[0]
        ka, kd = a["ess_kind"] == "upper bound", d["ess_kind"] == "upper bound"
        if ka and kd:
            r["acc_over_default"], r["ratio_kind"] = float("nan"), "undefined"
        else:
            r["acc_over_default"] = a["ess_per_s"] / d["ess_per_s"]
            r["ratio_kind"] = "lower bound" if kd else "upper bound" if ka else "estimate"
    rows.sort(key=lambda r: (r["N"], [k for _, k in STATS].index(r["statistic"]),
                             SAMPLERS.index(r["sampler"])))
    print()
    print_table(rows, MAIN_COLS)
    print()
    print_table(srows, SAMPLER_COLS)
    notes = [
        f"Block images (noise 0.5, seed 1), K_max = {K_MAX}, {CHAINS} chains per sampler, "
        "cores=1 (chains in sequence), initial values sigma_x = 0.5 std(X), sigma_a = 1. "
        "accelerated = ibp_model under pm.sample's own step assignment (AcceleratedGibbs [Z, A] "
        "+ IBPAlphaGibbs + IBPScaleSlice); pymc_default = the finite Beta-Bernoulli model "
        "(pi_k ~ Beta(alpha/K_max, 1)) under pm.sample's own assignment "
        "(BinaryGibbsMetropolis [Z] + NUTS [alpha, pi, sigma_a, A, sigma_x]). The two samplers "
        "may come from separate runs (date, git in the second table).",
        "statistic: K+ = number of non-empty columns of the Z draw; log joint = collapsed "
        "log p(X | Z, sigma_x, sigma_a) + log IBP(Z | alpha), recomputed from the stored draws "
        "with the same function for both samplers; sigma_x = the noise scale draw.",
        "draws: post-tuning draws per chain (tune in the second table; tuning draws discarded). "
        "ess = az.ess(method='bulk') over the 4 chains' draws; rhat = az.rhat over the 4 chains; "
        "ess_chain_sum = sum over chains of each chain's own bulk ESS (chains whose statistic "
        "never changes are left out of this sum).",
        "Constant chains: if the statistic never changes within any chain, its ESS is undefined "
        "(ess = nan, ess_kind = 'upper bound'). A chain whose K+ never leaves its first value "
        "carries at most one effective sample, so ess_upper = sum over chains of max(1, that "
        "chain's single-chain bulk ESS), a constant chain counting 1 (= 4 when all 4 chains "
        "are constant). ess_upper is listed for every row, but used only where ess is nan.",
        "ess_per_draw = (ess, or ess_upper where ess_kind = 'upper bound') / (4 x draws). "
        "s_per_it = seconds per iteration of one chain: median of the post-tuning iterations of "
        "a separate quiet 1-chain timing run (pymc_default 10 tune + 10 draws, accelerated "
        "100 + 100) after a warm-up run. ess_per_s = ess_per_draw / s_per_it (tuning cost "
        "excluded). ess_per_s_raw = the same ESS / the long run's pm.sample sampling_time (4 "
        "chains' tune + draws, the tuning included).",
        "acc_over_default = accelerated ess_per_s / pymc_default ess_per_s, same N and "
        "statistic. ratio_kind: 'estimate' when both ESS are estimates; 'lower bound' when "
        "pymc_default's ESS is undefined and its ess_upper is used (the true ratio is at least "
        "this); 'upper bound' in the reverse case; 'undefined' when both are.",
        "Second table: seconds = long-run sampling_time; s_per_it_long = median post-tuning "
        "iteration time inside the long run (a cross-check of s_per_it); at_K_max = fraction of "
        "draws with K+ = K_max (every slot in use: the truncation binds); K_plus_changes = number "
        "of times K+ changes value between consecutive draws, per chain; K_plus_hist = "
        "value:count over all chains' draws; log_lik_mean = mean collapsed log p(X | Z, sigmas).",
        "pymc_default's draws are sized to a wall-clock budget (--budget-s, 4 chains' tune + "
        "draws, at least 50 draws) from the timing run; an ESS from few draws with r-hat >> 1 "
        "is not a reliable estimate.",
        "Per-sampler summaries and traces: results/mixing_long_<sampler>_N<n>.json.",
    ]
    write_results("mixing_long", rows, MAIN_COLS,
                  "Long-run ESS per second of K+, the log joint and sigma_x (block images)",
                  notes, info, extra_tables=[("per sampler", srows, SAMPLER_COLS)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="number of images (default 1000)")
    ap.add_argument("--sampler", choices=SAMPLERS + ["both"], default="both")
    ap.add_argument("--draws", type=int, default=None,
                    help="draws per chain (default: accelerated 2000, pymc_default from "
                         "--budget-s)")
    ap.add_argument("--tune", type=int, default=None,
                    help="tuning iterations per chain (default: accelerated 500, "
                         "pymc_default 100)")
    ap.add_argument("--budget-s", type=float, default=3000.0,
                    help="pymc_default wall-clock budget of the 4 chains' tune + draws, used "
                         "when --draws is not given (default 3000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--assemble", action="store_true",
                    help="only assemble results/mixing_long.{csv,md} from the json files")
    args = ap.parse_args()
    quiet()
    info = machine_info()
    info["git"] = pymc_ibp_source(info)
    t_start = time.perf_counter()
    if not args.assemble:
        samplers = SAMPLERS if args.sampler == "both" else [args.sampler]
        for sampler in samplers:
            run_sampler(sampler, args.n, args)
    assemble(info)
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
