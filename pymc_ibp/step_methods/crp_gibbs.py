"""Gibbs sampling of the labels of a :class:`pymc_ibp.CRP` under any row-factorising likelihood.

Each label ``c_n`` is drawn from its exact full conditional given the other labels and every
other variable (the categories' parameters included), with the likelihood taken from the
model's own compiled element-wise logp: one evaluation with every label set to ``l`` gives the
likelihood of all ``N`` observations in category ``l`` at once, so a sweep costs ``L_max``
evaluations plus ``O(N L_max)``.
"""

from __future__ import annotations

import math
import warnings

import numba
import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.graph.traversal import ancestors

from pymc_ibp._numba_utils import categorical_logp, interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn, constant_value
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.exceptions import ModelPatternError, TruncationWarning
from pymc_ibp.step_methods.model_matching import one_value_var
from pymc_ibp.step_methods.uncollapsed import (
    check_one_row_changed,
    masked_entry_rows,
    per_row,
    perturbed_point,
)

__all__ = ["CRPGibbs", "crp_label_gibbs", "crp_split_merge"]


@numba.njit(cache=True)
def crp_label_gibbs(rng, c, ll, alpha):
    """One Gibbs scan of the labels ``c`` (in place, rows in random order) under the CRP(α)
    with ``L_max = ll.shape[0]`` labels, ``ll[l, n]`` the log-likelihood of row ``n`` in
    category ``l``.  Returns ``(changes, K)``.

    Prior conditional (from the pmf of :class:`pymc_ibp.CRP`): an occupied label ``l`` has
    weight ``n_{-n,l}``, each empty one ``α/(L_max - K_{-n})``, so the empty labels share the
    CRP's new-table weight ``α``; an empty label brings its current parameters, which given
    that it is empty are distributed as their prior (Neal 2000, Algorithm 8, with the empty
    labels as its auxiliary categories).
    """
    L, n = ll.shape
    counts = np.zeros(L, dtype=np.int64)
    for i in range(n):
        counts[c[i]] += 1
    K = 0
    for lab in range(L):
        if counts[lab] > 0:
            K += 1
    w = np.empty(L)
    log_alpha = math.log(alpha)
    changes = 0
    for it in rng.permutation(n):
        old = c[it]
        counts[old] -= 1
        km = K - (1 if counts[old] == 0 else 0)
        log_new = log_alpha - math.log(L - km) if km < L else 0.0
        for lab in range(L):
            if counts[lab] > 0:
                w[lab] = math.log(counts[lab]) + ll[lab, it]
            else:
                w[lab] = log_new + ll[lab, it]
        new = categorical_logp(rng, w, L)
        counts[new] += 1
        K = km + (1 if counts[new] == 1 else 0)
        c[it] = new
        if new != old:
            changes += 1
    return changes, K


@numba.njit(cache=True)
def _allocate(rng, c, ll, members, m, i, j, li, lj, order, force):
    """Sequential allocation (Dahl 2003) of ``members[:m]`` (which hold ``i`` and ``j``)
    between labels ``li`` (``i``'s side) and ``lj`` (``j``'s side) in the random ``order``:
    each next member joins a side with probability ``∝ size · p(x | θ_side)``.  With
    ``force`` the members take the sides given by ``c`` (scoring the current split) instead
    of drawn ones.  Writes the drawn labels into ``c`` (``force=False``).  Returns
    ``(log q, size of i's side, log-likelihood of the allocation)``."""
    n1, n2 = 1, 1
    log_q = 0.0
    lik = ll[li, i] + ll[lj, j]
    for t in range(m):
        k = members[order[t]]
        if k == i or k == j:
            continue
        w1 = math.log(n1) + ll[li, k]
        w2 = math.log(n2) + ll[lj, k]
        mx = max(w1, w2)
        log_norm = mx + math.log(math.exp(w1 - mx) + math.exp(w2 - mx))
        if force:
            first = c[k] == li
        else:
            first = rng.random() < math.exp(w1 - log_norm)
            c[k] = li if first else lj
        if first:
            log_q += w1 - log_norm
            n1 += 1
            lik += ll[li, k]
        else:
            log_q += w2 - log_norm
            n2 += 1
            lik += ll[lj, k]
    return log_q, n1, lik


