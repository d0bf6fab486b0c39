"""Gibbs sampling of the labels of a :class:`pymc_ibp.CRP` under any row-factorising likelihood.

Each label ``c_n`` is drawn from its exact full conditional given the other labels and every
other variable (the categories' parameters included), with the likelihood taken from the
model's own compiled element-wise logp: one evaluation with every label set to ``l`` gives the
likelihood of all ``N`` observations in category ``l`` at once, so a sweep costs ``L_max``
evaluations plus ``O(N L_max)``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.graph.traversal import ancestors

from pymc_ibp._numba_utils import categorical_logp, interrupt_safe
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.step_methods.model_matching import one_value_var
from pymc_ibp.step_methods.uncollapsed import check_one_row_changed, perturbed_point

__all__ = ["CRPGibbs", "crp_label_gibbs"]


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


@dataclass_state
class CRPGibbsState(StepMethodState):
    """``rng`` only: the step keeps no other changing state."""


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

    Raises
    ------
    ModelPatternError
        If ``vars`` is not one ``pmi.CRP`` variable, nothing depends on it, or the likelihood
        does not factorise over the observations (checked at construction by changing the
        first and last labels).

    Notes
    -----
    Stats: ``ibp_n_categories`` (occupied labels after the sweep) and ``ibp_label_changes``.

    References
    ----------
    R. M. Neal (2000). Markov chain sampling methods for Dirichlet process mixture models.
    *Journal of Computational and Graphical Statistics* 9(2), 249–265.
    """

    name = "crp_gibbs"
    default_blocked = False
    _state_class = CRPGibbsState
    stats_dtypes_shapes = {
        "ibp_n_categories": (np.int64, []),
        "ibp_label_changes": (np.int64, []),
    }

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
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
        self.l_max = int(l_max.data) if hasattr(l_max, "data") else int(l_max.eval())
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
            rows.append(term.sum(axis=tuple(range(1, term.ndim))) if term.ndim > 1 else term)
        row_ll = rows[0] if len(rows) == 1 else sum(rows[1:], rows[0])
        self._row_ll = model.compile_fn(row_ll, inputs=model.value_vars, on_unused_input="ignore",
                                        point_fn=True, **(compile_kwargs or {}))
        [alpha_v] = model.replace_rvs_by_values([alpha])
        self._alpha = model.compile_fn(alpha_v, inputs=model.value_vars,
                                       on_unused_input="ignore", point_fn=True,
                                       **(compile_kwargs or {}))
        self._check_factorisation(ip, [ch.name for ch in children])
        self.rng = get_random_generator(rng)

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
        new = dict(point)
        new[self.c_name] = c.astype(np.asarray(point[self.c_name]).dtype, copy=False)
        return new, [{"ibp_n_categories": int(K), "ibp_label_changes": int(changes)}]

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is not None and isinstance(var.owner.op, CRPRV):
            return Competence.IDEAL
        return Competence.INCOMPATIBLE
