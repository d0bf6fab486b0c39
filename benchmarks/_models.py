"""The benchmarks' models and samplers: the README's linear-Gaussian IBP model
(:func:`ibp_model`), its finite Beta-Bernoulli version (:func:`finite_model`), a conjugate
``A | Z`` step for the uncollapsed sampler (:func:`ConjugateA`), the timing data of
scaling.py / throughput.py (:func:`timing_data`), the ``pm.sample`` runs of the mixing
benchmarks (:func:`sample_block_model`) and the binarised digits with their Bernoulli-logit
IBP model (:func:`digits`, :func:`digits_logit_model`).
"""

from __future__ import annotations

import numpy as np


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


def timing_data(kind, n, k_max, seed=0):
    """The data of the timing benchmarks (scaling.py, throughput.py) and the feature scale
    ``sigma_a`` to run them at: ``"block"``: block images (D = 36, noise 0.5, K = 4),
    ``sigma_a`` = the root mean square of the true glyphs; ``"synthetic"``: linear-Gaussian IBP
    data (D = 161, alpha = 1, sigma_x = 0.5, sigma_a = 1, K+ ~ Poisson(H_N))."""
    import pymc_ibp as pmi

    if kind == "block":
        d = pmi.datasets.block_images(n, noise=0.5, seed=seed)
        sa = float(np.sqrt(np.mean(d.A ** 2)))
    else:
        d = pmi.datasets.ibp_linear_gaussian(n, 161, alpha=1.0, sigma_x=0.5, sigma_a=1.0,
                                             seed=seed)
        sa = 1.0
        if d.k > k_max:
            raise RuntimeError(f"synthetic data has K+ = {d.k} > K_max = {k_max}")
    return d, sa


def digits(n, seed, labels=False):
    """``n`` binarised scikit-learn digits (pixels > 7, 64 columns, int64), rows drawn with
    ``seed``; with ``labels``, ``(X, the digit of every row)``."""
    from sklearn.datasets import load_digits

    data = load_digits()
    rows = np.random.default_rng(seed).choice(len(data.data), size=n, replace=False)
    X = (data.data[rows] > 7).astype("int64")
    return (X, data.target[rows]) if labels else X


def digits_logit_model(X, k_max):
    """The digits example's model (``examples/digits.py``): ``alpha ~ Gamma(2, 1)``,
    ``Z ~ pmi.IBP(alpha)`` with ``K_max`` slots, ``A ~ Normal(0, 2)``, ``b ~ Normal(-1, 2)``,
    ``X ~ Bernoulli(logit_p = Z @ A + b)``; returns the model (``model["Z"]``, ...)."""
    import pymc as pm

    import pymc_ibp as pmi

    n, d = X.shape
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(n, k_max))
        A = pm.Normal("A", 0.0, 2.0, shape=(k_max, d))
        b = pm.Normal("b", -1.0, 2.0, shape=d)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
    return model


def ibp_model(X, k_max, *, alpha=None, sigma_x=None, sigma_a=None, sx_init=None, sa_init=None,
              z_init=None, a_init=None):
    """The linear-Gaussian IBP model of the README.

    ``alpha``/``sigma_x``/``sigma_a``: a float fixes the value (a constant in the model);
    ``None`` makes it free (``alpha ~ Gamma(1, 1)``, ``sigma_a ~ HalfNormal(2)``,
    ``sigma_x ~ HalfNormal(1)``) with initial values ``sx_init``/``sa_init``.
    NaN entries of ``X`` are imputed by PyMC (every sampler, IBPGibbs included).
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
        pm.Normal("X", mu=Z @ A, sigma=sx, observed=X)
    return model


def finite_model(X, k_max, *, sx_init=None, sa_init=None):
    """The finite Beta-Bernoulli version (Griffiths & Ghahramani 2011, §3): ``pi_k ~ Beta(alpha/K,
    1)``,
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


def _make_conjugate_a_class():
    import pymc as pm
    from pymc.step_methods.compound import BlockedStep, Competence
    from pymc.util import get_random_generator, get_value_vars_from_user_vars

    from pymc_ibp import kernels

    class ConjugateA(BlockedStep):
        """``A | Z, X, sigma_x, sigma_a`` drawn from its exact Gaussian conditional (Griffiths &
        Ghahramani 2011, §5).

        The A update of the uncollapsed / semi-collapsed Gibbs sampler of Doshi-Velez (2009, §3.1,
        §4.4):
        active rows from ``N(mu, Sigma)`` (one Cholesky, ``O(NKD + K^2 D + K^3)``), empty slots
        from the prior.  Benchmark helper, never auto-assigned.
        """

        name = "conjugate_a"
        stats_dtypes_shapes = {}

        def __init__(self, vars, *, X, z_name="Z", model=None, rng=None,
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
            self.X = np.where(np.isnan(X), 0.0, X)
            self.rng = get_random_generator(rng)

        def step(self, point):
            sa, sx = (float(np.asarray(h).ravel()[0]) for h in self._hyper(point))
            Z = np.asarray(point[self.z_name], dtype=np.int64)
            A = kernels.draw_features(self.rng, Z, self.X, sx * sx, sa * sa)
            new = dict(point)
            new[self.a_name] = A
            return new, [{}]

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