@numba.njit(cache=True)
def crp_split_merge(rng, c, ll, alpha, n_moves):
    """``n_moves`` split–merge Metropolis–Hastings proposals on the labels ``c`` (in place)
    under the CRP(α) with ``L_max = ll.shape[0]`` labels and the categories' parameters fixed
    (``ll[l, n]``: log-likelihood of row ``n`` in category ``l``).  Returns the number accepted.

    Two distinct rows ``i, j`` are drawn uniformly.  If they share a label the move proposes to
    *split* its category: ``j`` moves to a uniformly chosen empty label ``t`` and the other
    members are allocated one by one, in random order, to ``i``'s or ``j``'s side with
    probability ``∝ size · p(x | θ_side)`` (sequentially allocated merge–split, Dahl 2003; the
    empty label brings its current parameters, as in Neal's Algorithm 8).  Otherwise it
    proposes to *merge* ``j``'s category into ``i``'s.  With the labelled CRP pmf of
    :class:`pymc_ibp.CRP` the choice of ``t`` cancels the label factor ``1/(L_max - K)``, and a
    split is accepted with probability

        min{1, α Γ(n₁) Γ(n₂) / Γ(n) · p(x | split) / p(x | merged) / q(split)},

    ``q`` the product of the allocation probabilities; a merge with the reciprocal, its
    reverse split scored in a fresh random order.  Jain & Neal (2004) use the same ratio with
    a restricted-Gibbs launch state instead of sequential allocation.
    """
    L, n = ll.shape
    if n < 2:
        return 0
    counts = np.zeros(L, dtype=np.int64)
    for k in range(n):
        counts[c[k]] += 1
    members = np.empty(n, dtype=np.int64)
    accepted = 0
    log_alpha = math.log(alpha)
    for _ in range(n_moves):
        i = int(rng.random() * n)
        j = int(rng.random() * (n - 1))
        j += j >= i
        ci, cj = c[i], c[j]
        m = 0
        for k in range(n):
            if c[k] == ci or c[k] == cj:
                members[m] = k
                m += 1
        order = rng.permutation(m)
        if ci == cj:  # ---- split
            n_empty = L - (counts > 0).sum()
            if n_empty == 0:
                continue
            pick = int(rng.random() * n_empty)
            t = 0
            for lab in range(L):
                if counts[lab] == 0:
                    if pick == 0:
                        t = lab
                        break
                    pick -= 1
            old = c.copy()
            c[j] = t
            log_q, n1, lik = _allocate(rng, c, ll, members, m, i, j, ci, t, order, False)
            lik_old = 0.0
            for q in range(m):
                lik_old += ll[ci, members[q]]
            log_r = (lik - lik_old + log_alpha + math.lgamma(n1) + math.lgamma(m - n1)
                     - math.lgamma(m) - log_q)
            if math.log(rng.random()) < log_r:
                counts[ci] = n1
                counts[t] = m - n1
                accepted += 1
            else:
                c[:] = old
        else:  # ---- merge j's category into i's
            log_q, n1, lik = _allocate(rng, c, ll, members, m, i, j, ci, cj, order, True)
            lik_new = 0.0
            for q in range(m):
                lik_new += ll[ci, members[q]]
            log_r = (lik_new - lik - log_alpha - math.lgamma(n1) - math.lgamma(m - n1)
                     + math.lgamma(m) + log_q)
            if math.log(rng.random()) < log_r:
                for q in range(m):
                    c[members[q]] = ci
                counts[ci] = m
                counts[cj] = 0
                accepted += 1
    return accepted


@dataclass_state
class CRPGibbsState(StepMethodState):
    """``rng``, the iteration count and whether the truncation warning was given in this
    chain."""

    warned: bool
    iteration: int
    n_tune: int


