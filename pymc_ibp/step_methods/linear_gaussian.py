"""Collapsed and accelerated Gibbs steps for linear-Gaussian latent feature models.

Both steps update ``Z`` and ``A`` together: a sweep of ``Z`` with ``A`` integrated out, then
``A`` drawn from its exact Gaussian conditional given the new ``Z`` (so the trace holds ``A``
and every other step sees a consistent state), then imputed entries of ``X`` (if any) drawn
from ``N(Z A, σx²)`` — a data-augmentation Gibbs step that keeps the posterior of the observed
entries exact.  ``Z`` may have the :class:`pymc_ibp.IBP` prior (column counts and births) or
independent Bernoulli entries, e.g. under :class:`pymc_ibp.IBPStickBreaking` (per-entry prior
log-odds, no births); see :mod:`pymc_ibp.matching.prior_modes`.

Initialisation policy (``init_z="auto"``, the default): a chain starts from the ``Z`` it is
given when the user gave one (``pm.sample(initvals={"Z": ...})`` or ``initval=`` on the
variable), and otherwise from the best of a few annealed searches that each begin at a draw of
the prior (PyMC's default start, the prior's support point — all zeros for the IBP — counts as
"not given", also when another step has moved a per-entry prior's probabilities before the
first update of ``Z``; see ``init_sweeps`` of :class:`AcceleratedGibbs`).  With a per-entry
prior (the stick-breaking or dependent IBP) the search runs with the IBP's counts and births
at the mass those probabilities imply, and its features are put in the slots in decreasing
order of use.  The search runs at the value of a free ``α`` at the chain's initial point,
not at the chain's current ``α`` (drawn given PyMC's all-zero start before the first update of
``Z``).  Where the likelihood's mean has an offset that is one free variable the same for every
row (``Z @ A + b``, ``b`` of shape ``(D,)`` or ``()``), the search fits a baseline beside ``Z``
and ``b`` starts at its initial value plus that baseline, unless the user gave ``b``.  With
``init_method="vi"`` a chain without a given ``Z`` starts from a variational fit instead.

All state that changes during a run is in :class:`LinearGaussianIBPState` (the step's
``sampling_state``), so a run can be checkpointed and resumed (see the docs page
"Checkpoint and resume").
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp import kernels
from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.exceptions import DataError, ModelPatternError, warn_slots_in_use
from pymc_ibp.init.given import StartDefaults, check_binary_start, initial_value_given
from pymc_ibp.kernels.offsets import RowOffset, group_labels, group_row_sums, joint_groups
from pymc_ibp.matching.graph import (
    first_axis_index,
    row_constant_variable,
    row_indexed_variable,
    slot_dim,
    strip,
)
from pymc_ibp.matching.linear_gaussian import PATTERN, find_linear_gaussian, matched_models
from pymc_ibp.matching.prior_modes import prior_mode
from pymc_ibp.matching.priors import BINARY_MATRIX_OPS, match_prior
from pymc_ibp.step_methods.stats import group_by_matrix, one_step_per_matrix, per_matrix_stats

#: the split–merge proposals by name.  Steps keep the name, not the kernel: a numba dispatcher
#: held by a step would be pickled by value when PyMC sends the step to a spawned worker, and
#: rebuilt there without its on-disk cache (compiled again in every worker, about 26 s).
_SPLIT_MERGE = {"sequential": kernels.sequential_split_merge,
                "random": kernels.random_split_merge}

__all__ = ["AcceleratedGibbs", "CollapsedGibbs", "LinearGaussianIBPState"]


@dataclass_state
class LinearGaussianIBPState(StepMethodState):
    """Everything a linear-Gaussian IBP step changes during a run (plus ``rng``)."""

    sweeps: int
    started: bool
    warned: bool
    n_tune: int
    restarts: int
    segment: int
    candidates: list


# The start search's cooling schedule (AcceleratedGibbs._search_schedule; measurements there):
#: fraction of ``init_sweeps`` over which the noise variance cools, up to this many e-folds
SEARCH_COOL_FRACTION = 0.6
#: e-folds of ``v0 / σx²`` cooled over ``SEARCH_COOL_FRACTION · init_sweeps`` sweeps; a larger
#: ratio cools over proportionally more sweeps (the same rate per sweep)
SEARCH_COOL_EFOLDS = 1.5
#: the longest cooling, in units of ``init_sweeps``
SEARCH_COOL_MAX = 5.0
#: sweeps at ``σx²`` after the cooling, in units of ``init_sweeps``
SEARCH_SETTLE_FRACTION = 0.4


def _group_by_matrix(model, vars_):
    """Split the value variables ``vars_`` by the feature matrix they belong to (its ``Z``,
    ``A`` and imputed entries); variables of no matched model form a last group."""
    return group_by_matrix(model, vars_, [(spec.z_rv, *spec.a_rvs, *spec.missing_rvs)
                                          for spec in matched_models(model)])


def _column_mean_fill(X, M):
    """A copy of ``X`` with the entries ``M`` set to their column's mean over the others."""
    X = np.array(X, dtype=np.float64, copy=True)
    obs = ~M
    n_obs = obs.sum(axis=0)
    mean = np.where(obs, X, 0.0).sum(axis=0) / np.maximum(n_obs, 1)
    X[M] = np.broadcast_to(mean, X.shape)[M]
    return X


def _prediction(Z, X, m, noise):
    """``Z μ`` (``N x D``), ``μ`` the feature posterior mean given ``Z`` and ``X`` at ``noise``;
    ``None`` when no feature is in use (start search only)."""
    act = np.flatnonzero(np.asarray(m) > 0)
    if act.size == 0:
        return None
    G, RX = kernels.suff_stats(Z, X, act)
    _, mu = kernels.posterior_from_stats(G, RX, noise)
    return Z[:, act].astype(np.float64) @ mu


def _fill_from_z(Z, X, M, m, noise):
    """Set the entries ``M`` of ``X`` (in place) to the prediction ``Z μ`` (start search)."""
    pred = _prediction(Z, X, m, noise)
    if pred is not None:
        X[M] = pred[M]


def _search_baselines(model, spec, initial_point=None, model_point=None):
    """``(c0, c1, per_column, name, given, group)`` for each block of columns whose offset is
    one free, untransformed variable (value ``name``) of this block alone, the same for every
    row (``b`` of shape ``(D,)``, ``(1, D)`` or ``()``; ``group = None``) or one per group of
    rows (``b[group]`` with ``b`` of shape ``(G, D)``, or ``(G,)`` as ``b[group][:, None]``;
    ``group`` the symbolic group vector): the start search fits a baseline there
    (:func:`_baseline`), and the chain starts that variable at its initial value plus the
    baseline unless the user ``given`` its initial value.  Without a per-group baseline the
    search explained the groups' offsets with features of its own (one per group, which
    the chain then kept beside ``b``)."""
    out = []
    rvs = []
    for blk in spec.blocks:
        rv = group = None
        if blk.offset is not None:
            rv = row_constant_variable(model, blk.offset)
            if rv is None:
                rv = row_indexed_variable(model, blk.offset, *blk.shape)
                group = None if rv is None else first_axis_index(strip(blk.offset))
        rvs.append((rv, group))
    names = [rv for rv, _ in rvs]
    for (rv, group), c0, c1 in zip(rvs, spec.cols[:-1], spec.cols[1:], strict=True):
        if rv is None or names.count(rv) > 1:
            continue
        # as broadcast against the block's N x D_b; b[group]: (G, D), not (G,) for all columns
        per_column = (rv.ndim == 2 if group is not None
                      else not (True, *rv.type.broadcastable)[-1])
        out.append((int(c0), int(c1), per_column, model.rvs_to_values[rv].name,
                    initial_value_given(model, [rv], initial_point, model_point), group))
    return tuple(out)


def _any_grouped(groups):
    """Whether ``groups`` (one entry per baseline block, ``None`` for a block without a
    per-group offset; ``None``: no per-group offset at all) holds a per-group offset."""
    return groups is not None and any(g is not None for g in groups)


