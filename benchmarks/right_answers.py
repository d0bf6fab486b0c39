"""Does ``pm.sample()`` find it?  Planted data for every model family and likelihood, each
sampled with ``pm.sample``'s step assignment and defaults, each chain scored against the truth.

Cases (the docs' own models, or the issue's reproductions of their natural variants):

* ``ibp_gaussian``: the README's model on ``pmi.datasets.block_images(200, noise=0.5)``
  (4 glyphs, D = 36, K_max = 12);
* ``ibp_poisson``: ``Z ~ pmi.IBP(alpha)``, ``Y ~ Poisson(exp(Z @ A + b))`` on 200 rows of 4
  glyphs with weight 1.5 per lit pixel (rates 1 and 4.5);
* ``ibp_bernoulli``: the Bernoulli-logit model of docs/step-methods/polya-gamma-gibbs.md on
  ``pmi.datasets.binary_block_images(200)``;
* ``stick_gaussian``: ``pmi.IBPStickBreaking`` sticks, ``Z ~ Bernoulli(pi)``, Gaussian
  likelihood (docs/distributions/stick-breaking.md) on the block images;
* ``dp_ibp_gaussian``: the DP-IBP reproduction of the right-answers issue
  (``pmi.datasets.block_combinations(150)``, l_max = 15, K_max = 8);
* ``dp_ibp_poisson``: its Poisson reproduction (3 features, 4 categories, 200 x 20);
* ``ibp_ibp_gaussian`` / ``noisy_or_gaussian``: docs/distributions/ibp-ibp.md's model on 200
  rows of overlapping clusters of 4 glyphs (the issue's reproduction; ``q ~ Beta(1, 1)`` for the
  noisy-or);
* ``dependent_gaussian``: docs/distributions/dependent-ibp.md's model on
  ``pmi.datasets.dependent_glyphs`` (time steps x items).

Score of a chain (independent of the sampler): at up to 20 kept draws, evenly spaced over
the chain's second half, the columns of ``Z`` are assigned one to one to the true features
(Hungarian assignment on the Jaccard similarity of their owners). A true feature is
*recovered* when its column matches it with Jaccard >= 0.8; a column of at least 2% of the
rows left over is a *duplicate* when it matches a recovered feature with Jaccard >= 0.9 (a
second copy), else *spurious*. A draw *finds* the structure when every true feature is
recovered and nothing is spurious or duplicated; a chain finds it when at least half of its
scored draws do. A draw whose columns are as many as the true features and span the same
space of ``N``-vectors also finds it: ``Z @ A`` then equals the truth's for some ``A``, an
equivalent parametrisation the likelihood cannot tell apart (the DP-IBP's categories can be
written over different features). Each run is also passed to :func:`pymc_ibp.check_chains`:
a run with a chain that does not find the structure and no word from it is a *silent* wrong
answer (the steps' TruncationWarnings are reported beside it: they name K_max, not a wrong
mode).

    python -m benchmarks.right_answers                   # every case, 2 seeds, pm.sample defaults
    python -m benchmarks.right_answers --quick           # every case, 1 seed, 2 x (200 + 200)
    python -m benchmarks.right_answers --cases dp_ibp_poisson --seeds 1 2 3 4
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results

RECOVER_J, DUPLICATE_J = 0.8, 0.9
SCORED_DRAWS = 20


# ------------------------------------------------------------------------------------------
# data and models
# ------------------------------------------------------------------------------------------
def _glyphs():
    import pymc_ibp as pmi

    return np.asarray(pmi.datasets.BLOCK_GLYPHS, dtype=float)


def _ibp_gaussian(seed):
    import pymc as pm

    import pymc_ibp as pmi

    data = pmi.datasets.block_images(200, noise=0.5, seed=seed)
    n, d = data.X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, 12))
        sigma_a = pm.HalfNormal("sigma_a", 2.0, initval=1.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(12, d))
        sigma_x = pm.HalfNormal("sigma_x", 1.0, initval=0.5)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X)
    return model, np.asarray(data.Z)


def _ibp_poisson(seed):
    import pymc as pm

    import pymc_ibp as pmi

    rng = np.random.default_rng(seed)
    A0 = 1.5 * _glyphs()
    Z0 = (rng.random((200, 4)) < 0.35).astype(np.int8)
    Y = rng.poisson(np.exp(Z0 @ A0))
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(200, 10))
        A = pm.Normal("A", 0.0, 1.5, shape=(10, A0.shape[1]))
        b = pm.Normal("b", 0.0, 2.0)
        pm.Poisson("Y", mu=pm.math.exp(Z @ A + b), observed=Y)
    return model, Z0


def _ibp_bernoulli(seed):
    import pymc as pm

    import pymc_ibp as pmi

    data = pmi.datasets.binary_block_images(200, seed=seed)
    n, d = data.X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, 12))
        A = pm.Normal("A", 0.0, 2.0, shape=(12, d))
        b = pm.Normal("b", -1.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=data.X)
    return model, np.asarray(data.Z)


def _stick_gaussian(seed):
    import pymc as pm

    import pymc_ibp as pmi

    data = pmi.datasets.block_images(200, noise=0.5, seed=seed)
    n, d = data.X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        pi = pmi.IBPStickBreaking("pi", alpha, shape=12)
        Z = pm.Bernoulli("Z", p=pi, shape=(n, 12))
        A = pm.Normal("A", 0.0, 1.0, shape=(12, d))
        sigma_x = pm.HalfNormal("sigma_x", 1.0, initval=0.5)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X)
    return model, np.asarray(data.Z)


def _dp_ibp_gaussian(seed):
    import pymc as pm

    import pymc_ibp as pmi

    dc = pmi.datasets.block_combinations(150, noise=0.5, seed=seed)
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", pm.Gamma("alpha_c", 1, 1), pm.Gamma("alpha_m", 1, 1), l_max=15,
                       shape=(150, 8))
        A = pm.Normal("A", 0, 1, shape=(8, dc.X.shape[1]))
        sx = pm.HalfNormal("sigma_x", 1)
        pm.Normal("X", Z @ A, sx, observed=dc.X)
    return model, np.asarray(dc.Z)


def _dp_ibp_poisson(seed):
    import pymc as pm

    import pymc_ibp as pmi

    rng = np.random.default_rng(seed)
    Mt = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    ct = rng.integers(0, 4, 200)
    Y = rng.poisson(np.exp(Mt[ct] @ (1.2 * rng.normal(0, 1, (3, 20))) + 0.5))
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", pm.Gamma("ac", 1, 1), pm.Gamma("am", 1, 1), l_max=12,
                       shape=(200, 8))
        A = pm.Normal("A", 0, 1.5, shape=(8, 20))
        b = pm.Normal("b", 0, 2)
        pm.Poisson("Y", mu=pm.math.exp(Z @ A + b), observed=Y)
    return model, Mt[ct]


def _clusters(seed):
    """The issue's overlapping clusters: 8 clusters over 4 glyphs, 200 rows, noise 0.5."""
    import pymc_ibp as pmi

    rng = np.random.default_rng(seed)
    A0 = _glyphs()
    M0 = np.asarray(pmi.datasets.BLOCK_COMBINATIONS)[1:]
    C0 = (rng.random((200, 8)) < 0.25).astype(int)
    Z0 = (rng.random((200, 4)) < 1 - 0.1 ** (C0 @ M0)).astype(int)
    return Z0, Z0 @ A0 + 0.5 * rng.standard_normal((200, A0.shape[1]))


