"""Effective samples per second of K+ and of the log joint, for every sampler side by side.

Model (block images, ``pmi.datasets.block_images(N, noise=0.5, seed=1)``, D = 36, K_max = 12)::

    alpha ~ Gamma(1, 1);  Z ~ pmi.IBP(alpha)  (N x K_max)
    sigma_a ~ HalfNormal(2, initval=1);  A ~ Normal(0, sigma_a)  (K_max x D)
    sigma_x ~ HalfNormal(1, initval=0.5 std(X));  X ~ Normal(Z @ A, sigma_x)

(the initial values of the README demo, examples/block_images.py), sampled by

* ``accelerated``:   ``pm.sample()`` defaults: IBPAlphaGibbs + AcceleratedGibbs [Z, A] +
  IBPScaleSlice [sigma_a, sigma_x];
* ``collapsed``:     ``step=[pmi.CollapsedGibbs([Z])]`` (rest automatic);
* ``ibpgibbs+nuts``: ``step=[pmi.IBPGibbs([Z]), pm.NUTS([A])]`` (rest automatic);
* ``ibpgibbs+conjA``: ``step=[pmi.IBPGibbs([Z]), ConjugateA([A])]``: a conjugate A | Z draw
  instead of NUTS (benchmarks/_models.py);
* ``pymc_default``:  the finite Beta-Bernoulli model (``pi ~ Beta(alpha/K_max, 1)``,
  ``Z ~ Bernoulli(pi)``, same priors and likelihood) under ``pm.sample()``'s own choice,
  BinaryGibbsMetropolis [Z] + NUTS [alpha, pi, sigma_a, A, sigma_x].

All IBP samplers get the same budget (4 chains x (tune + draws), ``cores=1``, chains in
sequence).  PyMC's default is far slower per iteration, so it gets fewer iterations, sized
from a warm-up run to fit a time budget; compare per second.  Every sampler first does a
short warm-up ``pm.sample`` (numba cache load, PyTensor compilation); the reported time is
PyMC's own ``sampling_time`` (tune + draws, excluding step construction).

Statistics: K+ (the number of non-empty columns of the Z draws) and the *collapsed log joint*
``log p(X | Z, sigma_x, sigma_a) + log IBP(Z | alpha)`` computed from the stored draws of Z and
the hyperparameters with ``kernels.collapsed_loglik`` + the truncated IBP pmf, the same function
for every sampler (for the linear-Gaussian steps it equals the ``ibp_log_joint`` stat, checked;
for the finite model it is the IBP joint of its Z draws, a label-invariant statistic, not that
model's own density).  ESS = ``az.ess(method="bulk")`` over the 4 chains' draws.

    python -m benchmarks.mixing [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._mixing_stats import collapsed_log_joint, ess_bulk, rhat, traces
from benchmarks._models import sample_block_model
from benchmarks._timing import IterationClock, sampling_time

K_MAX = 12
CHAINS = 4
SAMPLERS = ["accelerated", "collapsed", "ibpgibbs+nuts", "ibpgibbs+conjA", "pymc_default"]


def sample(sampler, X, tune, draws, chains, seed, callback=None):
    return sample_block_model(sampler, X, K_MAX, tune, draws, chains, seed, callback=callback)


def statistics(idata, X):
    """K+, collapsed log joint and collapsed log-likelihood of every draw; and the largest
    difference between the recomputed log joint and the ``ibp_log_joint`` stat (which uses the
    hyperparameters current when the Z step ran: the scales of the previous draw, alpha of
    this or the previous draw depending on the step order)."""
    tr = traces(idata, X)
    kplus, lj, ll = tr["K_plus"], tr["log_joint"], tr["log_lik"]
    post = idata["posterior"]
    Z = post["Z"].values
    sx, sa, al = (post[v].values for v in ("sigma_x", "sigma_a", "alpha"))
    d = Z.shape[1]
    check = None
    ss = idata["sample_stats"]
    if "ibp_log_joint" in ss:
        stat = ss["ibp_log_joint"].values
        diffs = []
        for da in (0, 1):
            diffs.append(max(
                abs(stat[0, j] - collapsed_log_joint(Z[0, j], X, sx[0, j - 1], sa[0, j - 1],
                                                     al[0, j - da]))
                for j in range(1, min(d, 21))))
        check = float(min(diffs))
    return kplus, lj, ll, check


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 300 only, shorter chains")
    args = ap.parse_args()
    quiet()
    import pymc_ibp as pmi

    info = machine_info()
    t_start = time.perf_counter()
    if args.quick:
        grid, tune, draws, default_budget = [300], 30, 70, {300: 15.0}
    else:
        grid, tune, draws, default_budget = [300, 1000], 100, 150, {300: 50.0, 1000: 100.0}
    rows = []
    for n in grid:
        X = pmi.datasets.block_images(n, noise=0.5, seed=1).X
        for s_i, sampler in enumerate(SAMPLERS):
            t = time.perf_counter()
            clock = IterationClock()
            if sampler == "pymc_default":
                # per-iteration cost from the last iterations of a short run (the first NUTS
                # tuning iterations are much slower)
                warm = sample(sampler, X, tune=3, draws=3, chains=1, seed=99, callback=clock)
                t_it = clock.per_iteration()
                its = int(np.clip(default_budget[n] / (CHAINS * t_it), 10, tune + draws))
                s_tune, s_draws = its // 2, its - its // 2
            else:
                warm = sample(sampler, X, tune=3, draws=3, chains=1, seed=99, callback=clock)
                t_it = clock.per_iteration()
                s_tune, s_draws = tune, draws
            print(f"N={n} {sampler}: warm-up {time.perf_counter() - t:.1f} s "
                  f"({t_it * 1e3:.1f} ms/iteration); sampling {CHAINS} x ({s_tune} + {s_draws})",
                  flush=True)
            idata = sample(sampler, X, tune=s_tune, draws=s_draws, chains=CHAINS,
                           seed=1000 * n + s_i)
            secs = sampling_time(idata)
            kplus, lj, ll, check = statistics(idata, X)
            row = dict(
                N=n, sampler=sampler, tune=s_tune, draws=s_draws, chains=CHAINS,
                seconds=secs, ms_per_iteration=1e3 * secs / (CHAINS * (s_tune + s_draws)),
                K_plus_mean=float(kplus.mean()), K_plus_sd=float(kplus.std()),
                at_K_max=float((kplus == K_MAX).mean()),
                log_joint_mean=float(lj.mean()), log_lik_mean=float(ll.mean()),
                ess_K=ess_bulk(kplus), ess_lj=ess_bulk(lj),
                ess_sigma_x=ess_bulk(idata["posterior"]["sigma_x"].values),
                rhat_K=rhat(kplus), rhat_lj=rhat(lj),
                log_joint_stat_check=check,
            )
            row["ess_K_per_s"] = row["ess_K"] / secs
            row["ess_lj_per_s"] = row["ess_lj"] / secs
            row["ess_sx_per_s"] = row["ess_sigma_x"] / secs
            row["ess_K_per_draw"] = row["ess_K"] / (CHAINS * s_draws)
            rows.append(row)
            print_table([row], ["sampler", "seconds", "ms_per_iteration", "K_plus_mean",
                                "at_K_max", "log_lik_mean", "ess_K", "ess_lj", "rhat_K",
                                "rhat_lj", "ess_K_per_s", "ess_lj_per_s"])
            del idata, warm
        acc = [r for r in rows if r["N"] == n and r["sampler"] == "accelerated"][0]
        for r in rows:
            if r["N"] == n:
                # how many times more effective samples per second the accelerated sampler gets
                r["acc_over_this_K"] = acc["ess_K_per_s"] / r["ess_K_per_s"]
                r["acc_over_this_lj"] = acc["ess_lj_per_s"] / r["ess_lj_per_s"]
                r["acc_over_this_sx"] = acc["ess_sx_per_s"] / r["ess_sx_per_s"]
    cols = ["N", "sampler", "tune", "draws", "seconds", "ms_per_iteration", "K_plus_mean",
            "at_K_max", "log_lik_mean", "log_joint_mean", "ess_K", "rhat_K", "ess_lj", "rhat_lj",
            "ess_sigma_x", "ess_K_per_s", "ess_lj_per_s", "ess_sx_per_s", "acc_over_this_K",
            "acc_over_this_lj", "acc_over_this_sx"]
    print()
    print_table(rows, cols)
    checks = [r["log_joint_stat_check"] for r in rows if r["log_joint_stat_check"] is not None]
    notes = [
        f"Block images, K_max = {K_MAX}, {CHAINS} chains, cores=1 (chains in sequence); seconds = "
        "pm.sample's sampling_time (tune + draws), after a warm-up run.",
        "ess_* = az.ess(method='bulk') and rhat_* = az.rhat over the 4 chains' draws (tune "
        "discarded). log_joint = collapsed log p(X | Z, sigmas) + log IBP(Z | alpha) and "
        "log_lik = collapsed log p(X | Z, sigmas), recomputed from the stored draws with the same "
        "function for every sampler.",
        "acc_over_this_* = (accelerated ESS/s) / (this sampler's ESS/s); the issue's target is "
        ">= 1000 for pymc_default on K+.",
        "nan ESS: the statistic never changed (e.g. pymc_default's K+ = K_max in every draw: "
        "every column of its Z keeps at least one 1, so K+ carries no information).",
        "A K+ pinned at K_max in almost every draw (at_K_max near 1, e.g. pymc_default) has an "
        "ESS that only counts its rare dips: it is not evidence of exploring K+.",
        "pymc_default runs far fewer iterations (time budget); an ESS from so few draws (and "
        "r-hat >> 1) is not a reliable estimate, and can exceed the number of draws.",
        "r-hat >> 1 for every sampler: the chains sit in different local modes (features split "
        "or merged differently) within this budget, so every ESS here is close to the number of "
        "chains and the per-second ratios mostly reflect time per iteration.",
        "at_K_max: fraction of draws with every slot in use (the truncation binds).",
        "Log-joint cross-check (max |ibp_log_joint stat - recomputed with the hyperparameters "
        "current at the Z step|, linear-Gaussian steps): "
        + (f"{max(checks):.2e}" if checks else "n/a"),
        f"Total script time {time.perf_counter() - t_start:.0f} s.",
    ]
    write_results("mixing_quick" if args.quick else "mixing", rows, cols,
                  "ESS per second of K+ and the log joint (block images)", notes, info)


if __name__ == "__main__":
    main()