def _baseline(R, baselines, groups=None):
    """Per block of ``baselines`` (:func:`_search_baselines`) the mean of ``R`` over its rows
    (per column) or over all its entries (a scalar offset), over each group's rows for a
    per-group offset (``groups``: one entry per block, every row's group for a per-group
    offset's block and ``None`` for the others; ``None``: no per-group offset); zero
    elsewhere.  ``1 x D``, or ``N x D`` (one row per row of ``R``) with a per-group offset."""
    grouped = _any_grouped(groups)
    groups = [None] * len(baselines) if groups is None else groups
    c = np.zeros((R.shape[0] if grouped else 1, R.shape[1]))
    for (c0, c1, per_column, *_), g in zip(baselines, groups, strict=True):
        if g is None:
            c[:, c0:c1] = R[:, c0:c1].mean(axis=0) if per_column else R[:, c0:c1].mean()
            continue
        _, inv, count = np.unique(g, return_inverse=True, return_counts=True)
        if per_column:  # each group's mean row, or the mean of its entries
            block, n_entries = R[:, c0:c1], count
        else:
            block, n_entries = R[:, c0:c1].sum(axis=1, keepdims=True), count * (c1 - c0)
        c[:, c0:c1] = (group_row_sums(block, inv, len(count)) / n_entries[:, None])[inv]
    return c


def _group_values(base, g, c0, c1):
    """``(labels, values)``: the groups in ``g`` (every row's group) and, for each, its
    row of ``base[:, c0:c1]`` (a per-group baseline: an array with one row per row of ``g``,
    the same at every row of a group)."""
    labels, first = np.unique(g, return_index=True)
    return labels, base[first, c0:c1]


