"""Shared helpers of the benchmark scripts: models, a conjugate ``A`` step, timing, output.

Not a test module: nothing here asserts on timings.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


# ---------------------------------------------------------------------------------------------
# machine and output
# ---------------------------------------------------------------------------------------------
def machine_info() -> dict:
    """CPU model (``lscpu``), core count, load average and library versions."""
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import numba
    import numpy
    import pymc

    info = {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "pymc": pymc.__version__,
    }
    try:
        here = Path(__file__).parent
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../pymc_ibp"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["git"] = rev + (" + uncommitted pymc_ibp changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        info["git"] = "?"
    try:
        info["load_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    return info


def machine_line(info: dict) -> str:
    return (f"machine: {info['cpu']}, {info['cores']} cores (load average at start "
            f"{info.get('load_at_start', '?')}); python {info['python']}, numpy {info['numpy']}, "
            f"numba {info['numba']}, pymc {info['pymc']}; pymc_ibp at git {info.get('git', '?')}")


def fmt(x, digits=3):
    """Compact number formatting for tables."""
    if x is None:
        return "-"
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, str):
        return x
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e5 or ax < 1e-3:
        return f"{x:.{digits - 1}e}"
    if ax >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def md_table(rows: list[dict], columns: list[str], headers: list[str] | None = None) -> str:
    headers = headers or columns
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(out)


def print_table(rows: list[dict], columns: list[str]) -> None:
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c)
              for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for x in cells:
        print("  ".join(v.rjust(w) for v, w in zip(x, widths)))


def write_results(name: str, rows: list[dict], columns: list[str], title: str,
                  notes: list[str], info: dict, extra_tables: list[tuple[str, list[dict], list[str]]] = ()):
    """Write ``results/<name>.csv`` (all rows, all columns) and ``results/<name>.md``."""
    RESULTS.mkdir(exist_ok=True)
    allcols = list(dict.fromkeys([c for r in rows for c in r]))
    with open(RESULTS / f"{name}.csv", "w") as f:
        f.write(",".join(allcols) + "\n")
        for r in rows:
            f.write(",".join("" if r.get(c) is None else str(r.get(c)) for c in allcols) + "\n")
    md = [f"# {title}", "", machine_line(info), "", md_table(rows, columns), ""]
    for sub_title, sub_rows, sub_cols in extra_tables:
        md += [f"### {sub_title}", "", md_table(sub_rows, sub_cols), ""]
    md += [f"* {n}" for n in notes]
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"\nwrote {RESULTS / (name + '.csv')} and {RESULTS / (name + '.md')}")


def spread(times) -> dict:
    t = np.asarray(times, dtype=float)
    return {"median_s": float(np.median(t)), "min_s": float(t.min()), "max_s": float(t.max()),
            "reps": int(t.size)}


def loglog_slope(ns, ts) -> float | None:
    ns, ts = np.asarray(ns, float), np.asarray(ts, float)
    if ns.size < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
def pad(M, k_max):
    """Pad the columns (``Z``) or rows (``A``) of a ground-truth matrix to ``K_max``."""
    M = np.asarray(M)
    if M.ndim == 2 and M.dtype.kind == "i":  # Z: N x K
        out = np.zeros((M.shape[0], k_max), dtype=np.int64)
        out[:, :M.shape[1]] = M
        return out
    out = np.zeros((k_max, M.shape[1]))
    out[:M.shape[0]] = M
    return out


def ibp_model(X, k_max, *, alpha=None, sigma_x=None, sigma_a=None, sx_init=None, sa_init=None,
              z_init=None, a_init=None, mask=None):
    """The linear-Gaussian IBP model of the README.

    ``alpha``/``sigma_x``/``sigma_a``: a float fixes the value (a constant in the model);
    ``None`` makes it free (``alpha ~ Gamma(1, 1)``, ``sigma_a ~ HalfNormal(2)``,
    ``sigma_x ~ HalfNormal(1)``) with initial values ``sx_init``/``sa_init``.

    ``mask`` (bool N x D, True = held out) builds the *masked* likelihood
    ``X ~ Normal(M * (Z @ A), sigma_x)`` observed at ``M * X`` (``M = ~mask``): the held-out
    entries contribute a constant, i.e. they are marginalised out.  This is the form
    :class:`pymc_ibp.IBPGibbs` accepts (it rejects PyMC's NaN imputation, whose flattened
    ``X_observed``/``X_unobserved`` logp does not have one term per row); the linear-Gaussian
    samplers need NaN imputation instead (``X`` with NaN, ``mask=None``).
    """
    import pymc as pm

    import pymc_ibp as pmi

    n, d = X.shape
    with pm.Model() as model:
        a = pm.Gamma("alpha", 1.0, 1.0) if alpha is None else float(alpha)
        zkw = {} if z_init is None else {"initval": z_init}
        Z = pmi.IBP("Z", a, shape=(n, k_max), **zkw)
        sa = (pm.HalfNormal("sigma_a", 2.0, initval=sa_init) if sigma_a is None
              else float(sigma_a))
        akw = {} if a_init is None else {"initval": a_init}
        A = pm.Normal("A", 0.0, sa, shape=(k_max, d), **akw)
        sx = (pm.HalfNormal("sigma_x", 1.0, initval=sx_init) if sigma_x is None
              else float(sigma_x))
        if mask is None:
            pm.Normal("X", mu=Z @ A, sigma=sx, observed=X)
        else:
            keep = (~np.asarray(mask)).astype(float)
            pm.Normal("X", mu=keep * (Z @ A), sigma=sx, observed=np.where(mask, 0.0, X))
    return model


def finite_model(X, k_max, *, sx_init=None, sa_init=None):
    """The finite Beta-Bernoulli version (spec §2.3): ``pi_k ~ Beta(alpha/K, 1)``,
    ``Z_nk ~ Bernoulli(pi_k)``, same priors and likelihood as :func:`ibp_model`."""
    import pymc as pm

    n, d = X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        pi = pm.Beta("pi", alpha / k_max, 1.0, shape=k_max)
        Z = pm.Bernoulli("Z", p=pi, shape=(n, k_max))
        sa = pm.HalfNormal("sigma_a", 2.0, initval=sa_init)
        A = pm.Normal("A", 0.0, sa, shape=(k_max, d))
        sx = pm.HalfNormal("sigma_x", 1.0, initval=sx_init)
        pm.Normal("X", mu=Z @ A, sigma=sx, observed=X)
    return model


# ---------------------------------------------------------------------------------------------
# conjugate A | Z step (for the uncollapsed sampler)
# ---------------------------------------------------------------------------------------------
def _make_conjugate_a_class():
    import pymc as pm
    from pymc.step_methods.compound import BlockedStep, Competence
    from pymc.util import get_random_generator, get_value_vars_from_user_vars

    from pymc_ibp.step_methods import kernels

    class ConjugateA(BlockedStep):
        """``A | Z, X, sigma_x, sigma_a`` drawn from its exact Gaussian conditional (spec §3.1).

        The A update of the uncollapsed / semi-collapsed Gibbs sampler of [000 §3.1, §4.4]:
        active rows from ``N(mu, Sigma)`` (one Cholesky, ``O(NKD + K^2 D + K^3)``), empty slots
        from the prior.  With a held-out ``mask`` (the masked model of :func:`ibp_model`) each
        column ``d`` has its own posterior over its observed rows (``O(N K^2 D)``).
        Benchmark helper, never auto-assigned.
        """

        name = "conjugate_a"
        stats_dtypes_shapes = {}

        def __init__(self, vars, *, X, mask=None, z_name="Z", model=None, rng=None,
                     initial_point=None, compile_kwargs=None, blocked=True):
            model = pm.modelcontext(model)
            [a_val] = get_value_vars_from_user_vars(vars, model)
            self.vars = [a_val]
            self.a_name, self.z_name = a_val.name, z_name
            a_rv = model.values_to_rvs[a_val]
            like = [rv for rv in model.observed_RVs][0]
            hyper = model.replace_rvs_by_values([a_rv.owner.inputs[3], like.owner.inputs[3]])
            self._hyper = model.compile_fn([h.squeeze() if h.ndim else h for h in hyper],
                                           inputs=model.value_vars, on_unused_input="ignore",
                                           point_fn=True)
            self.X = np.where(np.isnan(X), 0.0, X) if mask is None else np.where(mask, 0.0, X)
            self.keep = None if mask is None else (~np.asarray(mask)).astype(float)
            self.rng = get_random_generator(rng)

        def step(self, point):
            sa, sx = (float(np.asarray(h).ravel()[0]) for h in self._hyper(point))
            Z = np.asarray(point[self.z_name], dtype=np.int64)
            if self.keep is None:
                A = kernels.draw_features(self.rng, Z, self.X, sx * sx, sa * sa)
            else:
                A = self._draw_masked(Z, sx * sx, sa * sa)
            new = dict(point)
            new[self.a_name] = A
            return new, [{}]

        def _draw_masked(self, Z, sx2, sa2):
            k_max = Z.shape[1]
            d = self.X.shape[1]
            A = self.rng.normal(0.0, math.sqrt(sa2), size=(k_max, d))
            act = np.flatnonzero(Z.sum(axis=0) > 0)
            if act.size:
                Za = Z[:, act].astype(float)
                P = np.einsum("nk,nd,nl->dkl", Za, self.keep, Za) / sx2
                P += np.eye(act.size) / sa2
                b = (Za.T @ (self.keep * self.X)).T / sx2  # d x k
                L = np.linalg.cholesky(P)
                y = np.linalg.solve(L, b[..., None])  # L y = b
                eps = self.rng.standard_normal(y.shape)
                Lt = np.swapaxes(L, -1, -2)
                A[act] = np.linalg.solve(Lt, y + eps)[..., 0].T
            return A

        @staticmethod
        def competence(var, has_grad):
            return Competence.INCOMPATIBLE

    return ConjugateA


_CONJ = None


def ConjugateA(*args, **kwargs):  # noqa: N802 - a class factory (pymc imported lazily)
    global _CONJ
    if _CONJ is None:
        _CONJ = _make_conjugate_a_class()
    return _CONJ(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# label-invariant statistics
# ---------------------------------------------------------------------------------------------
def collapsed_log_joint(Z, X, sigma_x, sigma_a, alpha, beta=1.0, prior=True):
    """``log p(X | Z) + log P(Z)``: A integrated out (spec §3.1, E14) and the truncated IBP
    pmf of :class:`pymc_ibp.IBP`; the same number as the ``ibp_log_joint`` stat.
    ``prior=False``: the collapsed log-likelihood ``log p(X | Z)`` alone."""
    from pymc_ibp.step_methods import kernels

    sx2, sa2 = float(sigma_x) ** 2, float(sigma_a) ** 2
    joint, ll = kernels.log_joint_of(Z, X, sx2, sa2, alpha, beta)
    return float(joint if prior else ll)


def ess_bulk(x) -> float:
    """ArviZ bulk ESS of a (chains, draws) array; NaN when constant."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    if np.ptp(x) == 0:
        return float("nan")
    return float(az.ess(x, method="bulk"))


