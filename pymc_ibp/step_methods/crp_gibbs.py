"""Gibbs sampling of the labels of a :class:`pymc_ibp.CRP` under any row-factorising likelihood.

Each label ``c_n`` is drawn from its exact full conditional given the other labels and every
other variable (the categories' parameters included), with the likelihood taken from the
model's own compiled element-wise logp: one evaluation with every label set to ``l`` gives the
likelihood of all ``N`` observations in category ``l`` at once, so a sweep costs ``L_max``
evaluations plus ``O(N L_max)``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator

from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn, constant_value
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.exceptions import DataError, ModelPatternError, TruncationWarning
from pymc_ibp.kernels.crp import crp_label_gibbs, crp_split_merge
from pymc_ibp.matching.graph import one_value_var
from pymc_ibp.matching.rows import RowLikelihood, perturbed_point
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["CRPGibbs"]


@dataclass_state
class CRPGibbsState(StepMethodState):
    """``rng``, the iteration count and whether the truncation warning was given in this
    chain."""

    warned: bool
    iteration: int
    n_tune: int


@refuses_potentials
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
        self._rows = RowLikelihood(model, c_rv, self.n, ip, compile_kwargs=compile_kwargs,
                                   labels=False, who="CRPGibbs")
        self._rows.compile(example="pm.Normal('X', mu=mu[c], ...)")
        [alpha_v] = model.replace_rvs_by_values([alpha])
        self._alpha = compile_point_fn(model, alpha_v, compile_kwargs=compile_kwargs)
        self._check_factorisation(ip)
        self.split_merge = max(10, self.n // 5) if split_merge is None else int(split_merge)
        if self.split_merge < 0:
            raise ValueError(f"split_merge must be >= 0; got {split_merge!r}.")
        self.rng = get_random_generator(rng)
        self.warned = False
        self.iteration = self.n_tune = 0

    def _check_factorisation(self, point):
        """Changing the first or the last label changes only that observation's term."""

        def relabel(c, r):
            c = np.array(c, copy=True)
            c[r] = (c[r] + 1) % self.l_max
            return c

        rows = [] if self.l_max < 2 else sorted({0, self.n - 1})
        self._rows.check_factorisation(perturbed_point(point), rows, relabel, "label",
                                       "the observations, which CRPGibbs needs",
                                       axis="observation")

    @interrupt_safe  # the kernel takes the step's Generator (see _numba_utils)
    def step(self, point):
        c = np.array(point[self.c_name], dtype=np.int64, copy=True)
        alpha = float(np.asarray(self._alpha(point)))
        if not (np.isfinite(alpha) and alpha > 0):  # e.g. a pm.Data alpha moved by pm.set_data
            raise DataError(f"CRPGibbs: the concentration alpha of pmi.CRP {self.c_name!r} is "
                            f"{alpha!r}; it must be > 0 (a pm.Data parameter changed with "
                            "pm.set_data must stay in its support).")
        trial = dict(point)
        ll = np.empty((self.l_max, self.n))
        for lab in range(self.l_max):
            trial[self.c_name] = np.full(self.n, lab, dtype=c.dtype)
            ll[lab] = np.asarray(self._rows(trial), dtype=float)
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
