r"""Mean-field variational inference for linear-Gaussian IBP models.

The model is the one :class:`pymc_ibp.AcceleratedGibbs` matches: ``Z ~ pmi.IBP(alpha)`` (one
parameter, ``beta = 1``), ``A ~ Normal(0, σa)`` and ``X ~ Normal(Z @ A, σx)`` (several observed
matrices sharing ``Z`` and per-column scales allowed).  Two approximations (Doshi-Velez et al.
[1]_; Doshi-Velez [2]_, ch. 6):

* ``method="infinite"``: the stick-breaking representation of the IBP (Teh, Görür &
  Ghahramani [3]_), ``v_k ~ Beta(α, 1)``, ``π_k = Π_{m≤k} v_m``, ``z_nk ~ Bernoulli(π_k)``,
  with the *variational family* truncated at ``K`` = the model's ``K_max``:

  .. math:: q = \prod_k \mathrm{Beta}(v_k; τ_{k1}, τ_{k2})\,
     \mathcal N(A_k; φ_k, \operatorname{diag}Φ_k) \prod_n \mathrm{Bernoulli}(z_{nk}; ν_{nk}).

  The ELBO needs :math:`\mathbb E\log(1-\prod_{m\le k}v_m)`, which has no closed form: it is
  replaced by a lower bound, ``bound="multinomial"`` (Doshi-Velez et al. 2009, §4.1;
  closed-form stick updates; the default) or ``bound="taylor"`` (the series of Doshi-Velez
  2009, §6.2.1, with ``terms`` terms and a bound on its tail; sticks by L-BFGS-B);
* ``method="finite"``: ``π_k ~ Beta(α/K, 1)`` independently (the finite Beta–Bernoulli model of
  Griffiths & Ghahramani [4]_, §4.1), ``q(π_k) = Beta(α/K + Σ_n ν_nk, 1 + N - Σ_n ν_nk)``.

Coordinate ascent: the features ``(φ, Φ)``, then every ``ν_nk``, then the sticks, then (with
``learn_hyper``) the closed-form maximisers of the ELBO in ``σx², σa²`` (one per block of
columns whose scale is a free variable of the model) and ``α`` (when it is free); each step
raises the ELBO, which :attr:`VariationalResult.elbo` records after every iteration.
Hyperparameters are point estimates (empirical Bayes), not posterior draws.  The iterations
keep the residual ``X - ν φ``, so each costs ``O(NKD)``.

With small noise the ELBO has many local optima; as in the experiments of [2]_, §6.5, the
noise variance is tempered (from the data's variance down to ``σx²`` over the first
``anneal`` iterations) and the best of ``restarts`` runs is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import xarray as xr
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.subtensor import Subtensor
from scipy.optimize import minimize

from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn, constant_value
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.inference import vi_kernels as vk
from pymc_ibp.kernels.gaussian import data_start
from pymc_ibp.matching.graph import is_zero_constant, strip
from pymc_ibp.matching.linear_gaussian import find_linear_gaussian, matched_models
from pymc_ibp.matching.priors import IBPPrior

__all__ = ["VariationalResult", "fit_variational", "truncation_bound", "variational_elbo",
           "variational_z"]


def truncation_bound(n, alpha, k):
    r"""Upper bound on the probability that ``n`` rows of the IBP use a feature beyond the
    first ``k`` sticks of its stick-breaking representation (the ``L¹`` distance bound of
    Doshi-Velez 2009, eq. 6.9, from the Lévy–Khintchine formula):

    .. math:: 1 - \exp\big(-N\alpha\,(\alpha/(1+\alpha))^{K}\big).

    Use it to choose ``K_max``: the smallest ``k`` with a bound below a tolerance."""
    n, alpha, k = float(n), float(alpha), np.asarray(k, dtype=float)
    return -np.expm1(-n * alpha * np.exp(k * (np.log(alpha) - np.log1p(alpha))))


def _stick_terms(tau, method, bound, terms):
    """Per feature ``k``, the expected log prior probabilities of ``z_nk = 1`` and of
    ``z_nk = 0``: ``(Σ_{m≤k} E log v_m, lower bound on E log(1 - Π_{m≤k} v_m))`` for
    ``infinite``, ``(E log π_k, E log(1 - π_k))`` for ``finite``."""
    elv, el1v = vk.beta_log_moments(tau)
    if method == "finite":
        return elv, el1v
    lower = (vk.log1m_prod_taylor(tau, terms) if bound == "taylor"
             else vk.log1m_prod_multinomial(tau))
    return np.cumsum(elv), lower


def variational_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, *, method="infinite",
                     bound="multinomial", terms=50, R=None, mask=None):
    r"""The evidence lower bound of the mean-field approximation (module docstring) at the
    given variational parameters; ``sx2``, ``sa2`` per column (length ``D``) or scalars.

    .. math::
        \mathcal L = \mathbb E_q[\log p(v)] + \mathbb E_q[\log p(Z\mid v)]
        + \mathbb E_q[\log p(A)] + \mathbb E_q[\log p(X\mid Z, A)] + H[q],

    with :math:`\mathbb E\log p(x_{nd}\mid\cdot) = -\tfrac12\log 2πσ_{x,d}^2
    - \mathbb E[(x_{nd}-z_nA_d)^2]/(2σ_{x,d}^2)` (Doshi-Velez et al. 2009, eq. 9 with the
    correction that the stick term of ``z_nk = 1`` is :math:`\sum_{m\le k}\mathbb E\log v_m`).
    ``mask`` (0/1, ``N x D``): the observed entries; the others are marginalised (they leave
    the likelihood).
    """
    X = np.asarray(X, dtype=float)
    n, d = X.shape
    k_max = nu.shape[1]
    sx2 = np.broadcast_to(np.asarray(sx2, dtype=float), (d,))
    sa2 = np.broadcast_to(np.asarray(sa2, dtype=float), (d,))
    M = np.ones_like(X) if mask is None else np.asarray(mask, dtype=float)
    if R is None:
        R = np.where(M > 0, X - nu @ phi, 0.0)
    m_nu = nu.sum(axis=0)
    on, off = _stick_terms(tau, method, bound, terms)
    elv, _ = vk.beta_log_moments(tau)
    if method == "finite":
        a0 = alpha / k_max
        lp_v = np.sum(np.log(a0) + (a0 - 1.0) * elv)
    else:
        lp_v = np.sum(np.log(alpha) + (alpha - 1.0) * elv)
    lp_z = np.sum(m_nu * on + (n - m_nu) * off)
    lp_a = np.sum(-0.5 * np.log(2 * np.pi * sa2)[None, :] - (Phi + phi**2) / (2 * sa2[None, :]))
    sq = vk.expected_sq_error(R, nu, phi, Phi, M)
    lp_x = np.sum(-0.5 * M.sum(axis=0) * np.log(2 * np.pi * sx2) - sq / (2 * sx2))
    with np.errstate(divide="ignore", invalid="ignore"):
        h_z = -(np.where(nu > 0, nu * np.log(nu), 0.0)
                + np.where(nu < 1, (1 - nu) * np.log1p(-nu), 0.0)).sum()
    h_a = 0.5 * np.sum(np.log(2 * np.pi * np.e * Phi))
    h_v = vk.beta_entropy(tau).sum()
    return float(lp_v + lp_z + lp_a + lp_x + h_z + h_a + h_v)


def _update_sticks(tau, nu, alpha, method, n, bound="multinomial", terms=50):
    """Coordinate update of the sticks: exact for ``finite`` (``q(π_k)`` in closed form) and
    for the multinomial bound (closed form with ``q_k`` at its optimum for the current ``τ``);
    for the Taylor bound L-BFGS-B on :func:`vi_kernels.stick_objective` (analytic gradient,
    in ``log τ``), started from the better of the current ``τ`` and the multinomial update
    and kept only if it raises the objective."""
    m_nu = nu.sum(axis=0)
    k_max = tau.shape[0]
    if method == "finite":
        return np.column_stack([alpha / k_max + m_nu, 1.0 + n - m_nu])
    closed = vk.stick_update_multinomial(tau, alpha, m_nu, n)
    if bound == "multinomial":
        return closed

    def neg(logt):
        t = np.exp(logt.reshape(k_max, 2))
        f, g = vk.stick_objective(t, alpha, m_nu, n, "taylor", terms)
        if not np.isfinite(f):
            return 1e300, np.zeros_like(logt)
        return -f, -(g * t).ravel()

    f_cur = neg(np.log(tau).ravel())[0]
    x0 = min((np.log(tau).ravel(), np.log(closed).ravel()), key=lambda x: neg(x)[0])
    res = minimize(neg, x0, jac=True, method="L-BFGS-B", bounds=[(-12.0, 14.0)] * x0.size)
    best = res.x if res.fun < neg(x0)[0] else x0
    return np.exp(best.reshape(k_max, 2)) if neg(best)[0] < f_cur else tau


@dataclass
class _Block:
    """Columns ``c0:c1`` with their ``A`` variable and whether each scale is learned."""

    c0: int
    c1: int
    a_name: str
    sx_name: str | None  # name of the free scale variable (learned), or None (fixed)
    sa_name: str | None
    sx_vec: bool = False  # the scale has one entry per column (learned per column)
    sa_vec: bool = False
    miss_name: str | None = None  # PyMC's imputed entries of this block (X_unobserved), if any
    miss_mask: np.ndarray | None = None


@dataclass
class VariationalResult:
    """Result of :func:`fit_variational`: the variational parameters, the ELBO after every
    iteration, and the hyperparameters used at the end (learned or fixed)."""

    nu: np.ndarray  #: ``N x K`` Bernoulli means of ``Z``
    phi: np.ndarray  #: ``K x D`` means of ``A`` (the observed matrices' columns side by side)
    Phi: np.ndarray  #: ``K x D`` variances of ``A``
    tau: np.ndarray  #: ``K x 2`` Beta parameters of the sticks (or of ``π`` for ``finite``)
    elbo: np.ndarray  #: ELBO after each iteration of the kept run
    sigma_x_columns: np.ndarray  #: the noise scale of every column at the end
    sigma_a_columns: np.ndarray  #: the feature scale of every column at the end
    alpha: float
    method: str
    bound: str
    converged: bool
    model: object = field(repr=False)
    z_name: str = "Z"
    _blocks: list = field(default_factory=list, repr=False)
    _alpha_name: str | None = None

    @property
    def sigma_x(self):
        """The noise scale at the end, shaped as the model's: a float for one observed matrix
        with a scalar ``sigma_x``, else one value per column (``sigma_x_columns``)."""
        return self._shaped(self.sigma_x_columns, "sx_vec")

    @property
    def sigma_a(self):
        """The feature scale at the end, shaped as :attr:`sigma_x` is."""
        return self._shaped(self.sigma_a_columns, "sa_vec")

    def _shaped(self, columns, per_column):
        if len(self._blocks) == 1 and not getattr(self._blocks[0], per_column):
            return float(columns[0])
        return columns

    @property
    def Z(self):  # noqa: N802 - the model's name for the matrix
        """The most probable ``Z`` under ``q`` (``ν > 1/2``), ``N x K`` int8."""
        return (self.nu > 0.5).astype(np.int8)

    def _scalars(self):
        """Point values of the learned/fixed free hyperparameters, by variable name."""
        out = {}
        for b in self._blocks:
            for name, vec, per_col in ((b.sx_name, b.sx_vec, self.sigma_x_columns),
                                       (b.sa_name, b.sa_vec, self.sigma_a_columns)):
                if name is not None:
                    vals = per_col[b.c0:b.c1]
                    out[name] = np.array(vals) if vec else np.asarray(vals[0])
        if self._alpha_name is not None:
            out[self._alpha_name] = np.asarray(self.alpha)
        return out

    def initvals(self):
        """Initial values for ``pm.sample(initvals=...)``: the most probable ``Z``, the mean of
        ``A`` and the hyperparameters' point values.  The linear-Gaussian steps start a chain
        at a ``Z`` given this way (and skip their multi-start burn-in)."""
        out = {self.z_name: self.Z.astype(np.int8)}
        for b in self._blocks:
            out[b.a_name] = self.phi[:, b.c0:b.c1].copy()
        out.update(self._scalars())
        return out

    def sample(self, draws=1000, *, chains=1, random_seed=None):
        """Draws from ``q`` as an ``xarray.DataTree`` with a ``posterior`` group shaped like
        ``pm.sample``'s (dims ``chain, draw`` and the model's own dims; deterministics
        included), so :func:`pymc_ibp.summary`, :func:`pymc_ibp.plot_features` and
        :func:`pymc_ibp.heldout_metrics` apply.  Hyperparameters are the fitted point values
        in every draw."""
        from pymc.backends.arviz import coords_and_dims_for_inferencedata, dict_to_dataset

        model = self.model
        rng = np.random.default_rng(random_seed)
        trace_vars = model.unobserved_value_vars
        fn = compile_point_fn(model, trace_vars)
        base = model.initial_point()
        for name, val in self._scalars().items():
            rv = model[name]
            tr = model.rvs_to_transforms.get(rv)
            value = model.rvs_to_values[rv]
            base[value.name] = (np.asarray(val, dtype=float) if tr is None else
                                constant_value(tr.forward(np.asarray(val, dtype=float),
                                                          *rv.owner.inputs)))
        n_tot = chains * draws
        out = {v.name: [] for v in trace_vars}
        z_dtype = base[self.z_name].dtype
        for _ in range(n_tot):
            point = dict(base)
            point[self.z_name] = (rng.random(self.nu.shape) < self.nu).astype(z_dtype)
            A = self.phi + np.sqrt(self.Phi) * rng.standard_normal(self.phi.shape)
            for b in self._blocks:
                point[b.a_name] = A[:, b.c0:b.c1]
                if b.miss_name is not None:  # the imputed entries, from the likelihood
                    mean = point[self.z_name] @ A[:, b.c0:b.c1]
                    sd = np.broadcast_to(self.sigma_x_columns[b.c0:b.c1], mean.shape)
                    point[b.miss_name] = (mean + sd * rng.standard_normal(mean.shape))[
                        b.miss_mask]
            for v, val in zip(trace_vars, fn(point), strict=True):
                out[v.name].append(val)
        names = pm.util.get_default_varnames([v.name for v in trace_vars],
                                             include_transformed=False)
        data = {k: np.stack(out[k]).reshape(chains, draws, *np.shape(out[k][0]))
                for k in names}
        coords, dims = coords_and_dims_for_inferencedata(model)
        ds = dict_to_dataset(data, inference_library=pm, coords=coords, dims=dims,
                             sample_dims=["chain", "draw"])
        ds.attrs["inference"] = f"pymc_ibp.fit_variational(method={self.method!r})"
        return xr.DataTree.from_dict({"posterior": ds})


def _match(model, z):
    specs = [s for s in matched_models(model) if z is None or s.z_rv.name == z]
    if len(specs) != 1:
        raise ModelPatternError(
            "fit_variational needs exactly one linear-Gaussian pmi.IBP matrix"
            + (f" named {z!r}" if z else "; pass z='name'") + f"; found {len(specs)}.")
    spec = find_linear_gaussian(model, specs[0].z_rv)
    if not isinstance(spec.prior, IBPPrior):
        raise ModelPatternError(
            f"fit_variational needs a pmi.IBP prior on {spec.z_rv.name!r} (its stick-breaking "
            "representation is built in); use pm.sample for other priors.")
    if spec.z_data is not None:
        raise ModelPatternError(f"{spec.z_rv.name!r} is observed: nothing to infer.")
    offsets = [b.offset for b in spec.blocks
               if b.offset is not None and not is_zero_constant(b.offset)]
    if offsets:
        free_rvs = set(model.free_RVs)
        free = sorted({v.name for v in ancestors(offsets) if v in free_rvs})
        what, fix = ((f"the offset {', '.join(map(repr, free))}", "centre the data's columns "
                      "(X - np.nanmean(X, axis=0)) and leave the offset out of the model")
                     if free else ("a constant offset", "subtract it from the data "
                                   "(X - offset) and leave it out of the model"))
        raise ModelPatternError(
            f"fit_variational fits X ~ Normal(Z @ A, sigma_x) without an offset (its "
            f"mean-field updates have no term for one), and the model adds {what}: {fix}, "
            "or fit the model as it is with pm.sample (AcceleratedGibbs fits offsets).")
    return spec


def _root(var):
    """``var`` without the views the matcher puts on a scale: casts, added axes, and
    ``s[None][0]`` (the per-column scale of a one-block model)."""
    var = strip(var)
    node = var.owner
    if (node is not None and isinstance(node.op, Subtensor) and len(node.inputs) == 2
            and isinstance(node.inputs[1], Constant) and int(node.inputs[1].data) == 0
            and node.inputs[0].owner is not None
            and isinstance(node.inputs[0].owner.op, DimShuffle)
            and list(node.inputs[0].owner.op.new_order[:1]) == ["x"]):
        var = strip(node.inputs[0].owner.inputs[0])
    return var


def _free_root(model, var):
    """The name of the free random variable of ``model`` that ``var`` is (through the
    matcher's views of it, :func:`_root`), else None."""
    var = _root(var)
    return var.name if var in model.free_RVs else None


@interrupt_safe
def fit_variational(model=None, *, z=None, method="infinite", bound="multinomial", terms=50,
                    max_iters=1000, tol=1e-6, learn_hyper=True, anneal=150, restarts=3,
                    random_seed=None):
    """Fit the mean-field variational approximation of a linear-Gaussian IBP model.

    Parameters
    ----------
    model : pm.Model, optional
        The model (from the context if omitted), with the pattern of
        :class:`pymc_ibp.AcceleratedGibbs` (``pmi.IBP`` prior with ``beta = 1``, no offset).
        Missing (NaN) entries are marginalised: they leave the likelihood, and
        :meth:`VariationalResult.sample` draws PyMC's imputed variable from the fit.  Its free
        variables must be ``Z``, the ``A`` matrices, the imputed entries and (optionally) the
        scales ``sigma_x``, ``sigma_a`` and ``alpha``.  The truncation ``K`` is the model's
        ``K_max``.
    z : str, optional
        Name of the IBP variable when the model has several.
    method : {"infinite", "finite"}
        Stick-breaking (default) or finite Beta–Bernoulli approximation (module docstring).
    bound : {"multinomial", "taylor"}
        Lower bound on ``E log(1 - Π_{m≤k} v_m)`` (``infinite`` only): the multinomial bound
        (default; closed-form stick updates) or the Taylor series with ``terms`` terms and a
        bound on its tail (tighter; sticks by L-BFGS-B, several times slower per iteration).
    terms : int, default 50
        Terms of the Taylor series of ``bound="taylor"`` (ignored otherwise).
    max_iters, tol : int, float
        Iteration limit; stop when the ELBO changes by less than ``tol · |ELBO|`` (after the
        annealing).
    learn_hyper : bool
        Update the free scales and ``alpha`` to their ELBO maximisers (default); otherwise keep
        them at the model's initial point.
    anneal : int
        Iterations over which the noise variance falls from the data's variance to ``σx²``.
    restarts : int
        Independent random starts; the run with the highest final ELBO is returned.
    random_seed : int or Generator, optional

    Returns
    -------
    VariationalResult
        With ``.elbo``, ``.Z``, ``.sample(draws)`` (a DataTree) and ``.initvals()``.
    """
    model = pm.modelcontext(model)
    if method not in ("infinite", "finite"):
        raise ValueError(f"method must be 'infinite' or 'finite'; got {method!r}.")
    if bound not in ("multinomial", "taylor"):
        raise ValueError(f"bound must be 'multinomial' or 'taylor'; got {bound!r}.")
    spec = _match(model, z)
    allowed = {spec.z_rv, *spec.a_rvs, *spec.missing_rvs}
    blocks, cols = [], spec.cols
    for b, c0, c1 in zip(spec.blocks, cols[:-1], cols[1:], strict=True):
        sx_name = _free_root(model, b.sigma_x) if learn_hyper else None
        sa_name = _free_root(model, b.sigma_a) if learn_hyper else None
        blocks.append(_Block(int(c0), int(c1), model.rvs_to_values[b.a_rv].name, sx_name,
                             sa_name, b.sigma_x.ndim > 0, b.sigma_a.ndim > 0,
                             None if b.missing_rv is None
                             else model.rvs_to_values[b.missing_rv].name, b.missing_mask))
        allowed |= {_root(v) for v in (b.sigma_x, b.sigma_a)} & set(model.free_RVs)
    alpha_name = _free_root(model, spec.prior.alpha) if learn_hyper else None
    if spec.prior.alpha in model.free_RVs:
        allowed.add(spec.prior.alpha)
    others = [rv.name for rv in model.free_RVs if rv not in allowed]
    if others:
        raise ModelPatternError(
            f"fit_variational infers Z, A, the scales and alpha of a linear-Gaussian IBP; the "
            f"model has other free variables {others}. Use pm.sample for this model.")
    sx, sa, alpha, beta = spec.hyper_values(model)
    # learned scales without a user's initial value start from the data's spread (as
    # IBPScaleSlice does): PyMC's default start, the prior's support point, can be far off
    for b, blk in zip(spec.blocks, blocks, strict=True):
        for var, name, role, arr in ((b.sigma_x, blk.sx_name, "sigma_x", sx),
                                     (b.sigma_a, blk.sa_name, "sigma_a", sa)):
            if name is not None and model.rvs_to_initial_values.get(var) is None:
                arr[blk.c0:blk.c1] = max(data_start(b.X, role), 1e-3)
    if not np.isclose(float(beta), 1.0):
        raise ModelPatternError(
            f"fit_variational needs the one-parameter IBP (beta = 1); {spec.z_rv.name!r} has "
            f"beta = {float(beta)}.")
    M = np.isfinite(spec.X).astype(float)  # missing entries leave the likelihood
    X = np.ascontiguousarray(np.where(M > 0, spec.X, 0.0), dtype=float)
    rng = np.random.default_rng(random_seed)
    best = None
    for _ in range(max(1, int(restarts))):
        run = _fit_once(X, np.asarray(sx, float) ** 2, np.asarray(sa, float) ** 2,
                        float(alpha), blocks, alpha_name is not None, spec.k_max, method,
                        bound, int(terms), max_iters, tol, anneal, rng, M)
        if best is None or run[-1][-1] > best[-1][-1]:
            best = run
    nu, phi, Phi, tau, sx2, sa2, alpha, converged, elbo = best
    return VariationalResult(
        nu=nu, phi=phi, Phi=Phi, tau=tau, elbo=np.asarray(elbo),
        sigma_x_columns=np.sqrt(sx2), sigma_a_columns=np.sqrt(sa2), alpha=alpha, method=method,
        bound=bound, converged=converged,
        model=model, z_name=model.rvs_to_values[spec.z_rv].name, _blocks=blocks,
        _alpha_name=alpha_name)


def variational_z(X, sx2, sa2, alpha, k_max, rng, *, cols=None, method="finite",
                  max_iters=600, anneal=150, tol=1e-6, restarts=3):
    """Array-level fit used to start MCMC chains: the best (highest final ELBO) of ``restarts``
    runs of coordinate ascent on ``X`` from random ``ν``, with ``σx²``, ``σa²`` (per column;
    starting values, learned per block of columns ``cols[b]:cols[b+1]``, default one block)
    and ``α`` learned, returning the most probable ``Z`` under ``q`` (``N x k_max`` int8)."""
    X = np.ascontiguousarray(X, dtype=float)
    d = X.shape[1]
    cols = [0, d] if cols is None else [int(c) for c in cols]
    blocks = [_Block(c0, c1, "", "sigma_x", "sigma_a")
              for c0, c1 in zip(cols[:-1], cols[1:], strict=True)]
    runs = [_fit_once(X, np.asarray(sx2, float), np.asarray(sa2, float), float(alpha), blocks,
                      True, int(k_max), method, "multinomial", 0, max_iters, tol, anneal, rng)
            for _ in range(max(1, int(restarts)))]
    nu = max(runs, key=lambda r: r[-1][-1])[0]
    return (nu > 0.5).astype(np.int8)


def _fit_once(X, sx2, sa2, alpha, blocks, learn_alpha, k_max, method, bound, terms, max_iters,
              tol, anneal, rng, M=None):
    n, d = X.shape
    M = np.ones_like(X) if M is None else M
    sx2, sa2 = np.array(np.broadcast_to(sx2, (d,))), np.array(np.broadcast_to(sa2, (d,)))
    nu = rng.random((n, k_max))
    phi = np.zeros((k_max, d))
    Phi = np.ones((k_max, d))
    tau = np.column_stack([np.full(k_max, alpha if method == "infinite" else alpha / k_max),
                           np.ones(k_max)])
    tau = _update_sticks(tau, nu, alpha, method, n)  # from the random start of ν (closed form)
    R = M * (X - nu @ phi)
    n_obs = M.sum(axis=0)
    mean = (M * X).sum(axis=0) / np.maximum(n_obs, 1.0)
    v0 = np.maximum((M * (X - mean) ** 2).sum(axis=0) / np.maximum(n_obs, 1.0), sx2)
    elbos, converged = [], False
    for it in range(int(max_iters)):
        w = min(1.0, it / anneal) if anneal else 1.0
        sx2_t = np.exp(w * np.log(sx2) + (1.0 - w) * np.log(np.maximum(v0, sx2)))
        vk.feature_update(X, R, nu, phi, Phi, sx2_t, sa2, M)
        on, off = _stick_terms(tau, method, bound, terms)
        vk.nu_update(R, nu, phi, Phi, sx2_t, np.ascontiguousarray(on - off), M)
        tau = _update_sticks(tau, nu, alpha, method, n, bound, terms)
        if w >= 1.0:
            sx2, sa2, alpha = _update_hyper(R, nu, phi, Phi, tau, sx2, sa2, alpha, blocks,
                                            learn_alpha, method, M)
        elbos.append(variational_elbo(X, nu, phi, Phi, tau, sx2, sa2, alpha, method=method,
                                      bound=bound, terms=terms, R=R, mask=M))
        if (w >= 1.0 and len(elbos) > 1
                and abs(elbos[-1] - elbos[-2]) < tol * abs(elbos[-1])):
            converged = True
            break
    return nu, phi, Phi, tau, sx2, sa2, alpha, converged, elbos


def _update_hyper(R, nu, phi, Phi, tau, sx2, sa2, alpha, blocks, learn_alpha, method, M):
    """Closed-form ELBO maximisers: ``σx² = Σ E(x - zA)² / (number of observed entries)``,
    ``σa² = Σ E A² / (K D_b)`` per block of a learned scale (per column for a vector scale),
    and ``α = -K / Σ_k E log v_k`` (``-K² / Σ_k E log π_k`` for ``finite``)."""
    sq = vk.expected_sq_error(R, nu, phi, Phi, M)
    n_obs = np.maximum(M.sum(axis=0), 1.0)
    ea2 = (Phi + phi**2).sum(axis=0)
    tiny = 1e-12 * max(1.0, float(np.max(sq / n_obs)))  # keeps log σ² finite on exact fits
    k_max = nu.shape[1]
    sx2, sa2 = sx2.copy(), sa2.copy()
    for b in blocks:
        sl = slice(b.c0, b.c1)
        if b.sx_name is not None:
            sx2[sl] = sq[sl] / n_obs[sl] if b.sx_vec else sq[sl].sum() / n_obs[sl].sum()
            sx2[sl] = np.maximum(sx2[sl], tiny)
        if b.sa_name is not None:
            sa2[sl] = ea2[sl] / k_max if b.sa_vec else ea2[sl].sum() / (k_max * (b.c1 - b.c0))
            sa2[sl] = np.maximum(sa2[sl], tiny)
    if learn_alpha:
        elv, _ = vk.beta_log_moments(tau)
        alpha = -k_max / elv.sum() if method == "infinite" else -k_max**2 / elv.sum()
    return sx2, sa2, alpha