def ess_bda2(x) -> float:
    """BDA-2 (Gelman et al. 2003) ``n_eff = m n var+/B`` (spec §9.2), capped at ``m n``."""
    x = np.asarray(x, dtype=float)
    if np.ptp(x) == 0:
        return float("nan")
    m, n = x.shape
    means = x.mean(axis=1)
    B = n * means.var(ddof=1)
    W = x.var(axis=1, ddof=1).mean()
    var_plus = (n - 1) / n * W + B / n
    if B <= 0:
        return float(m * n)
    return float(min(m * n, m * n * var_plus / B))


def sampling_time(idata) -> float:
    """Wall time of pm.sample's sampling loop (tune + draws; step construction excluded)."""
    return float(idata["posterior"].attrs["sampling_time"])


class Timer:
    def __enter__(self):
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.s = time.perf_counter() - self.t


# ---------------------------------------------------------------------------------------------
# timing callback and the block-images runs of mixing.py / mixing_long.py
# ---------------------------------------------------------------------------------------------
class IterationClock:
    """pm.sample callback recording the wall time, chain and tuning flag of every iteration."""

    def __init__(self):
        self.t, self.chain, self.tuning = [], [], []

    def __call__(self, trace, draw):
        self.t.append(time.perf_counter())
        self.chain.append(draw.chain)
        self.tuning.append(bool(draw.tuning))

    def per_iteration(self) -> float:
        """Median duration of the post-tuning iterations (the interval since the previous
        iteration of the same chain)."""
        t, c, tu = np.array(self.t), np.array(self.chain), np.array(self.tuning)
        ok = (c[1:] == c[:-1]) & ~tu[1:]
        d = np.diff(t)[ok]
        return float(np.median(d)) if d.size else float("nan")