class _LinearGaussianIBPStep(BlockedStep):
    """Shared machinery: model matching, hyperparameter reads, ``A`` and imputation draws."""

    name = "ibp_linear_gaussian"
    stats_dtypes_shapes = {
        "ibp_n_active": (np.int64, []),
        "ibp_log_joint": (np.float64, []),
        "ibp_log_lik": (np.float64, []),
        "ibp_flips": (np.int64, []),
        "ibp_births": (np.int64, []),
        "ibp_deaths": (np.int64, []),
        "ibp_kmax_hit": (bool, []),
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
                 column_split_merge=0, pair_swaps=3, init_method="anneal", tuning_repairs=True):
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
            spec = self._spec_owning(model, value_vars)
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
        self._slot_dim = slot_dim(model, spec.z_rv.name)  # named by a TruncationWarning
        if self.update_z and initial_point is not None:
            # the first chain's start, checked before any step runs: a step ordered before
            # this one (e.g. NUTS on the sticks of pmi.IBPStickBreaking) would otherwise fail
            # on it with a message that does not name Z; every chain's start is checked at
            # its first step too
            check_binary_start(initial_point[self.z_name], self.z_name, type(self).__name__)
        # one block of columns per observed matrix: its A, its imputed entries (if any)
        self._blocks = [
            (int(c0), int(c1), model.rvs_to_values[b.a_rv].name,
             model.rvs_to_values[b.missing_rv].name if b.missing_rv is not None else None,
             b.missing_mask)
            for b, c0, c1 in zip(spec.blocks, spec.cols[:-1], spec.cols[1:], strict=True)]
        for rv in spec.a_rvs + spec.missing_rvs:
            if model.rvs_to_transforms.get(rv) is not None:
                raise ModelPatternError(f"{rv.name!r} must not be transformed.")
        self.n, self.d = spec.shape
        self._sharded = spec.sharded
        if self._sharded is not None and not self.supports_sharded:
            raise ModelPatternError(
                f"The observed data of {self.z_name!r}'s likelihood is a {self._sharded!r}, "
                f"which stays on its shards; {type(self).__name__} needs the data on the "
                f"driver. Use pmi.DataParallelGibbs([{self.z_name}]) (assigned automatically "
                "to such models).")
        self.k_max = spec.k_max
        self.mode = prior_mode(spec.prior, self.n, self.k_max)
        if self.update_z and not self.mode.counts and not self.supports_logodds:
            raise ModelPatternError(
                f"{type(self).__name__} supports a pmi.IBP prior on {self.z_name!r} only; for a "
                f"Bernoulli (e.g. stick-breaking) prior use pmi.AcceleratedGibbs (window=1)."
            )
        # whether the noise scales are free variables (then the start search estimates them)
        free = set(model.free_RVs)
        self._free_sx = any(v in free for v in ancestors([spec.column_scales()[0]]))
        self._free_sa = any(v in free for v in ancestors([spec.column_scales()[1]]))
        hyper = model.replace_rvs_by_values([*spec.column_scales(), *self.mode.symbolic])
        self._hyper_fn = compile_point_fn(model, hyper, compile_kwargs=compile_kwargs)
        # sharded data stay on their shards (pmi.DataParallelGibbs reads them there)
        self._X = None if self._sharded is not None else spec.filled()  # read only
        self._mask = spec.missing_mask
        self._offset_fn = spec.compile_offset(model, compile_kwargs=compile_kwargs)
        fixed = self._mask is None and self._offset_fn is None
        self._colsq = kernels.column_sq_norms(self._X) if fixed and self._X is not None else None
        self._col_var = {}  # data variance of a block of columns, for the annealing
        if init_z not in ("auto", "prior", "point"):
            raise ValueError(f"init_z must be 'auto', 'prior' or 'point'; got {init_z!r}.")
        self.init_z = init_z
        self.init_restarts = int(init_restarts)
        if self.init_restarts < 1:
            raise ValueError(f"init_restarts must be >= 1; got {init_restarts!r}.")
        self.init_anneal = bool(init_anneal)
        if init_method not in ("anneal", "vi"):
            raise ValueError(f"init_method must be 'anneal' or 'vi'; got {init_method!r}.")
        self.init_method = init_method if self.mode.counts else "anneal"
        self.split_merge = int(split_merge) if self.mode.counts else 0
        if split_merge_proposal not in _SPLIT_MERGE:
            raise ValueError(f"split_merge_proposal must be one of {sorted(_SPLIT_MERGE)}; got "
                             f"{split_merge_proposal!r}.")
        self.split_merge_proposal = split_merge_proposal
        self.birth_death = int(birth_death) if self.mode.counts else 0
        self.column_split_merge = int(column_split_merge) if self.mode.counts else 0
        self.pair_swaps = int(pair_swaps) if self.mode.counts else 0
        self.birth_rows = int(birth_rows)
        self.init_subsample = int(init_subsample or 0)
        self.init_sweeps = int(init_sweeps)
        self.tuning_repairs = bool(tuning_repairs) and self.mode.counts
        # the start search's moves (IBP prior only): the chain's own, at least the defaults,
        # plus column split–merge proposals (whatever the chain itself uses)
        self._search_moves = (max(self.split_merge, 5), max(self.column_split_merge, 5),
                              max(self.birth_death, 3), max(self.pair_swaps, 5))
        if (self.birth_death < 0 or self.birth_rows < 1 or self.column_split_merge < 0
                or self.pair_swaps < 0):
            raise ValueError("birth_death, column_split_merge and pair_swaps must be >= 0 and "
                             "birth_rows >= 1.")
        # drawing A only (Z by another step, e.g. IBPGibbs, which records the Z move's stats):
        # the collapsed log joint alone
        self._stat_names = per_matrix_stats(self, model, spec.z_rv.name,
                                            only=None if self.update_z else ("ibp_log_joint",))
        # whether the user gave a chain's start of Z (its own initval= or pm.sample's
        # initvals; PyMC builds the steps at chain 0's start, and initvals may differ between
        # chains): told per chain (_from_prior).  The model's own initial point, not the one
        # given to the step: that one holds pm.sample's initvals
        ip = model.initial_point() if self.update_z else None
        self._starts = (StartDefaults(model, [spec.z_rv], initial_point, ip) if self.update_z
                        else None)
        self._baselines = (_search_baselines(model, spec, initial_point, ip)
                           if self.update_z else ())
        # the group vectors of per-group offsets (b[group]), read at every step (pm.Data)
        groups = [g for *_, g in self._baselines if g is not None]
        self._group_fn = (compile_point_fn(model, model.replace_rvs_by_values(groups),
                                           compile_kwargs=compile_kwargs) if groups else None)
        self._groups = None
        # the start search's α when α is a free variable: its value at the chain's initial
        # point (the prior's support point or the user's value), not the chain's current one,
        # which the α step drew given PyMC's all-zero start of Z before this step's first
        # call (about 1/(1 + H_N) under a Gamma(1, 1) prior)
        self._search_alpha = None
        if self.update_z and self.mode.counts and any(
                v in free for v in ancestors([self.mode.symbolic[0]])):
            self._hyper(initial_point if initial_point is not None else ip)
            self._search_alpha = self.mode.alpha
        if self.update_z and not self.mode.counts:  # is_support_point at the initial
            self._hyper(ip)  # probabilities until the first step sets them
        self.rng = get_random_generator(rng)
        self._reset_chain(0)

    def _reset_chain(self, tune):
        """Per-chain state (:class:`LinearGaussianIBPState`), set by :meth:`setup_chain`."""
        self.sweeps, self.started, self.warned = 0, False, False
        self.n_tune = int(tune)
        self.restarts, self.segment, self.candidates = 1, 0, []

    # --- helpers --------------------------------------------------------------------------
    @staticmethod
    def _spec_owning(model, value_vars):
        """The matched model whose A (or imputed X) is among ``value_vars``."""
        for spec in matched_models(model):
            mine = {model.rvs_to_values[rv] for rv in (*spec.a_rvs, *spec.missing_rvs)}
            if mine & set(value_vars):
                return spec
        raise ModelPatternError(
            f"No binary feature matrix among {[v.name for v in value_vars]} and none of them is "
            f"the feature matrix of a linear-Gaussian model. Needed pattern: {PATTERN}."
        )

    def _hyper(self, point):
        """The likelihood's variances as a :class:`kernels.Noise` (column blocks of equal
        scales); the prior mode's parameters are set from the same point."""
        sx, sa, *prior = self._hyper_fn(point)
        self.mode.set_params(*prior)
        sx, sa = np.asarray(sx, dtype=np.float64), np.asarray(sa, dtype=np.float64)
        for noise, v in ((True, sx), (False, sa)):
            v = np.broadcast_to(v, (self.d,))
            bad = ~(np.isfinite(v) & (v > 0))
            if np.any(bad):  # name the block (observed matrix) of the first bad column
                c = int(np.argmax(bad))
                block, _ = self.spec.block_of(c)
                what = (f"noise sigma of {block.obs_rv.name!r}" if noise else
                        f"prior sigma of {block.a_rv.name!r} (the features of "
                        f"{block.obs_rv.name!r})")
                raise DataError(f"{type(self).__name__}: the {what} is {v[c]} at column {c}; "
                                "the scales must be positive and finite.")
        return kernels.noise_blocks(sx * sx, sa * sa, self.d)

    def _trXX(self, X, noise):
        """``‖X_b‖²`` per block of ``noise``."""
        if self._colsq is None:
            return kernels.block_sq_norms(X, noise)
        return np.add.reduceat(self._colsq, noise.cols[:-1])

    def _data_var(self, noise):
        """The observed data's variance in each block of ``noise`` (cached)."""
        key = tuple(noise.cols)
        if key not in self._col_var:
            self._col_var[key] = kernels.block_variances(self.spec.X, key)
        return self._col_var[key]

    def _offset(self, point):
        """The offset added to ``Z @ A`` at ``point`` (a :class:`RowOffset`), or ``None``."""
        return None if self._offset_fn is None else self._offset_fn(point)

    def _complete_data(self, point, offset):
        """``(X, owned)``: the data the ``Z`` and ``A`` updates see, ``X`` with the imputed
        entries filled in, minus the offset added to ``Z @ A`` (if any); ``owned``: ``X`` is
        a new array, the step's own for this iteration (with missing entries or an offset),
        which the start search may shift in place; else it is the model's (read-only)."""
        X, owned = self._X, self._mask is not None
        if owned:
            X = X.copy()
            for c0, c1, _, miss, mask in self._blocks:
                if miss is not None:
                    X[:, c0:c1][mask] = point[miss]
        if offset is None:
            return X, owned
        return offset.subtract_from(X, out=X if owned else None), True

    def _sweep(self, Z, X, m, noise):  # pragma: no cover - abstract
        raise NotImplementedError

    def _extra_stats(self):
        """Stats a subclass adds to :attr:`stats_dtypes_shapes` (none here)."""
        return {}

    def _feature_stats(self, Z, X, act):
        """``G = Z_actᵀ Z_act`` and ``RX = Z_actᵀ X`` for the ``A`` draw and the log joint."""
        return kernels.suff_stats(Z, X, act)

    def _log_joint(self, Z, X, trXX, noise, ibp=None, M=None):
        """``(log p(X | Z, σ) + log P(Z), log p(X | Z, σ))``, ``A`` integrated out; with
        ``ibp = (α, β)`` under the IBP prior at that mass whatever the model's prior (the
        start search of a per-entry prior, whose features are not yet in their slots).  With
        a mask ``M`` of missing entries the likelihood is that of the observed entries alone
        (:func:`~pymc_ibp.kernels.observed_loglik`): values imputed from one
        ``Z`` would favour it over the others."""
        m = Z.sum(axis=0)
        act = np.flatnonzero(m > 0)
        G, RX = kernels.suff_stats(Z, X, act)
        joint, ll = self._joint_from_stats(G, RX, Z, m, act, trXX, noise, ibp)
        if M is None:
            return joint, ll
        obs = kernels.observed_loglik(Z, X, M, noise)
        return joint - ll + obs, obs

    def _joint_from_stats(self, G, RX, Z, m, act, trXX, noise, ibp=None):
        """:meth:`_log_joint` (complete data) from the statistics ``G``, ``RX`` of the active
        columns ``act``."""
        if ibp is not None and not self.mode.counts:
            return kernels.collapsed_log_joint(G, RX, m[act].astype(np.int64), trXX, Z.shape[0],
                                               noise, ibp[0], ibp[1], self.k_max)
        return self.mode.log_joint(G, RX, Z, m, act, trXX, noise)

    def _tempered(self, noise, w, v0):
        """``noise`` with each block's ``σx²`` moved geometrically towards ``v0`` (weight
        ``1 - w``; never below ``σx²``)."""
        v0 = np.maximum(v0, noise.sx2)
        return noise._replace(sx2=np.exp(w * np.log(noise.sx2) + (1.0 - w) * np.log(v0)))

    def _fresh_start(self, X, noise, restarts=1):
        """:meth:`_search`'s ``Z``."""
        return self._search(X, noise, restarts)[0]

    def _search(self, X, noise, restarts=1, in_place=False):
        """``(Z, base, fit)``: a new starting ``Z`` for the chain (or a multi-start segment;
        tuning only, it only chooses where the kept chain starts).  With the IBP prior and
        ``init_sweeps > 0``: the best (highest collapsed log joint at the current
        hyperparameters, a free ``σx`` or ``σa`` at each search's own final estimate of it) of
        ``restarts`` annealed searches, each ``init_sweeps`` sweeps (with the split–merge and
        birth/death moves) from its own prior draw, on all rows, or for a large data set
        (``N > init_subsample``) on one random subset of ``init_subsample`` rows (compared as
        an IBP over those rows), the other rows then assigned by :meth:`_assign_rows`.  A
        prior draw otherwise (``init_sweeps=0``).  With a per-entry prior (no counts) the
        searches use the IBP's counts and births at the mass :meth:`LogOddsMode.search_mass`
        and the result has its features in decreasing order of use (the stick-breaking
        order).  ``base`` (a :class:`RowOffset`, or ``None``): the baseline the search
        fitted beside ``Z`` where the offset is a free variable (:meth:`_anneal`), to be
        added to that offset's current value (:meth:`_full_baseline`: one row added to every
        row, or with per-group offsets one row per group read through the rows' groups).
        ``in_place``: ``X`` is the chain's own array (the chain's first search), which is
        then left minus the baseline in the columns of the offsets whose initial value the
        user did not give (:meth:`_offset_base`), what the chain's first ``A`` draw sees,
        instead of an ``N x D`` copy each for the rows' assignment and
        for that shift (275 MB each at N = 10^6, D = 36).  ``fit``: ``noise`` with a free
        ``σx`` or ``σa`` at the best search's final estimate of it (:meth:`_noise_estimate`)."""
        ns = self.init_subsample
        if self.init_method == "vi":
            return self._vi_start(X, noise), None, noise
        if not self.init_sweeps:
            return self.mode.draw(self.rng), None, noise
        rng = self.rng
        sub = bool(ns) and self.n > ns
        rows = np.sort(rng.choice(self.n, size=ns, replace=False)) if sub else None
        if not sub and self._sharded is not None:  # sharded data: the rows fetched
            rows, sub = np.arange(self.n), True
        Xs = np.ascontiguousarray(X[rows]) if sub else X
        Ms = None if self._mask is None else (self._mask[rows] if sub else self._mask)
        trXs = kernels.block_sq_norms(Xs, noise)
        gs = (None if self._groups is None
              else [g if g is None or not sub else g[rows] for g in self._groups])
        best, best_score, best_noise, best_base = None, -np.inf, noise, None
        ibp = self._search_prior()
        for _ in range(restarts):
            # each search scored at the noise it ended with (its estimate of a free σx: the
            # chain's initial σx can be far off and would favour too few or too many features)
            Zs, Xf, end_noise, base = self._anneal(Xs, noise, trXs, Ms, gs)
            score = (self._log_joint(Zs, Xf, kernels.block_sq_norms(Xf, end_noise), end_noise,
                                     ibp, Ms)[0] if restarts > 1 else 0.0)
            if best is None or score > best_score:
                best, best_score, best_noise, best_base = Zs, score, end_noise, base
        if not self.mode.counts:  # the most used features in the first slots
            best = np.ascontiguousarray(best[:, np.argsort(-best.sum(axis=0), kind="stable")])
        if not sub:
            if in_place and best_base is not None:
                for c0, c1, *_, given, _ in self._baselines:
                    if not given:
                        X[:, c0:c1] -= best_base[:, c0:c1]
            return best, self._full_baseline(best_base, slice(None)), best_noise
        Z = np.zeros((self.n, self.k_max), dtype=np.int8)
        Z[rows] = best
        best_base = self._full_baseline(best_base, rows)
        if best_base is None or not in_place:
            if rows.size < self.n:
                self._assign_rows(Z, X if best_base is None else best_base.subtract_from(X),
                                  best_noise, ibp)
            return Z, best_base, best_noise
        best_base.subtract_from(X, out=X)  # the rows assigned on the data minus the whole
        if rows.size < self.n:  # baseline, then the columns of offsets the user gave put back
            self._assign_rows(Z, X, best_noise, ibp)
        for c0, c1, *_, given, _ in self._baselines:
            if given:
                best_base.add_to(X, c0, c1)
        return Z, best_base, best_noise

    def _full_baseline(self, base, rows):
        """The baseline ``base`` (:func:`_baseline`) fitted on the rows ``rows`` (an index
        array, or ``slice(None)``: all of them), for all rows, as a :class:`RowOffset`: one
        row (no per-group offset), or each group's value of a per-group offset at every row
        of the group (0 for a group that ``rows`` miss), held as one row per combination of
        the offsets' groups (:func:`joint_groups`; ``b[group]``: ``G x D`` rather than
        ``N x D``, 275 MB at N = 10^6, D = 36)."""
        if base is None or not _any_grouped(self._groups):
            return None if base is None else RowOffset(base)
        first, index = joint_groups(*(g for g in self._groups if g is not None))
        full = np.zeros((first.size, base.shape[1]))
        for (c0, c1, *_), g in zip(self._baselines, self._groups, strict=True):
            if g is None:
                full[:, c0:c1] = base[0, c0:c1]
                continue
            seen, values = _group_values(base, g[rows], c0, c1)
            at_first = g[first]  # each combination's group of this offset
            at = np.minimum(np.searchsorted(seen, at_first), len(seen) - 1)
            hit = seen[at] == at_first  # groups that ``rows`` hold (others: 0)
            for j in range(c1 - c0):  # a column at a time: no N x D temporary
                full[:, c0 + j] = np.where(hit, values[at, j], 0.0)
        return RowOffset(full, index)

    def _assign_rows(self, Z, X, noise, ibp):
        """After a start fitted on a subset of the rows (the search, the variational start),
        one sweep of all rows given the fitted features, at the fit's estimate of the noise
        and without births (``Z`` in place): the start then covers every row.  Left empty,
        the other rows made the first steps of the hyperparameters see a ``Z`` that explains
        almost nothing (a free ``σx`` jumped to the data's spread, about twice the noise on
        block images) and the first sweeps of the chain ran at that noise; at N = 10^6 the
        chain then kept 7 features for the 4 glyphs, 2.6 x 10^5 nats below the truth."""
        miss = kernels.NO_MISS if self._mask is None else self._mask
        kernels.accelerated_sweep_core(
            self.rng, Z, X, Z.sum(axis=0).astype(np.int64), noise, ibp[0], ibp[1],
            kernels.refresh_interval(self.n), False, kernels.NO_LOGODDS, kernels.NO_EXT,
            kernels.NO_EXT, self.n, False, miss)

    def _anneal(self, X, noise, trXX, M=None, groups=None):
        """Sweeps with split–merge and birth/death moves from a prior draw, the noise variance
        falling geometrically from the data's variance to ``σx²`` over the first ``span`` of
        them and staying there (a simulated-annealing search for a starting point; ``span``
        and the number of sweeps from :meth:`_search_schedule`).

        With missing entries (mask ``M``) the search starts them at their column's observed
        mean and re-imputes them after every sweep as ``Z μ``, ``μ`` the feature posterior
        mean given the current ``Z`` (an EM-style fill: the chain's own imputed values, drawn
        once at the start, would otherwise steer the search towards features that fit them).
        Where the offset is a free variable, the same for every row (``b`` in ``Z @ A + b``,
        shape ``(D,)`` or ``()``), the search also fits a *baseline*, the correction of that
        offset's current value: the data's mean to begin with, then after every sweep the
        mean of what the features' posterior mean leaves (an EM-style update, as for the
        missing entries).  Without it, data far from the offset's initial value (block images
        plus 3, ``b`` starting at its prior mean 0) were explained by features that every row
        uses, which ``b`` cannot take over (``b`` and such a feature's row of ``A`` only
        trade along a ridge): of four chains, two kept one feature in all 60 rows and nothing
        else, two filled all ``K_max`` slots, five or more with such features, 165–315 nats
        below a chain started at the truth.

        Returns ``(Z, X, noise, base)`` with ``X`` as filled last (minus the baseline),
        ``noise`` the final noise (a free ``σx`` or ``σa`` re-estimated after every sweep and
        at the end, given the current ``Z``: :meth:`_residual_variance`,
        :meth:`_feature_variance`) and ``base`` the baseline (:func:`_baseline`) or ``None``;
        ``groups``: the rows' groups for each per-group offset (:func:`_baseline`)."""
        rng = self.rng
        alpha, beta = self._search_prior()
        nr = X.shape[0]
        n_sm, n_csm, n_bd, n_ps = self._search_moves
        Z = ibp_draw_core(rng, alpha, beta, nr, self.k_max)
        if M is not None:
            X = _column_mean_fill(X, M)
            trXX = kernels.block_sq_norms(X, noise)
        base = None
        if self._baselines:
            base = _baseline(X, self._baselines, groups)
            X = X - base  # a new array: the caller's X is left alone
            trXX = kernels.block_sq_norms(X, noise)
        v0 = kernels.block_variances(X, noise.cols)
        span, sweeps = self._search_schedule(v0, noise)
        target = noise
        for t in range(sweeps):
            m = Z.sum(axis=0).astype(np.int64)
            if M is not None and t > 0:
                _fill_from_z(Z, X, M, m, target)
                trXX = kernels.block_sq_norms(X, noise)
            if base is not None and t > 0:  # the baseline given the current Z
                pred = _prediction(Z, X, m, target)
                shift = _baseline(X if pred is None else X - pred, self._baselines, groups)
                X -= shift
                base += shift
                trXX = kernels.block_sq_norms(X, noise)
            if t > 0:  # a free σx or σa: its estimate given the current Z
                target = self._noise_estimate(Z, X, m, target, v0)
            s2 = self._tempered(target, min(1.0, t / span), v0)
            kernels.accelerated_sweep(rng, Z, X, m, s2, alpha, beta,
                                      kernels.refresh_interval(nr), False, kernels.NO_LOGODDS,
                                      kernels.NO_MISS if M is None else M)
            _SPLIT_MERGE[self.split_merge_proposal](rng, Z, X, m, s2, alpha, beta, n_sm, trXX)
            kernels.column_split_merge(rng, Z, X, m, s2, alpha, beta, n_csm, trXX)
            kernels.sequential_birth_death(rng, Z, X, m, s2, alpha, beta, n_bd,
                                           self.birth_rows, trXX)
            kernels.pair_pattern_swaps(rng, Z, X, m, s2, alpha, beta, n_ps, trXX)
            if t >= span and (t - span) % 10 == 0 or t == sweeps - 1:
                self._dissolve_combinations(Z, X, trXX, s2, (alpha, beta), M)
        if M is not None:
            _fill_from_z(Z, X, M, Z.sum(axis=0), target)
        return Z, X, self._noise_estimate(Z, X, Z.sum(axis=0), target, v0), base

    def _noise_estimate(self, Z, X, m, noise, v0):
        """``noise`` with a free ``σx`` and a free ``σa`` replaced by their estimates given
        ``Z`` (:meth:`_residual_variance`, then :meth:`_feature_variance`); ``v0`` the data's
        variance per block."""
        if self._free_sx:
            noise = noise._replace(sx2=self._residual_variance(Z, X, m, noise, v0))
        if self._free_sa:
            noise = noise._replace(sa2=self._feature_variance(Z, X, m, noise))
        return noise

    @staticmethod
    def _feature_variance(Z, X, m, noise):
        """Per block, ``E‖a_k‖² / d_b`` averaged over the active features under their
        posterior given ``Z`` (``‖μ_k‖² + d_b Σ_kk``; an EM update of a Normal(0, σa²) prior's
        variance): the start search's estimate of a free ``σa²``, as
        :meth:`_residual_variance` is of a free ``σx²`` (a far-off initial ``σa`` otherwise
        shapes the start: at four times the glyphs' scale, searches on the dependent IBP's
        tracking data merged glyphs, 360 nats below the truth).  Unchanged without active
        features."""
        act = np.flatnonzero(np.asarray(m) > 0)
        if act.size == 0:
            return noise.sa2
        G, RX = kernels.suff_stats(Z, X, act)
        Sig, mu = kernels.posterior_from_stats(G, RX, noise)
        out = np.empty_like(noise.sa2)
        for b in range(noise.sa2.shape[0]):
            c0, c1 = noise.cols[b], noise.cols[b + 1]
            w = c1 - c0
            e2 = (mu[:, c0:c1] ** 2).sum() + w * np.trace(Sig[b])
            out[b] = max(e2 / (act.size * w), 1e-6 * noise.sa2[b])
        return out

    def _search_schedule(self, v0, noise):
        """``(span, sweeps)`` of a start search: the noise variance falls from the data's
        variance ``v0`` to ``σx²`` over ``span`` sweeps, then ``sweeps - span = 0.4 ·
        init_sweeps`` sweeps follow at ``σx²``.  ``span = 0.6 · init_sweeps`` when
        ``log(v0 / σx²) <= 1.5`` (e.g. block images at their noise) and proportionally more
        for a larger ratio (at most ``5 · init_sweeps``): the same cooling rate per sweep
        whatever the signal-to-noise ratio.  Measured: the accelerated-sampling paper's data
        (``σx = 0.2``, ``log(v0 / σx²) = 4.5``) with 20% of the entries missing, 6 of 8
        searches at N = 500 (each the best of 4) within 20 nats of the true ``Z``
        (observed-data log joint) with this schedule (``span`` 179) against none of 8 with
        ``span`` 60; with complete data 8/8 against 5/8."""
        s = self.init_sweeps
        efolds = float(np.max(np.log(np.maximum(v0, noise.sx2) / noise.sx2)))
        stretch = min(max(1.0, efolds / SEARCH_COOL_EFOLDS),
                      SEARCH_COOL_MAX / SEARCH_COOL_FRACTION)
        span = int(math.ceil(SEARCH_COOL_FRACTION * s * stretch))
        return max(1, span), span + int(math.ceil(SEARCH_SETTLE_FRACTION * s))

    def _search_prior(self):
        """``(α, β)`` of the IBP prior the start search uses: the model's, or for a per-entry
        prior the mass it implies (:meth:`LogOddsMode.search_mass`) with ``β = 1``."""
        if self.mode.counts:
            alpha = self.mode.alpha if self._search_alpha is None else self._search_alpha
            return alpha, self.mode.beta
        return self.mode.search_mass(), 1.0

    def _dissolve_combinations(self, Z, X, trXX, noise, ibp=None, M=None):
        """Greedy repair of *combination modes* (start search and tuning only, not a Markov
        move): a
        feature ``c`` whose posterior mean is close to that of another feature ``a``
        (``‖μ_c - μ_a‖ < ‖μ_c‖/2``), to the sum of two others ``a + b`` or to their difference
        ``a - b`` stands for them on its rows (e.g. one feature for "glyph 0 + glyph 3" on the
        rows having both; or, on the rows of ``a`` without ``b``, ``b`` switched on with
        ``c ≈ a - b`` instead of ``a``); a feature may also just fit noise on a hundred rows.
        ``c`` is emptied, its rows moved to ``a`` (and ``b``; with ``b`` switched off for a
        difference) or to nothing, when that raises the collapsed log joint at ``noise``.  No
        single-row, pairwise or pattern-swap move makes these changes, which involve up to three
        features on many rows at once, and the data-driven deaths only remove features whose
        owners all fall in their row subset.  ``Z`` is changed in place.  Each candidate is
        scored from the statistics updated on ``c``'s rows (complete data), so a repair costs
        ``O(N K (K + D))`` once plus ``O(m_c K D)`` per candidate."""
        best = self._log_joint(Z, X, trXX, noise, ibp, M)[0]
        for _ in range(self.k_max):
            m = Z.sum(axis=0)
            act = np.flatnonzero(m > 0)
            if act.size < 2:
                return
            G, RX = kernels.suff_stats(Z, X, act)
            _, mu = kernels.posterior_from_stats(G, RX, noise)
            improved = False
            for ci in self.rng.permutation(act.size):
                norm = float(mu[ci] @ mu[ci])
                o = np.array([j for j in range(act.size) if j != ci])
                one = ((mu[ci] - mu[o]) ** 2).sum(axis=1)
                iu, ju = np.triu_indices(o.size, k=1)
                two = ((mu[ci] - mu[o[iu]] - mu[o[ju]]) ** 2).sum(axis=1)
                # c ≈ a - b: on c's rows a on, b off (b over-used, a under-used there)
                ia, ib = (x.ravel() for x in np.meshgrid(np.arange(o.size), np.arange(o.size)))
                keep = ia != ib
                ia, ib = ia[keep], ib[keep]
                diff = ((mu[ci] - mu[o[ia]] + mu[o[ib]]) ** 2).sum(axis=1)
                cands = ([(((o[i],), ()), d) for i, d in enumerate(one)]
                         + [(((o[i], o[j]), ()), d) for i, j, d in zip(iu, ju, two, strict=True)]
                         + [(((o[i],), (o[j],)), d) for i, j, d in zip(ia, ib, diff, strict=True)])
                cands = sorted((c for c in cands if c[1] < 0.25 * norm), key=lambda c: c[1])
                for on, off in [((), ())] + [c for c, _ in cands[:3]]:  # ((), ()) deletes c
                    Z2 = Z.copy()
                    rows = Z2[:, act[ci]] != 0
                    Z2[rows, act[ci]] = 0
                    for j in on:
                        Z2[rows, act[j]] = 1
                    for j in off:
                        Z2[rows, act[j]] = 0
                    if M is None:  # the statistics updated on c's rows only: O(|rows| K D)
                        zo = Z[rows][:, act].astype(np.float64)
                        zn = Z2[rows][:, act].astype(np.float64)
                        G2 = G - zo.T @ zo + zn.T @ zn
                        RX2 = RX - (zo - zn).T @ X[rows]
                        m2 = m.copy()
                        m2[act] += (zn - zo).sum(axis=0).astype(m2.dtype)
                        k2 = m2[act] > 0
                        score = self._joint_from_stats(
                            np.ascontiguousarray(G2[np.ix_(k2, k2)]),
                            np.ascontiguousarray(RX2[k2]), Z2, m2, act[k2], trXX, noise, ibp)[0]
                    else:
                        score = self._log_joint(Z2, X, trXX, noise, ibp, M)[0]
                    if score > best:
                        Z[:] = Z2
                        best, improved = score, True
                        break
                if improved:
                    break
            if not improved:
                return

    @staticmethod
    def _residual_variance(Z, X, m, noise, v0):
        """Per block, the mean squared residual ``X - Z μ`` with ``μ`` the feature posterior
        mean given ``Z`` (at least ``10⁻⁴`` of the data's variance ``v0``, or the current
        ``σx²`` where the data are constant, ``v0 = 0``): the start search's estimate of a free
        ``σx²``."""
        pred = _prediction(Z, X, m, noise)
        R = X if pred is None else X - pred
        ms = kernels.block_sq_norms(R, noise) / (R.shape[0] * np.diff(noise.cols))
        return np.maximum(ms, np.where(v0 > 0, 1e-4 * v0, noise.sx2))

    def _vi_start(self, X, noise):
        """A fresh start from a finite variational fit (:func:`pymc_ibp.inference.variational_z`),
        at the current scales as starting values; on a random subset of ``init_subsample``
        rows when ``N > 2 · init_subsample``, the other rows then assigned to its features by
        :meth:`_assign_rows` (at the scales a free ``σx`` or ``σa`` would have given the fitted
        rows, as after the search)."""
        from pymc_ibp.inference.variational import variational_z  # inference imports steps

        ns = self.init_subsample
        rows = (np.sort(self.rng.choice(self.n, size=ns, replace=False))
                if ns and self.n > 2 * ns else np.arange(self.n))
        widths = np.diff(noise.cols)
        Xs = X if rows.size == self.n else X[rows]  # no copy of X when fitting every row
        Z = np.zeros((self.n, self.k_max), dtype=np.int8)
        Z[rows] = Zs = variational_z(Xs, np.repeat(noise.sx2, widths),
                                     np.repeat(noise.sa2, widths), self.mode.alpha, self.k_max,
                                     self.rng, cols=noise.cols)
        if rows.size < self.n:
            fit = self._noise_estimate(Zs, Xs, Zs.sum(axis=0), noise,
                                       kernels.block_variances(Xs, noise.cols))
            self._assign_rows(Z, X, fit, self._search_prior())
        return Z

    def _from_prior(self, Z):
        """Whether the chain starts from the prior (initialisation policy in the module
        docstring), given the chain's initial ``Z``."""
        # PyMC's default start, the prior's support point, counts as not given also when
        # another step (e.g. the dependent IBP's sticks and processes) has moved a per-entry
        # prior's probabilities before Z's first update
        given = self._starts.given({self.z_name: Z}, self.z_name, self.mode.is_support_point)
        return self.init_z == "prior" or (self.init_z == "auto" and not given)

    def _will_search(self, Z):
        """Whether :meth:`_start` runs the annealed start search for the initial ``Z`` (on
        ``X`` minus the offset's starting value, if any, and with a baseline beside ``Z``
        where the offset is a free variable: :meth:`_anneal`)."""
        return (self._from_prior(Z) and self.init_method == "anneal"
                and self.init_sweeps > 0)

    def _start(self, Z, X, noise, owned=False):
        """``(Z, base, fit)``: the chain's first ``Z`` (initialisation policy in the module
        docstring), the search's baseline (:meth:`_anneal`; ``None`` without one) and the
        scales the chain's first ``A`` is drawn at (``noise`` with a free ``σx`` or ``σa`` at
        the search's estimate of it after a search, else ``noise``).  From
        the prior with ``init_sweeps > 0``: the best of ``init_restarts`` annealed searches
        (:meth:`_search`), before the first sweep, so that runs with little or no tuning
        start from it too.  With ``init_sweeps=0``: a prior draw and the multi-start schedule
        of :meth:`_restart` (``R`` segments of ``L >= 10`` sweeps in the first half of
        tuning).  ``owned``: ``X`` is the step's own array, which the start search may shift in
        place (:meth:`_search`)."""
        self.started = True
        if not self._from_prior(Z):
            return Z, None, noise
        if self._will_search(Z):
            found, base, fit = self._search(X, noise, restarts=self.init_restarts,
                                            in_place=owned)
            if not self.mode.counts and not np.isfinite(self.mode.log_prior(found)):
                return Z, None, noise  # the search (under the IBP's counts) broke a hard zero
            return found, base, fit
        R = self.init_restarts if self.init_method == "anneal" else 1
        while R > 1 and self.n_tune // (2 * R) < 10:
            R -= 1
        self.restarts, self.segment = R, (self.n_tune // (2 * R) if R > 1 else 0)
        return self._fresh_start(X, noise), None, noise

    def _start_offsets(self, base, X, offset, point, shifted):
        """``(X, offset, point)`` after a start search that fitted the baseline ``base``: the
        offset variables whose initial value the user did not give start at that value plus
        the baseline, and the data the first ``A`` draw (and that iteration's imputed entries
        and statistics) sees follows them; a value the user gave is left as it is.
        ``shifted``: the search already took the baseline off ``X`` in place (``X`` is the
        step's own array); otherwise ``X`` is the model's and a shifted copy is returned."""
        point = dict(point)
        base = self._offset_base(base)
        groups = self._groups or [None] * len(self._baselines)
        for (c0, c1, per_column, name, given, _), g in zip(self._baselines, groups, strict=True):
            if given:
                continue
            v = np.asarray(point[name])
            if g is None:
                shift = (base.table[0, c0:c1].reshape(v.shape) if per_column
                         else base.table[0, c0])
            else:  # b[group]: each group's row from the table
                # each table row's group of this offset: a scatter through the rows'
                # combination index (_full_baseline), no sort of N (np.unique: 0.12 s at 10^6)
                labels = np.empty(base.table.shape[0], dtype=np.asarray(g).dtype)
                labels[base.rows] = g
                values = base.table[:, c0:c1]
                shift = np.zeros(v.shape)
                shift[labels] = values if per_column else values[:, 0]
            point[name] = (v + shift).astype(v.dtype)
        # the search left the chain's own X shifted (_search's in_place); the model's array
        # is shifted into a copy
        return X if shifted else base.subtract_from(X), offset.plus(base), point

    def _offset_base(self, base):
        """The baseline ``base`` (a :class:`RowOffset` of the search's own table, changed in
        place) made zero in the columns of the offsets whose initial value the user gave: the
        part of it the chain's offset takes over."""
        for c0, c1, *_, given, _ in self._baselines:
            if given:
                base.table[:, c0:c1] = 0.0
        return base

    def _restart(self, Z, X, trXX, noise):
        """Multi-start burn-in (tuning only): the first ``R·L`` tuning sweeps are ``R``
        segments of ``L`` sweeps, each from its own prior draw of ``Z``; after the last one the
        chain continues from the segment end with the highest collapsed log joint (evaluated
        at the current hyperparameters).  Only the starting point of the post-tuning chain is
        chosen this way: after the ``R·L``-th sweep every sweep is the exact kernel."""
        s, L, R = self.sweeps, self.segment, self.restarts
        if not L or s == 0 or s > R * L or s % L:
            return Z
        self.candidates.append(Z)  # Z is the step's own copy of the point's value
        if s < R * L:
            return self._fresh_start(X, noise)
        scores = [self._log_joint(c, X, trXX, noise, M=self._mask)[0] for c in self.candidates]
        best = self.candidates[int(np.argmax(scores))]
        self.candidates = []
        return best

    def _repairs_now(self):
        """Whether this iteration ends with the greedy repair of :meth:`_dissolve_combinations`
        on all rows: at the middle and the last tuning iteration (``tuning_repairs``, IBP
        prior, data on the driver; at least 10 tuning iterations).  Tuning only, like the
        restarts: it only chooses where the kept chain starts.  It catches what the start
        search cannot see when it ran on a subset of the rows (``N > init_subsample``): a
        feature the first full sweeps split between two slots (measured on block images,
        N = 10⁴, the chain of seed 3: a 66-row copy of a glyph's feature, 495 nats below the
        truth, dissolved by one repair to 53 nats below)."""
        t, T = self.sweeps, self.n_tune
        return (self.tuning_repairs and T >= 10 and t in (T // 2, T - 1)
                and self._sharded is None)

    def _annealed(self, noise):
        """Noise variances for the Z moves.  Inside a multi-start segment (tuning only, with
        ``init_anneal``) each block's falls geometrically from the data's variance to its
        ``σx²`` over the first 60% of the segment's sweeps, so that features appear largest
        first instead of all slots filling with noise in the first sweep; ``σx²`` itself
        everywhere else."""
        L = self.segment
        if not (L and self.init_anneal) or self.sweeps >= self.restarts * L:
            return noise
        t, span = self.sweeps % L, max(1, int(math.ceil(0.6 * L)))
        if t >= span:
            return noise
        return self._tempered(noise, t / span, self._data_var(noise))

    @interrupt_safe  # the kernels take the step's Generator (see _numba_utils)
    def step(self, point):
        noise = self._hyper(point)
        z_in = self.spec.z_value(point, self.z_name)
        # int8 inside the kernels whatever the value's dtype (pmi.IBP: int8; a Bernoulli: int64)
        if not self.started and self.update_z:
            check_binary_start(z_in, self.z_name, type(self).__name__)
        Z = np.array(z_in, dtype=np.int8, copy=True)
        if self._group_fn is not None:  # one entry per baseline block (None: not grouped)
            vals = iter(self._group_fn(point))
            self._groups = [None if group is None else  # labels as b[group] reads them
                            group_labels(next(vals), np.shape(point[name])[0])
                            for _, _, _, name, _, group in self._baselines]
        offset = self._offset(point)
        X, owned = self._complete_data(point, offset)
        trXX = self._trXX(X, noise)
        flips = births = deaths = hit = sm_acc = bd_acc = ps_acc = 0
        noise_a = noise  # the scales A and the imputed entries are drawn at
        if self.update_z:
            # right after the start search only A is drawn: the other steps then update the
            # hyperparameters given the searched Z before the first Z move (the initial values
            # of a free sigma_x or alpha, e.g. alpha drawn given the all-zero Z, can be far off)
            searched = not self.started and self._will_search(Z)
            if not self.started:
                # after a search, A at its estimates of a free sigma_x / sigma_a: at the
                # initial values (e.g. sigma_a = 2 for features of size 0.5) the empty slots'
                # A would send sigma_a's first update far off (up to 27 for 0.5 measured)
                Z, base, noise_a = self._start(Z, X, noise, owned)
                if base is not None:
                    X, offset, point = self._start_offsets(base, X, offset, point, owned)
                    trXX = self._trXX(X, noise)
            if searched and self._mask is not None:  # the A draw below sees the search's fill
                X = _column_mean_fill(X, self._mask)
                for _ in range(3):
                    _fill_from_z(Z, X, self._mask, Z.sum(axis=0), noise_a)
                trXX = self._trXX(X, noise)
            Z = self._restart(Z, X, trXX, noise)
            m = Z.sum(axis=0).astype(np.int64)
            noise_z = self._annealed(noise)
        if self.update_z and not searched:
            flips, births, deaths, hit = self._sweep(Z, X, m, noise_z)
            if self._mask is not None:  # the sweep may have re-drawn the missing entries
                trXX = self._trXX(X, noise)
            if self.split_merge > 0:
                sm_acc = _SPLIT_MERGE[self.split_merge_proposal](
                    self.rng, Z, X, m, noise_z, self.mode.alpha, self.mode.beta,
                    self.split_merge, trXX)
            if self.column_split_merge > 0:
                sm_acc += kernels.column_split_merge(
                    self.rng, Z, X, m, noise_z, self.mode.alpha, self.mode.beta,
                    self.column_split_merge, trXX)
            if self.birth_death > 0:
                bd_acc = kernels.sequential_birth_death(
                    self.rng, Z, X, m, noise_z, self.mode.alpha, self.mode.beta,
                    self.birth_death, self.birth_rows, trXX)
            if self.pair_swaps > 0:
                ps_acc = kernels.pair_pattern_swaps(
                    self.rng, Z, X, m, noise_z, self.mode.alpha, self.mode.beta,
                    self.pair_swaps, trXX)
            if self._repairs_now():
                self._dissolve_combinations(Z, X, trXX, noise, M=self._mask)
                m[:] = Z.sum(axis=0)
        else:
            m = Z.sum(axis=0).astype(np.int64)
        # A | Z, X: active rows from the exact Gaussian conditional, empty slots from the prior
        act = np.flatnonzero(m > 0)
        G, RX = self._feature_stats(Z, X, act)
        widths = np.diff(noise.cols)
        sa_col = np.sqrt(np.repeat(noise_a.sa2, widths))
        A = self.rng.standard_normal((self.k_max, self.d)) * sa_col
        if act.size:
            A[act] = kernels.draw_active_features(self.rng, G, RX, noise_a)
        new = dict(point)
        if self.update_z:
            new[self.z_name] = Z.astype(z_in.dtype, copy=False)
        sx_col = np.sqrt(np.repeat(noise_a.sx2, widths))
        for c0, c1, a_name, miss, mask in self._blocks:
            new[a_name] = A[:, c0:c1]
            if miss is not None:
                mean = Z @ A[:, c0:c1] + (0.0 if offset is None else offset.columns(c0, c1))
                sd = np.broadcast_to(sx_col[c0:c1], mean.shape)[mask]
                new[miss] = mean[mask] + sd * self.rng.standard_normal(sd.shape)
        # label-invariant statistics, with the hyperparameters this sweep used
        log_joint, loglik = self.mode.log_joint(G, RX, Z, m, act, trXX, noise)
        if hit and not self.warned and self.sweeps >= self.n_tune:  # kept draws only
            self.warned = True
            warn_slots_in_use(type(self).__name__, self.z_name, self.k_max, self._slot_dim)
        self.sweeps += 1
        stats_ = {
            "ibp_n_active": int(act.size),
            "ibp_log_joint": float(log_joint),
            "ibp_log_lik": float(loglik),
            "ibp_flips": int(flips),
            "ibp_births": int(births),
            "ibp_deaths": int(deaths),
            "ibp_kmax_hit": bool(hit),
            "ibp_split_merge_accepted": int(sm_acc),
            "ibp_birth_death_accepted": int(bd_acc),
            "ibp_pair_swap_accepted": int(ps_acc),
            **self._extra_stats(),
        }
        return new, [{self._stat_names[k]: v for k, v in stats_.items() if k in self._stat_names}]

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self._reset_chain(tune)

    def reset_tuning(self):
        pass

    @staticmethod
    def _spec_of(var):
        """The matched linear-Gaussian model (in the current model context) whose ``Z``,
        ``A`` or imputed ``X`` is ``var``, or ``None``."""
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

    @staticmethod
    def competence(var, has_grad):
        # IDEAL for the Z, A and imputed X of a model with the linear-Gaussian pattern (data
        # on the driver; sharded data go to DataParallelGibbs); other IBP models go to
        # IBPGibbs (any likelihood)
        spec = _LinearGaussianIBPStep._spec_of(var)
        if spec is None or spec.sharded is not None:
            return Competence.INCOMPATIBLE
        return Competence.IDEAL


class AcceleratedGibbs(_LinearGaussianIBPStep):
    r"""Accelerated collapsed Gibbs sampler for the linear-Gaussian IBP (Doshi-Velez & Ghahramani
    2009, §4, eqs. 7–8, Alg. 1).

    Samples from exactly the same conditionals as :class:`CollapsedGibbs`,

    .. math:: P(z_{nk}=1\mid\cdot) \propto \frac{m_{-n,k}}{N-1-m_{-n,k}+\beta}\,
        \mathcal N\big(x_n;\ z_n\mu_{-n},\ (z_n\Sigma_{-n}z_n^\top+\sigma_x^2) I_D\big),

    but keeps the feature posterior :math:`(\Sigma, \mu)` of all the data and removes/re-adds one
    row at a time by rank-one updates (window :math:`W=1` by default, in the corrected form derived
    in :func:`pymc_ibp.kernels.row_update`), so a sweep costs
    :math:`O(N(K^2+KD))`, linear in ``N``.  The posterior is recomputed from the exact
    statistics :math:`Z^\top Z, Z^\top X` every ``refresh`` rows (default ``max(5, N/10)``).
    Births: row ``n``'s singleton set is block-Gibbs sampled over all ``j`` that fit in the
    free slots (:math:`\mathrm{Poisson}(j; \alpha\beta/(N-1+\beta))` prior), exactly the
    conditional of :class:`pymc_ibp.IBP`; new features take uniformly random empty slots.
    After the sweep ``A`` is drawn from :math:`\mathcal N(\mu, \Sigma)` column-wise and empty
    slots of ``A`` from the prior.

    Parameters
    ----------
    vars : list
        The ``pmi.IBP`` variable (``A`` and imputed data are added automatically).
    window : int
        Rows removed from the posterior at a time (``W``, default 1, the cheapest; ``W > 1``
        uses the matrix-normal window likelihood of Doshi-Velez 2009, eq. 4.2 at ``O(W³ + W²D)``
        per entry).
    refresh : int, optional
        Rows between from-scratch recomputations of the posterior.
    init_z : {"auto", "prior", "point"}
        ``"auto"`` (default): start from the chain's initial ``Z`` when the user gave one
        (``pm.sample(initvals={"Z": ...})`` or ``initval=`` on the variable; PyMC's default,
        the prior's support point, does not count), otherwise from a draw of the prior
        (custom-step runs are not jittered by PyMC, so chains would otherwise all start at the
        same point).
        ``"prior"``: always a prior draw; ``"point"``: always the chain's initial point.
    split_merge : int
        Split–merge Metropolis–Hastings proposals after each sweep (Meeds et al. 2007; Dahl 2005;
        default 5, 0 to
        disable).  They move between modes that single-site Gibbs cannot, e.g. two halves of
        one feature merging.
    split_merge_proposal : {"sequential", "random"}
        ``"sequential"`` (default): anchored, sequentially-allocated proposals whose owners
        are allocated by their collapsed predictive
        (:mod:`pymc_ibp.kernels.split_merge`);
        they split and merge features of any size.  ``"random"``: the uniform
        allocation of Meeds et al. (2007), whose acceptance decays like ``3^{-m}`` in the
        feature size ``m``.
    column_split_merge : int
        Split–merge proposals per sweep whose selection is uniform over features instead of
        rows (default 0: off; :func:`pymc_ibp.kernels.column_split_merge`): with
        row-anchored selection a pair of small duplicated features is almost never proposed
        for a merge, so surplus small features linger.  Measured (benchmarks/README.md): it
        helped on data with many small features (the accelerated-sampling paper's synthetic
        data) but made short runs on block images worse, hence off by default.  ``pmi.IBP``
        prior only.  Accepted moves count in ``ibp_split_merge_accepted``.
    birth_death : int
        Data-driven birth/death Metropolis–Hastings proposals after each sweep (default 3; 0
        disables them; :func:`pymc_ibp.kernels.sequential_birth_death`): a new
        feature is built from the residuals of an anchor row and the rows of a random subset
        that resemble it, so a chain can gain a large feature in one move (e.g. leave
        ``K+ = 0``), and the reverse move deletes one.  ``pmi.IBP`` prior only.
    pair_swaps : int
        Pattern-swap Metropolis–Hastings proposals on feature pairs after each sweep (default
        3; 0 disables them; :mod:`pymc_ibp.kernels.pair_swaps`): one of five
        transpositions of the patterns ``(z_g, z_h) ∈ {00, 01, 10, 11}`` of two features,
        applied to every row at once.  They leave *complement modes*, where a feature is
        represented by one owned by almost every row plus a "negative" feature on the rows
        that lack it.  ``O(N(K + D) + K³)`` per proposal.  ``pmi.IBP`` prior only; accepted
        moves in ``ibp_pair_swap_accepted``.
    birth_rows : int
        Size of the random row subset a birth allocates (default 64); larger subsets propose
        larger features at ``O(birth_rows (K² + KD))`` per proposal.
    init_sweeps : int
        The annealed start search (default 100; 0 turns it off): a chain starting from the
        prior (``init_z="auto"`` without a user's ``Z``, or ``init_z="prior"``) starts from the
        best, by collapsed log joint at the chain's initial hyperparameters, of
        ``init_restarts`` searches, each ``init_sweeps`` sweeps from its own prior draw of ``Z``
        with split–merge, column split–merge, birth/death and pair-swap moves (at least 5, 5,
        3 and 5 per sweep whatever the chain's own settings), the noise
        variance the ``Z`` moves see falling geometrically from the data's variance ``v0`` to
        ``σx²`` over the first 60% of the sweeps, so that features appear largest first (over
        proportionally more sweeps when ``log(v0/σx²) > 1.5``, at most ``5 · init_sweeps``:
        the same cooling rate at any signal-to-noise ratio, :meth:`_search_schedule`), a
        greedy repair of combination and noise features every 10 sweeps after that
        (:meth:`_dissolve_combinations`), ``0.4 · init_sweeps`` sweeps at ``σx²`` in all.
        With missing entries every score of the search (repairs, the choice among restarts)
        is that of the observed entries
        (:func:`~pymc_ibp.kernels.observed_loglik`).  It runs
        before the first iteration, so runs with ``tune=0`` start from it too, and only chooses
        where the chain starts: every iteration of ``pm.sample`` is the exact kernel.  Under a
        per-entry prior (``pmi.IBPStickBreaking``, ``pmi.DependentIBP``) the search uses the
        IBP's counts and births at the mass that prior implies (the mean number of features
        per row) and puts the features found in the slots in decreasing order of use.  A model
        with an offset (``Z @ A + b``) uses the multi-start segments of ``init_sweeps=0``
        instead, since the offset is learned during tuning.  A free ``σx`` or ``σa`` is
        re-estimated given ``Z`` after every sweep of the search (residuals; an EM update of
        the features' variance), so that far-off initial values do not shape the start.  Cost:
        ``init_restarts · init_sweeps`` sweeps of at most ``init_subsample`` rows (3-7 s
        per chain at N = 1000, D = 36 with about 5 features; about 30 s when the features fill
        ``K_max = 30``: docs page "AcceleratedGibbs").  Measured against ``init_sweeps=0``
        (benchmarks/structure.py, README model; docs page "AcceleratedGibbs"): block images
        N = 1000 with ``tune=0``, final gaps to the true ``Z`` of −31 to +18 nats against
        −1330 to +15; the accelerated-sampling paper's data, N = 500, K_max = 40, −172 to −79
        against −1682 to −350.  The first iteration after a search draws only ``A``, so that
        the other steps update the hyperparameters given the searched ``Z`` first.
    init_subsample : int
        For large data sets (``N > init_subsample``, default 1000 rows) the start search
        runs on one random subset of ``init_subsample`` rows; one sweep of all rows without
        births then assigns the other rows to the features found (about ``1 + init_restarts ·
        init_sweeps · 1000 / N`` full sweeps of work).  0: search on all rows.
    init_restarts : int
        Number of annealed start searches (default 4; the best is kept).  With
        ``init_sweeps=0`` it is the older multi-start burn-in instead: the first half of the
        tuning sweeps is split into ``init_restarts`` segments of at least 10 sweeps, each
        from its own prior draw of ``Z`` (annealed over its first 60% with ``init_anneal``),
        and the chain continues from the segment end with the highest collapsed log joint.
        Either way it only chooses the starting point of the kept chain (poor local modes,
        e.g. a union feature plus "negative" features, are otherwise practically never left).
    init_method : {"anneal", "vi"}
        How a chain without a given ``Z`` starts (``pmi.IBP`` prior only).  ``"anneal"``
        (default): the annealed start search of ``init_sweeps``.  ``"vi"``: a fit of the
        finite variational approximation (:func:`pymc_ibp.inference.variational_z`; scales
        and ``alpha`` learned inside the fit only; on ``init_subsample`` random rows when
        ``N > 2 · init_subsample``; the best of 3 runs), with no search or multi-start
        burn-in; about 2 s per chain at N = 1000.  Measured against the older multi-start
        burn-in (8 chains, structure.py's protocol): block images N = 1000 with ``tune=0``,
        6/8 chains reached the structure against 3/8; the accelerated-sampler paper's data
        (N = 500, K_max = 40, ``tune=100``), final gaps to the true Z of 67-273 nats against
        370-1913.  Not the default: two short composition runs (two observed matrices with
        different noise, per-dimension noise) ended in poorer modes than with ``"anneal"``.
    tuning_repairs : bool
        Apply the start search's greedy repair (:meth:`_dissolve_combinations`) to all rows
        at the middle and the last tuning iteration (default True; ``pmi.IBP`` prior, at least
        10 tuning iterations).  Tuning only: it chooses where the kept chain starts, every
        kept draw is the exact kernel.  It undoes what a search on a subset of the rows cannot
        see: on block images at N = 10⁴ one chain of four kept a 66-row copy of a glyph's
        feature after the first full sweeps (495 nats below the truth); the repair removed it.
    init_anneal : bool
        With ``init_sweeps=0``: within each multi-start segment, anneal the noise variance used
        by the ``Z`` moves from the data's variance down to the current ``σx²`` over the
        segment's first 60% (default True): features then emerge largest first, instead of the
        first sweep from a prior draw filling every slot when ``σx`` is small.  Tuning only,
        like the restarts.
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

    def _sweep(self, Z, X, m, noise):
        mode = self.mode
        if self.window > 1:
            return kernels.accelerated_sweep_window(self.rng, Z, X, m, noise, mode.alpha,
                                                    mode.beta, self.refresh, self.window)
        alpha, beta = (mode.alpha, mode.beta) if mode.counts else (1.0, 1.0)
        # rows with missing entries: (z_n, x_n,mis) as a block, writing the new x_n,mis into X
        miss = kernels.NO_MISS if self._mask is None else self._mask
        return kernels.accelerated_sweep(self.rng, Z, X, m, noise, alpha, beta, self.refresh,
                                         False, mode.logodds, miss)


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

    def _sweep(self, Z, X, m, noise):
        return kernels.collapsed_sweep(self.rng, Z, X, m, noise, self.mode.alpha,
                                       self.mode.beta, kernels.block_sq_norms(X, noise))
