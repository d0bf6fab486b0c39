"""The MEIBP studies of Reed (2013, §4.9): the per-row maximisers against brute force, and the
number of features the MEIBP finds on block images as the noise grows.

**Maximisers.**  Reed's setup: N = 500, D = 50, sigma_X = 0.5, K = 2, 4, ..., 14 features,
10 data sets per K.  Each data set has ``Z`` with Bernoulli(1/2) entries and non-negative
features ``A ~ HalfNormal(1)``; ``X = Z A + noise``.  ``q(A)`` is either (i) *true*: the
MEIBP's exact update given the true ``Z`` (pmi.inference.meibp._update_qa), or (ii)
*random*: pre-truncation means drawn from N(0, 1) with the update's scales.  For 25 rows of
each data set, the row objective ``F`` (Reed 2013, eq. 4.20; the other rows fixed at the truth)
is maximised by each maximiser and by brute force over all 2^K rows; reported: the mean of
``(F - F_min) / (OPT - F_min)`` and the mean number of objective queries (gain evaluations).
``rand`` = a uniformly random row (Reed's reference: about 0.9).

**Sensitivity.**  2000 block images (pmi.datasets.block_images, seed 1) with noise
0.1, 0.2, ..., 1.0; the MEIBP (local search, K_max = 20, sigma_x = the noise, sigma_a = 1,
alpha = 1) from a Bernoulli(1/3) start; reported: K+ and the number of features owned by more
than 5% of the rows (the truth has 4 glyphs, each in about half the images).

    python -m benchmarks.meibp_study            # both studies (+ results/meibp_study.png)
    python -m benchmarks.meibp_study --quick    # K <= 8, 3 data sets, noise 0.3 and 0.7
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results

KINDS = ["ls", "lg", "lg-ord", "lg-sto"]


def brute_force(omega, Q, new, k_rest):
    """``(max F, min F)`` over all 2^K rows."""
    return _brute_force_jit()(omega, Q, new, k_rest)


def _brute_force_jit():
    import numba

    from pymc_ibp.inference.submodular import row_value

    @numba.njit(cache=False)
    def run(omega, Q, new, k_rest):
        k = omega.shape[0]
        z = np.zeros(k, dtype=np.int8)
        hi, lo = -np.inf, np.inf
        for code in range(2**k):
            for j in range(k):
                z[j] = (code >> j) & 1
            v = row_value(z, omega, Q, new, k_rest)
            hi, lo = max(hi, v), min(lo, v)
        return hi, lo

    global _BRUTE
    if _BRUTE is None:
        _BRUTE = run
    return _BRUTE


_BRUTE = None


def row_instances(rng, k, case, n=500, d=50, sx2=0.25, rows=25):
    """Per-row objectives (ω, Q, new, K_rest) of one data set of the maximiser study."""
    from pymc_ibp.inference.meibp import _eta, _row_weights, _update_qa, tn_moments

    A = np.abs(rng.normal(size=(k, d)))
    Z = (rng.random((n, k)) < 0.5).astype(np.int64)
    X = Z @ A + np.sqrt(sx2) * rng.normal(size=(n, d))
    Zf = Z.astype(float)
    G, RX, m = Zf.T @ Zf, Zf.T @ X, Z.sum(axis=0)
    Ea, Ea2, Ha = np.zeros((k, d)), np.zeros((k, d)), np.zeros((k, d))
    mu, sd = np.zeros((k, d)), np.zeros((k, d))
    for _ in range(3):
        _update_qa(G, RX, m, Ea, Ea2, Ha, mu, sd, sx2, 1.0)
    if case == "random":
        mu = rng.normal(size=(k, d))
        for a in range(k):
            for b in range(d):
                Ea[a, b], Ea2[a, b], Ha[a, b] = tn_moments(mu[a, b], sd[a, b])
    Q = Ea @ Ea.T / sx2
    eta = _eta(Ea2, Ha, 1.0, np.log(k / 10.0))
    out = []
    for i in rng.choice(n, size=rows, replace=False):
        m_rest = (m - Z[i]).astype(np.int64)
        omega, new = _row_weights(X[i], m_rest, Ea, Ea2, eta, n, sx2)
        out.append((omega, Q, new, int((m_rest > 0).sum())))
    return out


def maximiser_study(ks, n_sets):
    from pymc_ibp.inference.submodular import MAXIMISERS, maximise_row, row_value

    rng = np.random.default_rng(0)
    rows = []
    for case in ("true", "random"):
        for k in ks:
            ratios = {kind: [] for kind in [*KINDS, "rand"]}
            queries = {kind: [] for kind in KINDS}
            for _ in range(n_sets):
                for omega, Q, new, k_rest in row_instances(rng, k, case):
                    opt, low = brute_force(omega, Q, new, k_rest)
                    if opt - low < 1e-12:
                        continue
                    for kind in KINDS:
                        z, q = maximise_row(rng, omega, Q, new, k_rest, MAXIMISERS.index(kind))
                        ratios[kind].append((row_value(z, omega, Q, new, k_rest) - low)
                                            / (opt - low))
                        queries[kind].append(q)
                    z = (rng.random(k) < 0.5).astype(np.int8)
                    ratios["rand"].append((row_value(z, omega, Q, new, k_rest) - low)
                                          / (opt - low))
            row = dict(A=case, K=k, rows=len(ratios["rand"]))
            for kind in [*KINDS, "rand"]:
                row[f"ratio_{kind}"] = float(np.mean(ratios[kind]))
            for kind in KINDS:
                row[f"queries_{kind}"] = float(np.mean(queries[kind]))
            rows.append(row)
            print_table([row], list(row))
    return rows


def sensitivity_study(noises, n=2000):
    import pymc as pm

    import pymc_ibp as pmi

    rows = []
    for noise in noises:
        data = pmi.datasets.block_images(n, noise=noise, seed=1)
        with pm.Model() as model:
            Z = pmi.IBP("Z", 1.0, shape=(n, 20))
            A = pm.HalfNormal("A", 1.0, shape=(20, data.d))
            pm.Normal("X", Z @ A, noise, observed=data.X)
        t = time.perf_counter()
        res = pmi.inference.fit_meibp(model, random_seed=1)
        secs = time.perf_counter() - t
        m = res.Z.sum(axis=0)
        row = dict(noise=noise, K_plus=int((m > 0).sum()), large=int((m > 0.05 * n).sum()),
                   iterations=len(res.objective), converged=res.converged, seconds=secs)
        rows.append(row)
        print_table([row], list(row))
    return rows


def plot(rows, path):
    """Two panels: the mean normalised ratio and the mean queries per row, against K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, case in zip(axes[:2], ("true", "random"), strict=True):
        sub = [r for r in rows if r["A"] == case]
        ks = [r["K"] for r in sub]
        for kind in [*KINDS, "rand"]:
            ax.plot(ks, [r[f"ratio_{kind}"] for r in sub], marker="o", label=kind)
        ax.set(title=f"q(A) {case}", xlabel="K", ylabel="(F - F_min) / (OPT - F_min)")
        ax.legend(fontsize=8)
    sub = [r for r in rows if r["A"] == "random"]
    for kind in KINDS:
        axes[2].plot([r["K"] for r in sub], [r[f"queries_{kind}"] for r in sub], marker="o",
                     label=kind)
    axes[2].set(title="queries per row (q(A) random)", xlabel="K", ylabel="gain evaluations")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    quiet()
    info = machine_info()
    t0 = time.perf_counter()
    ks, n_sets = ((2, 4, 8), 3) if args.quick else (tuple(range(2, 15, 2)), 10)
    noises = (0.3, 0.7) if args.quick else tuple(np.round(np.arange(0.1, 1.01, 0.1), 1))
    mx = maximiser_study(ks, n_sets)
    sens = sensitivity_study(noises)
    cols = list(mx[0])
    notes = [
        "ratio_* = mean of (F - F_min) / (OPT - F_min) over rows (OPT, F_min by brute force "
        "over all 2^K rows); queries_* = mean number of gain evaluations per row; rand = a "
        "uniformly random row.",
        "A = true: q(A) from the MEIBP's exact update given the true Z; random: "
        "pre-truncation means drawn from N(0, 1). N = 500, D = 50, sigma_X = 0.5, alpha = K/10, "
        "Z with Bernoulli(1/2) entries, 25 rows per data set.",
        "Sensitivity table: fit_meibp (local search) on 2000 block images per noise level; "
        "large = features owned by more than 5% of the rows (truth: 4).",
        f"Total script time {time.perf_counter() - t0:.0f} s.",
    ]
    name = "meibp_study_quick" if args.quick else "meibp_study"
    plot(mx, Path(__file__).parent / "results" / f"{name}.png")
    write_results(name, mx, cols,
                  "MEIBP: per-row maximisers against brute force, and sensitivity to noise",
                  notes, info,
                  extra_tables=[("Features found on block images", sens, list(sens[0]))])


if __name__ == "__main__":
    main()
