"""Where do the surrogate starts of the correlated models land?  The chained start of the
IBP-IBP and the noisy-or IBP-IBP (:class:`pymc_ibp.init.chained.ChainedStart`: a plain IBP fitted
to a linear-Gaussian surrogate of the data, the categories fitted to its features) on the
overlapping clusters of ``benchmarks/right_answers.py`` (200 rows, 8 clusters over 4 glyphs
that co-occur in most rows), with and without the surrogate's pair / triple moves
(:func:`pymc_ibp.kernels.pair_triple_moves`), 8 chain generators per data seed.  A start
*finds* the glyphs when its ``Z`` recovers all four with nothing spurious or duplicated (the
score of ``benchmarks/right_answers.py``).  The two models share the surrogate (the same data
and features), so their starts differ only in how the categories are written.

    python -m benchmarks.surrogate_starts
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks.right_answers import CASES, score_draw

SEEDS = (1, 2, 3)
DRAWS = 8


def run(case, seed, triples):
    import pymc_ibp.init.surrogate as surrogate
    from pymc_ibp.init.chained import ChainedStart
    from pymc_ibp.matching.correlated import match_correlated

    saved = surrogate.SURROGATE_MOVES
    surrogate.SURROGATE_MOVES = saved._replace(pair_triples=triples)
    try:
        model, truth = CASES[case](seed)
        match = match_correlated(model, model["Z_M"])
        start = ChainedStart(model, model["Z_M"], match, 1.0, 1.0, "IBPGibbs")
        found, k_plus = 0, []
        t0 = time.perf_counter()
        for r in range(DRAWS):
            d = start.draw(np.random.default_rng(r), model.initial_point())
            Z = (d.values["Z"] if "Z" in d.values
                 else (d.values["Z_C"] @ d.values["Z_M"] > 0).astype(np.int8))
            rec, spur, dup, k, _ = score_draw(Z, truth)
            found += rec == truth.shape[1] and spur == 0 and dup == 0
            k_plus.append(k)
        wall = (time.perf_counter() - t0) / DRAWS
    finally:
        surrogate.SURROGATE_MOVES = saved
    return {"case": case, "seed": seed, "pair_triples": triples, "found": f"{found}/{DRAWS}",
            "k_plus": " ".join(str(k) for k in k_plus), "s_per_start": round(wall, 2)}


def main():
    quiet()
    info = machine_info()
    rows = []
    for case in ("ibp_ibp_gaussian", "noisy_or_gaussian"):
        for seed in SEEDS:
            for triples in (0, 5):
                row = run(case, seed, triples)
                print(row, flush=True)
                rows.append(row)
    cols = ["case", "seed", "pair_triples", "found", "k_plus", "s_per_start"]
    print_table(rows, cols)
    write_results(
        "surrogate_starts", rows, cols,
        "Chained starts of the IBP-IBP and noisy-or IBP-IBP on overlapping clusters", [
            f"{DRAWS} chain generators (0..{DRAWS - 1}) per data seed; pair_triples: the "
            "surrogate's pair / triple proposals per sweep (0: off, 5: the default).",
            "found: starts whose Z recovers the 4 glyphs (one-to-one Jaccard >= 0.8) with "
            "nothing spurious or duplicated; k_plus: the starts' K+ (4 true).",
            "s_per_start: seconds per start (one process; the first start of a run includes "
            "numba's loading of cached kernels).",
            "python -m benchmarks.surrogate_starts",
        ], info)


if __name__ == "__main__":
    main()
