"""Variational IBP against the accelerated Gibbs sampler: time and held-out log-likelihood
(in the spirit of Doshi-Velez 2009, Fig. 6.4).

Synthetic data as in the thesis's grid: Z and A from the truncated stick-breaking prior with
K features (v_k ~ Beta(alpha = 3, 1), pi_k = v_1 ... v_k, z_nk ~ Bernoulli(pi_k), A ~ N(0, 1),
sigma_x = 0.5), over a grid of N, D and K, and one real data set that ships with scikit-learn:
the 8 x 8 digits (1797 images, pixel values / 16, centred).  10% of the entries are held out
(``pmi.holdout_mask``; NaN in the data, so both methods see them as missing).
Model: the README's (alpha ~ Gamma(1, 1), sigma_a ~ HalfNormal(2), sigma_x ~ HalfNormal(1),
K_max = 30).  Methods:

* ``vi-finite`` / ``vi-infinite``: ``pmi.inference.fit_variational`` (defaults: 3 restarts,
  150 annealed iterations), then 200 draws of ``fit.sample``;
* ``gibbs``: ``pm.sample`` with the automatic steps (AcceleratedGibbs), 1 chain, 100 tuning +
  200 draws, ``cores=1``.

Reported: wall time of the fit or of the ``pm.sample`` call (model compilation included,
after a warm-up), and ``pmi.heldout_metrics`` of the held-out entries (``mean_log_pred``:
mean over entries and draws of ``log N(x; z a, sigma_x²)``; ``l2``) over the last 100 draws.

    python -m benchmarks.vi_vs_gibbs     # N {250, 1000, 4000} x D {10, 50} x K {5, 20} + digits
    python -m benchmarks.vi_vs_gibbs --quick    # N = 250, D = 10, K = 5

Saves ``results/vi_vs_gibbs.{md,csv,png}`` (the picture: held-out log-likelihood against time,
one point per data set and method).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model

K_MAX = 30
METHODS = ["vi-finite", "vi-infinite", "gibbs"]


def digits_data():
    from sklearn.datasets import load_digits

    X = load_digits().data / 16.0
    return X - X.mean(axis=0)


def stick_breaking_data(n, d, k, seed, alpha=3.0, sigma_x=0.5, sigma_a=1.0):
    """Z, A from the truncated stick-breaking prior with ``k`` sticks, X = Z A + noise."""
    rng = np.random.default_rng(seed)
    pi = np.cumprod(rng.beta(alpha, 1.0, size=k))
    Z = (rng.random((n, k)) < pi).astype(float)
    A = rng.normal(0.0, sigma_a, size=(k, d))
    return Z @ A + rng.normal(0.0, sigma_x, size=(n, d))


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = list(dict.fromkeys(r["data"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    marks = {"vi-finite": "o", "vi-infinite": "s", "gibbs": "^"}
    for method, mk in marks.items():
        rs = [r for r in rows if r["method"] == method]
        axes[0].scatter([r["seconds"] for r in rs], [r["mean_log_pred"] for r in rs],
                        marker=mk, label=method, alpha=0.8)
        # per data set: held-out log-likelihood relative to the Gibbs chain's
        ref = {r["data"]: r["mean_log_pred"] for r in rows if r["method"] == "gibbs"}
        axes[1].plot(range(len(names)), [next(r["mean_log_pred"] for r in rs if r["data"] == n)
                                         - ref[n] for n in names], marker=mk, label=method)
    axes[0].set_xscale("log")
    axes[0].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].set_xlabel("seconds (fit + 200 draws, or pm.sample)")
    axes[0].set_ylabel("held-out mean log predictive")
    axes[0].legend()
    axes[1].axhline(0.0, color="grey", lw=0.8)
    axes[1].set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    axes[1].set_ylabel("held-out mean log pred. minus Gibbs's")
    axes[1].legend()
    fig.suptitle("Variational IBP vs accelerated Gibbs (one point per data set and method)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_method(method, X_obs, X_true, mask, seed):
    import pymc as pm

    import pymc_ibp as pmi

    with ibp_model(X_obs, K_MAX) as model:
        t = time.perf_counter()
        if method == "gibbs":
            idata = pm.sample(tune=100, draws=200, chains=1, cores=1, random_seed=seed,
                              progressbar=False, quiet=True, compute_convergence_checks=False)
        else:
            fit = pmi.inference.fit_variational(model, method=method.split("-")[1],
                                                random_seed=seed)
            idata = fit.sample(200, random_seed=seed)
        secs = time.perf_counter() - t
    met = pmi.heldout_metrics(idata, X_true, mask, last=100)
    z = idata["posterior"]["Z"].values[0, -100:]
    k_plus = float(np.mean([(zz.sum(axis=0) > 0).sum() for zz in z]))
    return dict(seconds=secs, mean_log_pred=met["mean_log_pred"], l2=met["l2"], K_plus=k_plus)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    quiet()
    import pymc_ibp as pmi

    info = machine_info()
    t0 = time.perf_counter()
    grid = [(250, 10, 5)] if args.quick else [(n, d, k) for n in (250, 1000, 4000)
                                               for d in (10, 50) for k in (5, 20)]
    sets = [(f"N={n} D={d} K={k}", stick_breaking_data(n, d, k, seed=n + d + k))
            for n, d, k in grid]
    if not args.quick:
        sets.append(("digits (sklearn)", digits_data()))
    # warm-up: numba and PyTensor compilation outside the timings
    warm = sets[0][1][:50]
    for method in METHODS:
        run_method(method, warm, warm, pmi.holdout_mask(warm, 20, seed=0), 0)
    rows = []
    for name, X in sets:
        mask = pmi.holdout_mask(X, int(0.1 * X.size), seed=1)
        X_obs = np.where(mask, np.nan, X)
        for method in METHODS:
            print(f"{name}: {method}", flush=True)
            r = dict(data=name, N=X.shape[0], D=X.shape[1], method=method,
                     **run_method(method, X_obs, X, mask, seed=3))
            rows.append(r)
            print_table([r], list(r))
    cols = ["data", "N", "D", "method", "seconds", "mean_log_pred", "l2", "K_plus"]
    print()
    print_table(rows, cols)
    notes = [
        "Held-out: 10% of the entries (pmi.holdout_mask, seed 1), NaN in the model's data; "
        "mean_log_pred and l2 from pmi.heldout_metrics over the last 100 draws (VI: 200 draws "
        "of fit.sample; gibbs: the chain's draws).",
        "seconds: fit_variational + fit.sample, or the pm.sample call (1 chain, 100 + 200), "
        "model compilation included, after a warm-up run of every method.",
        "K_plus = mean number of active features over the last 100 draws.",
        "Synthetic (N, D, K): truncated stick-breaking prior with K sticks, alpha 3, "
        "A ~ N(0, 1), sigma_x 0.5 (stick_breaking_data, seed N+D+K); digits: sklearn's "
        "load_digits, / 16, centred (1797 x 64).",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    name = "vi_vs_gibbs_quick" if args.quick else "vi_vs_gibbs"
    write_results(name, rows, cols, "Variational IBP against the accelerated Gibbs sampler",
                  notes, info)
    plot(rows, Path(__file__).parent / "results" / f"{name}.png")


if __name__ == "__main__":
    main()
