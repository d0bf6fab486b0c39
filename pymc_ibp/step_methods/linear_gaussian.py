"""Collapsed and accelerated Gibbs steps for linear-Gaussian latent feature models.

Both steps update ``Z`` and ``A`` together: a sweep of ``Z`` with ``A`` integrated out, then
``A`` drawn from its exact Gaussian conditional given the new ``Z`` (so the trace holds ``A``
and every other step sees a consistent state), then imputed entries of ``X`` (if any) drawn
from ``N(Z A, σx²)`` — a data-augmentation Gibbs step that keeps the posterior of the observed
entries exact.  ``Z`` may have the :class:`pymc_ibp.IBP` prior (column counts and births) or
independent Bernoulli entries, e.g. under :class:`pymc_ibp.IBPStickBreaking` (per-entry prior
log-odds, no births); see :mod:`pymc_ibp.matching.prior_modes`.

Where a chain starts (``init_z="auto"``, the default: the ``Z`` the user gave, else the best of
a few annealed searches from prior draws) is decided by the step's
:class:`~pymc_ibp.init.search.AnnealedSearch`; see :mod:`pymc_ibp.init.search`.

All state that changes during a run is in :class:`LinearGaussianIBPState` (the step's
``sampling_state``, with the search's own state nested in it), so a run can be checkpointed and
resumed (see the docs page
"Checkpoint and resume").
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp import kernels
from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.init.given import check_binary_start
from pymc_ibp.matching.linear_gaussian import PATTERN, find_linear_gaussian, matched_models
from pymc_ibp.matching.priors import BINARY_MATRIX_OPS, IBPPrior, match_prior
from pymc_ibp.step_methods.linear_gaussian_update import (
    LinearGaussianUpdate,
    LinearGaussianUpdateState,
)
from pymc_ibp.step_methods.potentials import refuses_potentials
from pymc_ibp.step_methods.stats import group_by_matrix, one_step_per_matrix, per_matrix_stats

__all__ = ["AcceleratedGibbs", "CollapsedGibbs", "LinearGaussianIBPState", "spec_of",
           "spec_owning"]


@dataclass_state
class LinearGaussianIBPState(StepMethodState):
    """Everything a linear-Gaussian IBP step changes during a run: ``rng`` and the state of
    its update (:class:`~pymc_ibp.step_methods.linear_gaussian_update.LinearGaussianUpdate`,
    the start search's nested in it)."""

    update: LinearGaussianUpdateState


def _group_by_matrix(model, vars_):
    """Split the value variables ``vars_`` by the feature matrix they belong to (its ``Z``,
    ``A`` and imputed entries); variables of no matched model form a last group."""
    return group_by_matrix(model, vars_, [(spec.z_rv, *spec.a_rvs, *spec.missing_rvs)
                                          for spec in matched_models(model)])


def spec_owning(model, value_vars):
    """The matched model whose A (or imputed X) is among ``value_vars``."""
    for spec in matched_models(model):
        mine = {model.rvs_to_values[rv] for rv in (*spec.a_rvs, *spec.missing_rvs)}
        if mine & set(value_vars):
            return spec
    raise ModelPatternError(
        f"No binary feature matrix among {[v.name for v in value_vars]} and none of them is "
        f"the feature matrix of a linear-Gaussian model. Needed pattern: {PATTERN}."
    )


def spec_of(var):
    """The matched linear-Gaussian model (in the current model context) whose ``Z``, ``A`` or
    imputed ``X`` is ``var``, or ``None``."""
    if var.owner is None or not isinstance(var.owner.op, (*BINARY_MATRIX_OPS, NormalRV)):
        return None
    try:
        model = pm.modelcontext(None)
    except TypeError:
        return None
    for spec in matched_models(model):
        if var is spec.z_rv or var in spec.a_rvs or var in spec.missing_rvs:
            return spec
    return None


class _LinearGaussianIBPStep(BlockedStep):
    """The PyMC side of the linear-Gaussian steps: which variables they own, their stats and
    state; the iteration itself is a
    :class:`~pymc_ibp.step_methods.linear_gaussian_update.LinearGaussianUpdate`."""

    name = "ibp_linear_gaussian"
    stats_dtypes_shapes = {
        "ibp_n_active": (np.int64, []),
        "ibp_log_joint": (np.float64, []),
        "ibp_log_lik": (np.float64, []),
        "ibp_flips": (np.int64, []),
        "ibp_births": (np.int64, []),
        "ibp_deaths": (np.int64, []),
        "ibp_kmax_hit": (bool, []),
        "ibp_births_denied": (np.float64, []),
        "ibp_kmax_suggested": (np.int64, []),
        "ibp_split_merge_accepted": (np.int64, []),
        "ibp_birth_death_accepted": (np.int64, []),
        "ibp_pair_swap_accepted": (np.int64, []),
    }
    _state_class = LinearGaussianIBPState
    #: whether the sweep supports the per-entry log-odds prior mode
    supports_logodds = False
    #: whether the step samples a model whose observed data is a pmi.ShardedData
    supports_sharded = False

    def __new__(cls, *args, **kwargs):
        # with several feature matrices: one instance per matrix (its Z, A and imputed X)
        split = one_step_per_matrix(cls, args, kwargs, _group_by_matrix)
        return split if split is not None else super().__new__(cls, *args, **kwargs)

    def __init__(self, vars=None, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, init_z="auto", split_merge=5,
                 split_merge_proposal="sequential", init_restarts=4, init_anneal=True,
                 birth_death=3, birth_rows=64, init_subsample=1000, init_sweeps=100,
                 column_split_merge=0, pair_swaps=3, init_method="anneal", tuning_repairs=True,
                 k_max_probe=30, data=None):
        model = pm.modelcontext(model)
        if vars is None:
            vars = [spec.z_rv for spec in matched_models(model)]
        value_vars = get_value_vars_from_user_vars(vars, model)
        z_vals = [v for v in value_vars if match_prior(model, model.values_to_rvs[v]) is not None]
        if len(z_vals) > 1:
            raise ModelPatternError(
                f"{type(self).__name__} updates exactly one binary feature matrix; got "
                f"{[v.name for v in z_vals]}. Needed pattern: {PATTERN}."
            )
        if z_vals:
            spec = find_linear_gaussian(model, model.values_to_rvs[z_vals[0]])
        else:
            # Z is updated by another step (e.g. IBPGibbs): draw only A (and imputed X) exactly
            spec = spec_owning(model, value_vars)
        self.spec = spec
        self.update_z = bool(z_vals)
        owned = ([spec.z_rv] if self.update_z else []) + spec.a_rvs + spec.missing_rvs
        owned_vals = [model.rvs_to_values[rv] for rv in owned]
        for v in value_vars:
            if v not in owned_vals:
                raise ModelPatternError(
                    f"{type(self).__name__} updates {[o.name for o in owned_vals]}; it cannot also "
                    f"update {v.name!r}. Assign {v.name!r} to another step."
                )
        self.vars = owned_vals
        self.z_name = model.rvs_to_values[spec.z_rv].name
        if self.update_z and initial_point is not None:
            # the first chain's start, checked before any step runs: a step ordered before
            # this one (e.g. NUTS on the sticks of pmi.IBPStickBreaking) would otherwise fail
            # on it with a message that does not name Z; every chain's start is checked at
            # its first step too
            check_binary_start(initial_point[self.z_name], self.z_name, type(self).__name__)
        for rv in spec.a_rvs + spec.missing_rvs:
            if model.rvs_to_transforms.get(rv) is not None:
                raise ModelPatternError(f"{rv.name!r} must not be transformed.")
        self.n, self.d = spec.shape
        if spec.sharded is not None and not self.supports_sharded:
            raise ModelPatternError(
                f"The observed data of {self.z_name!r}'s likelihood is a {spec.sharded!r}, "
                f"which stays on its shards; {type(self).__name__} needs the data on the "
                f"driver. Use pmi.DataParallelGibbs([{self.z_name}]) (assigned automatically "
                "to such models).")
        self.k_max = spec.k_max
        counts = isinstance(spec.prior, IBPPrior)
        if self.update_z and not counts and not self.supports_logodds:
            raise ModelPatternError(
                f"{type(self).__name__} supports a pmi.IBP prior on {self.z_name!r} only; for a "
                f"Bernoulli (e.g. stick-breaking) prior use pmi.AcceleratedGibbs (window=1)."
            )
        self.split_merge = int(split_merge) if counts else 0
        self.birth_death = int(birth_death) if counts else 0
        self.column_split_merge = int(column_split_merge) if counts else 0
        self.pair_swaps = int(pair_swaps) if counts else 0
        self.birth_rows = int(birth_rows)
        if (self.birth_death < 0 or self.birth_rows < 1 or self.column_split_merge < 0
                or self.pair_swaps < 0):
            raise ValueError("birth_death, column_split_merge and pair_swaps must be >= 0 and "
                             "birth_rows >= 1.")
        # drawing A only (Z by another step, e.g. IBPGibbs, which records the Z move's stats):
        # the collapsed log joint alone
        self._stat_names = per_matrix_stats(self, model, spec.z_rv.name,
                                            only=None if self.update_z else ("ibp_log_joint",))
        self.update = LinearGaussianUpdate(
            model, spec, who=type(self).__name__, update_z=self.update_z, sweep=self._sweep,
            moves=kernels.Moves(self.split_merge, split_merge_proposal, self.column_split_merge,
                                self.birth_death, self.birth_rows, self.pair_swaps),
            initial_point=initial_point, compile_kwargs=compile_kwargs, data=data,
            init_z=init_z, init_restarts=init_restarts, init_anneal=init_anneal,
            init_subsample=init_subsample, init_sweeps=init_sweeps, init_method=init_method,
            column_split_merge=self.column_split_merge, tuning_repairs=tuning_repairs,
            k_max_probe=k_max_probe)
        self.mode = self.update.mode
        self.rng = get_random_generator(rng)

    @property
    def search(self):
        """The chain's start search (:class:`~pymc_ibp.init.search.AnnealedSearch`)."""
        return self.update.search

    def _sweep(self, rng, Z, X, m, noise):  # pragma: no cover - abstract
        raise NotImplementedError

    def _extra_stats(self):
        """Stats a subclass adds to :attr:`stats_dtypes_shapes` (none here)."""
        return {}

    @interrupt_safe  # the kernels take the step's Generator (see _numba_utils)
    def step(self, point):
        new, info = self.update.step(self.rng, point)
        stats_ = {
            "ibp_n_active": info.n_active,
            "ibp_log_joint": info.log_joint,
            "ibp_log_lik": info.log_lik,
            "ibp_flips": info.flips,
            "ibp_births": info.births,
            "ibp_deaths": info.deaths,
            "ibp_kmax_hit": info.kmax_hit,
            "ibp_births_denied": info.births_denied,
            "ibp_kmax_suggested": info.kmax_suggested,
            "ibp_split_merge_accepted": info.moves.split_merge,
            "ibp_birth_death_accepted": info.moves.birth_death,
            "ibp_pair_swap_accepted": info.moves.pair_swaps,
            **self._extra_stats(),
        }
        return new, [{self._stat_names[k]: v for k, v in stats_.items() if k in self._stat_names}]

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.update.reset(tune)

    def reset_tuning(self):
        pass

    @staticmethod
    def potential_scope(model, var):
        """What a potential must not depend on for this step to take ``var``: ``Z`` is
        sampled with ``A`` integrated out (and its imputed entries), ``A`` given ``Z``."""
        spec = spec_of(var)
        if spec is not None and var is spec.z_rv:
            return [var, *spec.a_rvs, *spec.missing_rvs]
        return [var]

    @staticmethod
    def competence(var, has_grad):
        # IDEAL for the Z, A and imputed X of a model with the linear-Gaussian pattern (data
        # on the driver; sharded data go to DataParallelGibbs); other IBP models go to
        # IBPGibbs (any likelihood)
        spec = spec_of(var)
        if spec is None or spec.sharded is not None:
            return Competence.INCOMPATIBLE
        return Competence.IDEAL


@refuses_potentials
class AcceleratedGibbs(_LinearGaussianIBPStep):
    r"""Accelerated collapsed Gibbs sampler for the linear-Gaussian IBP (Doshi-Velez & Ghahramani
    2009, §4, eqs. 7–8, Alg. 1).

    .. math:: P(z_{nk}=1\mid\cdot) \propto \frac{m_{-n,k}}{N-1-m_{-n,k}+\beta}\,
        \mathcal N\big(x_n;\ z_n\mu_{-n},\ (z_n\Sigma_{-n}z_n^\top+\sigma_x^2) I_D\big)

    These are the conditionals of :class:`CollapsedGibbs`, computed from the feature posterior
    :math:`(\Sigma, \mu)` of all rows by removing and re-adding one row at a time (rank-one
    updates, :func:`pymc_ibp.kernels.row_update`): :math:`O(N(K^2+KD))` per sweep.  Births are
    block-Gibbs sampled into free slots; after the sweep ``A`` is drawn from
    :math:`\mathcal N(\mu, \Sigma)`, then the missing entries of ``X``.

    ``pm.sample`` picks it for every model with the linear-Gaussian pattern (``X ~ Normal(Z @ A,
    σx)``, ``A ~ Normal(0, σa)``): it mixes like the collapsed sampler at about the cost of the
    uncollapsed one.  Other likelihoods go to :class:`pymc_ibp.IBPGibbs`.  Details: the docs
    page *AcceleratedGibbs*.

    Parameters
    ----------
    vars : list
        The ``pmi.IBP`` variable (``A`` and imputed data are added automatically).
    model, rng, initial_point, compile_kwargs, blocked
        As for PyMC's steps.
    window : int
        Rows removed from the posterior at a time (default 1, the cheapest); see the docs page.
    refresh : int, optional
        Rows between recomputations of the posterior (default ``max(5, N/10)``); see the docs page.
    init_z : {"auto", "point", "prior", "surrogate"}
        Where a chain starts (default ``"auto"``: a given ``Z``, else the start search); see
        :mod:`pymc_ibp.init.policy`.
    split_merge : int
        Split–merge proposals per sweep (Meeds et al. 2007; default 5, 0: off); see the docs page.
    split_merge_proposal : {"sequential", "random"}
        Their allocation (default ``"sequential"``); see :mod:`pymc_ibp.kernels.split_merge`.
    column_split_merge : int
        Split–merge proposals chosen uniformly over features (default 0: off); see the docs page.
    birth_death : int
        Data-driven birth / death proposals per sweep (default 3, 0: off); see the docs page.
    birth_rows : int
        Rows a birth draws its feature from (default 64); see the docs page.
    pair_swaps : int
        Pattern swaps of feature pairs per sweep (default 3, 0: off); see the docs page.
    init_sweeps : int
        Sweeps of each annealed start search (default 100; 0: no search); see the docs page.
    init_restarts : int
        Start searches, the best one kept (default 4); see :mod:`pymc_ibp.init.search`.
    init_subsample : int
        Rows the start search runs on for larger ``N`` (default 1000; 0: all); see the docs page.
    init_method : {"anneal", "vi"}
        The annealed search (default) or a variational fit (``"vi"``); see the docs page.
    tuning_repairs : bool
        Repairs of combination modes on all rows during tuning (default True); see the docs page.
    init_anneal : bool
        Annealing of the multi-start tuning of ``init_sweeps=0`` (default True); see the docs page.
    k_max_probe : int
        When every ``K_max`` slot is in use in a kept draw, sweeps of a probe with room for more
        features, whose ``K+`` the :class:`~pymc_ibp.TruncationWarning` and the stat
        ``ibp_kmax_suggested`` turn into the ``K_max`` to use (default 30; 0: off); see the
        docs page.

    References
    ----------
    F. Doshi-Velez and Z. Ghahramani (2009). Accelerated sampling for the Indian buffet
    process. *ICML*, 273-280.

    F. Doshi-Velez (2009). *The Indian buffet process: scalable inference and extensions*. MSc
    thesis, University of Cambridge.

    E. Meeds, Z. Ghahramani, R. M. Neal and S. T. Roweis (2007). Modeling dyadic data with
    binary latent factors. *NIPS 19*.
    """

    name = "accelerated_gibbs"
    supports_logodds = True

    def __init__(self, vars=None, *, window=1, refresh=None, **kwargs):
        super().__init__(vars, **kwargs)
        if isinstance(window, bool) or not float(window).is_integer() or window < 1:
            raise ValueError(f"AcceleratedGibbs needs an integer window >= 1; got "
                             f"window={window!r}.")
        self.window = int(window)
        if self.window > 1 and not self.mode.counts:
            raise ModelPatternError(
                f"window > 1 is implemented for the pmi.IBP prior only; {self.z_name!r} has a "
                "Bernoulli prior: use window=1."
            )
        self.refresh = int(refresh) if refresh is not None else kernels.refresh_interval(self.n)

    def _sweep(self, rng, Z, X, m, noise):
        mode = self.mode
        if self.window > 1:
            return kernels.accelerated_sweep_window(rng, Z, X, m, noise, mode.alpha,
                                                    mode.beta, self.refresh, self.window)
        # rows with missing entries: (z_n, x_n,mis) as a block, writing the new x_n,mis into X
        return kernels.accelerated_sweep(rng, Z, X, m, noise, mode.sweep_prior, self.refresh,
                                         miss=self.update.mask)


@refuses_potentials
class CollapsedGibbs(_LinearGaussianIBPStep):
    r"""Classic collapsed Gibbs sampler for the linear-Gaussian IBP (Griffiths & Ghahramani 2011;
    Doshi-Velez 2009, §3.2).

    .. math:: P(z_{nk}=1\mid\cdot) \propto \frac{m_{-n,k}}{N-1-m_{-n,k}+\beta}\,p(X\mid Z),

    with :math:`p(X\mid Z)` evaluated in full (Griffiths & Ghahramani 2011, §5) from cached
    :math:`Z^\top Z`,
    :math:`Z^\top X` at :math:`O(K^3+K^2D)` per element, so a sweep costs
    :math:`O(NK(K^3+K^2D))`.  The correctness reference for :class:`AcceleratedGibbs` and a
    reasonable choice for small ``N``.  Births as in :class:`AcceleratedGibbs`.
    """

    name = "collapsed_gibbs"

    @staticmethod
    def competence(var, has_grad):
        # never chosen automatically: AcceleratedGibbs is the same chain, faster
        return Competence.INCOMPATIBLE

    def _sweep(self, rng, Z, X, m, noise):
        return kernels.collapsed_sweep(rng, Z, X, m, noise, self.mode.alpha,
                                       self.mode.beta, kernels.block_sq_norms(X, noise))
