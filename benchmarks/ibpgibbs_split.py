"""Does pmi.IBPGibbs take apart a feature that stands for two?  The split / merge of a feature
with its parameters (``feature_split_merge``) against the moves without it.

A chain's log density is far below the density at the true parameters even at equilibrium
(a draw of A's hundreds of entries sits in the typical set, not at the mode), so chains are
compared with chains started at the truth, which stand for the posterior here.

Data: 300 binary block images generated from the model itself,
``pmi.datasets.binary_block_images(300, seed=0)``: ``X ~ Bernoulli(logit_p = Z @ A + b)`` with
the four 6 x 6 glyphs of ``pmi.datasets.block_images`` (``A = 4 x glyph``, ``b = -2``: a pixel
is on with probability 0.88 under a glyph, 0.12 elsewhere).  Model:
``Z ~ pmi.IBP(2)`` with ``K_max = 20``, ``A ~ Normal(0, 3)``, ``b ~ Normal(-2, 2)``; ``Z`` by
``pmi.IBPGibbs``, ``A`` and ``b`` by NUTS (both passed explicitly). Starts: ``truth`` (every
chain at the true ``Z``, ``A`` and ``b``: the reference), ``merged`` (at the true ``Z`` with
glyphs 0 and 1 in one column, ``A = 0``), ``point`` (PyMC's initial point, ``Z = 0``,
``init_z="point"``) or ``surrogate`` (PyMC's initial point and the step's default start for this
model, ``init_z="surrogate"``: the chain's first iteration finds ``Z`` on a linear-Gaussian
surrogate of the data and sets A given it). Moves: ``no_fsm`` (the step's defaults but
``feature_split_merge = 0``) or ``default`` (with 3 split / merge proposals of a feature with
its parameters per sweep).

Reported per setting (4 chains x (50 + 100), cores=2): ``score_mean``, the mean over chains
of each chain's mean score over its last 50 draws, where the score is the model's log density
(no Jacobians) with the empty slots' rows of A left out (they are prior draws, independent of
everything else, so leaving them out integrates them out exactly); ``score_vs_truth_start``,
that minus the same for the truth-started chains (both move settings pooled);
``chain_min`` / ``chain_max``, the lowest and highest chain mean; ``pair_split``, the chains
whose last draw has one column agreeing with glyph 0's column of the true Z on at least 90 %
of the rows and another with glyph 1's; the accepted feature split / merge proposals per
iteration; the wall time of pm.sample.

    python -m benchmarks.ibpgibbs_split
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results

COLS = ["start", "moves", "N", "K_max", "chains", "tune", "draws", "K_plus_mean",
        "score_mean", "score_vs_truth_start", "chain_min", "chain_max", "pair_split",
        "fsm_accepted_per_it", "wall_s"]
MOVES = {"no_fsm": dict(feature_split_merge=0), "default": {}}
N, K_MAX, CHAINS, TUNE, DRAWS, LAST = 300, 20, 4, 50, 100, 50


def data(seed=0):
    import pymc_ibp as pmi

    blocks = pmi.datasets.binary_block_images(N, seed=seed)
    return blocks.X, blocks.Z, blocks.A


def run(start, moves, x, z_true, a_true, seed=7):
    import pymc as pm

    import pymc_ibp as pmi

    n, d = x.shape
    initvals = None
    start_kw = {"init_z": {"surrogate": "surrogate", "point": "point"}.get(start, "auto")}
    if start == "merged":
        z0 = np.zeros((n, K_MAX), dtype="int64")
        z0[:, 0] = z_true[:, 0] | z_true[:, 1]
        z0[:, 1:3] = z_true[:, 2:4]
        initvals = {"Z": z0}
    if start == "truth":
        z0 = np.zeros((n, K_MAX), dtype="int64")
        z0[:, :4] = z_true
        a0 = np.zeros((K_MAX, d))
        a0[:4] = a_true
        initvals = {"Z": z0, "A": a0, "b": np.full(d, -2.0)}
    with pm.Model() as model:
        Z = pmi.IBP("Z", 2.0, shape=(n, K_MAX))
        A = pm.Normal("A", 0.0, 3.0, shape=(K_MAX, d))
        b = pm.Normal("b", -2.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=x)
        t = time.perf_counter()
        idata = pm.sample(draws=DRAWS, tune=TUNE, chains=CHAINS, cores=2, initvals=initvals,
                          step=[pmi.IBPGibbs([Z], **MOVES[moves], **start_kw), pm.NUTS([A, b])],
                          random_seed=seed,
                          compute_convergence_checks=False, progressbar=False)
        wall = time.perf_counter() - t
        logp = model.compile_logp(jacobian=False)
        a_rows = model.compile_fn(model.logp(vars=[A], sum=False)[0].sum(axis=1),
                                  inputs=[model.rvs_to_values[A]], point_fn=False)

    def score(zv, av, bv):
        empty = zv.sum(axis=0) == 0
        return float(logp({"Z": zv, "A": av, "b": bv})) - float(np.sum(a_rows(av)[empty]))

    post = idata["posterior"]
    zs, as_, bs = post["Z"].values, post["A"].values, post["b"].values
    means, split = [], 0
    for c in range(CHAINS):
        s = [score(zs[c, i], as_[c, i], bs[c, i]) for i in range(DRAWS - LAST, DRAWS)]
        means.append(np.mean(s))
        last = zs[c, -1]
        agree = [max(np.mean(last[:, j] == z_true[:, g]) for j in range(K_MAX)) for g in (0, 1)]
        split += int(min(agree) >= 0.9)
    ss = idata["sample_stats"]
    return {"start": start, "moves": moves, "N": n, "K_max": K_MAX, "chains": CHAINS,
            "tune": TUNE, "draws": DRAWS,
            "K_plus_mean": float(ss["ibp_n_active"].values[:, -LAST:].mean()),
            "score_mean": float(np.mean(means)), "chain_min": float(np.min(means)),
            "chain_max": float(np.max(means)), "pair_split": f"{split}/{CHAINS}",
            "fsm_accepted_per_it": float(ss["ibp_feature_split_merge_accepted"].values.mean()),
            "wall_s": wall}


def main():
    quiet()
    info = machine_info()
    x, z_true, a_true = data()
    rows = []
    for start in ("truth", "merged", "point", "surrogate"):
        for moves in MOVES:
            rows.append(run(start, moves, x, z_true, a_true))
            print_table(rows[-1:], COLS)
    ref = float(np.mean([r["score_mean"] for r in rows if r["start"] == "truth"]))
    for r in rows:
        r["score_vs_truth_start"] = r["score_mean"] - ref
    print()
    print_table(rows, COLS)
    notes = [
        "Binary block images from the model (A = 4 x glyph, b = -2), N = 300; Z ~ pmi.IBP(2), "
        "K_max = 20, A ~ Normal(0, 3), b ~ Normal(-2, 2); Z by pmi.IBPGibbs, A and b by NUTS; "
        "4 chains x (50 + 100), cores=2, random_seed=7.",
        "start = truth: the true Z, A and b (the reference); merged: the true Z with glyphs 0 and "
        "1 in one column, A = 0; point: PyMC's initial point (Z = 0), init_z='point'; "
        "surrogate: PyMC's initial point with init_z='surrogate' (the default for this "
        "model).  moves = no_fsm: the step's defaults but feature_split_merge = 0; "
        "default: with 3 split / merge proposals of a feature with its parameters per sweep.",
        "score = model log density (no Jacobians) without the empty slots' rows of A, averaged "
        "over a chain's last 50 draws; score_mean / chain_min / chain_max = mean / min / max "
        "over chains; score_vs_truth_start = score_mean minus that of the truth-started chains "
        "(both move settings pooled); pair_split = chains whose last Z has a "
        "column agreeing with glyph 0's true column on >= 90 % of the rows and one with "
        "glyph 1's.",
        "Command: python -m benchmarks.ibpgibbs_split",
    ]
    write_results("ibpgibbs_split", rows, COLS,
                  "IBPGibbs: splitting a feature that stands for two (Bernoulli block images)",
                  notes, info)


if __name__ == "__main__":
    main()
