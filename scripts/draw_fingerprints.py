"""Fingerprints of the random draws of every registered step method, for fixed seeds.

What it is for: checking that a restructuring of ``pymc_ibp`` (modules moved or renamed, no
change of behaviour) leaves the draws bit for bit unchanged.  Each case builds one tiny model
(N = 20-60 rows) whose sampling exercises one step family (by ``pm.sample``'s automatic
assignment or an explicit ``step=``), samples it with a fixed ``random_seed`` and keeps every
posterior variable and every sample stat (tuning draws included; PyMC's wall-clock timings
left out) and the step assignment that PyMC prints.  Only the public API is used
(``import pymc_ibp as pmi``), so the script runs unchanged on both sides of a restructuring.

The two commands (``PYTHONPATH=/path/to/old/checkout`` in front fingerprints that code instead
of the installed package; the first line printed says which ``pymc_ibp`` was imported)::

    python scripts/draw_fingerprints.py --save fp_base.npz      # before: write the baseline
    python scripts/draw_fingerprints.py --compare fp_base.npz   # after: OK / DIFF per case

``--compare`` exits with status 1 when any array differs (values, dtype or shape) or a key is
missing or extra.  ``--list`` lists the cases, ``--only a,b`` runs a subset, ``--no-with-dask``
leaves out the cases that need a local Dask cluster (``DataParallelGibbs``).
"""

import argparse
import logging
import os
import re
import sys
import time
import warnings

import numpy as np
import pymc as pm
from pymc.step_methods import STEP_METHODS

import pymc_ibp as pmi

# PyMC's per-draw wall-clock stats (NUTS): never reproducible, so never fingerprinted
TIMING_STATS = ("perf_counter_diff", "perf_counter_start", "process_time_diff")

# the tuning draws are kept too (warmup_* groups): a difference shows where it starts
COMMON = {"compute_convergence_checks": False, "progressbar": False, "cores": 1,
          "discard_tuned_samples": False}
GROUPS = {"posterior": "posterior", "sample_stats": "stats",
          "warmup_posterior": "warmup_posterior", "warmup_sample_stats": "warmup_stats"}


def _sample(random_seed, tune=15, draws=20, chains=2, **kwargs):
    return pm.sample(tune=tune, draws=draws, chains=chains, random_seed=random_seed,
                     **COMMON, **kwargs)


# --- data ----------------------------------------------------------------------------------


def _blocks(n, seed):
    return pmi.datasets.block_images(n, noise=0.5, seed=seed).X


def _small_lg(n, d, seed):
    return pmi.datasets.ibp_linear_gaussian(n, d, alpha=2.0, sigma_x=0.5, sigma_a=1.0,
                                            seed=seed).X


def _readme_model(X, k_max=8, offset=False):
    """The README's model (smaller), optionally with a per-column offset ``Z @ A + b``."""
    n, d = X.shape
    with pm.Model(coords={"obs": range(n), "feature": range(k_max), "dim": range(d)}) as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        mu = Z @ A
        if offset:
            mu = mu + pm.Normal("b", 0.0, 2.0, dims="dim")
        pm.Normal("X", mu=mu, sigma=sigma_x, observed=X, dims=("obs", "dim"))
    return model


# --- the cases: each returns pm.sample's result (or, without sampling, a dict of arrays) -----


def case_accel_readme(ctx):
    """AcceleratedGibbs + IBPAlphaGibbs + IBPScaleSlice (the README's model)."""
    with _readme_model(_blocks(40, seed=1)):
        return _sample(11)


def case_accel_offset(ctx):
    """AcceleratedGibbs with an offset Z @ A + b: IBPOffsetGibbs for b."""
    with _readme_model(_blocks(40, seed=2) + 0.3, offset=True):
        return _sample(12)


def case_accel_nan(ctx):
    """AcceleratedGibbs with NaN entries (integrated out row by row, then redrawn)."""
    X = _blocks(40, seed=3)
    X[np.random.default_rng(3).random(X.shape) < 0.1] = np.nan
    with _readme_model(X):
        return _sample(13)


def case_accel_stick_breaking(ctx):
    """AcceleratedGibbs for a Bernoulli Z under pmi.IBPStickBreaking sticks."""
    X = _blocks(40, seed=4)
    n, d = X.shape
    with pm.Model(coords={"obs": range(n), "feature": range(8), "dim": range(d)}):
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        pi = pmi.IBPStickBreaking("pi", alpha, dims="feature")
        Z = pm.Bernoulli("Z", p=pi, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X, dims=("obs", "dim"))
        return _sample(14)