def _ibp_ibp_gaussian(seed, noisy_or=False):
    import pymc as pm

    import pymc_ibp as pmi

    Z0, X = _clusters(seed)
    with pm.Model() as model:
        if noisy_or:
            q = pm.Beta("q", 1, 1)
            Z = pmi.noisy_or_ibp_ibp("Z", 1.0, 1.0, q, l_max=10, shape=(200, 12))
        else:
            Z = pmi.ibp_ibp("Z", alpha_c=1.0, alpha_m=1.0, l_max=10, shape=(200, 12))
        A = pm.Normal("A", 0.0, 1.0, shape=(12, X.shape[1]))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
    return model, Z0


def _dependent_gaussian(seed):
    import pymc as pm

    import pymc_ibp as pmi

    data = pmi.datasets.dependent_glyphs(seed=seed)
    t = np.asarray(data.covariate, dtype=float)
    n, d = data.X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        dibp = pmi.dependent_ibp("Z", t, alpha=alpha, cov="matern52", shape=(n, 20))
        A = pm.Normal("A", 0.0, 1.0, shape=(20, d))
        pm.Normal("X", mu=dibp.Z @ A, sigma=0.5, observed=data.X)
    return model, np.asarray(data.Z)


CASES = {
    "ibp_gaussian": _ibp_gaussian,
    "ibp_poisson": _ibp_poisson,
    "ibp_bernoulli": _ibp_bernoulli,
    "stick_gaussian": _stick_gaussian,
    "dp_ibp_gaussian": _dp_ibp_gaussian,
    "dp_ibp_poisson": _dp_ibp_poisson,
    "ibp_ibp_gaussian": _ibp_ibp_gaussian,
    "noisy_or_gaussian": lambda seed: _ibp_ibp_gaussian(seed, noisy_or=True),
    "dependent_gaussian": _dependent_gaussian,
}
#: the cases whose likelihood adds an offset per column, the same for every row (a scalar
#: offset is not the column of ones times any row of coefficients)
OFFSET_CASES = {"ibp_bernoulli"}


