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

    def row_options(self, values, M, labels):
        """The new row's choices at one draw of a correlated model (the categories ``labels``
        of the rows so far, ``c`` or ``C``, and the category-feature matrix ``M``):
        ``(patterns, cats, p, q, log_w)``, the possible ``z`` (``P x K``), the new row's
        labels (``cats``: the DP-IBP's label indices, the IBP-IBP's rows of ``C``), and each
        possible pair ``(patterns[p[t]], cats[q[t]])`` with its log prior ``log p(c) +
        log P(z | c)``.

        DP-IBP: a label in use with probability ``n_j / (N + α_c)``, each of the ``L_max - K``
        free labels with ``α_c / ((L_max - K)(N + α_c))`` (the ratio of the truncated CRP's
        pmfs; none when every label is in use), ``z = M[label]`` (a free label's row of ``M``
        is the draw's, a draw from its prior given the others).  IBP-IBP and noisy-or: the
        new row's categories ``c`` from ``C``'s IBP
        (:func:`pymc_ibp.kernels.prediction.new_row_patterns`, new categories with the draw's
        rows of ``M``) and ``z = 1[c M > 0]``, or for the noisy-or every ``z`` with
        ``P(z_k = 1 | c) = 1 - q^{(c M)_k}``."""
        M = np.asarray(M, dtype=np.int8)
        if self.categories.kind == "dp_ibp":
            alpha = float(self._hyper(*values)[0])
            counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=M.shape[0])
            free = int((counts == 0).sum())
            with np.errstate(divide="ignore"):
                log_w = np.where(counts > 0, np.log(counts),
                                 math.log(alpha) - math.log(max(free, 1)))
            log_w -= math.log(counts.sum() + (alpha if free else 0.0))
            idx = np.arange(M.shape[0])
            return M, idx, idx, idx, log_w
        alpha, beta = self.hyper(values)
        C = np.asarray(labels)
        fit = FittedDraw(np.zeros((C.shape[1], 0)), np.zeros(0), C.sum(axis=0), C.shape[0],
                         alpha, beta)
        cats, log_prior = new_row_patterns(fit)
        cats = cats.astype(C.dtype)
        z = np.asarray(self._z_of_c(*values, M, cats), float)
        if self.categories.kind == "ibp_ibp":
            patterns, group = np.unique(z.astype(np.int8), axis=0, return_inverse=True)
            return patterns, cats, group.ravel(), np.arange(len(cats)), log_prior
        # noisy-or: every z over the features some c can switch on
        on = np.flatnonzero(z.max(axis=0) > 0)
        if 2**on.size > MAX_PATTERNS:
            raise DataError(
                f"a new row of a noisy-or IBP-IBP has 2^{on.size} possible feature sets (at "
                f"most {MAX_PATTERNS} are summed over). Hold out entries instead "
                "(pmi.compare_models(holdout='entries')).")
        bits = subset_bits(on.size).astype(np.int64)
        pr = np.clip(z[:, on], 0.0, 1.0)
        with np.errstate(divide="ignore"):  # log 0 as a finite floor: 0 x floor is 0
            lp1, lp0 = (np.maximum(np.log(v), _LOG_ZERO) for v in (pr, 1.0 - pr))
        log_pz = bits @ lp1.T + (1 - bits) @ lp0.T  # (z patterns, category sets)
        patterns = np.zeros((bits.shape[0], z.shape[1]), dtype=np.int8)
        patterns[:, on] = bits
        p, q = np.nonzero(log_pz > _LOG_ZERO / 2)  # the pairs a category set can give
        return patterns, cats, p, q, log_pz[p, q] + log_prior[q]

    def labels_log_predictive(self, values, X, M, labels):
        """``log p(x_r | draw)`` of each row of ``X`` as a new row of a correlated model's
        draw: the sum over the new row's choices (:meth:`row_options`) of their prior times
        the rows' likelihood at ``z``; the weights of equal ``z`` are pooled."""
        patterns, _, p, _, lw = self.row_options(values, M, labels)
        log_w = np.full(len(patterns), -np.inf)
        np.logaddexp.at(log_w, p, lw)
        keep = np.isfinite(log_w)
        return self._mixture(values, X, patterns[keep], log_w[keep])

    def fold_in_labels(self, rng, values, X, observed, M, labels):
        """``(z, label)`` of each observed new row of ``X`` (``R x D``, ``observed`` its
        entries that count) drawn from its exact conditional at one draw of a correlated
        model, each row as row ``N + 1`` (:meth:`row_options` times the row's likelihood)."""
        patterns, cats, p, q, lw = self.row_options(values, M, labels)
        ll = self.pattern_loglik(values, X, observed, patterns)
        score = ll[:, p] + lw + rng.gumbel(size=(X.shape[0], len(lw)))
        pick = np.argmax(score, axis=1)  # Gumbel-max: a draw from the normalised weights
        return patterns[p[pick]], cats[q[pick]]

    def draw_labels(self, rng, values, M, labels, rows, attempts=1000):
        """``(Z, labels)`` of ``rows`` new rows drawn from the model's predictive at one
        draw: one after the other from the untruncated prior's predictive (each row sees the
        categories of the rows before it), the set kept when every new category found a free
        slot (the truncated prior is the untruncated one given that, as in
        :func:`pymc_ibp.kernels.prediction.predictive_rows`).  Raises
        :class:`~pymc_ibp.exceptions.DataError` when ``attempts`` sets in a row needed more
        slots."""
        fitted = labels
        for _ in range(attempts):
            labels, Z, new = fitted, np.zeros((rows, M.shape[1]), dtype=np.int8), []
            for r in range(rows):
                if rng.random() < self._overflow(values, M, labels):
                    break
                patterns, cats, p, q, lw = self.row_options(values, M, labels)
                t = int(np.argmax(lw + rng.gumbel(size=len(lw))))
                Z[r] = patterns[p[t]]
                new.append(cats[q[t]])
                labels = (np.append(labels, cats[q[t]]) if np.ndim(labels) == 1
                          else np.vstack([labels, cats[q[t]][None]]))
            else:
                return Z, np.asarray(new)
        raise DataError(
            f"{self.who}: {attempts} sets of {rows} new rows in a row needed more category "
            f"slots than {self.categories.labels.name!r} has; raise l_max or draw fewer rows.")

    def _overflow(self, values, M, labels):
        """The probability that a new row after ``labels`` opens more categories than the
        free slots of ``M``'s rows, under the untruncated prior (CRP or IBP)."""
        from scipy.stats import poisson

        if self.categories.kind == "dp_ibp":
            alpha = float(self._hyper(*values)[0])
            counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=M.shape[0])
            return 0.0 if (counts == 0).any() else alpha / (counts.sum() + alpha)
        alpha, beta = self.hyper(values)
        C = np.asarray(labels)
        free = int((C.sum(axis=0) == 0).sum())
        return float(poisson.sf(free, alpha * beta / (C.shape[0] + beta)))

    def pattern_loglik(self, values, X, observed, patterns, chunk=2**18):
        """The log-likelihoods (``R x P``) of each row of ``X`` at each of ``patterns``, at
        most about ``chunk`` (row, pattern) pairs per call."""
        c = len(patterns)
        out = np.empty((X.shape[0], c))
        step = max(1, chunk // c)
        for at in range(0, X.shape[0], step):
            x = np.repeat(X[at:at + step], c, axis=0)
            seen = np.repeat(observed[at:at + step], c, axis=0)
            ll = self.loglik(values, x, seen)(np.tile(patterns, (x.shape[0] // c, 1)))
            out[at:at + step] = np.reshape(ll, (-1, c))
        return out

    def _mixture(self, values, X, patterns, log_w):
        """``log Σ_p w_p p(x_r | z = patterns[p], draw)`` for each row of ``X``."""
        from scipy.special import logsumexp

        ll = self.pattern_loglik(values, X, np.ones(X.shape, dtype=bool), patterns)
        return logsumexp(ll + log_w, axis=1)

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
        for c in range(chains):
            for t in range(draws):
                out[c, t] = generic.labels_log_predictive([v[c, t] for v in used_all], X_rows,
                                                          z_all[c, t], c_all[c, t])
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

    For a DP-IBP, IBP-IBP or noisy-or IBP-IBP (``Z`` built from categories) a new row's
    category (``c``) or categories (a row of ``C``) and its ``Z`` are drawn together from the
    enumerated choices of a new row (those :func:`log_predictive_rows` sums over), times the
    row's likelihood for ``X_new``, exactly at each draw; rows from the model are drawn one
    after the other, each seeing the categories of the rows before it.  The result then
    also holds the new rows' labels (``{c}_new`` or ``{C}_new``), and ``Z_new`` is named
    after the model's ``Z``.

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
        A ``predictions`` node with ``{z}_new`` (``chain, draw, row, feature``; int8), for a
        correlated model the new rows' labels ``{c}_new`` (``chain, draw, row``) or
        ``{C}_new`` (``chain, draw, row, category``), and, with ``n_new``, ``X_new``
        (``chain, draw, row, column``): add it to the result with
        ``idata["predictions"] = ...``.
    """
    model = pm.modelcontext(model)
    if (X_new is None) == (n_new is None):
        raise ValueError("pmi.predict_rows needs X_new (features of observed rows) or n_new "
                         "(rows drawn from the model), not both.")
    spec = _spec(model, z)
    generic = _NewRows(model, z) if spec is None else None
    if generic is not None and generic.categories is not None:
        return _predict_labelled_rows(idata, model, generic, X_new, n_new, random_seed)
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
    X_new, rows, observed = _new_rows_request(X_new, n_new, d)
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
    return _predictions(model, post, z_rv.name, Z_out, X_out)


def _new_rows_request(X_new, n_new, d):
    """``(X_new, rows, observed)`` of a request for observed rows ``X_new`` (``R x d``, NaN
    for a missing entry) or ``n_new`` rows from the model, checked."""
    if X_new is None:
        rows = int(n_new)
        if rows < 1:
            raise ValueError(f"n_new must be >= 1; got {n_new!r}.")
        return None, rows, None
    X_new = np.asarray(X_new, dtype=np.float64)
    if X_new.ndim != 2 or X_new.shape[1] != d:
        raise DataError(f"pmi.predict_rows: X_new must be R x {d} (the columns of the "
                        f"fitted data); got shape {X_new.shape}.")
    if np.any(np.isinf(X_new)):
        raise DataError("pmi.predict_rows: X_new contains inf.")
    return X_new, X_new.shape[0], ~np.isnan(X_new)


def _predictions(model, post, z, Z_out, X_out, labels=None, labels_out=None):
    """The ``predictions`` node: ``{z}_new`` (``chain, draw, row, feature``; ``z`` a name),
    the new rows' labels ``{labels}_new`` of a correlated model, and ``X_new`` when drawn."""
    chains, draws, rows, k_max = Z_out.shape
    dims = model.named_vars_to_dims.get(z) or ()
    feature = dims[1] if len(dims) == 2 else f"{z}_feature"
    coords = {dim: (post.coords[dim].values if dim in post.coords else np.arange(size))
              for dim, size in (("chain", chains), ("draw", draws))}
    coords.update({"row": np.arange(rows), feature: np.arange(k_max)})
    data = {f"{z}_new": (("chain", "draw", "row", feature), Z_out)}
    if labels is not None:
        dims = ("chain", "draw", "row")
        if labels_out.ndim == 4:
            ldims = model.named_vars_to_dims.get(labels.name) or ()
            cat = ldims[1] if len(ldims) == 2 else f"{labels.name}_category"
            coords[cat] = np.arange(labels_out.shape[3])
            dims = (*dims, cat)
        data[f"{labels.name}_new"] = (dims, labels_out)
    if X_out is not None:
        coords["column"] = np.arange(X_out.shape[3])
        data["X_new"] = (("chain", "draw", "row", "column"), X_out)
    return xr.DataTree(xr.Dataset(data, coords=coords))


def _predict_labelled_rows(idata, model, generic, X_new, n_new, random_seed):
    """:func:`predict_rows` of a DP-IBP, IBP-IBP or noisy-or IBP-IBP: the new rows' ``Z``
    and categories, drawn exactly at each draw from the enumerated choices of a new row
    (:meth:`_NewRows.row_options`)."""
    post = idata["posterior"]
    m_name = model.rvs_to_values[generic.z_rv].name
    l_rv = generic.categories.labels
    names = [m_name, model.rvs_to_values[l_rv].name, *(rv.name for rv in generic.used)]
    missing = [name for name in names if name not in post]
    if missing:
        raise DataError(f"pmi.predict_rows: the posterior has no draws of {missing}.")
    rng = np.random.default_rng(random_seed)
    X_new, rows, observed = _new_rows_request(X_new, n_new, generic.d)
    m_all, l_all, *used_all = (np.asarray(post[name].values) for name in names)
    chains, draws = m_all.shape[:2]
    Z_out = np.zeros((chains, draws, rows, generic.k_max), dtype=np.int8)
    L_out = np.zeros((chains, draws, rows, *l_all.shape[3:]), dtype=l_all.dtype)
    X_out = np.zeros((chains, draws, rows, generic.d)) if X_new is None else None
    for c in range(chains):
        for t in range(draws):
            values = [v[c, t] for v in used_all]
            if X_new is not None:
                Z_out[c, t], L_out[c, t] = generic.fold_in_labels(
                    rng, values, np.where(observed, X_new, 0.0), observed, m_all[c, t],
                    l_all[c, t])
            else:
                Z_out[c, t], L_out[c, t] = generic.draw_labels(rng, values, m_all[c, t],
                                                               l_all[c, t], rows)
                X_out[c, t] = generic.draw(rng, values, Z_out[c, t])
    z_name = generic.categories.z.name or "Z"
    return _predictions(model, post, z_name, Z_out, X_out, l_rv, L_out)