def case_accel_shared_z(ctx):
    """AcceleratedGibbs for one Z behind two observed matrices, one with per-column noise."""
    X = _blocks(40, seed=21)
    X1, X2 = X[:, :20], X[:, 20:] - 0.2
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(40, 8))
        sa1 = pm.HalfNormal("sigma_a1", 2.0)
        sa2 = pm.HalfNormal("sigma_a2", 2.0)
        A1 = pm.Normal("A1", 0.0, sa1, shape=(8, 20))
        A2 = pm.Normal("A2", 0.0, sa2, shape=(8, 16))
        sx1 = pm.HalfNormal("sigma_x1", 1.0, shape=20)
        sx2 = pm.HalfNormal("sigma_x2", 1.0)
        b2 = pm.Normal("b2", 0.0, 2.0, shape=16)
        pm.Normal("X1", mu=Z @ A1, sigma=sx1, observed=X1)
        pm.Normal("X2", mu=Z @ A2 + b2, sigma=sx2, observed=X2)
        return _sample(31)


def case_collapsed(ctx):
    """CollapsedGibbs, given explicitly (the reference sampler; never assigned by itself)."""
    model = _readme_model(_blocks(24, seed=5), k_max=6)
    with model:
        return _sample(15, step=[pmi.CollapsedGibbs([model["Z"]])])


def case_ibpgibbs_explicit_lg(ctx):
    """IBPGibbs given explicitly in a linear-Gaussian model (its surrogate start search)."""
    model = _readme_model(_blocks(30, seed=6), k_max=6)
    with model:
        return _sample(16, step=[pmi.IBPGibbs([model["Z"]])])


def case_ibpgibbs_poisson(ctx):
    """IBPGibbs for Z under a Poisson likelihood (NUTS for A)."""
    X = (np.random.default_rng(7).random((30, 4)) < 0.3).astype(np.int64)
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(30, 5))
        A = pm.Normal("A", 0.0, 2.0, shape=(5, 4))
        pm.Poisson("X", mu=pm.math.exp(Z @ A - 1.0), observed=X)
        return _sample(17)


def case_polya_gamma(ctx):
    """PolyaGammaGibbs for Z, A and b of a Bernoulli(logit_p = Z @ A + b) model."""
    X = pmi.datasets.binary_block_images(40, seed=8).X
    n, d = X.shape
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, 6))
        A = pm.Normal("A", 0.0, 3.0, shape=(6, d))
        b = pm.Normal("b", 0.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
        return _sample(18)


def case_crp_mixture(ctx):
    """CRPGibbs + CRPAlphaGibbs: a Dirichlet-process mixture written with pmi.CRP."""
    rng = np.random.default_rng(9)
    X = np.concatenate([rng.normal(m, 0.5, 10) for m in (-4.0, 0.0, 4.0)])
    with pm.Model():
        alpha = pm.Gamma("alpha", 2.0, 2.0)
        mu = pm.Normal("mu", 0.0, 10.0, shape=6)
        c = pmi.CRP("c", alpha, l_max=6, shape=len(X))
        pm.Normal("X", mu=mu[c], sigma=0.5, observed=X)
        return _sample(19)


def case_dp_ibp(ctx):
    """pmi.dp_ibp: CRPGibbs (labels), IBPGibbs (M), CRPAlphaGibbs, IBPAlphaGibbs."""
    X = _small_lg(30, 4, seed=10)
    with pm.Model(coords={"obs": range(30), "feature": range(5), "dim": range(4)}):
        alpha_c = pm.Gamma("alpha_c", 1.0, 1.0)
        alpha_m = pm.Gamma("alpha_m", 1.0, 1.0)
        Z = pmi.dp_ibp("Z", alpha_c, alpha_m, l_max=6, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X, dims=("obs", "dim"))
        return _sample(20)


def case_ibp_ibp(ctx):
    """pmi.ibp_ibp: IBPGibbs for C (column-wise) and M (entry-wise)."""
    X = _small_lg(30, 4, seed=11)
    with pm.Model(coords={"obs": range(30), "feature": range(5), "dim": range(4)}):
        Z = pmi.ibp_ibp("Z", alpha_c=1.0, alpha_m=1.0, l_max=4, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X, dims=("obs", "dim"))
        return _sample(21)


def case_noisy_or(ctx):
    """pmi.noisy_or_ibp_ibp with a free q: NoisyOrQSlice, block and turn-on/off moves of C."""
    X = _small_lg(30, 4, seed=12)
    with pm.Model(coords={"obs": range(30), "feature": range(5), "dim": range(4)}):
        q = pm.Beta("q", 1.0, 1.0)
        Z = pmi.noisy_or_ibp_ibp("Z", 1.0, 1.0, q, l_max=4, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X, dims=("obs", "dim"))
        return _sample(22)


def case_nonnegative(ctx):
    """NonNegativeFeatureGibbs (A ~ Exponential(lam)) + ExponentialRateGibbs (lam ~ Gamma)."""
    X = np.random.default_rng(13).exponential(size=(30, 5))
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(30, 5))
        lam = pm.Gamma("lam", 1.0, 1.0)
        A = pm.Exponential("A", lam, shape=(5, 5))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)
        return _sample(23)