# ------------------------------------------------------------------------------------------
# score
# ------------------------------------------------------------------------------------------
def _jaccard(truth, cols):
    """Jaccard similarity of the owners of each true feature (rows of the result) and each
    column."""
    t = truth.astype(bool)
    c = cols.astype(bool)
    inter = t.T.astype(np.int64) @ c.astype(np.int64)
    union = t.sum(0)[:, None] + c.sum(0)[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 0.0)


def same_span(cols, truth, intercept=False):
    """Whether the columns in use span the same space of ``N``-vectors as the true features
    (with ``intercept``, both joined by the column of ones: the model has an offset per
    column, the same for every row): then every ``truth @ A`` is some ``cols @ A'``, and the
    two explain the data equally well (in a DP-IBP with features ``{x}, {y}, {x, y}, {w}``
    per category, ``{y}, {y, v}, {x}, {x, y}`` with ``v = w - y`` is the same model)."""
    if cols.shape[1] != truth.shape[1]:
        return False
    if intercept:
        ones = np.ones((truth.shape[0], 1))
        cols, truth = np.hstack([cols, ones]), np.hstack([truth, ones])
    r = np.linalg.matrix_rank(truth.astype(float))
    return (np.linalg.matrix_rank(cols.astype(float)) == r
            and np.linalg.matrix_rank(np.hstack([truth, cols]).astype(float)) == r)


def score_draw(Z, truth, intercept=False):
    """``(recovered, spurious, duplicated, K+, equivalent)`` of one draw of ``Z`` against the
    true features (columns of ``truth`` that some row owns): the columns are assigned one to
    one to the true features (Hungarian, on Jaccard similarity; true features may overlap, as
    the glyphs of overlapping clusters do, so the best column of each alone would count one
    column twice); ``equivalent``: the columns are as many as the true features and span the
    same space (:func:`same_span`)."""
    from scipy.optimize import linear_sum_assignment

    truth = truth[:, truth.sum(0) > 0]
    m = Z.sum(0)
    cols = Z[:, m > 0]
    J = _jaccard(truth, cols)
    rows, assigned = linear_sum_assignment(-J) if J.size else (np.zeros(0, int),) * 2
    good = J[rows, assigned] >= RECOVER_J
    recovered = int(good.sum())
    big = cols.sum(0) >= max(2, int(np.ceil(0.02 * Z.shape[0])))
    free = np.ones(cols.shape[1], dtype=bool)
    free[assigned[good]] = False
    # a free column that is a second copy of a recovered true feature
    copy = np.zeros(cols.shape[1], dtype=bool)
    for t in rows[good]:
        copy |= free & (J[t] >= DUPLICATE_J)
    duplicated = int((copy & big).sum())
    spurious = int((free & big & ~copy).sum())
    return (recovered, spurious, duplicated, int(cols.shape[1]),
            int(same_span(cols, truth, intercept)))


def score_chain(Zc, truth, intercept=False):
    """The chain's scored draws: the share that find the structure, the median recovered
    features and K+, and whether the chain finds it."""
    n_draws = Zc.shape[0]
    idx = np.unique(np.linspace(n_draws // 2, n_draws - 1, min(SCORED_DRAWS, n_draws),
                                dtype=np.int64))
    scores = np.array([score_draw(np.asarray(Zc[t]), truth, intercept) for t in idx])
    k_true = int((truth.sum(0) > 0).sum())
    found = (((scores[:, 0] == k_true) & (scores[:, 1] == 0) & (scores[:, 2] == 0))
             | (scores[:, 4] == 1))
    return {"found_share": float(found.mean()), "recovered": float(np.median(scores[:, 0])),
            "equivalent": float(np.mean(scores[:, 4])),
            "spurious": float(np.median(scores[:, 1])),
            "duplicated": float(np.median(scores[:, 2])), "k_plus": float(np.median(scores[:, 3])),
            "found": bool(found.mean() >= 0.5)}


