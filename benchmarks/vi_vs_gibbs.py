"""Variational IBP against the accelerated Gibbs sampler: time and held-out log-likelihood
(in the spirit of Doshi-Velez 2009, Fig. 6.4).

Synthetic data from the model, ``pmi.datasets.ibp_linear_gaussian(N, D, alpha=3,
sigma_x=0.5, sigma_a=1)``, over a grid of N and D, and one real data set that ships with
scikit-learn: the 8 x 8 digits (1797 images, pixel values / 16, centred).  10% of the entries
are held out (``pmi.holdout_mask``; NaN in the data, so both methods see them as missing).
Model: the README's (alpha ~ Gamma(1, 1), sigma_a ~ HalfNormal(2), sigma_x ~ HalfNormal(1),
K_max = 30).  Methods:

* ``vi-finite`` / ``vi-infinite``: ``pmi.inference.fit_variational`` (defaults: 3 restarts,
  150 annealed iterations), then 200 draws of ``fit.sample``;
* ``gibbs``: ``pm.sample`` with the automatic steps (AcceleratedGibbs), 1 chain, 100 tuning +
  200 draws, ``cores=1``.

Reported: wall time of the fit or of the ``pm.sample`` call (model compilation included,
after a warm-up), and ``pmi.heldout_metrics`` of the held-out entries (``mean_log_pred``:
mean over entries and draws of ``log N(x; z a, sigma_x²)``; ``l2``) over the last 100 draws.

    python -m benchmarks.vi_vs_gibbs            # N in {250, 1000, 4000} x D in {10, 50} + digits
    python -m benchmarks.vi_vs_gibbs --quick    # N = 250, D = 10
"""

from __future__ import annotations

import argparse
import time

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
    grid = [(250, 10)] if args.quick else [(n, d) for n in (250, 1000, 4000) for d in (10, 50)]
    sets = [(f"synthetic N={n} D={d}",
             pmi.datasets.ibp_linear_gaussian(n, d, alpha=3.0, sigma_x=0.5, sigma_a=1.0,
                                              seed=n + d).X) for n, d in grid]
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
        "Synthetic: ibp_linear_gaussian(N, D, alpha=3, sigma_x=0.5, sigma_a=1, seed=N+D); "
        "digits: sklearn's load_digits, / 16, centred (1797 x 64).",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    write_results("vi_vs_gibbs_quick" if args.quick else "vi_vs_gibbs", rows, cols,
                  "Variational IBP against the accelerated Gibbs sampler", notes, info)


if __name__ == "__main__":
    main()
