"""How large must K_max be on real data?  The README's linear-Gaussian model on scikit-learn's
digits as continuous pixels (1797 x 64, scaled to [0, 1] and centred), with ``pm.sample``'s
step assignment.

* ``free``: the README model as it stands (``sigma_x ~ HalfNormal(1)``) at ``--k-max``
  (default 30), ``--chains`` x (``--tune`` + ``--draws``): K+, ``sigma_x``, the births the full
  slots denied per sweep (``ibp_births_denied``), the K_max the step's probe suggested
  (``ibp_kmax_suggested``; see docs/step-methods/accelerated-gibbs.md) and what
  :func:`pymc_ibp.check_chains` says;
* ``fixed``: the same model with ``sigma_x`` fixed at ``--sigma-x`` (default 0.2, the pixel
  noise the features are to ignore), at the K_max the probe of a first run (``--tune`` + 50
  at ``--k-max``) suggests (or ``--fixed-k-max``): does every chain agree (rank R-hat of the
  log joint <= 1.05)?

    python -m benchmarks.digits_k_max [--chains 4] [--tune 500] [--draws 500]

Writes ``results/digits_k_max.{csv,md}``.
"""

from __future__ import annotations

import argparse
import time

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import ibp_model


def digits():
    from sklearn.datasets import load_digits

    X = load_digits().data / 16.0
    return X - X.mean(axis=0)


def fit(X, k_max, sigma_x, chains, tune, draws, seed):
    """``pm.sample`` of the README model (``sigma_x=None``: free); its warnings are printed by
    the chains' worker processes (the stats carry what they say)."""
    import pymc as pm


    with ibp_model(X, k_max, sigma_x=sigma_x):
        t = time.perf_counter()
        idata = pm.sample(tune=tune, draws=draws, chains=chains, cores=min(chains, 2),
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
        wall = time.perf_counter() - t
    return idata, wall


def row(label, X, k_max, sigma_x, args, draws=None):
    import arviz as az

    import pymc_ibp as pmi

    draws = args.draws if draws is None else draws
    idata, wall = fit(X, k_max, sigma_x, args.chains, args.tune, draws, args.seed)
    iters = args.tune + draws
    st = idata.sample_stats
    lj = st.ibp_log_joint
    means = lj.mean("draw").values
    issues = pmi.check_chains(idata, warn=False)
    sx = (idata.posterior.sigma_x.mean().item() if "sigma_x" in idata.posterior
          else float(sigma_x))
    return {
        "case": label, "k_max": k_max,
        "sigma_x": "free" if sigma_x is None else f"{sigma_x:g}",
        "chains": args.chains, "iters": f"{args.tune}+{draws}",
        "k_plus": " ".join(f"{v:.1f}" for v in st.ibp_n_active.mean("draw").values),
        "sigma_x_mean": f"{sx:.3f}",
        "denied_per_sweep": f"{float(st.ibp_births_denied.mean()):.1f}",
        "suggested_k_max": int(st.ibp_kmax_suggested.max()),
        "rhat_log_joint": f"{float(az.rhat(lj.to_dataset(name='lj'), method='rank')['lj']):.2f}",
        "spread_nats": f"{means.max() - means.min():.0f}",
        "check_chains": " ".join(sorted({i.kind for i in issues})) or "-",
        "wall_s": f"{wall:.0f}",
        "s_per_iter": f"{wall * min(args.chains, 2) / args.chains / iters:.3f}",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--k-max", type=int, default=30)
    parser.add_argument("--sigma-x", type=float, default=0.2)
    parser.add_argument("--fixed-k-max", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", nargs="+", default=["free", "fixed"])
    args = parser.parse_args()
    quiet()
    info = machine_info()
    X = digits()
    rows = []
    if "free" in args.cases:
        rows.append(row("free", X, args.k_max, None, args))
        print_table(rows[-1:], list(rows[-1]))
    if "fixed" in args.cases:
        k = args.fixed_k_max
        if k is None:  # a first short run at --k-max: the probe's suggestion
            first = row("fixed, first run", X, args.k_max, args.sigma_x, args, draws=50)
            rows.append(first)
            print_table(rows[-1:], list(rows[-1]))
            k = max(first["suggested_k_max"], args.k_max)
        rows.append(row("fixed", X, k, args.sigma_x, args))
        print_table(rows[-1:], list(rows[-1]))
    cols = list(rows[0])
    print_table(rows, cols)
    write_results("digits_k_max", rows, cols,
                  "How large must K_max be? The README model on the continuous digits", [
                      f"{args.chains} chains x ({args.tune} + {args.draws}), cores = 2, "
                      f"random_seed = {args.seed}; pm.sample's step assignment",
                      "k_plus: per chain; denied_per_sweep: ibp_births_denied (births the full "
                      "slots refused, summed over rows); suggested_k_max: ibp_kmax_suggested "
                      "(the step's probe, 0: the slots never all filled in a kept draw); "
                      "rhat_log_joint: rank R-hat of ibp_log_joint across chains; spread: "
                      "largest minus smallest chain mean; s_per_iter: wall x cores / chains / "
                      "iterations",
                      "python -m benchmarks.digits_k_max",
                  ], info)


if __name__ == "__main__":
    main()