# ------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------
def run_case(case, seed, chains, tune, draws):
    import pymc as pm

    import pymc_ibp as pmi

    model, truth = CASES[case](seed)
    kwargs = {} if tune is None else {"tune": tune, "draws": draws}
    t0 = time.perf_counter()
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pm.sample(chains=chains, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False, **kwargs)
    wall = time.perf_counter() - t0
    truncation = any(issubclass(w.category, pmi.TruncationWarning) for w in caught)
    Z = np.asarray(idata["posterior"]["Z"].values)
    per_chain = [score_chain(Z[c], np.asarray(truth), case in OFFSET_CASES)
                 for c in range(Z.shape[0])]
    kinds = sorted({i.kind for i in pmi.check_chains(idata, warn=False)})
    n_found = sum(c["found"] for c in per_chain)
    return {
        "case": case, "seed": seed, "chains": Z.shape[0],
        "k_true": int((np.asarray(truth).sum(0) > 0).sum()),
        "found": f"{n_found}/{Z.shape[0]}",
        "k_plus": " ".join(f"{c['k_plus']:.0f}" for c in per_chain),
        "recovered": " ".join(f"{c['recovered']:.0f}" for c in per_chain),
        "found_share": " ".join(f"{c['found_share']:.2f}" for c in per_chain),
        "equivalent": " ".join(f"{c['equivalent']:.2f}" for c in per_chain),
        "dup": " ".join(f"{c['duplicated']:.0f}" for c in per_chain),
        "check_chains": ",".join(kinds) or "-",
        "truncation_warning": truncation,
        "silent_wrong": n_found < Z.shape[0] and not kinds,
        "wall_s": round(wall, 1),
    }


def _default_cores():
    """The ``cores`` pm.sample uses when none is given (``min(4, cpu_count // 2)``)."""
    import os

    return max(1, min(4, (os.cpu_count() or 2) // 2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seeds", nargs="*", type=int)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--name", help="the results file's name under benchmarks/results/ "
                        "(default: right_answers with _quick / _subset)")
    args = parser.parse_args()
    quiet()
    info = machine_info()
    seeds = args.seeds or ([1] if args.quick else [1, 2])
    tune, draws = (200, 200) if args.quick else (None, None)
    chains = 2 if args.quick else args.chains
    rows = []
    for case in args.cases:
        for seed in seeds:
            row = run_case(case, seed, chains, tune, draws)
            print({k: row[k] for k in ("case", "seed", "found", "k_plus", "check_chains",
                                       "truncation_warning", "wall_s")}, flush=True)
            rows.append(row)
    cols = ["case", "seed", "chains", "k_true", "found", "k_plus", "recovered", "found_share",
            "equivalent", "dup", "check_chains", "truncation_warning", "silent_wrong", "wall_s"]
    print_table(rows, cols)
    length = (f"{tune} + {draws}" if tune is not None else "pm.sample's defaults (1000 + 1000)")
    suffix = "" if not args.quick else "_quick"
    if set(args.cases) != set(CASES) or (args.seeds and not args.quick):
        suffix += "_subset"
    write_results(
        args.name or f"right_answers{suffix}", rows, cols,
        "Does pm.sample() find it? Planted data, pm.sample's step assignment", [
            f"{chains} chains x {length}, cores = pm.sample's default ({_default_cores()} "
            "here: PyMC counts half the CPUs), random_seed = the data seed; the steps "
            "pm.sample assigns.",
            "found: chains whose scored draws (20 of the second half) find every true feature "
            f"(one-to-one Jaccard >= {RECOVER_J}) with nothing spurious or duplicated (a column "
            f"of >= 2% of the rows left over; a duplicate: Jaccard >= {DUPLICATE_J} to a "
            "recovered feature), or as many columns as true features spanning the same space "
            "(an equivalent parametrisation of Z @ A), in at least half of them; k_plus, "
            "recovered, found_share, dup: per chain (medians over the scored draws); "
            "equivalent: the share of scored draws of the second kind.",
            "check_chains: the kinds pmi.check_chains reports (disagree, k_max, duplicates); "
            "truncation_warning: whether a step emitted a TruncationWarning (of any binary "
            "matrix: it names K_max, not a wrong mode); silent_wrong: some chain misses the "
            "structure and pmi.check_chains says nothing.",
            "python -m benchmarks.right_answers" + (" --quick" if args.quick else "")
            + (f" --cases {' '.join(args.cases)}" if set(args.cases) != set(CASES) else "")
            + (f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds else "")
            + (f" --name {args.name}" if args.name else ""),
        ], info)


if __name__ == "__main__":
    main()
