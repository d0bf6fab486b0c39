"""Prediction for new rows of a fitted IBP model (:func:`predict_rows`): rows drawn from the
model (features from the IBP's predictive given each posterior draw's feature counts, new
features included, then their data), or the features of observed new rows ("fold-in": each
row's features given the row and each posterior draw's ``A``, scales, offset and counts).  A
linear-Gaussian model has closed-form likelihood ratios; any other likelihood of one observed
``N x D`` matrix is evaluated by the model's own logp, compiled once for the new rows.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import ancestors

from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.kernels.prediction import (
    MAX_PATTERNS,
    FittedDraw,
    fold_in_rows,
    new_row_patterns,
    predictive_rows,
    row_log_predictive,
    subset_bits,
)
from pymc_ibp.matching.correlated import match_correlated
from pymc_ibp.matching.graph import observed_data, same_for_every_row
from pymc_ibp.matching.linear_gaussian import PATTERN, matched_models
from pymc_ibp.matching.priors import IBPPrior, match_prior

__all__ = ["log_predictive_rows", "predict_rows"]

#: log 0 as a finite number, so that 0 x log 0 is 0 in a matrix product
_LOG_ZERO = -1e300


def _spec(model, z):
    """The linear-Gaussian spec of the IBP ``z`` (or the model's one), ``None`` when the model
    is not linear-Gaussian or its ``Z`` is not a ``pmi.IBP`` (:class:`_NewRows` then takes it
    or says what it needs)."""
    specs = [s for s in matched_models(model) if z is None or s.z_rv.name == z]
    if len(specs) > 1:
        raise ModelPatternError(
            "pmi.predict_rows needs one pmi.IBP matrix with the linear-Gaussian pattern (pass "
            f"z='name' when the model has several); found {len(specs)}.")
    if not specs:
        return None
    spec = specs[0]
    if not isinstance(spec.prior, IBPPrior):  # e.g. the noisy-or's Z ~ Bernoulli(1 - q^(C M))
        return None
    if spec.sharded is not None:
        raise ModelPatternError("pmi.predict_rows reads the model's data on the driver; "
                                "sharded data are not supported.")
    for b in spec.blocks:
        if b.offset is not None and not same_for_every_row(b.offset):
            raise ModelPatternError(
                f"pmi.predict_rows: the offset of {b.obs_rv.name!r} differs between rows (one "
                "per row or per group of rows), which new rows do not have; only an offset the "
                "same for every row (b of shape (D,)) is supported.")
    return spec


class _NewRows:
    """The likelihood of new rows of any model with one observed ``N x D`` matrix below the
    ``pmi.IBP`` ``z`` (or the model's one): the model's element-wise logp with the fitted
    rows' ``Z`` and data replaced by new ones, compiled once (:meth:`loglik`), and the
    distribution's parameters for new rows (:meth:`draw`)."""

    def __init__(self, model, z, who="pmi.predict_rows"):
        self.who = who
        free = [rv for rv in model.free_RVs
                if (z is None or rv.name == z)
                and rv.ndim == 2 and isinstance(match_prior(model, rv), IBPPrior)]
        if z is None and len(free) > 1:  # an IBP-IBP's C and M: its M is the one
            correlated = [rv for rv in free if match_correlated(model, rv) is not None]
            free = correlated if len(correlated) == 1 else free
        if len(free) != 1:
            raise ModelPatternError(
                f"{who} needs one pmi.IBP matrix"
                + (f" named {z!r}" if z else " (pass z='name' when the model has several)")
                + f"; found {len(free)}.")
        self.z_rv = z_rv = free[0]
        #: the match of a correlated model's category-feature matrix (the DP-IBP's
        #: Z = M[c], the IBP-IBP's Z = 1[C M > 0], the noisy-or's Z ~ Bernoulli(1 - q^(C M))):
        #: the likelihood's Z is replaced
        self.categories = match_correlated(model, z_rv)
        children = ([self.categories.child] if self.categories is not None else
                    [c for c in model.observed_RVs if z_rv in set(ancestors([c]))])
        data = None
        if len(children) == 1:
            try:
                data = observed_data(model.rvs_to_values[children[0]])
            except ModelPatternError:
                data = None
        n, k_max = model.initial_point()[model.rvs_to_values[z_rv].name].shape
        if self.categories is not None:  # M is L_max x K_max; the rows are the labels'
            n = model.initial_point()[
                model.rvs_to_values[self.categories.labels].name].shape[0]
        if data is None or data.ndim != 2 or data.shape[0] != n:
            raise ModelPatternError(
                f"{who} needs the likelihood of {z_rv.name!r} to be one observed "
                f"N x D matrix (N = {n}, one row per row of {z_rv.name!r}, no missing entries "
                f"imputed by PyMC); found {[c.name for c in children]}. Needed pattern for "
                f"the closed form: {PATTERN}.")
        self.obs = obs = children[0]
        self.n, self.d = data.shape
        self.k_max = int(k_max)
        z_new = pt.matrix("z_new", dtype="int8")
        x_new = pt.matrix("x_new", dtype="float64")
        mask = pt.matrix("mask", dtype="bool")
        prior = match_prior(model, z_rv)
        kind = None if self.categories is None else self.categories.kind
        z_of_c, labels = None, None
        if kind is None:
            z_old = z_rv
            outs = [*obs.owner.inputs[2:], prior.alpha, prior.beta]
        elif kind == "dp_ibp":  # the labels' CRP concentration in place of the IBP's
            z_old = self.categories.z
            outs = [*obs.owner.inputs[2:], self.categories.labels.owner.inputs[2],
                    pt.constant(0.0)]
        else:  # IBP-IBP, noisy-or: the categories' IBP, and Z (or P(Z = 1)) from C and M
            z_old, labels = self.categories.z, self.categories.labels
            c_prior = match_prior(model, labels)
            outs = [*obs.owner.inputs[2:], c_prior.alpha, c_prior.beta]
            z_of_c = z_old if kind == "ibp_ibp" else z_old.owner.inputs[-1]
        reach = set(ancestors(outs, blockers=[z_old]))
        if z_of_c is not None:
            reach |= set(ancestors([z_of_c], blockers=[labels, z_rv]))
        self.used = [rv for rv in model.free_RVs
                     if rv not in (z_rv, labels, z_old) and rv in reach]
        # the graph rebuilt on stand-ins: the new rows' Z (its own shape, not the fitted
        # rows') and one input per free variable (each draw's value)
        ins = [rv.type() for rv in self.used]
        swap = {z_old: z_new.astype(z_old.dtype), **dict(zip(self.used, ins, strict=True))}
        *params, alpha, beta = clone_replace(outs, swap, rebuild_strict=False)
        # a variable of the parameters' shape (not the fitted rows' size) whose logp the new
        # rows' data get
        _, like = obs.owner.op(*params, rng=obs.owner.inputs[0], return_next_rng=True)
        rows = pt.switch(mask, pm.logp(like, x_new), 0.0).sum(axis=1)
        self._loglik = pm.compile([*ins, z_new, x_new, mask], rows, on_unused_input="ignore")
        self._hyper = pm.compile(ins, [alpha, beta], on_unused_input="ignore")
        self._params = pm.compile([*ins, z_new], params, on_unused_input="ignore")
        if z_of_c is not None:  # Z (IBP-IBP) or P(Z = 1) (noisy-or) of new rows' categories
            c_new = pt.matrix("c_new", dtype=labels.dtype)
            m_new = pt.matrix("m_new", dtype=z_rv.dtype)
            [z_c] = clone_replace([z_of_c], {labels: c_new, z_rv: m_new,
                                             **dict(zip(self.used, ins, strict=True))},
                                  rebuild_strict=False)
            self._z_of_c = pm.compile([*ins, m_new, c_new], z_c, on_unused_input="ignore")
        self.op = obs.owner.op
        self._checked = False  # whether loglik's shapes were checked

    def hyper(self, values):
        """``(alpha, beta)`` at one draw's ``values`` (of :attr:`used`)."""
        return tuple(float(v) for v in self._hyper(*values))

    def loglik(self, values, X, observed):
        """``loglik(Z)``: the log-likelihoods of the rows ``X`` (``R x D``, ``observed`` its
        entries that count) at features ``Z`` and one draw's ``values``; a
        :class:`~pymc_ibp.exceptions.ModelPatternError` when the likelihood has terms per
        fitted row besides ``Z`` (e.g. an offset per row), which new rows do not have."""
        X = np.where(observed, X, 0.0)
        if self._checked:
            return lambda Z: self._loglik(*values, Z, X, observed)
        self._checked = True
        probe = np.zeros((X.shape[0] + (X.shape[0] == self.n), self.k_max), dtype=np.int8)
        try:
            out = self._loglik(*values, probe, np.zeros((probe.shape[0], self.d)),
                               np.ones((probe.shape[0], self.d), dtype=bool))
            ok = np.shape(out) == (probe.shape[0],)
        except (ValueError, AssertionError):
            ok = False
        if not ok:
            raise ModelPatternError(
                f"{self.who}: the likelihood of {self.obs.name!r} has terms per fitted "
                f"row besides {self.z_rv.name!r} (e.g. an offset per row or per group of "
                "rows), which new rows do not have.")
        return lambda Z: self._loglik(*values, Z, X, observed)

    def row_log_predictive(self, values, X, fit):
        """``log p(x_r | draw)`` of each row of ``X`` (``R x D``, no missing entries) as a new
        row: the sum over its feature sets (:func:`pymc_ibp.kernels.prediction.new_row_patterns`,
        the draw's ``A`` for new features) of their prior times the rows' likelihood."""
        patterns, log_prior = new_row_patterns(fit)
        return self._mixture(values, X, patterns, log_prior)

    def category_log_predictive(self, values, X, M, c):
        """``log p(x_r | draw)`` of each row of ``X`` as a new row of a DP-IBP draw (labels
        ``c``, category-feature matrix ``M``): a category in use with probability
        ``n_j / (N + α_c)``, each of the ``L_max - K`` free labels with ``α_c / ((L_max - K)
        (N + α_c))`` (the ratio of the truncated CRP's pmfs; none when every label is in
        use), and the row's features ``M[label]`` (a free label's row of ``M`` is the draw's,
        a draw from its prior given the others)."""
        alpha = float(self._hyper(*values)[0])
        counts = np.bincount(np.asarray(c, dtype=np.int64), minlength=M.shape[0])
        free = int((counts == 0).sum())
        with np.errstate(divide="ignore"):
            log_w = np.where(counts > 0, np.log(counts),
                             math.log(alpha) - math.log(max(free, 1)))
        log_w -= math.log(counts.sum() + (alpha if free else 0.0))
        return self._mixture(values, X, np.asarray(M, dtype=np.int8), log_w)

    def categories_log_predictive(self, values, X, M, C):
        """``log p(x_r | draw)`` of each row of ``X`` as a new row of an IBP-IBP or noisy-or
        draw (category matrix ``C``, category-feature matrix ``M``): the sum over the new
        row's categories ``c`` (:func:`pymc_ibp.kernels.prediction.new_row_patterns` of
        ``C``'s IBP, new categories with the draw's rows of ``M``) of their prior times the
        likelihood of ``z = 1[c M > 0]``, or for the noisy-or of every ``z`` with
        ``P(z_k = 1 | c) = 1 - q^{(c M)_k}``; the weights of equal ``z`` are pooled."""
        from scipy.special import logsumexp

        alpha, beta = self.hyper(values)
        C = np.asarray(C)
        fit = FittedDraw(np.zeros((C.shape[1], 0)), np.zeros(0), C.sum(axis=0), self.n,
                         alpha, beta)
        cats, log_prior = new_row_patterns(fit)
        z = np.asarray(self._z_of_c(*values, np.asarray(M), cats.astype(C.dtype)), float)
        if self.categories.kind == "ibp_ibp":
            patterns, group = np.unique(z.astype(np.int8), axis=0, return_inverse=True)
        else:  # every z over the features some c can switch on, P(z | c) summed over c
            on = np.flatnonzero(z.max(axis=0) > 0)
            if 2**on.size > MAX_PATTERNS:
                raise DataError(
                    f"scoring held-out rows of a noisy-or IBP-IBP sums over 2^{on.size} "
                    f"feature sets of a new row (at most {MAX_PATTERNS}). Hold out entries "
                    "instead (pmi.compare_models(holdout='entries')).")
            bits = subset_bits(on.size).astype(np.int64)
            p = np.clip(z[:, on], 0.0, 1.0)
            with np.errstate(divide="ignore"):  # log 0 as a finite floor: 0 x floor is 0
                lp1, lp0 = (np.maximum(np.log(v), _LOG_ZERO) for v in (p, 1.0 - p))
            log_pz = bits @ lp1.T + (1 - bits) @ lp0.T  # (z patterns, category sets)
            patterns = np.zeros((bits.shape[0], z.shape[1]), dtype=np.int8)
            patterns[:, on] = bits
            log_w = logsumexp(log_pz + log_prior[None, :], axis=1)
            keep = log_w > _LOG_ZERO / 2  # a z no category set can give is dropped
            return self._mixture(values, X, patterns[keep], log_w[keep])
        log_w = np.full(patterns.shape[0], -np.inf)
        np.logaddexp.at(log_w, group.ravel(), log_prior)
        return self._mixture(values, X, patterns, log_w)

    def _mixture(self, values, X, patterns, log_w, chunk=2**18):
        """``log Σ_p w_p p(x_r | z = patterns[p], draw)`` for each row of ``X``: every row
        scored at every pattern, at most about ``chunk`` (row, pattern) pairs per call."""
        from scipy.special import logsumexp

        c = len(patterns)
        out = np.empty(X.shape[0])
        step = max(1, chunk // c)
        for at in range(0, X.shape[0], step):
            x = np.repeat(X[at:at + step], c, axis=0)
            ll = self.loglik(values, x, np.ones(x.shape, dtype=bool))(
                np.tile(patterns, (x.shape[0] // c, 1)))
            out[at:at + step] = logsumexp(np.reshape(ll, (-1, c)) + log_w, axis=1)
        return out

    def draw(self, rng, values, Z):
        """Data of the new rows with features ``Z`` at one draw's ``values``."""
        params = self._params(*values, Z)
        return np.asarray(self.op.rng_fn(rng, *params, None), dtype=np.float64)



def _draw_parameters(model, spec):
    """The names of the ``A`` blocks, the free variables the scales, ``alpha``, ``beta`` and
    the offset depend on, and a compiled function of their values giving
    ``(σx, σa, alpha, beta, b)`` (``b`` of length ``D``, zeros without an offset)."""
    sx, sa = spec.column_scales()
    off = pt.concatenate([pt.zeros(b.shape[1]) if b.offset is None
                          else pt.broadcast_to(b.offset, (1, b.shape[1])).reshape(
                              (b.shape[1],))
                          for b in spec.blocks])
    outs = [sx, sa, spec.prior.alpha, spec.prior.beta, off]
    used = [rv for rv in model.free_RVs if rv in set(ancestors(outs))]
    return ([b.a_rv.name for b in spec.blocks], used,
            pm.compile(used, outs, on_unused_input="ignore"))


def log_predictive_rows(idata, model=None, X_rows=None, *, z=None):
    """``log p(x_r | θ_s)``: the density of each observed row of ``X_rows`` as a new row of a
    fitted IBP model, at each posterior draw ``θ_s``, with the new row's features summed over
    exactly.  Its log mean over the draws, ``log mean_s p(x_r | θ_s)``, is the row's
    held-out log predictive density.

    The new row is row ``N + 1`` of the truncated IBP given the draw's ``Z``: each feature in
    use with probability ``m_k / (N + β)``, ``j ~ Poisson(αβ / (N + β))`` new ones in the free
    slots.  For a linear-Gaussian model (the pattern of :class:`pymc_ibp.AcceleratedGibbs`)
    the new features' ``A`` is integrated out and every ``j`` is summed
    (:func:`pymc_ibp.kernels.prediction.row_log_predictive`); under any other likelihood of
    one observed ``N x D`` matrix (Poisson, Bernoulli, Student-t, ...) the model's own logp
    is evaluated at every feature set, with the draw's ``A`` of the free slots for the new
    features and ``j`` up to where the prior's tail is below 1e-6
    (:func:`pymc_ibp.kernels.prediction.new_row_patterns`; at most 65,536 sets per draw).
    For a DP-IBP (``Z = M[c]``, :func:`pymc_ibp.dp_ibp`) the sum is over the new row's
    category: each label in use with probability ``n_j / (N + α_c)``, each free label with
    ``α_c / ((L_max - K)(N + α_c))`` and its row of the draw's ``M``, under any likelihood.
    For an IBP-IBP (``Z = 1[C M > 0]``, :func:`pymc_ibp.ibp_ibp`) the sum is over the new
    row's categories ``c``, a new row of ``C``'s IBP as above (new categories with the draw's
    rows of ``M``), with ``z = 1[c M > 0]``; for the noisy-or IBP-IBP
    (:func:`pymc_ibp.noisy_or_ibp_ibp`) also over every ``z``, ``P(z_k = 1 | c) =
    1 - q^{(c M)_k}``.

    Parameters
    ----------
    idata : xarray.DataTree
        The result of ``pm.sample`` for ``model``.
    model : pm.Model, optional
        A model with a ``pmi.IBP`` prior or a DP-IBP (default: the model in context).
    X_rows : array_like (R, D)
        The rows, without missing entries.
    z : str, optional
        The IBP variable, when the model has several.

    Returns
    -------
    ndarray (chain, draw, R)
    """
    model = pm.modelcontext(model)
    spec = _spec(model, z)
    generic = None
    if spec is None:
        try:
            generic = _NewRows(model, z, who="pmi.log_predictive_rows")
        except ModelPatternError as err:
            raise ModelPatternError(
                f"held-out rows are scored for models of one pmi.IBP matrix ({err}); hold out "
                "entries for other models (pmi.compare_models(holdout='entries')).") from None
        n, d = generic.n, generic.d
        used, z_rv = generic.used, generic.z_rv
        a_names = []
    else:
        n, d = spec.shape
        a_names, used, fn = _draw_parameters(model, spec)
        z_rv = spec.z_rv
    X_rows = np.asarray(X_rows, dtype=np.float64)
    if X_rows.ndim != 2 or X_rows.shape[1] != d or not np.all(np.isfinite(X_rows)):
        raise DataError(f"log_predictive_rows needs finite rows of {d} columns; got shape "
                        f"{X_rows.shape}.")
    post = idata["posterior"]
    z_name = model.rvs_to_values[z_rv].name
    missing = [name for name in [z_name, *a_names, *(rv.name for rv in used)]
               if name not in post]
    if missing:
        raise DataError(f"log_predictive_rows: the posterior has no draws of {missing}.")
    z_all = np.asarray(post[z_name].values)
    used_all = [np.asarray(post[rv.name].values) for rv in used]
    chains, draws = z_all.shape[:2]
    out = np.empty((chains, draws, X_rows.shape[0]))
    if generic is not None and generic.categories is not None:
        labels = model.rvs_to_values[generic.categories.labels].name
        if labels not in post:
            raise DataError(f"log_predictive_rows: the posterior has no draws of {labels!r}.")
        c_all = np.asarray(post[labels].values)
        score = (generic.category_log_predictive if generic.categories.kind == "dp_ibp"
                 else generic.categories_log_predictive)
        for c in range(chains):
            for t in range(draws):
                out[c, t] = score([v[c, t] for v in used_all], X_rows, z_all[c, t],
                                  c_all[c, t])
        return out
    if generic is not None:
        for c in range(chains):
            for t in range(draws):
                values = [v[c, t] for v in used_all]
                alpha, beta = generic.hyper(values)
                fit = FittedDraw(np.zeros((generic.k_max, 0)), np.zeros(0),
                                 z_all[c, t].sum(axis=0), n, alpha, beta)
                out[c, t] = generic.row_log_predictive(values, X_rows, fit)
        return out
    a_all = np.concatenate([np.asarray(post[a].values, dtype=np.float64) for a in a_names],
                           axis=-1)
    for c in range(chains):
        for t in range(draws):
            sx, sa, alpha, beta, b = fn(*[v[c, t] for v in used_all])
            fit = FittedDraw(a_all[c, t], np.asarray(b, dtype=float), z_all[c, t].sum(axis=0),
                             n, float(alpha), float(beta))
            out[c, t] = row_log_predictive(X_rows, fit, np.asarray(sx, float) ** 2,
                                           np.asarray(sa, float) ** 2)
    return out


def predict_rows(idata, model=None, *, X_new=None, n_new=None, z=None, sweeps=20,
                 random_seed=None):
    """New rows of a fitted IBP model, one set per posterior draw.

    Either ``X_new`` (``R x D``, NaN for a missing entry): the features ``Z_new`` of these
    observed rows, each drawn given the row and the draw's ``A``, scales, offset and feature
    counts (``sweeps`` Gibbs scans of its entries from their exact conditionals, each row as
    row ``N + 1`` of the IBP: features of the fitted rows with probability ``m_k / (N + β)``,
    new ones in the draw's free slots, whose ``A`` is the draw's); or ``n_new``: rows drawn
    from the model, ``Z_new`` from the IBP's predictive (one row after the other, new features
    included) and their data from the likelihood (``Normal(Z_new A + b, σx)`` for the
    linear-Gaussian model).  A linear-Gaussian model (the pattern of
    :class:`pymc_ibp.AcceleratedGibbs`) has closed-form likelihood ratios; any other
    likelihood of one observed ``N x D`` matrix below ``Z`` (Poisson, Bernoulli, Student-t,
    ...) is the model's own logp, compiled once for the new rows (two evaluations per column
    and scan of a draw), whose terms must depend on the rows only through ``Z``.

    Parameters
    ----------
    idata : xarray.DataTree
        The result of ``pm.sample`` (its ``posterior`` group holds ``Z``, ``A`` and the free
        hyperparameters).
    model : pm.Model, optional
        The model (default: the model in context).
    X_new : array_like, optional
        Observed new rows (fold-in).
    n_new : int, optional
        How many rows to draw from the model.
    z : str, optional
        The IBP variable, when the model has several.
    sweeps : int, default 20
        Gibbs scans of each new row per draw (fold-in).
    random_seed : int or Generator, optional
        Seeds the draws.

    Returns
    -------
    xarray.DataTree
        A ``predictions`` node with ``{z}_new`` (``chain, draw, row, feature``; int8) and,
        with ``n_new``, ``X_new`` (``chain, draw, row, column``): add it to the result with
        ``idata["predictions"] = ...``.
    """
    model = pm.modelcontext(model)
    if (X_new is None) == (n_new is None):
        raise ValueError("pmi.predict_rows needs X_new (features of observed rows) or n_new "
                         "(rows drawn from the model), not both.")
    spec = _spec(model, z)
    generic = _NewRows(model, z) if spec is None else None
    if generic is not None and generic.categories is not None:
        raise ModelPatternError(
            "pmi.predict_rows does not draw new rows of a DP-IBP, IBP-IBP or noisy-or IBP-IBP "
            "(Z built from categories) yet; pmi.log_predictive_rows scores them.")
    post = idata["posterior"]
    z_rv = spec.z_rv if generic is None else generic.z_rv
    z_name = model.rvs_to_values[z_rv].name
    if generic is None:
        n, d = spec.shape
        k_max = spec.k_max
        a_names, used, fn = _draw_parameters(model, spec)
    else:
        n, d, k_max = generic.n, generic.d, generic.k_max
        used = generic.used
    missing = [rv.name for rv in [z_rv, *used] if rv.name not in post]
    if missing:
        raise DataError(f"pmi.predict_rows: the posterior has no draws of {missing}.")
    rng = np.random.default_rng(random_seed)
    if X_new is not None:
        X_new = np.asarray(X_new, dtype=np.float64)
        if X_new.ndim != 2 or X_new.shape[1] != d:
            raise DataError(f"pmi.predict_rows: X_new must be R x {d} (the columns of the "
                            f"fitted data); got shape {X_new.shape}.")
        if np.any(np.isinf(X_new)):
            raise DataError("pmi.predict_rows: X_new contains inf.")
        rows = X_new.shape[0]
        observed = ~np.isnan(X_new)
    else:
        rows = int(n_new)
        if rows < 1:
            raise ValueError(f"n_new must be >= 1; got {n_new!r}.")
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    Z_out = np.zeros((chains, draws, rows, k_max), dtype=np.int8)
    X_out = np.zeros((chains, draws, rows, d)) if n_new is not None else None
    # the draws as arrays once (not an xarray selection per draw)
    z_all = np.asarray(post[z_name].values)
    used_all = [np.asarray(post[rv.name].values) for rv in used]
    if generic is None:
        a_all = np.concatenate([np.asarray(post[a].values, dtype=np.float64) for a in a_names],
                               axis=-1)
    for c in range(chains):
        for t in range(draws):
            Z = z_all[c, t]
            m = Z.sum(axis=0)
            values = [v[c, t] for v in used_all]
            if generic is not None:
                alpha, beta = generic.hyper(values)
                if X_new is not None:
                    fit = FittedDraw(np.zeros((k_max, 0)), np.zeros(0), m, n, alpha, beta)
                    Z_out[c, t] = fold_in_rows(rng, X_new, None, fit, int(sweeps),
                                               loglik=generic.loglik(values, X_new, observed))
                else:
                    Z_out[c, t] = predictive_rows(rng, m, n, alpha, beta, rows)
                    X_out[c, t] = generic.draw(rng, values, Z_out[c, t])
                continue
            A = a_all[c, t]
            sx_v, _, alpha, beta, b = fn(*values)
            sx_v = np.broadcast_to(np.asarray(sx_v, dtype=np.float64), (d,))
            alpha, beta = float(alpha), float(beta)
            if X_new is not None:
                W = np.where(observed, 1.0 / sx_v**2, 0.0)
                fit = FittedDraw(A, np.asarray(b, dtype=float), m, n, alpha, beta)
                Z_out[c, t] = fold_in_rows(rng, X_new, W, fit, int(sweeps))
            else:
                Zn = predictive_rows(rng, m, n, alpha, beta, rows)
                Z_out[c, t] = Zn
                X_out[c, t] = (Zn @ A + np.asarray(b, dtype=float)
                               + sx_v * rng.standard_normal((rows, d)))
    dims = model.named_vars_to_dims.get(z_rv.name) or ()
    feature = dims[1] if len(dims) == 2 else f"{z_rv.name}_feature"
    coords = {dim: (post.coords[dim].values if dim in post.coords else np.arange(size))
              for dim, size in (("chain", chains), ("draw", draws))}
    coords.update({"row": np.arange(rows), feature: np.arange(k_max)})
    data = {f"{z_rv.name}_new": (("chain", "draw", "row", feature), Z_out)}
    if X_out is not None:
        coords["column"] = np.arange(d)
        data["X_new"] = (("chain", "draw", "row", "column"), X_out)
    return xr.DataTree(xr.Dataset(data, coords=coords))
