"""Cost of one pmi.IBPGibbs sweep: likelihood evaluations and time, against the two-evaluation
column update.

``IBPGibbs`` draws column ``k`` of ``Z`` from the likelihood ratios of its ``N`` entries.  The
likelihood factorises over the rows, so the step evaluates the model's compiled row
log-likelihood once with column ``k`` flipped in every row and takes each row's other option
from the values at the current ``Z``, carried from column to column: ``K_max + 1``
evaluations per sweep.  The reference (``two_eval``) is the textbook update (Doshi-Velez 2009,
§3.1) that evaluates the column set to 1 and set to 0: ``2 K_max`` evaluations.  Both draw
each column with the same numba kernel and the same random numbers, so from one state and one
seed they make the same draws (checked: ``same_draws``).

Models (each from the state the step's own start reaches: its first iteration, the surrogate
start, sets ``Z`` and ``A``):

* ``digits_logit``: 300 binarised scikit-learn digits (64 pixels), ``K_max = 32``,
  ``X ~ Bernoulli(logit_p = Z @ A + b)`` (the example of ``benchmarks/ibpgibbs_mixing.py``);
* ``blocks_student_t``: 1000 block images (36 pixels, noise 0.5), ``K_max = 20``,
  ``X ~ StudentT(nu=5, mu=Z @ A, sigma=0.5)``.

Reported: evaluations of the row log-likelihood per sweep, milliseconds per sweep (moves
off: ``split_merge = combination_moves = feature_moves = feature_split_merge = 0``; best of
``--repeats`` blocks of ``--sweeps`` sweeps; both include the step's statistics), their ratio,
and milliseconds per step with the step's default moves (which reuse the rows' values at the
current ``Z`` as well).

    python -m benchmarks.ibpgibbs_sweep [--sweeps S] [--repeats R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results
from benchmarks._models import digits, digits_logit_model

COLS = ["model", "N", "D", "K_max", "K_plus", "evals_step", "evals_two_eval", "ms_step",
        "ms_two_eval", "speedup", "same_draws", "ms_step_default_moves"]
MOVES_OFF = dict(split_merge=0, combination_moves=0, feature_moves=0, feature_split_merge=0)


def build(name):
    import pymc as pm

    import pymc_ibp as pmi

    if name == "digits_logit":
        model = digits_logit_model(digits(300, 2026), 32)
    else:
        X = pmi.datasets.block_images(1000, noise=0.5, seed=1).X
        with pm.Model() as model:
            alpha = pm.Gamma("alpha", 2.0, 1.0)
            Z = pmi.IBP("Z", alpha, shape=(X.shape[0], 20))
            A = pm.Normal("A", 0.0, 1.0, shape=(20, X.shape[1]))
            pm.StudentT("X", nu=5, mu=Z @ A, sigma=0.5, observed=X)
    (n, k_max), d = model["Z"].type.shape, model["A"].type.shape[1]
    return model, model["Z"], (n, d, k_max)


def two_eval_sweep(step, point, rng):
    """One sweep of the two-evaluation column update, with the step's own kernels and
    statistics; returns the new point."""
    from pymc_ibp.kernels.columns import ibp_column_gibbs

    Z = np.array(point[step.z_name], copy=True)
    alpha, beta = (float(np.asarray(h)) for h in step._hyper(point))
    m = Z.sum(axis=0).astype(np.int64)
    n_active = int((m > 0).sum())
    trial = dict(point)
    loglik = 0.0
    for k in rng.permutation(step.k_max):
        col = Z[:, k].copy()
        Z[:, k] = 1
        ll1 = step._rows.at(trial, Z)
        Z[:, k] = 0
        ll0 = step._rows.at(trial, Z)
        Z[:, k] = col
        _, n_active = ibp_column_gibbs(rng, Z, k, ll1, ll0, m, n_active, alpha, beta)
        loglik = float(np.where(Z[:, k] == 1, ll1, ll0).sum())
    new = {**point, step.z_name: Z}
    step._stats({"ibp_n_active": n_active, "ibp_log_lik": loglik}, new)
    return new


def counting(step):
    """Wrap the step's compiled row log-likelihood with a call counter; returns the counter."""
    compiled, calls = step._rows._fn, [0]

    def counted(point):
        calls[0] += 1
        return compiled(point)

    step._rows._fn = counted
    return calls