class CRPGibbs(BlockedStep):
    r"""Gibbs sampler for the labels ``c`` of a :class:`pymc_ibp.CRP` under any likelihood that
    factorises over the observations (e.g. a Dirichlet-process mixture
    ``X ~ Normal(mu[c], sigma)``).

    Each label is drawn from

    .. math:: P(c_n = l\mid\cdot) \propto
        \begin{cases} n_{-n,l}\; p(x_n\mid\theta_l) & n_{-n,l} > 0,\\
        \frac{\alpha}{L_{max}-K_{-n}}\; p(x_n\mid\theta_l) & \text{label } l \text{ empty,}
        \end{cases}

    the exact full conditional of the truncated CRP (:class:`pymc_ibp.CRP`) given the other
    labels and the categories' parameters ``θ``.  An empty label carries the current value of
    its parameters, which the other steps (e.g. NUTS) draw from their prior while it is empty:
    Neal's (2000) Algorithm 8 with the ``L_max - K`` empty labels as the auxiliary categories.
    The likelihood comes from the model's compiled element-wise logp of every variable that
    depends on ``c``, reduced over all but the observation axis; ``L_max`` evaluations per sweep.

    Parameters
    ----------
    vars : list
        The ``pmi.CRP`` variable.
    split_merge : int, optional
        Split–merge Metropolis–Hastings proposals per step after the scan
        (:func:`crp_split_merge`: sequential allocation with the categories' parameters fixed,
        no extra likelihood evaluations, ``O(size of the two categories)`` each); default
        ``max(10, N // 5)``, 0 disables them.  One-at-a-time moves merge two categories only
        by a slow random walk of their members; a merge proposal does it in one step.  A
        proposal picks two rows at random, so a merge of two categories of sizes ``n₁, n₂`` is
        attempted with probability ``≈ 2 n₁ n₂ / N²`` per proposal.

    Raises
    ------
    ModelPatternError
        If ``vars`` is not one ``pmi.CRP`` variable, nothing depends on it, or the likelihood
        does not factorise over the observations (checked at construction by changing the
        first and last labels).

    Notes
    -----
    Stats: ``ibp_n_categories`` (occupied labels after the sweep), ``ibp_label_changes`` (of
    the scan), ``ibp_category_split_merge`` (accepted split–merge proposals) and
    ``ibp_lmax_hit`` (every label occupied, ``l_max < N``: the truncation may bind; a
    :class:`pymc_ibp.TruncationWarning` names ``l_max`` and what to pass instead, once per
    chain, at the first hit after tuning).

    References
    ----------
    R. M. Neal (2000). Markov chain sampling methods for Dirichlet process mixture models.
    *Journal of Computational and Graphical Statistics* 9(2), 249–265.

    D. B. Dahl (2003). An improved merge-split sampler for conjugate Dirichlet process mixture
    models. Technical Report 1086, Department of Statistics, University of Wisconsin–Madison.

    S. Jain and R. M. Neal (2004). A split-merge Markov chain Monte Carlo procedure for the
    Dirichlet process mixture model. *Journal of Computational and Graphical Statistics*
    13(1), 158–182.
    """

    name = "crp_gibbs"
    default_blocked = False
    _state_class = CRPGibbsState
    stats_dtypes_shapes = {
        "ibp_n_categories": (np.int64, []),
        "ibp_label_changes": (np.int64, []),
        "ibp_category_split_merge": (np.int64, []),
        "ibp_lmax_hit": (bool, []),
    }

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, split_merge=None):
        model = pm.modelcontext(model)
        c_val, c_rv = one_value_var(vars, model, "CRPGibbs updates one label vector at a time")
        if not (isinstance(c_rv.owner.op, CRPRV) and c_rv.ndim == 1):
            raise ModelPatternError(
                f"CRPGibbs needs a 1-D pmi.CRP('c', alpha, shape=N); {c_rv.name!r} is a "
                f"{type(c_rv.owner.op).__name__} with ndim={c_rv.ndim}.")
        self.vars = [c_val]
        self.c_name = c_val.name
        ip = model.initial_point() if initial_point is None else initial_point
        self.n = int(np.shape(ip[self.c_name])[0])
        _, _, alpha, _, l_max = c_rv.owner.inputs
        self.l_max = int(constant_value(l_max))
        children = [rv for rv in model.basic_RVs if rv is not c_rv and c_rv in set(ancestors([rv]))]
        if not children:
            raise ModelPatternError(f"No variable depends on {c_rv.name!r}; nothing to "
                                    "condition on (its prior draws need no step).")
        rows = []
        for child, term in zip(children, model.logp(vars=children, sum=False), strict=True):
            if term.ndim == 0 or child.ndim == 0:
                raise ModelPatternError(
                    f"The logp of {child.name!r} does not factorise over the observations of "
                    f"{c_rv.name!r}. CRPGibbs needs a likelihood whose element-wise logp has "
                    "the observation axis first, e.g. pm.Normal('X', mu=mu[c], ...).")
            # a masked child (PyMC's X_observed / X_unobserved for NaN entries): its terms
            # added to their observations' rows
            rows.append(per_row(term, self.n, masked_entry_rows(child, c_rv, model, self.n)))
        row_ll = rows[0] if len(rows) == 1 else sum(rows[1:], rows[0])
        self._row_ll = compile_point_fn(model, row_ll, compile_kwargs=compile_kwargs)
        [alpha_v] = model.replace_rvs_by_values([alpha])
        self._alpha = compile_point_fn(model, alpha_v, compile_kwargs=compile_kwargs)
        self._check_factorisation(ip, [ch.name for ch in children])
        self.split_merge = max(10, self.n // 5) if split_merge is None else int(split_merge)
        if self.split_merge < 0:
            raise ValueError(f"split_merge must be >= 0; got {split_merge!r}.")
        self.rng = get_random_generator(rng)
        self.warned = False
        self.iteration = self.n_tune = 0

    def _check_factorisation(self, point, names):
        point = perturbed_point(point)
        ll = np.asarray(self._row_ll(point))
        if ll.shape != (self.n,):
            raise ModelPatternError(
                f"The element-wise logp of {names} reduces to shape {ll.shape}, not one term per "
                f"observation of {self.c_name!r} ({self.n},). CRPGibbs needs the observation "
                "axis first.")
        if self.l_max < 2:
            return
        for r in sorted({0, self.n - 1}):
            c = np.array(point[self.c_name], copy=True)
            c[r] = (c[r] + 1) % self.l_max
            ll2 = np.asarray(self._row_ll({**point, self.c_name: c}))
            check_one_row_changed(ll, ll2, r, f"Changing label {r} of {self.c_name!r}", names,
                                  "the observations, which CRPGibbs needs")

    @interrupt_safe  # the kernel takes the step's Generator (see _numba_utils)
    def step(self, point):
        c = np.array(point[self.c_name], dtype=np.int64, copy=True)
        alpha = float(np.asarray(self._alpha(point)))
        trial = dict(point)
        ll = np.empty((self.l_max, self.n))
        for lab in range(self.l_max):
            trial[self.c_name] = np.full(self.n, lab, dtype=c.dtype)
            ll[lab] = np.asarray(self._row_ll(trial), dtype=float)
        changes, K = crp_label_gibbs(self.rng, c, ll, alpha)
        accepted = crp_split_merge(self.rng, c, ll, alpha, self.split_merge)
        if accepted:
            K = np.unique(c).size
        hit = K == self.l_max and self.l_max < self.n
        self.iteration += 1
        if hit and not self.warned and self.iteration > self.n_tune:  # transient hits in burn-in
            self.warned = True
            warnings.warn(
                f"CRPGibbs: all l_max={self.l_max} labels of {self.c_name!r} are occupied; the "
                "truncation may bias the posterior. Raise l_max (e.g. to "
                f"{min(2 * self.l_max, self.n)}) and re-run; 'ibp_lmax_hit' marks the affected "
                "draws.", TruncationWarning, stacklevel=3)
        new = dict(point)
        new[self.c_name] = c.astype(np.asarray(point[self.c_name]).dtype, copy=False)
        return new, [{"ibp_n_categories": int(K), "ibp_label_changes": int(changes),
                      "ibp_category_split_merge": int(accepted), "ibp_lmax_hit": bool(hit)}]

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.warned = False
        self.iteration, self.n_tune = 0, int(tune)

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is not None and isinstance(var.owner.op, CRPRV):
            return Competence.IDEAL
        return Competence.INCOMPATIBLE