def sample_block_model(sampler, X, k_max, tune, draws, chains, seed, callback=None, quiet=False):
    """``pm.sample`` of the mixing benchmarks' model on block images ``X`` (initial values
    ``sigma_x = 0.5 std(X)``, ``sigma_a = 1``): ``"pymc_default"`` is :func:`finite_model`, every
    other sampler :func:`ibp_model`; ``step`` per sampler name (``"accelerated"`` and
    ``"pymc_default"``: pm.sample's own assignment)."""
    import pymc as pm

    import pymc_ibp as pmi

    sx0 = 0.5 * float(np.std(X))
    if sampler == "pymc_default":
        model = finite_model(X, k_max, sx_init=sx0, sa_init=1.0)
    else:
        model = ibp_model(X, k_max, sx_init=sx0, sa_init=1.0)
    with model:
        Z, A = model["Z"], model["A"]
        if sampler == "collapsed":
            step = [pmi.CollapsedGibbs([Z])]
        elif sampler == "ibpgibbs+nuts":
            # NUTS must be named: with A free, pm.sample would offer A to AcceleratedGibbs
            step = [pmi.IBPGibbs([Z]), pm.NUTS([A])]
        elif sampler == "ibpgibbs+conjA":
            step = [pmi.IBPGibbs([Z]), ConjugateA([A], X=X)]
        else:
            step = None
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=1, step=step,
                         random_seed=seed, progressbar=False, quiet=quiet,
                         compute_convergence_checks=False,
                         var_names=["alpha", "sigma_x", "sigma_a", "Z"], callback=callback)