def case_nonnegative_halfnormal(ctx):
    """NonNegativeFeatureGibbs under a HalfNormal prior with a Bernoulli Z."""
    X = np.random.default_rng(14).exponential(size=(24, 4))
    with pm.Model():
        Z = pm.Bernoulli("Z", p=0.3, shape=(24, 4))
        A = pm.HalfNormal("A", 1.5, shape=(4, 4))
        pm.Normal("X", mu=Z @ A, sigma=0.7, observed=X)
        return _sample(24)


def case_dependent_ibp(ctx):
    """pmi.dependent_ibp: DependentIBPGibbs, GPLengthScaleHMC, AcceleratedGibbs for Z."""
    rng = np.random.default_rng(15)
    t = np.repeat(np.arange(8.0), 4)
    X = rng.normal(size=(len(t), 3))
    with pm.Model(coords={"obs": range(len(t)), "feature": range(4)}):
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        mod = pmi.dependent_ibp("Z", t, alpha=alpha, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        pm.Normal("X", mod.Z @ A, 0.5, observed=X)
        return _sample(25)


def _binary_x(seed, n, d):
    return (np.random.default_rng(seed).random((n, d)) < 0.4).astype(np.int64)


def case_binary_detection(ctx):
    """BinaryFeatureGibbs (A ~ Bernoulli) + DetectionRateGibbs (f, m ~ Beta), noisy detection."""
    X = _binary_x(16, 30, 6)
    with pm.Model():
        C = pmi.IBP("C", 1.0, shape=(30, 4))
        rho = pm.Beta("rho", 1.0, 3.0)
        A = pm.Bernoulli("A", rho, shape=(4, 6))
        f = pm.Beta("f", 1.0, 9.0, shape=6)
        m = pm.Beta("m", 1.0, 9.0)
        pm.Bernoulli("X", p=pmi.likelihoods.noisy_detection(C, A, f, m), observed=X)
        return _sample(26)


def case_binary_leaky_masked(ctx):
    """BinaryFeatureGibbs under the leaky noisy-or with masked (missing) entries."""
    X = _binary_x(17, 24, 5)
    missing = np.random.default_rng(17).random(X.shape) < 0.1
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(24, 3))
        A = pm.Bernoulli("A", 0.3, shape=(3, 5))
        pm.Bernoulli("X", p=pmi.likelihoods.leaky_noisy_or(Z, A, leak=0.05, activation=0.9),
                     observed=np.ma.masked_array(X, mask=missing))
        return _sample(27)


def case_data_parallel(ctx):
    """DataParallelGibbs (synchronous mode, 2 shards) on a local Dask cluster."""
    model = _readme_model(_blocks(40, seed=18))
    with model:
        step = pmi.DataParallelGibbs([model["Z"]], client=ctx.client(), n_shards=2,
                                     inner_sweeps=2)
        try:
            return _sample(28, tune=5, draws=10, chains=1, step=[step])
        finally:
            step.close()


def case_data_parallel_exact(ctx):
    """DataParallelGibbs in its exact mode (2 shards)."""
    model = _readme_model(_blocks(40, seed=19))
    with model:
        step = pmi.DataParallelGibbs([model["Z"]], client=ctx.client(), n_shards=2,
                                     inner_sweeps=1, mode="exact", exact_rows=2)
        try:
            return _sample(29, tune=5, draws=10, chains=1, step=[step])
        finally:
            step.close()


