"""The noisy-or IBP-IBP demonstration of Doshi-Velez (2009, §7.2.3, Fig. 7.6-7.7): block images
in which several, often overlapping, clusters of glyphs are present at once.

From the thesis's text: the glyphs and clusters are those of the DP-IBP demonstration (§7.2.1:
four 6x6 block glyphs, ``pmi.datasets.BLOCK_GLYPHS``, in nine combinations,
``pmi.datasets.BLOCK_COMBINATIONS``, the null one included), but an image may now show several
clusters at once; the likelihood is the chapter's ``X = Z A + e`` with exponential features
and Gaussian noise; every hyperparameter has a vague prior and is sampled; inference is
uncollapsed Gibbs sampling started in the chain of §7.3 (DP -> DP-IBP -> IBP-IBP -> noisy-or
IBP-IBP; ``pmi.inference.chained_fit``).  The thesis reports that the recovered features and
clusters "largely match" the truth but contain replicas and that the numbers of features and
categories are often over-estimated (Fig. 7.7), while the reconstructions stay good.

Assumed (the text gives no numbers): 700 images as in §7.2.1; each image joins each of the
eight non-null clusters independently with probability 1/4 (two clusters on average, none for
10% of the images); its glyphs are drawn from the noisy-or of the model itself,
``z_nk ~ Bernoulli(1 - q^(c_n . m_k))`` with ``q = 0.1``; noise sd 0.5 (the §7.2.1 data's).
The truth is then eight categories (the null cluster owns no feature and cannot be seen) and
four features.

Model: ``pmi.noisy_or_ibp_ibp`` (C ~ IBP(alpha_c), M ~ IBP(alpha_m), q ~ Beta(1, 1)),
``A ~ Exponential(lam)``, ``lam ~ Gamma(1, 1)``, ``sigma_x ~ HalfNormal(1)``,
``alpha_c, alpha_m ~ Gamma(1, 1)``.  pm.sample assigns CRPGibbs / IBPGibbs to the structure
(the noisy-or ``Z`` included), NonNegativeFeatureGibbs to ``A``, ExponentialRateGibbs to
``lam``, CRPAlphaGibbs / IBPAlphaGibbs to the concentrations, NoisyOrQSlice to ``q`` and NUTS
to ``sigma_x``.  Every stage runs ``--chains`` x (``--tune`` + ``--draws``) (the thesis: 3
chains x 1000 iterations), with ``--k-max`` feature and ``--l-max`` category slots (the
summary says how often every slot was in use).

Scoring a draw: a recovered feature (a column of ``Z`` in use) *matches* a glyph when its row
of ``A`` correlates > 0.9 with it; *replicas* are the matches beyond the first of a glyph,
*unmatched* features match none, *composites* are unmatched features that match a sum of two
or more glyphs (a motif learnt as one feature).  A category in use (members in ``C`` and at
least one feature) stands for the set of glyphs its matched features carry; the true clusters
found are those sets among the eight true ones; *replica categories* are categories whose set
another category already has.

Outputs (in --out, default docs/_static/noisy_or/):
  structure.png  the last draw of chain 0: features and category-feature matrix (top) above
                 the true glyphs and clusters (bottom), as the thesis's Fig. 7.6
  counts.png     categories and features in use per iteration through the four chained
                 stages, every chain, true values dashed; histograms over the noisy-or
                 stage's kept draws (Fig. 7.7)
  summary.md     the table printed at the end
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

STAGES = ("dp", "dp_ibp", "ibp_ibp", "noisy_or")
TITLES = {"dp": "DP", "dp_ibp": "DP-IBP", "ibp_ibp": "IBP-IBP", "noisy_or": "noisy-or"}


def overlapping_blocks(n, p_cluster, q, noise, seed):
    """Images whose glyphs come from several clusters at once through a noisy-or:
    ``(X, Z, C, M, A)`` with ``C`` the ``n x 8`` memberships of the non-null clusters."""
    import numpy as np

    import pymc_ibp as pmi

    rng = np.random.default_rng(seed)
    A = np.asarray(pmi.datasets.BLOCK_GLYPHS, dtype=float)
    M = np.asarray(pmi.datasets.BLOCK_COMBINATIONS)[1:]  # the null cluster owns nothing
    C = (rng.random((n, M.shape[0])) < p_cluster).astype(np.int64)
    Z = (rng.random((n, A.shape[0])) < 1.0 - q ** (C @ M)).astype(np.int64)
    X = Z @ A + noise * rng.standard_normal((n, A.shape[1]))
    return X, Z, C, M, A


def structure(stage, draw):
    """``(categories, features)`` in use in one draw (a dict of its variables): the features
    are the columns of ``Z`` in use, the categories the occupied ones that own one of them."""
    import numpy as np

    used = np.flatnonzero(draw["Z"].sum(axis=0) > 0)
    if stage == "dp":
        return np.unique(draw["Z_c"]), used
    M = draw["Z_M"]
    owns = M[:, used].sum(axis=1) > 0
    occupied = (np.unique(draw["Z_c"]) if stage == "dp_ibp"
                else np.flatnonzero(draw["Z_C"].sum(axis=0) > 0))
    return occupied[owns[occupied]], used


def match(A_used, patterns, threshold=0.9):
    """The pattern (a row of ``patterns``) each recovered feature matches (correlation >
    ``threshold``), or -1."""
    import numpy as np

    if A_used.shape[0] == 0:
        return np.zeros(0, dtype=int)
    corr = np.corrcoef(np.vstack([patterns, A_used]))[len(patterns):, : len(patterns)]
    corr = np.nan_to_num(corr, nan=0.0)
    return np.where(corr.max(axis=1) > threshold, corr.argmax(axis=1), -1)


def glyph_sums(glyphs):
    """Every sum of two or more glyphs (the images of a composite feature)."""
    from itertools import combinations

    import numpy as np

    k = len(glyphs)
    return np.array([glyphs[list(s)].sum(axis=0) for r in range(2, k + 1)
                     for s in combinations(range(k), r)])


def score_draw(draw, truth, true_sets, glyphs, sums):
    """Replica and recovery counts of one noisy-or draw, and the RMSE of its ``Z A`` against
    the noiseless ``truth``."""
    import numpy as np

    cats, used = structure("noisy_or", draw)
    g = match(draw["A"][used], glyphs)
    counts = np.bincount(g[g >= 0], minlength=len(glyphs))
    sets = [frozenset(g[(draw["Z_M"][c, used] > 0) & (g >= 0)]) for c in cats]
    sets = [s for s in sets if s]
    return {"categories": len(cats), "features": len(used),
            "replicas": int(np.maximum(counts - 1, 0).sum()), "unmatched": int((g < 0).sum()),
            "composites": int((match(draw["A"][used[g < 0]], sums) >= 0).sum()),
            "all_glyphs": bool((counts > 0).all()),
            "clusters_found": len(set(sets) & true_sets),
            "replica_categories": len(sets) - len(set(sets)),
            "rmse": float(np.sqrt(np.mean((draw["Z"] @ draw["A"] - truth) ** 2)))}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="docs/_static/noisy_or")
    parser.add_argument("--n", type=int, default=700)
    parser.add_argument("--p-cluster", type=float, default=0.25)
    parser.add_argument("--q", type=float, default=0.1, help="the data's noisy-or q")
    parser.add_argument("--k-max", type=int, default=24, help="feature slots (>= --l-max)")
    parser.add_argument("--l-max", type=int, default=24, help="category slots")
    parser.add_argument("--tune", type=int, default=200, help="per stage")
    parser.add_argument("--draws", type=int, default=200, help="per stage")
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
    X, Z_true, C_true, M_true, A_true = overlapping_blocks(args.n, args.p_cluster, args.q,
                                                           0.5, args.seed)
    truth = Z_true @ A_true
    true_sets = {frozenset(np.flatnonzero(m)) for m in M_true}
    n_true_cat, n_true_feat = len(M_true), len(A_true)
    d = X.shape[1]

    def likelihood(Z):
        lam = pm.Gamma("lam", 1.0, 1.0)
        A = pm.Exponential("A", lam, shape=(args.k_max, d))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)

    t1 = time.perf_counter()
    fit = pmi.inference.chained_fit(
        likelihood, n=args.n, k_max=args.k_max, l_max=args.l_max,
        alpha_c=lambda: pm.Gamma("alpha_c", 1.0, 1.0),
        alpha_m=lambda: pm.Gamma("alpha_m", 1.0, 1.0), q=lambda: pm.Beta("q", 1.0, 1.0),
        tune=args.tune, draws=args.draws, chains=args.chains, cores=args.cores,
        random_seed=args.seed, progressbar=False, discard_tuned_samples=False,
        compute_convergence_checks=False)
    t_sample = time.perf_counter() - t1
    stage_secs = {s: float(fit[s]["posterior"].attrs["sampling_time"]) for s in STAGES}

    # --- categories and features in use per iteration, through the stages
    n_cat, n_feat = [], []
    for stage in STAGES:
        idata = fit[stage]
        names = ["Z", "Z_c"] if stage == "dp" else (["Z", "Z_c", "Z_M"] if stage == "dp_ibp"
                                                    else ["Z", "Z_C", "Z_M"])
        per_group = []
        for group in ("warmup_posterior", "posterior"):
            vals = {v: idata[group][v].values for v in names}
            per_group.append(np.array([[
                [len(x) for x in structure(stage, {v: vals[v][ch, i] for v in names})]
                for i in range(vals["Z"].shape[1])] for ch in range(vals["Z"].shape[0])]))
        both = np.concatenate(per_group, axis=1)  # chain x iteration x (categories, features)
        n_cat.append(both[..., 0])
        n_feat.append(both[..., 1])
    n_cat, n_feat = np.concatenate(n_cat, axis=1), np.concatenate(n_feat, axis=1)

    # --- the noisy-or stage's kept draws, scored
    post = fit["noisy_or"]["posterior"]
    keys = ("Z", "Z_C", "Z_M", "A")
    vals = {v: post[v].values for v in keys}
    sums = glyph_sums(A_true)
    scores = [[score_draw({v: vals[v][ch, i] for v in keys}, truth, true_sets, A_true, sums)
               for i in range(post.sizes["draw"])] for ch in range(post.sizes["chain"])]

    # --- Fig 7.6: the last draw of chain 0 above the truth
    last = {v: vals[v][0, -1] for v in keys}
    cats, used = structure("noisy_or", last)
    g = match(last["A"][used], A_true)
    order = np.argsort(np.where(g < 0, len(A_true), g), kind="stable")
    used, g = used[order], g[order]
    comb = last["Z_M"][np.ix_(cats, used)]
    comb = comb[np.lexsort(comb.T[::-1])][::-1] if comb.size else comb
    labels = [f"g{x + 1}" if x >= 0 else "?" for x in g]
    fig, axes = plt.subplots(2, 2, figsize=(10, 5.8), gridspec_kw={"width_ratios": [3, 1]})
    for row, (feats, cm, xlabels, title) in enumerate((
            (last["A"][used], comb, labels,
             f"recovered: {len(used)} features, {len(cats)} categories"),
            (A_true, M_true, [f"g{k + 1}" for k in range(n_true_feat)],
             f"true: {n_true_feat} features, {n_true_cat} clusters (null cluster not shown)"))):
        k = feats.shape[0]
        strip = np.full((6, 7 * max(k, 1) - 1), np.nan)
        for j in range(k):
            strip[:, 7 * j:7 * j + 6] = feats[j].reshape(6, 6)
        axes[row, 0].imshow(strip, cmap="gray_r")
        axes[row, 0].set_title(title, fontsize=10)
        axes[row, 0].set_xticks([7 * j + 2.5 for j in range(k)], xlabels, fontsize=8)
        axes[row, 0].set_yticks([])
        axes[row, 1].imshow(cm if cm.size else np.zeros((1, 1)), cmap="Greys", vmin=0, vmax=1,
                            aspect="auto")
        axes[row, 1].set_title("categories x features", fontsize=9)
        axes[row, 1].set_xticks(range(cm.shape[1]), xlabels, fontsize=8)
        axes[row, 1].set_yticks([])
    fig.suptitle("features labelled by the glyph they match (corr > 0.9; ? = none)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "structure.png", dpi=110)
    plt.close(fig)

    # --- Fig 7.7: counts per iteration through the stages, histograms of the last stage
    per_stage = args.tune + args.draws
    kept = slice((len(STAGES) - 1) * per_stage + args.tune, None)
    fig, axes = plt.subplots(2, 2, figsize=(10, 5.8), gridspec_kw={"height_ratios": [3, 2]})
    for col, (series, true, label) in enumerate(((n_cat, n_true_cat, "categories in use"),
                                                 (n_feat, n_true_feat, "features in use"))):
        ax = axes[0, col]
        for ch in range(series.shape[0]):
            ax.plot(series[ch], lw=0.7, label=f"chain {ch}")
        ax.axhline(true, ls="--", color="k", lw=0.8)
        for i, stage in enumerate(STAGES):
            ax.axvline(i * per_stage, color="grey", lw=0.6)
            ax.text(i * per_stage + 3, 0.97, TITLES[stage], fontsize=7, va="top",
                    transform=ax.get_xaxis_transform())
        ax.set_xlabel("iteration (stages of the chained fit, tuning included)")
        ax.set_title(label, fontsize=10)
        vals_kept = series[:, kept].ravel()
        bins = np.arange(vals_kept.min() - 0.5, vals_kept.max() + 1.5)
        axes[1, col].hist(vals_kept, bins=bins, color="0.5")
        axes[1, col].axvline(true, ls="--", color="k", lw=0.8)
        axes[1, col].set_xlabel(f"{label}, noisy-or stage's kept draws")
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "counts.png", dpi=110)
    plt.close(fig)

    # --- summary
    qs, sx = post["q"].values, post["sigma_x"].values
    rows = []
    for ch, sc in enumerate(scores):
        f = np.array([s["features"] for s in sc])
        rows.append([ch, np.mean([s["categories"] for s in sc]), f.mean(),
                     np.mean(f == n_true_feat), np.mean(f > n_true_feat),
                     np.mean([s["replicas"] for s in sc]), np.mean([s["replicas"] > 0 for s in sc]),
                     np.mean([s["unmatched"] for s in sc]), np.mean([s["composites"] for s in sc]),
                     np.mean([s["all_glyphs"] for s in sc]),
                     np.mean([s["clusters_found"] for s in sc]),
                     np.mean([s["replica_categories"] for s in sc]),
                     qs[ch].mean(), sx[ch].mean(), np.mean([s["rmse"] for s in sc])])
    allf = n_feat[:, kept]
    slots_c = (vals["Z_C"].sum(axis=2) > 0).sum(axis=-1)  # occupied category slots per draw
    slots_k = (vals["Z"].sum(axis=2) > 0).sum(axis=-1)
    lines = [
        "| chain | categories in use | features in use | P(K+ = 4) | P(K+ > 4) | replica "
        "features | P(any replica) | unmatched features | of which composites | P(all 4 "
        "glyphs) | true clusters found (of 8) | replica categories | q | sigma_x | RMSE of ZA "
        "vs noiseless truth |",
        "|---|" + "---|" * 14,
        *("| " + " | ".join([str(r[0])] + [f"{v:.2f}" for v in r[1:]]) + " |" for r in rows),
    ]
    lines += [
        "",
        f"N = {args.n}, K_max = {args.k_max}, L_max = {args.l_max}; data: each image in each of "
        f"the 8 non-null clusters w.p. {args.p_cluster}, glyphs by a noisy-or with q = "
        f"{args.q}, noise sd 0.5 (truth: 8 categories, 4 features, q = {args.q}, sigma_x = "
        "0.5).",
        f"Every stage {args.chains} chains x ({args.tune} tune + {args.draws} draws), cores = "
        f"{args.cores}; sampling time per stage: "
        + ", ".join(f"{TITLES[s]} {stage_secs[s]:.0f} s" for s in STAGES)
        + f"; chained fit {t_sample:.0f} s with compilation, total "
        f"{time.perf_counter() - t0:.0f} s.",
        "Means over the noisy-or stage's kept draws.  A feature in use matches a glyph when "
        "its row of A correlates > 0.9 with it; replica features = matches beyond a glyph's "
        "first; unmatched = features matching no glyph; composites = unmatched features "
        "matching a sum of two or more glyphs (a motif learnt as one feature).  A category in "
        "use (members and a feature) stands for the glyphs of its matched features; true "
        "clusters found = those sets among the 8 true ones; replica categories = categories "
        "repeating another's set.",
        f"Over all chains: K+ over-estimated (> 4) in {np.mean(allf > n_true_feat):.0%} of the "
        f"kept draws, under-estimated in {np.mean(allf < n_true_feat):.0%}; categories "
        f"over-estimated (> 8) in {np.mean(n_cat[:, kept] > n_true_cat):.0%}.  Truncation: "
        f"all {args.l_max} category slots occupied (featureless categories included) in "
        f"{np.mean(slots_c == args.l_max):.0%} of the kept draws, all {args.k_max} feature "
        f"slots in use in {np.mean(slots_k == args.k_max):.0%}.",
        f"Command: python examples/noisy_or_overlap.py --n {args.n} --tune {args.tune} "
        f"--draws {args.draws} --chains {args.chains}",
    ]
    text = "\n".join(lines)
    print(text)
    (out / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
