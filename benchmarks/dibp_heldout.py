"""Held-out prediction with the dependent IBP against the IBP, under the protocol of
Williamson, Orbanz & Ghahramani (2010, §5, Table 1).

Two data sets that ship in packages, each with a covariate:

* ``macro`` — statsmodels' US macroeconomic data (1959Q1-2009Q3), the quarter as covariate
  (one item per covariate value, as the paper's music and UN data): quarterly growth rates
  (100 x log-differences) of real GDP, consumption, investment, government spending,
  disposable income, CPI, M1 and population, and the levels of the T-bill rate,
  unemployment, inflation and the real interest rate; 202 quarters x 12 series.
* ``diabetes`` — scikit-learn's diabetes data, the patient's age as covariate (58 distinct
  ages, several patients each: the "bag of items" model): sex, BMI, blood pressure and the six
  serum measurements; 442 patients x 9 measurements.

Each column is standardised on the training rows of the fold.  10 folds of test rows; each
test row has ``--observed`` randomly chosen entries observed and the rest predicted by the
posterior mean of ``Z @ A`` over ``--draws`` posterior samples (the training rows are fully
observed).  Both models share the likelihood ``X ~ Normal(Z @ A, sigma_x)``,
``A ~ Normal(0, sigma_a)``, half-normal scales, ``alpha ~ Gamma(2, 1)``, truncation ``--k``;
the IBP is the truncated stick-breaking IBP (``Z ~ Bernoulli(pi)``), the dIBP
``pmi.dependent_ibp`` over the covariate.  pm.sample assigns AcceleratedGibbs (missing entries
integrated out row by row), DependentIBPGibbs, IBPAlphaGibbs, IBPScaleSlice, GPLengthScaleHMC
(dIBP length scales) and NUTS (the IBP's sticks).

Paper, Table 1 (RMSE, mean ± sd over 10 folds; IBP vs dIBP): music 1.08 ± 0.06 vs
0.69 ± 0.04, UN development 0.93 ± 0.06 vs 0.79 ± 0.07.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._machine import machine_info, print_table, write_results

COLS = ["data", "fold", "rmse_ibp", "rmse_dibp", "dibp_better", "kplus_ibp", "kplus_dibp",
        "s_ibp", "s_dibp"]


def load(name):
    """``(X, covariate, column names)``."""
    if name == "macro":
        import statsmodels.api as sm

        d = sm.datasets.macrodata.load_pandas().data
        growth = ["realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi", "m1", "pop"]
        levels = ["tbilrate", "unemp", "infl", "realint"]
        g = 100.0 * np.diff(np.log(d[growth].to_numpy(float)), axis=0)
        X = np.column_stack([g, d[levels].to_numpy(float)[1:]])
        return X, np.arange(X.shape[0], dtype=float), growth + levels
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        d = load_diabetes(scaled=False)
        return d.data[:, 1:], d.data[:, 0].astype(float), list(d.feature_names[1:])
    raise ValueError(name)


def fit_predict(kind, X, t, k, tune, draws, seed):
    import pymc as pm

    import pymc_ibp as pmi

    n, d = X.shape
    with pm.Model(coords={"obs": range(n), "feature": range(k), "dim": range(d)}):
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        if kind == "dibp":
            Z = pmi.dependent_ibp("Z", t, alpha=alpha, dims=("obs", "feature")).Z
        else:
            pi = pmi.IBPStickBreaking("pi", alpha, dims="feature")
            Z = pm.Bernoulli("Z", p=pi, dims=("obs", "feature"))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X, dims=("obs", "dim"))
        t0 = time.perf_counter()
        idata = pm.sample(tune=tune, draws=draws, chains=1, cores=1, random_seed=seed,
                          progressbar=False, compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    Zs = idata.posterior["Z"].values[0].astype(float)
    As = idata.posterior["A"].values[0]
    pred = np.einsum("snk,skd->nd", Zs, As) / len(Zs)
    kplus = float((Zs.sum(axis=1) > 0).sum(axis=1).mean())
    return pred, kplus, wall


def run_data(name, args, rng):
    X_raw, t, _ = load(name)
    n, d = X_raw.shape
    folds = np.array_split(rng.permutation(n), args.folds)
    rows = []
    for f, test in enumerate(folds):
        train = np.setdiff1d(np.arange(n), test)
        mu, sd = X_raw[train].mean(axis=0), X_raw[train].std(axis=0)
        X = (X_raw - mu) / sd
        Xo = X.copy()
        hidden = np.zeros_like(X, dtype=bool)
        for r in test:
            hide = rng.permutation(d)[args.observed:]
            hidden[r, hide] = True
        Xo[hidden] = np.nan
        row = {"data": name, "fold": f}
        for kind in ("ibp", "dibp"):
            pred, kplus, wall = fit_predict(kind, Xo, t, args.k, args.tune, args.draws,
                                            args.seed + f)
            row[f"rmse_{kind}"] = float(np.sqrt(np.mean((pred[hidden] - X[hidden]) ** 2)))
            row[f"kplus_{kind}"] = kplus
            row[f"s_{kind}"] = wall
        row["dibp_better"] = bool(row["rmse_dibp"] < row["rmse_ibp"])
        rows.append(row)
        print_table(rows[-1:], COLS)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", nargs="+", default=["macro", "diabetes"])
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--observed", type=int, default=3, help="observed entries per test row")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--tune", type=int, default=200)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=2010)
    ap.add_argument("--quick", action="store_true", help="2 folds, 40 + 20 iterations")
    args = ap.parse_args()
    if args.quick:
        args.folds, args.tune, args.draws = 2, 40, 20
    info = machine_info()
    rng = np.random.default_rng(args.seed)
    rows = []
    for name in args.data:
        rows += run_data(name, args, rng)
    summary = []
    for name in args.data:
        r = [x for x in rows if x["data"] == name]
        ibp = np.array([x["rmse_ibp"] for x in r])
        dibp = np.array([x["rmse_dibp"] for x in r])
        summary.append({"data": name, "IBP": f"{ibp.mean():.3f} ± {ibp.std(ddof=1):.3f}",
                        "dIBP": f"{dibp.mean():.3f} ± {dibp.std(ddof=1):.3f}",
                        "folds_dibp_better": f"{int((dibp < ibp).sum())} / {len(r)}"})
    summary += [{"data": "paper: music", "IBP": "1.08 ± 0.06", "dIBP": "0.69 ± 0.04",
                 "folds_dibp_better": ""},
                {"data": "paper: UN", "IBP": "0.93 ± 0.06", "dIBP": "0.79 ± 0.07",
                 "folds_dibp_better": "10 / 10"}]
    print()
    print_table(summary, ["data", "IBP", "dIBP", "folds_dibp_better"])
    notes = [
        "RMSE of the predicted (hidden) entries of the test rows, in standard deviations of "
        "the training rows; mean ± sd over folds.",
        f"{args.folds} folds, {args.observed} observed entries per test row, K = {args.k}, "
        f"1 chain x ({args.tune} + {args.draws}) per model and fold; predictions average "
        f"Z @ A over the {args.draws} kept draws.",
        "Command: python -m benchmarks.dibp_heldout" + (" --quick" if args.quick else ""),
    ]
    write_results("dibp_heldout_quick" if args.quick else "dibp_heldout", summary,
                  ["data", "IBP", "dIBP", "folds_dibp_better"],
                  "Held-out prediction: dependent IBP vs IBP (Williamson et al. 2010, Table 1)",
                  notes, info, extra_tables=[("Per fold", rows, COLS)], csv_rows=rows)


if __name__ == "__main__":
    main()