def traces(idata, X):
    """Label-invariant traces of every draw, each ``(chains, draws)``: K+, the collapsed log
    joint and log-likelihood (:func:`collapsed_log_joint`, the same function for every sampler),
    alpha and the scales."""
    post = idata["posterior"]
    Z = post["Z"].values
    sx, sa, al = (post[v].values for v in ("sigma_x", "sigma_a", "alpha"))
    c, d = Z.shape[:2]
    kplus = (Z.sum(axis=2) > 0).sum(axis=-1)
    lj = np.empty((c, d))
    ll = np.empty((c, d))
    for i in range(c):
        for j in range(d):
            lj[i, j] = collapsed_log_joint(Z[i, j], X, sx[i, j], sa[i, j], al[i, j])
            ll[i, j] = collapsed_log_joint(Z[i, j], X, sx[i, j], sa[i, j], al[i, j],
                                           prior=False)
    return {"K_plus": kplus.astype(int), "log_joint": lj, "log_lik": ll,
            "sigma_x": np.asarray(sx, float), "alpha": np.asarray(al, float),
            "sigma_a": np.asarray(sa, float)}


def rhat(x) -> float:
    """``az.rhat`` over chains, nan for a constant statistic."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    if np.ptp(x) == 0:
        return float("nan")
    r = float(az.rhat(x))
    return r if math.isfinite(r) else float("nan")