def case_sharded(ctx):
    """pmi.ShardedData: pm.sample assigns DataParallelGibbs by itself."""
    X = _blocks(40, seed=20)
    data = pmi.ShardedData.from_arrays([X[:20], X[20:]], allow_gather=False)
    n, d = data.shape
    with pm.Model():
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, 8))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, shape=(8, d))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.tensor())
        return _sample(30, tune=5, draws=10, chains=1,
                       data_parallel_gibbs={"client": ctx.client()})


def case_registry(ctx):
    """No sampling: PyMC's list of registered step methods, in order (ties in pm.sample's
    assignment go to the earlier one, so the order can change which step samples what)."""
    return {"step_methods": np.array([cls.__name__ for cls in STEP_METHODS])}


CASES = {
    "registry": (case_registry, False),
    "accel_readme": (case_accel_readme, False),
    "accel_offset": (case_accel_offset, False),
    "accel_nan": (case_accel_nan, False),
    "accel_stick_breaking": (case_accel_stick_breaking, False),
    "accel_shared_z": (case_accel_shared_z, False),
    "collapsed": (case_collapsed, False),
    "ibpgibbs_explicit_lg": (case_ibpgibbs_explicit_lg, False),
    "ibpgibbs_poisson": (case_ibpgibbs_poisson, False),
    "polya_gamma": (case_polya_gamma, False),
    "crp_mixture": (case_crp_mixture, False),
    "dp_ibp": (case_dp_ibp, False),
    "ibp_ibp": (case_ibp_ibp, False),
    "noisy_or": (case_noisy_or, False),
    "nonnegative": (case_nonnegative, False),
    "nonnegative_halfnormal": (case_nonnegative_halfnormal, False),
    "dependent_ibp": (case_dependent_ibp, False),
    "binary_detection": (case_binary_detection, False),
    "binary_leaky_masked": (case_binary_leaky_masked, False),
    "data_parallel": (case_data_parallel, True),
    "data_parallel_exact": (case_data_parallel_exact, True),
    "sharded": (case_sharded, True),
}


# --- running ---------------------------------------------------------------------------------


class _Dask:
    """The local Dask cluster (2 process workers, 1 thread each), started on first use."""

    def __init__(self):
        self._cluster = self._client = None

    def client(self):
        if self._client is None:
            import distributed

            self._cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                                     processes=True, dashboard_address=":0")
            self._client = distributed.Client(self._cluster)
            self._client.wait_for_workers(2, timeout=120)
        return self._client

    def close(self):
        if self._client is not None:
            self._client.close()
            self._cluster.close()
            self._client = self._cluster = None


