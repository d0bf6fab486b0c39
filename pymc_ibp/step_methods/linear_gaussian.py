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
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp import kernels
from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import DataError, ModelPatternError, warn_slots_in_use
from pymc_ibp.init.baselines import search_baselines
from pymc_ibp.init.given import StartDefaults, check_binary_start
from pymc_ibp.init.policy import init_z_policy
from pymc_ibp.init.search import AnnealedSearch, AnnealedSearchState, column_mean_fill, fill_from_z
from pymc_ibp.kernels.offsets import group_labels
from pymc_ibp.kernels.split_merge import SPLIT_MERGE_PROPOSALS
from pymc_ibp.matching.graph import (
    slot_dim,
)
from pymc_ibp.matching.linear_gaussian import PATTERN, find_linear_gaussian, matched_models
from pymc_ibp.matching.prior_modes import prior_mode
from pymc_ibp.matching.priors import BINARY_MATRIX_OPS, match_prior
from pymc_ibp.step_methods.stats import group_by_matrix, one_step_per_matrix, per_matrix_stats

__all__ = ["AcceleratedGibbs", "CollapsedGibbs", "LinearGaussianIBPState"]


@dataclass_state
class LinearGaussianIBPState(StepMethodState):
    """Everything a linear-Gaussian IBP step changes during a run (plus ``rng``)."""

    sweeps: int
    started: bool
    warned: bool
    n_tune: int
    search: AnnealedSearchState