def timed(fn, point, sweeps, repeats):
    """Best time of ``repeats`` blocks of ``sweeps`` calls ``point = fn(point)`` from
    ``point``, in ms per call, and the last block's final point."""
    best = np.inf
    for _ in range(repeats):
        p = point
        t = time.perf_counter()
        for _ in range(sweeps):
            p = fn(p)
        best = min(best, (time.perf_counter() - t) / sweeps)
    return best * 1e3, p


def run(name, sweeps, repeats):
    import pymc_ibp as pmi

    model, Z, (n, d, k_max) = build(name)
    with model:
        step = pmi.IBPGibbs([Z], **MOVES_OFF)
        moves = pmi.IBPGibbs([Z], init_z="point")
    step.setup_chain(np.random.default_rng(1), tune=0, draws=1)
    start, _ = step.step(model.initial_point())  # the step's start (surrogate) sets Z and A
    calls = counting(step)
    # one sweep each from the same state and seed: the same draws?
    step.setup_chain(np.random.default_rng(7), tune=0, draws=1)
    calls[0] = 0
    ours, _ = step.step(dict(start))
    evals_step = calls[0]
    calls[0] = 0
    ref = two_eval_sweep(step, dict(start), np.random.default_rng(7))
    evals_ref = calls[0]
    same = bool(np.array_equal(ours[step.z_name], ref[step.z_name]))
    step.setup_chain(np.random.default_rng(2), tune=0, draws=1)
    ms_step, _ = timed(lambda p: step.step(p)[0], start, sweeps, repeats)
    rng = np.random.default_rng(2)
    ms_ref, _ = timed(lambda p: two_eval_sweep(step, p, rng), start, sweeps, repeats)
    moves.setup_chain(np.random.default_rng(3), tune=0, draws=1)
    ms_moves, _ = timed(lambda p: moves.step(p)[0], start, sweeps, repeats)
    return {"model": name, "N": n, "D": d, "K_max": k_max,
            "K_plus": int((start[step.z_name].sum(axis=0) > 0).sum()),
            "evals_step": evals_step, "evals_two_eval": evals_ref, "ms_step": ms_step,
            "ms_two_eval": ms_ref, "speedup": ms_ref / ms_step, "same_draws": same,
            "ms_step_default_moves": ms_moves}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweeps", type=int, default=20, help="sweeps per timed block")
    ap.add_argument("--repeats", type=int, default=3, help="timed blocks per setting (best of)")
    args = ap.parse_args()
    quiet()
    info = machine_info()
    rows = []
    for name in ["digits_logit", "blocks_student_t"]:
        rows.append(run(name, args.sweeps, args.repeats))
        print_table(rows[-1:], COLS)
    print()
    print_table(rows, COLS)
    notes = [
        "evals = calls of IBPGibbs's compiled row log-likelihood in one sweep (moves off); "
        "ms = milliseconds per sweep, best of "
        f"{args.repeats} blocks of {args.sweeps} sweeps from the step's start; step = "
        "pmi.IBPGibbs (K_max + 1 evaluations), two_eval = the column set to 1 and to 0 "
        "(2 K_max evaluations), both with the step's statistics; speedup = "
        "ms_two_eval / ms_step; same_draws = one sweep of each from the same state and seed "
        "gives the same Z.",
        "ms_step_default_moves = milliseconds per step with IBPGibbs's default moves (5 "
        "split-merge, 5 dissolve / compose, 3 feature birth / death, 3 feature split / merge "
        "proposals).",
        f"Command: python -m benchmarks.ibpgibbs_sweep --sweeps {args.sweeps} "
        f"--repeats {args.repeats}",
    ]
    write_results("ibpgibbs_sweep", rows, COLS,
                  "IBPGibbs: one likelihood evaluation per column", notes, info)


if __name__ == "__main__":
    main()
