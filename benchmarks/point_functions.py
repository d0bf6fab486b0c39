"""The cost of calling a compiled function of the model's point: PyMC's ``PointFunc`` (PyTensor
validates every input at every call) against ``pymc_ibp._pytensor_utils.PointFunction`` (the
steps' compiled functions: arrays that already have the inputs' types go in unchecked).

Model: the digits model's shape with generated data, ``Z ~ pmi.IBP(2)`` (N x K_max),
``A ~ Normal(0, 2)``, ``b ~ Normal(-1, 2)``, ``X ~ Bernoulli(logit_p = Z @ A + b)``, at three
sizes N x D x K_max: 3 x 3 x 2 (the exact-posterior tests' size), 30 x 16 x 8 and 300 x 64 x 32
(the digits example).

Reported per size:
* ``us_per_call``: microseconds per call of the row log-likelihood graph (IBPGibbs'
  ``RowLikelihood``, the function it calls most), compiled both ways; best of 5 repetitions;
* ``step_ms``: milliseconds per ``pmi.IBPGibbs`` step (default moves, A and b fixed), with the
  step's own point functions and with each of them replaced by PyMC's ``PointFunc`` of the same
  compiled function; both runs start from the same point and seed, and ``same_draws`` says
  whether they end at the same ``Z`` (they must: only the input checks differ).

    python -m benchmarks.point_functions [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import quiet
from benchmarks._machine import machine_info, print_table, write_results

COLS = ["N", "D", "K_max", "pointfunc_us_per_call", "pointfunction_us_per_call", "call_ratio",
        "steps", "pointfunc_step_ms", "pointfunction_step_ms", "step_ratio", "same_draws"]
SIZES = [(3, 3, 2, 2000), (30, 16, 8, 200), (300, 64, 32, 10)]  # N, D, K_max, steps


def model_of(n, d, k_max, seed=0):
    import pymc as pm

    import pymc_ibp as pmi

    rng = np.random.default_rng(seed)
    z = (rng.random((n, k_max)) < 0.3).astype(np.int8)
    a = rng.normal(0, 2, (k_max, d))
    x = (rng.random((n, d)) < 1 / (1 + np.exp(-(z @ a - 1)))).astype(np.int64)
    with pm.Model() as model:
        zv = pmi.IBP("Z", 2.0, shape=(n, k_max))
        av = pm.Normal("A", 0.0, 2.0, shape=(k_max, d))
        bv = pm.Normal("b", -1.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=zv @ av + bv, observed=x)
    point = model.initial_point()
    point["Z"] = z.astype(point["Z"].dtype)
    point["A"] = a
    return model, point


def per_call_us(fn, point, calls):
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn(point)
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def with_pointfunc(step):
    """Replace every PointFunction held by ``step`` (and by its feature moves) with PyMC's
    PointFunc of the same compiled function, validating its inputs."""
    from pymc.pytensorf import PointFunc

    from pymc_ibp._pytensor_utils import PointFunction

    for obj in (step, getattr(step, "_features", None)):
        if obj is None:
            continue
        for name, value in vars(obj).items():
            if isinstance(value, PointFunction):
                value.f.trust_input = False
                setattr(obj, name, PointFunc(value.f))
    return step


def step_ms(model, point, steps, validate):
    import pymc_ibp as pmi

    with model:
        step = pmi.IBPGibbs([model["Z"]], rng=np.random.default_rng(1), init_z="point",
                            _explain=False)
    if validate:
        with_pointfunc(step)
    p = dict(point)
    step.step(p)  # the first step compiles nothing more, but warms numba's kernels
    t = time.perf_counter()
    for _ in range(steps):
        p, _ = step.step(p)
    return (time.perf_counter() - t) / steps * 1e3, p["Z"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the steps and calls")
    args = ap.parse_args()
    quiet()
    from pymc_ibp._pytensor_utils import compile_point_fn

    info = machine_info()
    rows = []
    for n, d, k_max, steps in SIZES:
        steps = max(2, steps // 10) if args.quick else steps
        model, point = model_of(n, d, k_max)
        [ll] = model.logp(vars=model.observed_RVs, sum=False)
        row_ll = ll.sum(axis=1)
        pymc_fn = model.compile_fn(row_ll, inputs=model.value_vars, on_unused_input="ignore",
                                   point_fn=True)
        ours = compile_point_fn(model, row_ll)
        calls = max(20, 20_000 // (n * d)) // (10 if args.quick else 1)
        a, b = per_call_us(pymc_fn, point, calls), per_call_us(ours, point, calls)
        s_old, z_old = step_ms(model, point, steps, validate=True)
        s_new, z_new = step_ms(model, point, steps, validate=False)
        rows.append({"N": n, "D": d, "K_max": k_max, "pointfunc_us_per_call": a,
                     "pointfunction_us_per_call": b, "call_ratio": a / b, "steps": steps,
                     "pointfunc_step_ms": s_old, "pointfunction_step_ms": s_new,
                     "step_ratio": s_old / s_new,
                     "same_draws": bool(np.array_equal(z_old, z_new))})
        print_table(rows[-1:], COLS)
    print()
    print_table(rows, COLS)
    notes = [
        "Data: Z with 30 % ones, A ~ Normal(0, 2), X ~ Bernoulli(sigmoid(Z A - 1)), seed 0; "
        "the model as in the docstring; one process, one BLAS thread.",
        "*_us_per_call: the row log-likelihood graph compiled with model.compile_fn(point_fn=True)"
        " (PyMC's PointFunc) and with pymc_ibp's compile_point_fn, best of 5 repetitions; "
        "call_ratio = PointFunc / PointFunction.",
        "*_step_ms: one pmi.IBPGibbs step (default moves; A and b held at the start) with "
        "PointFunc in place of every point function the step holds, and as shipped; the same "
        "start and rng seed for both; same_draws: both runs end at the same Z.",
        f"Command: python -m benchmarks.point_functions{' --quick' if args.quick else ''}",
    ]
    write_results("point_functions_quick" if args.quick else "point_functions", rows, COLS,
                  "Compiled point functions: PyMC's PointFunc against pymc_ibp's PointFunction",
                  notes, info)


if __name__ == "__main__":
    main()