class _Capture(logging.Handler):
    """Keeps PyMC's log messages (the step assignment) without printing them."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


_STEP_LINE = re.compile(r"^>*(CompoundStep|\w+: \[.*\])$")
_SHORT_CHAIN = re.compile(r"Only \d+ samples per chain")  # the runs are short on purpose


def _quiet_logging():
    capture = _Capture()
    log = logging.getLogger("pymc")
    log.setLevel(logging.INFO)
    for handler in log.handlers:
        handler.setLevel(logging.WARNING)
        handler.addFilter(lambda record: not _SHORT_CHAIN.match(record.getMessage()))
    log.addHandler(capture)
    for name in ("pymc_ibp", "distributed", "numba", "pytensor"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return capture


def _arrays(name, idata, assignment):
    out = {}
    for group, prefix in GROUPS.items():
        ds = idata[group]
        for var in sorted(ds.data_vars):
            if var in TIMING_STATS:
                continue
            out[f"{name}/{prefix}/{var}"] = np.asarray(ds[var].values)
    out[f"{name}/assignment"] = np.array(assignment, dtype=str)
    return out


def run_cases(names, ctx, capture, keep_going):
    """({key: array}, {case: error}) for the cases ``names``, printing each case's time and
    assignment; a case that raises stops the run unless ``keep_going``."""
    arrays, errors = {}, {}
    for name in names:
        fn, _ = CASES[name]
        capture.messages.clear()
        t0 = time.perf_counter()
        try:
            idata = fn(ctx)
        except Exception as err:
            if not keep_going:
                raise
            errors[name] = f"{type(err).__name__}: {err}".splitlines()[0]
            print(f"ran {name}: raised {errors[name]}", flush=True)
            continue
        seconds = time.perf_counter() - t0
        if isinstance(idata, dict):  # arrays of their own, no sampling
            arrays.update({f"{name}/{k}": v for k, v in idata.items()})
            print(f"ran {name}", flush=True)
            continue
        assignment = [m for m in capture.messages if _STEP_LINE.match(m)]
        arrays.update(_arrays(name, idata, assignment))
        steps = " ".join(m.lstrip(">") for m in assignment if m != "CompoundStep")
        print(f"ran {name} ({seconds:.1f} s): {steps}", flush=True)
    return arrays, errors


def _max_abs_diff(a, b):
    """How two arrays of the same dtype differ: shape, or max abs diff and entries differing."""
    if a.shape != b.shape:
        return f"shape {a.shape} -> {b.shape}"
    if a.dtype.kind in "fc":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        both = ~nan_a & ~nan_b
        d = np.abs(a[both] - b[both])
        n = int((d != 0).sum() + (nan_a != nan_b).sum())
        msg = f"max abs diff {d.max():.3g}" if d.size else "all NaN"
        if (nan_a != nan_b).any():
            msg += f", {int((nan_a != nan_b).sum())} NaN mismatches"
    elif a.dtype.kind in "biu":
        d = np.abs(a.astype(np.int64) - b.astype(np.int64))
        n = int((d != 0).sum())
        msg = f"max abs diff {d.max()}"
    else:
        n = int((a != b).sum())
        msg = "values differ"
    return f"{msg}, {n} of {a.size} entries differ"


def _same(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def load(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def compare(names, new, old, errors):
    """Print OK / DIFF per case against the baseline ``old``; True if everything agrees."""
    ok = True
    for name in names:
        if name in errors:
            ok = False
            print(f"DIFF {name}: raised {errors[name]}")
            continue
        o = {k for k in old if k.startswith(name + "/")}
        n = {k for k in new if k.startswith(name + "/")}
        problems = []
        if not o:
            problems.append("no such case in the baseline")
        for key in sorted(o - n):
            problems.append(f"missing {key.removeprefix(name + '/')}")
        for key in sorted(n - o):
            problems.append(f"extra {key.removeprefix(name + '/')}")
        for key in sorted(o & n):
            a, b = old[key], new[key]
            if _same(a, b):
                continue
            what = key.removeprefix(name + "/")
            if a.dtype != b.dtype:
                problems.append(f"{what} (dtype {a.dtype} -> {b.dtype})")
            elif what in ("assignment", "step_methods"):
                problems.append(f"{what} {a.tolist()} -> {b.tolist()}")
            else:
                problems.append(f"{what} ({_max_abs_diff(a, b)})")
        if problems:
            ok = False
            print(f"DIFF {name}: " + "; ".join(problems))
        else:
            print(f"OK {name}")
    cases_old = {k.split("/", 1)[0] for k in old}
    not_run = sorted(cases_old - set(names))
    if not_run:
        print(f"(not run: {', '.join(not_run)})")
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--save", metavar="FILE.npz", help="write the fingerprints")
    action.add_argument("--compare", metavar="FILE.npz", help="rerun and compare bit for bit")
    action.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--only", metavar="CASE,CASE", help="run these cases only")
    parser.add_argument("--with-dask", action=argparse.BooleanOptionalAction, default=True,
                        help="run the cases that need a local Dask cluster (default: on)")
    args = parser.parse_args(argv)

    if args.list:
        for name, (fn, dask) in CASES.items():
            print(f"{name:24s} {'[dask] ' if dask else ''}{' '.join(fn.__doc__.split())}")
        return 0
    names = list(CASES)
    if args.only:
        names = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in names if s not in CASES]
        if unknown:
            parser.error(f"unknown case(s) {', '.join(unknown)}; see --list")
    if not args.with_dask:
        names = [s for s in names if not CASES[s][1]]

    if args.compare and not os.path.isfile(args.compare):
        parser.error(f"no baseline file {args.compare!r}")
    baseline = load(args.compare) if args.compare else None
    warnings.simplefilter("ignore")
    capture = _quiet_logging()
    print(f"pymc_ibp from {pmi.__file__}", flush=True)
    ctx = _Dask()
    t0 = time.perf_counter()
    try:
        arrays, errors = run_cases(names, ctx, capture, keep_going=bool(args.compare))
    finally:
        ctx.close()
    print(f"{len(names)} cases in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.save:
        with open(args.save, "wb") as f:
            np.savez_compressed(f, **arrays)
        print(f"saved {len(arrays)} arrays to {args.save}")
        return 0
    return 0 if compare(names, arrays, baseline, errors) else 1


if __name__ == "__main__":
    sys.exit(main())