def _group_by_matrix(model, vars_):
    """Split the value variables ``vars_`` by the feature matrix they belong to (its ``Z``,
    ``A`` and imputed entries); variables of no matched model form a last group."""
    return group_by_matrix(model, vars_, [(spec.z_rv, *spec.a_rvs, *spec.missing_rvs)
                                          for spec in matched_models(model)])


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
        free = set(model.free_RVs)
        hyper = model.replace_rvs_by_values([*spec.column_scales(), *self.mode.symbolic])
        self._hyper_fn = compile_point_fn(model, hyper, compile_kwargs=compile_kwargs)
        # sharded data stay on their shards (pmi.DataParallelGibbs reads them there)
        self._X = None if self._sharded is not None else spec.filled()  # read only
        self._mask = spec.missing_mask
        self._offset_fn = spec.compile_offset(model, compile_kwargs=compile_kwargs)
        fixed = self._mask is None and self._offset_fn is None
        self._colsq = kernels.column_sq_norms(self._X) if fixed and self._X is not None else None
        self.split_merge = int(split_merge) if self.mode.counts else 0
        self.split_merge_proposal = split_merge_proposal
        self.birth_death = int(birth_death) if self.mode.counts else 0
        self.column_split_merge = int(column_split_merge) if self.mode.counts else 0
        self.pair_swaps = int(pair_swaps) if self.mode.counts else 0
        self.birth_rows = int(birth_rows)
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
        # chains): told per chain.  The model's own initial point, not the one given to the
        # step: that one holds pm.sample's initvals
        ip = model.initial_point() if self.update_z else None
        baselines = search_baselines(model, spec, initial_point, ip) if self.update_z else ()
        # the group vectors of per-group offsets (b[group]), read at every step (pm.Data)
        groups = [g for *_, g in baselines if g is not None]
        self._group_fn = (compile_point_fn(model, model.replace_rvs_by_values(groups),
                                           compile_kwargs=compile_kwargs) if groups else None)
        # the start search's α when α is a free variable: its value at the chain's initial
        # point (the prior's support point or the user's value), not the chain's current one,
        # which the α step drew given PyMC's all-zero start of Z before this step's first
        # call (about 1/(1 + H_N) under a Gamma(1, 1) prior)
        search_alpha = None
        if self.update_z and self.mode.counts and any(
                v in free for v in ancestors([self.mode.symbolic[0]])):
            self._hyper(initial_point if initial_point is not None else ip)
            search_alpha = self.mode.alpha
        if self.update_z and not self.mode.counts:  # is_support_point at the initial
            self._hyper(ip)  # probabilities until the first step sets them
        self.search = AnnealedSearch(
            spec=spec, mode=self.mode, z_name=self.z_name,
            starts=(StartDefaults(model, [spec.z_rv], initial_point, ip) if self.update_z
                    else None),
            init_z=init_z_policy(init_z, type(self).__name__, on_the_model=True),
            init_restarts=init_restarts, init_anneal=init_anneal,
            init_subsample=init_subsample, init_sweeps=init_sweeps, init_method=init_method,
            # the search's moves (IBP prior only): the chain's own, at least the defaults, plus
            # column split–merge proposals (whatever the chain itself uses)
            moves=(max(self.split_merge, 5), max(self.column_split_merge, 5),
                   max(self.birth_death, 3), max(self.pair_swaps, 5)),
            split_merge_proposal=split_merge_proposal, birth_rows=self.birth_rows,
            tuning_repairs=tuning_repairs, baselines=baselines,
            free_sx=any(v in free for v in ancestors([spec.column_scales()[0]])),
            free_sa=any(v in free for v in ancestors([spec.column_scales()[1]])),
            search_alpha=search_alpha, assign_rows=self._assign_rows)
        self.rng = get_random_generator(rng)
        self._reset_chain(0)

    def _reset_chain(self, tune):
        """Per-chain state (:class:`LinearGaussianIBPState`), set by :meth:`setup_chain`."""
        self.sweeps, self.started, self.warned = 0, False, False
        self.n_tune = int(tune)
        self.search.reset()

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

    def _assign_rows(self, rng, Z, X, noise, ibp):
        """The start search's sweep of the rows outside its subset (``Z`` in place; the
        search's :meth:`~pymc_ibp.init.search.AnnealedSearch.assign_local`): a hook for a step
        whose rows live elsewhere."""
        self.search.assign_local(rng, Z, X, noise, ibp)

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
            self.search.groups = [None if group is None else  # labels as b[group] reads them
                                  group_labels(next(vals), np.shape(point[name])[0])
                                  for _, _, _, name, _, group in self.search.baselines]
        offset = self._offset(point)
        X, owned = self._complete_data(point, offset)
        trXX = self._trXX(X, noise)
        flips = births = deaths = hit = sm_acc = bd_acc = ps_acc = 0
        noise_a = noise  # the scales A and the imputed entries are drawn at
        if self.update_z:
            # right after the start search only A is drawn: the other steps then update the
            # hyperparameters given the searched Z before the first Z move (the initial values
            # of a free sigma_x or alpha, e.g. alpha drawn given the all-zero Z, can be far off)
            searched = not self.started and self.search.will_search(Z)
            if not self.started:
                # after a search, A at its estimates of a free sigma_x / sigma_a: at the
                # initial values (e.g. sigma_a = 2 for features of size 0.5) the empty slots'
                # A would send sigma_a's first update far off (up to 27 for 0.5 measured)
                self.started = True
                Z, base, noise_a = self.search.start(self.rng, Z, X, noise, self.n_tune, owned)
                if base is not None:
                    X, offset, point = self.search.start_offsets(base, X, offset, point, owned)
                    trXX = self._trXX(X, noise)
            if searched and self._mask is not None:  # the A draw below sees the search's fill
                X = column_mean_fill(X, self._mask)
                for _ in range(3):
                    fill_from_z(Z, X, self._mask, Z.sum(axis=0), noise_a)
                trXX = self._trXX(X, noise)
            Z = self.search.restart(self.rng, Z, X, trXX, noise, self.sweeps)
            m = Z.sum(axis=0).astype(np.int64)
            noise_z = self.search.annealed(noise, self.sweeps)
        if self.update_z and not searched:
            flips, births, deaths, hit = self._sweep(Z, X, m, noise_z)
            if self._mask is not None:  # the sweep may have re-drawn the missing entries
                trXX = self._trXX(X, noise)
            if self.split_merge > 0:
                sm_acc = SPLIT_MERGE_PROPOSALS[self.split_merge_proposal](
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
            if self.search.repairs_now(self.sweeps, self.n_tune):
                self.search.dissolve_combinations(self.rng, Z, X, trXX, noise, M=self._mask)
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
