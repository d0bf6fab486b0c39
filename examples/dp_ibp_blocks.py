"""The DP-IBP demonstration of Doshi-Velez (2009, §7.2.1, Fig. 7.4-7.5) with pm.sample.

700 noisy 6x6 block images whose four glyphs co-occur in nine combinations (the null one
included; pmi.datasets.block_combinations).  The model is the thesis's: DP-IBP feature
matrix (pmi.dp_ibp: labels c ~ CRP, category-feature matrix M ~ IBP, Z = M[c]), non-negative
features A ~ Exponential(lam) and Gaussian noise, every hyperparameter under a vague Gamma or
half-normal prior.  pm.sample assigns CRPGibbs (c), IBPGibbs (M), NonNegativeFeatureGibbs (A),
ExponentialRateGibbs (lam), IBPAlphaGibbs (alpha_m) and NUTS (alpha_c, sigma_x).

Outputs (in --out, default docs/_static/dp_ibp/):
  structure.png  a representative draw: features and category-feature matrix (top) above
                 the true glyphs and combinations (bottom), as the thesis's Fig. 7.4
  counts.png     number of occupied categories and of features in use per iteration, every
                 chain, true values dashed (Fig. 7.5)
  summary.md     the table printed at the end
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def used_structure(Z_M, c, A):
    """Occupied categories, the features they use, and the recovered Z, for one draw."""
    import numpy as np

    occupied = np.unique(c)
    used = np.flatnonzero(Z_M[occupied].sum(axis=0) > 0)
    return occupied, used, Z_M[c][:, used], A[used]


def match_glyphs(A_used, glyphs):
    """For every true glyph, the index of the best-correlated recovered feature and the
    correlation (``-1`` when no feature is in use)."""
    import numpy as np

    if A_used.shape[0] == 0:
        return np.full(len(glyphs), -1), np.zeros(len(glyphs))
    corr = np.corrcoef(np.vstack([glyphs, A_used]))[: len(glyphs), len(glyphs):]
    return corr.argmax(axis=1), corr.max(axis=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="docs/_static/dp_ibp")
    parser.add_argument("--n", type=int, default=700)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--chains", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    t0 = time.perf_counter()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pymc as pm

    import pymc_ibp as pmi

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = pmi.datasets.block_combinations(args.n, noise=0.5, seed=args.seed)
    l_max, k_max = 30, 10
    coords = {"obs": range(args.n), "feature": range(k_max), "dim": range(data.d)}
    with pm.Model(coords=coords):
        alpha_c = pm.Gamma("alpha_c", 1.0, 1.0)
        alpha_m = pm.Gamma("alpha_m", 1.0, 1.0)
        Z = pmi.dp_ibp("Z", alpha_c, alpha_m, l_max=l_max, dims=("obs", "feature"))
        lam = pm.Gamma("lam", 1.0, 1.0)
        A = pm.Exponential("A", lam, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X, dims=("obs", "dim"))
        t1 = time.perf_counter()
        idata = pm.sample(tune=args.tune, draws=args.draws, chains=args.chains,
                          cores=args.cores, random_seed=args.seed, progressbar=False,
                          var_names=["Z_c", "Z_M", "A", "alpha_c", "alpha_m", "lam", "sigma_x"],
                          discard_tuned_samples=False, compute_convergence_checks=False)
        t_sample = time.perf_counter() - t1

    post = idata.posterior
    warm = idata.warmup_posterior
    n_cat, n_feat, n_comb, glyph_corr = [], [], [], []
    for group in (warm, post):
        cs, Ms, As = (group[v].values for v in ("Z_c", "Z_M", "A"))
        n_cat.append(np.array([[np.unique(c).size for c in ch] for ch in cs]))
        feats, combs, corrs = [], [], []
        for ch in range(cs.shape[0]):
            f, cmb, cr = [], [], []
            for c, M, A_ in zip(cs[ch], Ms[ch], As[ch], strict=True):
                occ, used, Zu, Au = used_structure(M, c, A_)
                f.append(used.size)
                cmb.append(len({tuple(r) for r in Zu}))
                cr.append(match_glyphs(Au, data.A)[1].min())
            feats.append(f)
            combs.append(cmb)
            corrs.append(cr)
        n_feat.append(np.array(feats))
        n_comb.append(np.array(combs))
        glyph_corr.append(np.array(corrs))
    n_cat, n_feat, n_comb, glyph_corr = (np.concatenate(v, axis=1)
                                         for v in (n_cat, n_feat, n_comb, glyph_corr))
    kept = slice(args.tune, None)

    # --- Fig 7.4: a representative draw (the last of chain 0) above the truth
    c, M, A_ = (post[v].values[0, -1] for v in ("Z_c", "Z_M", "A"))
    occ, used, Zu, Au = used_structure(M, c, A_)
    combos = np.unique(Zu, axis=0)
    order, _ = match_glyphs(Au, data.A)
    fig, axes = plt.subplots(2, 2, figsize=(9, 5.5), gridspec_kw={"width_ratios": [3, 1]})
    for row, (feats, comb, title) in enumerate((
            (Au, combos, f"recovered: {Au.shape[0]} features, {len(combos)} combinations"),
            (data.A, data.M, f"true: {data.k} features, {len(data.M)} combinations"))):
        k = feats.shape[0]
        strip = np.ones((6, 7 * max(k, 1) - 1)) * np.nan
        for j in range(k):
            strip[:, 7 * j:7 * j + 6] = feats[j].reshape(6, 6)
        axes[row, 0].imshow(strip, cmap="gray_r")
        axes[row, 0].set_title(title, fontsize=10)
        axes[row, 0].axis("off")
        axes[row, 1].imshow(comb, cmap="Greys", vmin=0, vmax=1, aspect="auto")
        axes[row, 1].set_title("combinations x features", fontsize=9)
        axes[row, 1].set_xticks(range(comb.shape[1]))
        axes[row, 1].set_yticks([])
    fig.tight_layout()
    fig.savefig(out / "structure.png", dpi=110)
    plt.close(fig)

    # --- Fig 7.5: occupied categories and features per iteration
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, series, truth, label in ((axes[0], n_cat, len(data.M), "occupied categories"),
                                     (axes[1], n_feat, data.k, "features in use")):
        for ch in range(series.shape[0]):
            ax.plot(series[ch], lw=0.8, label=f"chain {ch}")
        ax.axhline(truth, ls="--", color="k", lw=0.8)
        ax.axvline(args.tune, color="grey", lw=0.5)
        ax.set_xlabel("iteration (tuning left of the grey line)")
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "counts.png", dpi=110)
    plt.close(fig)

    rows = []
    for ch in range(n_cat.shape[0]):
        rows.append((ch, n_cat[ch, kept].mean(), n_comb[ch, kept].mean(),
                     np.mean(n_comb[ch, kept] == 9), n_feat[ch, kept].mean(),
                     np.mean(n_feat[ch, kept] == 4), np.mean(glyph_corr[ch, kept] > 0.9)))
    lmax_hit = float(idata.sample_stats["ibp_lmax_hit"].values.mean())
    lines = [
        "| chain | occupied categories | distinct combinations | P(9 combinations) | "
        "features in use | P(4 features) | P(every glyph recovered, corr > 0.9) |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | "
          f"{r[6]:.2f} |" for r in rows),
    ]
    lines += ["", f"N = {args.n}, L_max = {l_max}, K_max = {k_max}; {args.chains} chains x "
              f"({args.tune} tune + {args.draws} draws); sampling {t_sample:.0f} s "
              f"({t_sample / (args.chains * (args.tune + args.draws)) * 1e3:.0f} ms per "
              f"iteration per chain, cores={args.cores}); total {time.perf_counter() - t0:.0f} s.",
              "Means over the kept draws.  Occupied categories count distinct labels: several "
              "categories may share one combination (identical rows of M), which the model "
              "allows; distinct combinations count the distinct rows of Z.  A glyph is "
              "recovered when a feature in use correlates > 0.9 with it.  Fraction of draws "
              f"with all l_max labels occupied: {lmax_hit:.2f}.",
              f"Command: python examples/dp_ibp_blocks.py --tune {args.tune} --draws "
              f"{args.draws} --chains {args.chains}"]
    text = "\n".join(lines)
    print(text)
    (out / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
