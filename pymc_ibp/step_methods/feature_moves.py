r"""Moves that change a feature together with its parameters, for :class:`pymc_ibp.IBPGibbs`:
birth / death (below) and split / merge (:meth:`FeatureParameterMoves.split_merge`).

The single-entry updates of :class:`pymc_ibp.IBPGibbs` create a feature in an empty slot with
whatever parameters that slot currently holds: under the posterior those are a draw from
their prior (no row uses them), which almost never fits a row in more than a few dimensions.
So an uncollapsed chain rarely creates a feature it needs, and its split–merge and
dissolve / compose moves only rearrange the features it has.

This move proposes a new feature *and its parameters* from the data.  With ``A`` the
parameter matrix whose row ``A_k`` belongs to slot ``k`` (found in the model: a free
continuous variable with ``K_max`` rows whose row ``k`` reaches the likelihood only through
column ``k`` of ``Z``, and whose prior factorises over the rows):

*Birth* (probability ½): an empty slot ``k`` and an anchor row ``a``, uniformly; a feature
fitted to the anchor alone (the Laplace mean below) gives every other row ``i`` its
log-likelihood gain ``Δ_i``, and ``i`` joins the new feature independently with probability
``π_i = σ(Δ_i - log N)`` (at most ``max_rows`` rows in all, else a null move; ``max_rows = 1``
gives single-row features).  Then ``z_ik = 1`` on that set ``S`` and
``A_k' \sim q_1 = \mathcal N(\hat a, \mathrm{diag}(1/\hat\pi))``, a Laplace approximation of
:math:`p(A_k \mid x_S, \cdot) \propto p(A_k)\,\prod_{i\in S} p(x_i \mid z_i + e_k, A)` in the
value space of ``A`` (damped Newton steps from 0 with the diagonal of the Hessian, from
PyTensor's gradients of the model's own row likelihood and of ``A``'s prior; any
likelihood).  *Death* (the reverse): a feature with at most ``max_rows`` rows (``F`` of
them), uniformly, and an anchor among its rows, uniformly; the feature is switched off and
its parameters are redrawn from ``q_0``, the same Laplace approximation with no row, i.e. of
``A_k``'s prior (exact for a Normal prior).  The birth ``(Z, A_k) \to (Z', A_k')`` is
accepted with

.. math:: \min\Big\{1, \frac{P(Z')}{P(Z)}\,
    \frac{p(X\mid Z', A')\,p(A_k')}{p(X\mid Z, A)\,p(A_k)}\,
    \frac{E\,N\,q_0(A_k)}{F'\,|S|\,P(S\mid a)\,q_1(A_k')}\Big\}

(``P`` the truncated IBP pmf, ``E`` the empty slots before the birth, ``F'`` the features
with at most ``max_rows`` rows after it, ``P(S | a) = \prod_{i \ne a}`` of ``π_i`` or
``1 - π_i``), a death with the reciprocal.  The anchor is part of the proposal in both
directions, so each (birth, death) pair with the same anchor is balanced on its own.  Every
proposal depends only on what the move leaves unchanged, so this is a reversible
Metropolis–Hastings move on ``(Z, A)`` given everything else (Green 1995), exact whatever
the quality of the Laplace approximation; a good approximation only makes it accepted more
often.

The split / merge move uses the same Laplace approximations: a feature is split in two, two of
its rows seeding the two new features and its other rows allocated by their likelihood under
the seeds, with both rows of ``A`` drawn given their new rows; or two features are merged,
the union's parameters drawn given all its rows and the emptied slot's from ``q_0``.

References
----------
P. J. Green (1995). Reversible jump Markov chain Monte Carlo computation and Bayesian model
determination. *Biometrika* 82(4), 711-732.

S. Jain and R. M. Neal (2004). A split-merge Markov chain Monte Carlo procedure for the
Dirichlet process mixture model. *Journal of Computational and Graphical Statistics* 13(1),
158-182.

E. Meeds, Z. Ghahramani, R. M. Neal and S. T. Roweis (2007). Modeling dyadic data with binary
latent factors. *NIPS 19*, 977-984 (Metropolis–Hastings moves on a feature and its
parameters).
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.traversal import ancestors
from scipy import optimize, special

from pymc_ibp._numba_utils import ordered_pair as _ordered_pair
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.rows import perturbed_point
from pymc_ibp.step_methods.feature_folds import FoldMove
from pymc_ibp.step_methods.feature_triples import PairTripleMove

__all__ = ["FeatureParameterMoves"]

_DIRECTION = "__ibp_feature_direction"
_NEWTON_STEPS = 4
_MAX_STEP = 4.0  # largest Newton step, in prior standard deviations of the current curvature
_MIN_PRECISION = 1e-8


def ordered_pair(rng, n):
    """Two distinct indices below ``n`` (:func:`pymc_ibp._numba_utils.ordered_pair`, in Python)."""
    return _ordered_pair.py_func(rng, n)


def _rows_sum(term):
    return term.sum(axis=tuple(range(1, term.ndim))) if term.ndim > 1 else term


class FeatureParameterMoves:
    """The parameter matrix ``A`` of the features of ``Z`` and the compiled pieces of the
    moves that change a feature together with its parameters: birth / death
    (:meth:`birth_death`) and split / merge (:meth:`split_merge`).  Build with :meth:`find`."""

    def __init__(self, moves, model, a_rv, compile_kwargs, max_rows=1):
        self.moves = moves
        self.rows = moves.rows
        self.folds = FoldMove(self)
        self.triples = PairTripleMove(self)
        self.max_rows = int(max_rows)
        self.a_rv = a_rv
        self.a_name = model.rvs_to_values[a_rv].name
        a_val = model.rvs_to_values[a_rv]
        [prior] = model.logp(vars=[a_rv], sum=False)
        prior_rows = _rows_sum(prior)
        direction = pt.tensor(_DIRECTION, shape=(None,) * a_val.ndim, dtype=a_val.dtype)
        total = self.rows.graph.sum() + prior_rows.sum()
        grad = pt.grad(total, a_val)
        hess_dir = pt.grad((grad * direction).sum(), a_val)
        self._grad = compile_point_fn(model, [grad, hess_dir], extra_inputs=[direction],
                                      compile_kwargs=compile_kwargs)
        self._prior = compile_point_fn(model, prior_rows, compile_kwargs=compile_kwargs)
        self._q0 = {}  # slot -> the prior's Laplace approximation, within one sweep

    def new_sweep(self):
        """Forget the cached prior approximations (the hyperparameters may have changed)."""
        self._q0 = {}

    def prior_laplace(self, trial, Z, k):
        """``q_0`` of slot ``k``: the Laplace approximation with column ``k`` of ``Z`` empty,
        where the likelihood does not reach ``A_k``; it depends only on ``A``'s prior, so it
        is computed once per sweep."""
        if k not in self._q0:
            self._q0[k] = self.laplace(trial, Z, k)
        return self._q0[k]

    @classmethod
    def find(cls, moves, model, z_rv, ip, compile_kwargs, required,
             max_rows=1):
        """The move for ``step`` (an :class:`pymc_ibp.IBPGibbs` of ``z_rv``), or ``None`` when
        no variable is a per-slot parameter matrix of ``Z`` (``required``: raise instead)."""
        k_max = moves.k_max
        child_set = set(moves.rows.children)
        z_anc = set(ancestors([z_rv]))
        found, why = [], []
        for rv in model.free_RVs:
            if rv is z_rv or rv in z_anc or not rv.dtype.startswith("float"):
                continue
            value = ip[model.rvs_to_values[rv].name]
            if value.ndim < 1 or value.shape[0] != k_max:
                continue
            deps = [r for r in model.basic_RVs if r is not rv and rv in set(ancestors([r]))]
            if not deps or not set(deps) <= child_set:
                why.append(f"{rv.name!r} has dependents {[d.name for d in deps]} that are not "
                           f"all likelihood terms of {z_rv.name!r}")
                continue
            try:
                move = cls(moves, model, rv, compile_kwargs, max_rows)
                move._check(ip)
            except (ModelPatternError, NotImplementedError, TypeError, ValueError) as err:
                why.append(str(err))
                continue
            found.append(move)
        if len(found) == 1:
            return found[0]
        if required:
            reason = ("several candidates: " + ", ".join(m.a_name for m in found)) if found \
                else ("; ".join(why) or "no free continuous variable with K_max rows")
            raise ModelPatternError(
                f"IBPGibbs(feature_params=True) needs one parameter matrix A of {z_rv.name!r}: a "
                f"free continuous variable with K_max = {k_max} rows whose row k reaches the "
                f"likelihood only through column k of {z_rv.name!r} (e.g. mu = Z @ A) and whose "
                f"prior factorises over its rows ({reason}).")
        return None

    def _check(self, point):
        """Raise unless row ``k`` of ``A`` reaches the likelihood only through column ``k``
        of ``Z`` and the prior of ``A`` factorises over its rows (checked on slot 0)."""
        step = self.moves
        point = perturbed_point(point, seed=5)
        a = np.array(point[self.a_name], dtype=float, copy=True)
        bumped = a.copy()
        bumped[0] += 0.37 + 0.11 * np.arange(a[0].size).reshape(a[0].shape)
        Z = np.ones_like(point[step.z_name])
        Z[:, 0] = 0
        off = self.rows.at({**point, self.a_name: a}, Z.copy())
        off2 = self.rows.at({**point, self.a_name: bumped}, Z.copy())
        Z[:, 0] = 1
        on = self.rows.at({**point, self.a_name: a}, Z.copy())
        on2 = self.rows.at({**point, self.a_name: bumped}, Z.copy())
        if not np.allclose(off, off2, rtol=1e-9, atol=1e-9) or np.allclose(on, on2):
            raise ModelPatternError(
                f"row 0 of {self.a_name!r} does not reach the likelihood through column 0 of "
                f"{step.z_name!r} alone")
        p, p2 = (np.asarray(self._prior({**point, self.a_name: v})) for v in (a, bumped))
        if p.shape != (step.k_max,) or not np.allclose(p[1:], p2[1:], rtol=1e-9, atol=1e-9):
            raise ModelPatternError(f"the prior of {self.a_name!r} does not factorise over "
                                    "its rows")

    # ---- the Laplace approximation ------------------------------------------------------
    def laplace(self, trial, Z, k):
        """Mean and precision (value space, the shape of ``A_k``) of the Gaussian
        approximation of ``p(A_k | rows owning k, ·)``: damped Newton steps from 0 with the
        diagonal of the Hessian (the Hessian applied to the indicator of row ``k``, exact
        when each entry of ``A_k`` reaches its own data)."""
        step = self.moves
        a_all = np.array(trial[self.a_name], dtype=float, copy=True)
        direction = np.zeros_like(a_all)
        direction[k] = 1.0
        t = {**trial, step.z_name: Z, self.a_name: a_all, _DIRECTION: direction}
        a = np.zeros_like(a_all[k])
        prec = None
        for it in range(_NEWTON_STEPS + 1):
            a_all[k] = a
            g, h = self._grad(t)
            g, prec = np.asarray(g)[k], np.maximum(-np.asarray(h)[k], _MIN_PRECISION)
            if not (np.all(np.isfinite(g)) and np.all(np.isfinite(prec))):
                raise FloatingPointError(f"non-finite gradient of the log-posterior of "
                                         f"{self.a_name}[{k}]")
            if it == _NEWTON_STEPS:
                break
            sd = 1.0 / np.sqrt(prec)
            a = a + np.clip(g / prec, -_MAX_STEP * sd, _MAX_STEP * sd)
        return a, prec

    def start_rows(self, point, surrogate_features=None):
        """``point`` with the rows of ``A`` of the active features of its ``Z`` at their
        Laplace means (two passes over the columns) or, where those fit the rows better (a
        higher log-likelihood), at ``surrogate_features`` (``K_max x D``; a start search's)."""
        Z = point[self.moves.z_name]
        a_name = self.a_name
        trial = dict(point)
        active = np.flatnonzero(Z.sum(axis=0))
        for _ in range(2):
            for k in active:
                try:
                    mean, _ = self.laplace(trial, Z, int(k))
                except FloatingPointError:
                    continue
                trial = self.with_rows(trial, {int(k): mean})
        new = dict(point)
        new[a_name] = np.asarray(trial[a_name], dtype=point[a_name].dtype)
        if (surrogate_features is not None
                and surrogate_features.shape == np.shape(point[a_name])):
            other = self.with_rows(dict(new), {int(k): surrogate_features[k] for k in active})
            if np.sum(self.rows(other)) > np.sum(self.rows(new)):
                new[a_name] = np.asarray(other[a_name], dtype=point[a_name].dtype)
        return new

    def joint_mode(self, trial, Z, maxiter=200):
        """``A`` with its rows of the active features of ``Z`` at the mode of
        ``log p(X | Z, A) + log p(A)`` (the other rows as in ``trial``): L-BFGS (at most
        ``maxiter`` iterations) from ``trial[A]`` with PyTensor's gradients, for any
        likelihood (a local mode where it is not log-concave, e.g. Student-t).  ``trial[A]``
        itself when the search does not improve on it."""
        step = self.moves
        a0 = np.array(trial[self.a_name], dtype=np.float64, copy=True)
        active = np.flatnonzero(np.asarray(Z).sum(axis=0))
        shape = a0[active].shape
        # the gradient function also gives a Hessian product, not used here
        base = {**trial, step.z_name: Z, _DIRECTION: np.zeros_like(a0)}

        def neg_log_post(x):
            a = a0.copy()
            a[active] = x.reshape(shape)
            t = {**base, self.a_name: a}
            val = float(np.sum(self.rows.at(t, Z)) + np.sum(self._prior(t)))
            grad = np.asarray(self._grad(t)[0], dtype=np.float64)[active].ravel()
            if not (math.isfinite(val) and np.all(np.isfinite(grad))):
                return math.inf, np.zeros_like(x)
            return -val, -grad

        x0 = a0[active].ravel()
        start, _ = neg_log_post(x0)
        found = optimize.minimize(neg_log_post, x0, jac=True, method="L-BFGS-B",
                                  options={"maxiter": int(maxiter)})
        if math.isfinite(found.fun) and found.fun < start:
            a0[active] = found.x.reshape(shape)
        return a0

    @staticmethod
    def log_q(x, mean, prec):
        return float(np.sum(0.5 * np.log(prec / (2.0 * math.pi)) - 0.5 * prec * (x - mean) ** 2))

    # ---- the move ----------------------------------------------------------------------
    def birth_death(self, rng, Z, trial, alpha, beta):
        """One birth or death proposal; returns ``(accepted, Z)``.  On acceptance
        ``trial[A]`` holds the new parameters (a new array).  Where the Laplace approximation
        cannot be formed (a non-finite gradient) the proposal is a null move: it depends only
        on what the move leaves unchanged, so the reverse proposal fails as well."""
        try:
            return self._birth_death(rng, Z, trial, alpha, beta)
        except FloatingPointError:
            return 0, Z

    def _group_probs(self, trial, Z_without, k, anchor):
        """Inclusion probabilities of the rows in a feature seeded by row ``anchor``:
        ``π_i = σ(Δ_i - log N)``, ``Δ_i`` the row log-likelihood gain of ``z_ik = 1`` with
        ``A_k`` at the Laplace mean fitted to the anchor alone.  Depends only on what a
        birth or death of feature ``k`` leaves unchanged (``Z`` without column ``k``, the
        other rows of ``A``).  Also returns the log-likelihood at ``Z_without``, which the
        acceptance ratio needs as well."""
        seeded = Z_without.copy()
        seeded[anchor, k] = 1
        mean, _ = self.laplace(trial, seeded, k)
        t = {**trial, self.a_name: self._with_row(trial, k, mean)}
        on = Z_without.copy()
        on[:, k] = 1
        without = self.rows.at(dict(t), Z_without)  # A_k does not reach these rows
        delta = self.rows.at(dict(t), on) - without
        if not np.all(np.isfinite(delta)):
            raise FloatingPointError("non-finite likelihood gain of a seeded feature")
        return special.expit(delta - math.log(Z_without.shape[0])), float(np.sum(without))

    @staticmethod
    def _log_p_group(probs, rows, anchor):
        """``log P(S | anchor)``: every row but the anchor in or out of ``S`` independently."""
        inside = np.zeros(probs.size, dtype=bool)
        inside[rows] = True
        with np.errstate(divide="ignore"):
            terms = np.where(inside, np.log(probs), np.log1p(-probs))
        terms[anchor] = 0.0
        return float(terms.sum())

    def _birth_death(self, rng, Z, trial, alpha, beta):
        n = Z.shape[0]
        m = Z.sum(axis=0).astype(np.int64)
        if rng.random() < 0.5:  # ---- birth
            empty = np.flatnonzero(m == 0)
            if empty.size == 0:
                return 0, Z
            k = int(empty[int(rng.random() * empty.size)])
            anchor = int(rng.random() * n)
            ll_without = None
            if self.max_rows > 1:
                probs, ll_without = self._group_probs(trial, Z, k, anchor)
                inside = rng.random(n) < probs
                inside[anchor] = True
                rows = np.flatnonzero(inside)
                if rows.size > self.max_rows:
                    return 0, Z  # no death leads back: a null move
                log_group = self._log_p_group(probs, rows, anchor)
            else:
                rows, log_group = np.array([anchor]), 0.0
            born = Z.copy()
            born[rows, k] = 1
            mean1, prec1 = self.laplace(trial, born, k)
            a_new = mean1 + rng.standard_normal(mean1.shape) / np.sqrt(prec1)
            log_r = self._log_ratio(trial, Z, born, k, a_new, (mean1, prec1), alpha, beta,
                                    n_empty=empty.size, log_group=log_group, ll0=ll_without)
            if self.accepts(rng, log_r, born, trial, {k: a_new}):
                return 1, born
            return 0, Z
        small = np.flatnonzero((m >= 1) & (m <= self.max_rows))  # ---- death
        if small.size == 0:
            return 0, Z
        k = int(small[int(rng.random() * small.size)])
        rows = np.flatnonzero(Z[:, k])
        anchor = int(rows[int(rng.random() * rows.size)])
        dead = Z.copy()
        dead[:, k] = 0
        log_group, ll_without = 0.0, None
        if self.max_rows > 1:
            probs, ll_without = self._group_probs(trial, dead, k, anchor)
            log_group = self._log_p_group(probs, rows, anchor)
        q1 = self.laplace(trial, Z, k)
        mean0, prec0 = self.prior_laplace(trial, dead, k)
        a_old = mean0 + rng.standard_normal(mean0.shape) / np.sqrt(prec0)
        a_cur = np.array(trial[self.a_name], dtype=float)[k]
        reverse = {**trial, self.a_name: self._with_row(trial, k, a_old)}
        log_r = self._log_ratio(reverse, dead, Z, k, a_cur, q1, alpha, beta,
                                n_empty=int((m == 0).sum()) + 1, log_group=log_group,
                                q0=(mean0, prec0), ll0=ll_without)
        if self.accepts(rng, -log_r, dead, trial, {k: a_old}):
            return 1, dead
        return 0, Z

    def _log_ratio(self, trial, Z, born, k, a_new, q1, alpha, beta, n_empty, log_group,
                   q0=None, ll0=None):
        """Log acceptance ratio of the birth ``(Z, trial[A]) -> (born, A_k = a_new)``: the
        forward proposal picks the slot (``1/E``), the anchor (``1/N``), the other rows
        (``exp(log_group)``) and ``a_new ~ q1``; the reverse death picks the feature among
        those with at most ``max_rows`` rows (``1/F'``), the anchor among its rows
        (``1/|S|``) and the old parameters from ``q0``."""
        step = self.moves
        n = Z.shape[0]
        a_old = np.array(trial[self.a_name], dtype=float)[k]
        mean0, prec0 = q0 if q0 is not None else self.prior_laplace(trial, Z, k)
        after = {**trial, self.a_name: self._with_row(trial, k, a_new)}
        if ll0 is None:  # the log-likelihood before the birth (column k of Z empty)
            ll0 = float(np.sum(self.rows.at(dict(trial), Z)))
        ll1 = float(np.sum(self.rows.at(after, born)))
        p0 = float(np.asarray(self._prior(trial))[k])
        p1 = float(np.asarray(self._prior(after))[k])
        counts = born.sum(axis=0)
        n_small = int(((counts >= 1) & (counts <= self.max_rows)).sum())
        size = int(counts[k])
        return (step.log_prior(born, alpha, beta) - step.log_prior(Z, alpha, beta)
                + ll1 - ll0 + p1 - p0
                + self.log_q(a_old, mean0, prec0) - self.log_q(a_new, *q1)
                + math.log(n_empty) + math.log(n) - log_group
                - math.log(n_small) - math.log(size))

    # ---- split / merge with parameters -----------------------------------------------------
    def split_merge(self, rng, Z, trial, alpha, beta):
        r"""One split or merge proposal of a feature together with its parameters; returns
        ``(accepted, Z)`` (on acceptance ``trial[A]`` holds the new parameters, a new array).

        *Split* (probability ½): an active column ``c`` (uniformly, among the ``K_+``), an
        empty slot ``t`` (among the ``E``) and an ordered pair of distinct owners ``(a, b)`` of
        ``c`` (among the ``m_c (m_c - 1)``; a feature with one row gives a null move).  The
        *seeds* ``s_c, s_t`` are Laplace means of a feature fitted to row ``a`` alone and to
        row ``b`` alone.  Row ``a`` keeps ``c`` only, row ``b`` takes ``t`` only, and every
        other owner of ``c`` independently takes ``c`` only, ``t`` only or both with
        probability proportional to its likelihood with ``A_c = s_c``, ``A_t = s_t``.  Then
        ``A_c' \sim q_c``, the Laplace approximation of ``p(A_c \mid \cdot)`` at the split
        ``Z'`` with ``A_t = s_t``, and ``A_t' \sim q_t``, that of ``p(A_t \mid \cdot)`` at
        ``Z'`` with ``A_c = A_c'``.  *Merge* (the reverse): an ordered pair ``(c, t)`` of
        active columns (among ``K_+ (K_+ - 1)``), a row ``a`` owning ``c`` but not ``t`` and
        a row ``b`` owning ``t`` but not ``c``, uniformly (none: a null move, as no split
        leads to such a pair); column ``c`` becomes the union, ``t`` is emptied,
        ``A_c' \sim q_u`` (the Laplace approximation at the union) and ``A_t' \sim q_0``
        (that of the prior).  A split ``(Z, A) \to (Z', A')`` is accepted with

        .. math:: \min\Big\{1, \frac{P(Z')\,p(X\mid Z', A')\,p(A_c')\,p(A_t')}
            {P(Z)\,p(X\mid Z, A)\,p(A_c)\,p(A_t)}\,
            \frac{E\,m_c(m_c-1)\,q_u(A_c)\,q_0(A_t)}
            {(K_+ + 1)\,n_{c\setminus t}\,n_{t\setminus c}\,P(\text{allocation})\,
            q_c(A_c')\,q_t(A_t')}\Big\}

        (``K_+``, ``E`` and ``m_c`` before the split, ``n_{c \ t}`` and ``n_{t \ c}`` the rows
        owning one of the two columns only after it), a merge with the reciprocal.  The seeds
        and allocation probabilities depend only on what a merge keeps (the other columns of
        ``Z`` and rows of ``A``, the union and the anchors), so both directions compute the
        same proposal densities and the move is a reversible Metropolis–Hastings move on
        ``(Z, A)`` (Green 1995; the two anchor rows follow the split–merge sampler of
        Jain & Neal 2004), exact whatever the quality of the Laplace approximations.  Unlike
        the split–merge of ``Z`` alone, the new feature comes with parameters fitted to its
        rows, so a feature that stands for two can split into two that fit.
        """
        try:
            return self._split_merge(rng, Z, trial, alpha, beta)
        except FloatingPointError:  # the same fits fail in both directions: a null move
            return 0, Z

    def _split_merge(self, rng, Z, trial, alpha, beta):
        n, k_max = Z.shape
        m = Z.sum(axis=0).astype(np.int64)
        act = np.flatnonzero(m > 0)
        kp = act.size
        a_cur = np.array(trial[self.a_name], dtype=float)
        if rng.random() < 0.5:  # ---- split
            if kp == 0 or kp == k_max:
                return 0, Z
            c, t = self.column_and_slot(rng, m, act)
            rows = np.flatnonzero(Z[:, c])
            if rows.size < 2:
                return 0, Z  # no merge leads to a feature with one row alone
            i, j = ordered_pair(rng, rows.size)
            a, b = int(rows[i]), int(rows[j])
            seeds, logp = self._allocation(trial, Z, c, t, a, b)
            cum = np.cumsum(np.exp(logp[:, rows]), axis=0)
            opt = np.zeros(n, dtype=np.int64)
            opt[rows] = np.minimum((rng.random(rows.size)[None, :] > cum).sum(axis=0), 2)
            opt[a], opt[b] = 0, 1
            split = Z.copy()
            split[rows, c] = (opt[rows] != 1).astype(Z.dtype)
            split[rows, t] = (opt[rows] != 0).astype(Z.dtype)
            mean_c, prec_c = self.laplace(self.with_rows(trial, {t: seeds[1]}), split, c)
            new_c = mean_c + rng.standard_normal(mean_c.shape) / np.sqrt(prec_c)
            mean_t, prec_t = self.laplace(self.with_rows(trial, {c: new_c}), split, t)
            new_t = mean_t + rng.standard_normal(mean_t.shape) / np.sqrt(prec_t)
            log_r = self._split_log_ratio(
                trial, Z, split, c, t, a, b, seeds, logp, (a_cur[c], a_cur[t]),
                (new_c, new_t), ((mean_c, prec_c), (mean_t, prec_t)), alpha, beta)
            if self.accepts(rng, log_r, split, trial, {c: new_c, t: new_t}):
                return 1, split
            return 0, Z
        if kp < 2:  # ---- merge
            return 0, Z
        i, j = ordered_pair(rng, kp)
        c, t = int(act[i]), int(act[j])
        only_c = np.flatnonzero((Z[:, c] == 1) & (Z[:, t] == 0))
        only_t = np.flatnonzero((Z[:, t] == 1) & (Z[:, c] == 0))
        if only_c.size == 0 or only_t.size == 0:
            return 0, Z  # no split leads here
        a = int(only_c[int(rng.random() * only_c.size)])
        b = int(only_t[int(rng.random() * only_t.size)])
        merged = Z.copy()
        merged[:, c] = Z[:, c] | Z[:, t]
        merged[:, t] = 0
        seeds, logp = self._allocation(trial, merged, c, t, a, b)
        mean_c, prec_c = self.laplace(self.with_rows(trial, {t: seeds[1]}), Z, c)
        mean_t, prec_t = self.laplace(self.with_rows(trial, {c: a_cur[c]}), Z, t)
        mean_u, prec_u = self.laplace(trial, merged, c)
        new_c = mean_u + rng.standard_normal(mean_u.shape) / np.sqrt(prec_u)
        mean0, prec0 = self.prior_laplace(trial, merged, t)
        new_t = mean0 + rng.standard_normal(mean0.shape) / np.sqrt(prec0)
        log_r = self._split_log_ratio(
            trial, merged, Z, c, t, a, b, seeds, logp, (new_c, new_t), (a_cur[c], a_cur[t]),
            ((mean_c, prec_c), (mean_t, prec_t)), alpha, beta,
            reverse=((mean_u, prec_u), (mean0, prec0)))
        if self.accepts(rng, -log_r, merged, trial, {c: new_c, t: new_t}):
            return 1, merged
        return 0, Z

    # ---- moves in their own objects ------------------------------------------------------
    def fold(self, rng, Z, trial, alpha, beta, seen=None):
        """One fold or unfold proposal (:meth:`FoldMove.propose
        <pymc_ibp.step_methods.feature_folds.FoldMove.propose>`): ``(accepted, Z)``."""
        return self.folds.propose(rng, Z, trial, alpha, beta, seen)

    def pair_triple(self, rng, Z, trial, alpha, beta):
        """One merge or unmerge proposal (:meth:`PairTripleMove.propose
        <pymc_ibp.step_methods.feature_triples.PairTripleMove.propose>`): ``(accepted, Z)``."""
        return self.triples.propose(rng, Z, trial, alpha, beta)

    def _allocation(self, trial, merged, c, t, a, b):
        """The seeds ``(s_c, s_t)`` (Laplace means of a feature fitted to row ``a`` alone and
        to row ``b`` alone, at the merged ``Z`` without column ``c``) and the log-probabilities
        (3 x N) of options ``c`` only, ``t`` only, both for every owner of the union, with
        ``A_c = s_c`` and ``A_t = s_t``.  Depend only on what a split or merge of ``c, t``
        leaves unchanged."""
        alone = merged.copy()
        alone[:, c] = 0
        alone[a, c] = 1
        s_c, _ = self.laplace(trial, alone, c)
        alone[a, c] = 0
        alone[b, t] = 1
        s_t, _ = self.laplace(trial, alone, t)
        ll = self.moves.split_option_ll(self.with_rows(trial, {c: s_c, t: s_t}), merged, c, t,
                                        merged[:, c] == 1)
        if not np.all(np.isfinite(ll[:, merged[:, c] == 1])):
            raise FloatingPointError("non-finite likelihood of a split allocation")
        return (s_c, s_t), ll - np.logaddexp.reduce(ll, axis=0)

    def _split_log_ratio(self, trial, merged, split, c, t, a, b, seeds, logp, a_merged,
                         a_split, fits, alpha, beta, reverse=None):
        """Log acceptance ratio of the split ``(merged, A_c, A_t = a_merged) -> (split,
        a_split)`` of the union in column ``c`` into ``c`` and ``t``.  ``fits``: ``q_c`` and
        ``q_t`` at ``split``; ``reverse``: ``q_u`` and ``q_0`` at ``merged`` (computed when
        ``None``)."""
        n, k_max = merged.shape
        m = merged.sum(axis=0)
        kp = int((m > 0).sum())
        rows = np.flatnonzero(merged[:, c])
        free = rows[(rows != a) & (rows != b)]
        opt = np.where(split[free, t] == 0, 0, np.where(split[free, c] == 0, 1, 2))
        log_alloc = float(np.sum(logp[opt, free]))
        n_c = int(np.sum((split[:, c] == 1) & (split[:, t] == 0)))
        n_t = int(np.sum((split[:, t] == 1) & (split[:, c] == 0)))
        if reverse is None:
            reverse = (self.laplace(trial, merged, c), self.prior_laplace(trial, merged, t))
        (mean_u, prec_u), (mean0, prec0) = reverse
        (mean_c, prec_c), (mean_t, prec_t) = fits
        return (self.target_log_ratio(trial, merged, split, c, t, a_merged, a_split, alpha,
                                       beta)
                + math.log(k_max - kp) + math.log(rows.size) + math.log(rows.size - 1)
                - math.log(kp + 1) - math.log(n_c) - math.log(n_t)
                + self.log_q(a_merged[0], mean_u, prec_u)
                + self.log_q(a_merged[1], mean0, prec0)
                - log_alloc - self.log_q(a_split[0], mean_c, prec_c)
                - self.log_q(a_split[1], mean_t, prec_t))

    @staticmethod
    def column_and_slot(rng, m, act):
        """An active column and an empty slot, uniformly (the start of a split or an
        unfold)."""
        c = int(act[int(rng.random() * act.size)])
        empty = np.flatnonzero(m == 0)
        return c, int(empty[int(rng.random() * empty.size)])

    def target_log_ratio(self, trial, merged, split, c, t, a_merged, a_split, alpha, beta):
        """``log p(Z', A' | X) - log p(Z, A | X)`` (up to the evidence) of a move from
        ``(merged, A_c, A_t = a_merged)`` to ``(split, a_split)``, only columns ``c`` and
        ``t`` and their rows of ``A`` changed."""
        return self.joint_log_ratio(trial, merged, {c: a_merged[0], t: a_merged[1]}, split,
                                     {c: a_split[0], t: a_split[1]}, alpha, beta)

    def joint_log_ratio(self, trial, Z0, rows0, Z1, rows1, alpha, beta):
        """``log p(Z1, A1 | X) - log p(Z0, A0 | X)`` (up to the evidence), ``A0`` and ``A1``
        ``trial[A]`` with the rows ``rows0`` and ``rows1`` (the same slots) replaced."""
        before = self.with_rows(trial, rows0)
        after = self.with_rows(trial, rows1)
        ll0 = float(np.sum(self.rows.at(dict(before), Z0)))
        ll1 = float(np.sum(self.rows.at(dict(after), Z1)))
        p0 = np.asarray(self._prior(before))
        p1 = np.asarray(self._prior(after))
        slots = list(rows0)
        return (self.moves.log_prior(Z1, alpha, beta) - self.moves.log_prior(Z0, alpha, beta)
                + ll1 - ll0 + float(np.sum(p1[slots]) - np.sum(p0[slots])))

    def with_rows(self, trial, rows):
        """``trial`` with the given rows of ``A`` replaced (a new dict and array)."""
        a = np.array(trial[self.a_name], copy=True)
        for k, row in rows.items():
            a[k] = row
        return {**trial, self.a_name: a}

    def accepts(self, rng, log_r, Z, trial, rows):
        """The Metropolis--Hastings test of a move to ``Z`` with the given ``rows`` of ``A``
        (:meth:`RowMoves.accepts <pymc_ibp.step_methods.ibp_gibbs_moves.RowMoves.accepts>`,
        with the model's potentials); on acceptance ``trial[A]`` holds them (a new array)."""
        if self.moves.potentials is None:  # no proposal point to score
            if math.log(rng.random()) < log_r:
                trial[self.a_name] = self.with_rows(trial, rows)[self.a_name]
                return True
            return False
        proposed = self.with_rows(trial, rows)
        if self.moves.accepts(rng, log_r, Z, proposed):
            trial[self.a_name] = proposed[self.a_name]
            return True
        return False

    def _with_row(self, trial, k, row):
        a = np.array(trial[self.a_name], copy=True)
        a[k] = row
        return a

