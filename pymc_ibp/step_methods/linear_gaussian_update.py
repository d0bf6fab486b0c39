"""One iteration of a linear-Gaussian IBP model's ``Z`` and ``A`` (and imputed ``X``): the part
that :class:`pymc_ibp.AcceleratedGibbs`, :class:`pymc_ibp.CollapsedGibbs`,
:class:`pymc_ibp.DataParallelGibbs` and the start of :class:`pymc_ibp.IBPGibbs` share.

:class:`LinearGaussianUpdate` reads the model's scales, prior parameters and offsets at the
current point, completes the data (imputed entries filled in, the offset taken off), starts
the chain (:class:`~pymc_ibp.init.search.AnnealedSearch`), runs the step's sweep of ``Z`` and
the moves after it (:func:`pymc_ibp.kernels.linear_gaussian_moves`), draws ``A`` from its exact
Gaussian conditional and the imputed entries from ``N(Z A, σx²)``.  It reads the data and their
statistics through a data object: :class:`LocalData` (the arrays on the driver) or the
data-parallel step's shards (:mod:`pymc_ibp.distributed.modes`).  Its per-chain state
(:class:`LinearGaussianUpdateState`, the search's nested in it) is nested in the step's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state
from pytensor.graph.traversal import ancestors

from pymc_ibp import kernels
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import DataError, warn_slots_in_use
from pymc_ibp.inference.k_max import probe_k_max
from pymc_ibp.init.baselines import search_baselines
from pymc_ibp.init.given import StartDefaults, check_binary_start
from pymc_ibp.init.parameters import StartCheck
from pymc_ibp.init.policy import init_z_policy
from pymc_ibp.init.search import AnnealedSearch, AnnealedSearchState, column_mean_fill, fill_from_z
from pymc_ibp.kernels.offsets import group_labels
from pymc_ibp.matching.graph import slot_knob
from pymc_ibp.matching.prior_modes import prior_mode

__all__ = ["LinearGaussianUpdate", "LinearGaussianUpdateState", "LocalData", "UpdateInfo"]


class LocalData:
    """The data of a linear-Gaussian model held on the driver, as the update reads them:
    ``X`` (``N x D``, missing entries 0; read only), ``‖X_b‖²`` per block (:meth:`trXX`), the
    statistics of the active features (:meth:`feature_stats`) and the assignment of the rows
    outside a subset start search (:meth:`assign_rows`).  ``colsq``: the columns' sums of
    squares when the data the update sees are fixed (no imputed entries, no offset)."""

    def __init__(self, X, colsq=None):
        self.X, self.colsq = X, colsq

    def trXX(self, X, noise):
        """``‖X_b‖²`` per block of ``noise``."""
        return kernels.block_sq_norms(X, noise, self.colsq)

    def feature_stats(self, Z, X, act):
        """``G = Z_actᵀ Z_act`` and ``RX = Z_actᵀ X`` for the ``A`` draw and the log joint."""
        return kernels.suff_stats(Z, X, act)

    def assign_rows(self, search, rng, Z, X, noise, ibp):
        """The rows outside the start search's subset (``Z`` in place):
        :meth:`~pymc_ibp.init.search.AnnealedSearch.assign_local`."""
        search.assign_local(rng, Z, X, noise, ibp)


class UpdateInfo(NamedTuple):
    """What one :meth:`LinearGaussianUpdate.step` did: the sweep's flips, births and deaths,
    whether it filled every slot, the moves' acceptances, the active features, the log joint
    and log-likelihood (``A`` integrated out), the births the free slots denied
    (:class:`~pymc_ibp.kernels.SweepStats`) and the ``K_max`` a probe suggested (0: none ran,
    :func:`~pymc_ibp.inference.k_max.probe_k_max`)."""

    flips: int
    births: int
    deaths: int
    kmax_hit: bool
    moves: kernels.MovesInfo
    n_active: int
    log_joint: float
    log_lik: float
    births_denied: float = 0.0
    kmax_suggested: int = 0


@dataclass_state
class LinearGaussianUpdateState(DataClassState):
    """The update's per-chain state: iterations done, whether the chain has started and has
    warned, its tuning length, the ``K_max`` its probe suggested and the start search's
    state."""

    sweeps: int
    started: bool
    warned: bool
    n_tune: int
    suggested: int
    search: AnnealedSearchState


class LinearGaussianUpdate(WithSamplingState):
    """``Z`` (when ``update_z``), ``A`` and the imputed entries of the matched model ``spec``
    (module docstring), for the step ``who``.  ``sweep(rng, Z, X, m, noise)`` is the step's
    sweep of ``Z`` (in place; returns a :class:`~pymc_ibp.kernels.SweepStats`;
    ``None``: the update only starts chains, each :meth:`step` right after :meth:`reset` and
    only when the search runs);
    ``moves`` the :class:`~pymc_ibp.kernels.Moves` after it; ``data`` a :class:`LocalData`
    or the shards' equivalent (default: the model's arrays); ``k_max_probe``: the sweeps of
    the probe run when ``K_max`` binds in a kept draw (0: none); the start options as for
    :class:`~pymc_ibp.init.search.AnnealedSearch`."""

    _state_class = LinearGaussianUpdateState

    def __init__(self, model, spec, *, who, update_z, sweep, moves, initial_point=None,
                 compile_kwargs=None, data=None, init_z="auto", init_restarts=4,
                 init_anneal=True, init_subsample=1000, init_sweeps=100, init_method="anneal",
                 column_split_merge=0, tuning_repairs=True, k_max_probe=30):
        self.spec, self.who, self.update_z, self.sweep = spec, who, bool(update_z), sweep
        self.k_max_probe = int(k_max_probe)
        self.moves = moves
        self.z_name = model.rvs_to_values[spec.z_rv].name
        self._slot_knob = slot_knob(model, spec.z_rv.name)  # named by a TruncationWarning
        # one block of columns per observed matrix: its A, its imputed entries (if any)
        self.blocks = [
            (int(c0), int(c1), model.rvs_to_values[b.a_rv].name,
             model.rvs_to_values[b.missing_rv].name if b.missing_rv is not None else None,
             b.missing_mask)
            for b, c0, c1 in zip(spec.blocks, spec.cols[:-1], spec.cols[1:], strict=True)]
        self.n, self.d = spec.shape
        self.k_max = spec.k_max
        self.mode = prior_mode(spec.prior, self.n, self.k_max)
        # the prior's parameters at each chain's start (pm.set_data may have moved them)
        self.start_check = StartCheck(model, spec.z_rv, who) if self.update_z else None
        free = set(model.free_RVs)
        hyper = model.replace_rvs_by_values([*spec.column_scales(), *self.mode.symbolic])
        self._hyper_fn = compile_point_fn(model, hyper, compile_kwargs=compile_kwargs)
        self.mask = spec.missing_mask
        self._offset_fn = spec.compile_offset(model, compile_kwargs=compile_kwargs)
        if data is None:  # sharded data stay on their shards (the data-parallel step's data)
            X = None if spec.sharded is not None else spec.filled()  # read only
            fixed = self.mask is None and self._offset_fn is None and X is not None
            data = LocalData(X, kernels.column_sq_norms(X) if fixed else None)
        self.data = data
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
            self.noise(initial_point if initial_point is not None else ip)
            search_alpha = self.mode.alpha
        self._free_alpha = search_alpha is not None
        if self.update_z and not self.mode.counts:  # is_support_point at the initial
            self.start_check.check(ip)  # (the probabilities need valid parameters)
            self.noise(ip)  # probabilities until the first step sets them
        self.search = AnnealedSearch(
            spec=spec, mode=self.mode, z_name=self.z_name,
            starts=(StartDefaults(model, [spec.z_rv], initial_point, ip) if self.update_z
                    else None),
            init_z=init_z_policy(init_z, who, on_the_model=True),
            init_restarts=init_restarts, init_anneal=init_anneal,
            init_subsample=init_subsample, init_sweeps=init_sweeps, init_method=init_method,
            # the search's moves (IBP prior only): the chain's own, at least the defaults, plus
            # column split–merge proposals (whatever the chain itself uses)
            moves=(max(moves.split_merge, 5), max(column_split_merge, 5),
                   max(moves.birth_death, 3), max(moves.pair_swaps, 5)),
            split_merge_proposal=moves.proposal, birth_rows=moves.birth_rows,
            tuning_repairs=tuning_repairs, baselines=baselines,
            free_sx=any(v in free for v in ancestors([spec.column_scales()[0]])),
            free_sa=any(v in free for v in ancestors([spec.column_scales()[1]])),
            search_alpha=search_alpha,
            assign_rows=lambda *args: self.data.assign_rows(self.search, *args))
        self.reset(0)

    def reset(self, tune):
        """A new chain with ``tune`` tuning iterations."""
        self.sweeps, self.started, self.warned = 0, False, False
        self.n_tune = int(tune)
        self.suggested = 0
        self.search.reset()

    def noise(self, point):
        """The likelihood's variances at ``point`` as a :class:`kernels.Noise` (column blocks
        of equal scales); the prior mode's parameters are set from the same point."""
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
                raise DataError(f"{self.who}: the {what} is {v[c]} at column {c}; "
                                "the scales must be positive and finite.")
        return kernels.noise_blocks(sx * sx, sa * sa, self.d)

    @property
    def has_offset(self):
        """Whether the model adds an offset to ``Z @ A``."""
        return self._offset_fn is not None

    def offset(self, point):
        """The offset added to ``Z @ A`` at ``point`` (a :class:`RowOffset`), or ``None``."""
        return None if self._offset_fn is None else self._offset_fn(point)

    def complete_data(self, point, offset):
        """``(X, owned)``: the data the ``Z`` and ``A`` updates see, ``X`` with the imputed
        entries filled in, minus the offset added to ``Z @ A`` (if any); ``owned``: ``X`` is
        a new array, the update's own for this iteration (with missing entries or an offset),
        which the start search may shift in place; else it is the model's (read-only)."""
        X, owned = self.data.X, self.mask is not None
        if owned:
            X = X.copy()
            for c0, c1, _, miss, mask in self.blocks:
                if miss is not None:
                    X[:, c0:c1][mask] = point[miss]
        if offset is None:
            return X, owned
        return offset.subtract_from(X, out=X if owned else None), True

    def step(self, rng, point):
        """``(new point, UpdateInfo)`` of one iteration from ``point`` with the chain's
        generator ``rng``."""
        noise = self.noise(point)
        z_in = self.spec.z_value(point, self.z_name)
        # int8 inside the kernels whatever the value's dtype (pmi.IBP: int8; a Bernoulli: int64)
        if not self.started and self.update_z:
            self.start_check.check(point)
            check_binary_start(z_in, self.z_name, self.who)
        Z = np.array(z_in, dtype=np.int8, copy=True)
        if self._group_fn is not None:  # one entry per baseline block (None: not grouped)
            vals = iter(self._group_fn(point))
            self.search.groups = [None if group is None else  # labels as b[group] reads them
                                  group_labels(next(vals), np.shape(point[name])[0])
                                  for _, _, _, name, _, group in self.search.baselines]
        offset = self.offset(point)
        X, owned = self.complete_data(point, offset)
        trXX = self.data.trXX(X, noise)
        flips = births = deaths = hit = 0
        denied = 0.0
        moved = kernels.MovesInfo(0, 0, 0)
        noise_a = noise  # the scales A and the imputed entries are drawn at
        if self.update_z:
            # right after the start search only A is drawn: the other steps then update the
            # hyperparameters given the searched Z before the first Z move (the initial values
            # of a free sigma_x or alpha, e.g. alpha drawn given the all-zero Z, can be far off)
            searched = not self.started and self.search.will_search(Z)
            # likewise at a given Z with features: A at the scales' estimates given it, the
            # scales' steps next, then the first Z move
            given = (not self.started and not self.search.from_prior(Z) and Z.any()
                     and self.search.sharded is None)
            if not self.started:
                # after a search, A at its estimates of a free sigma_x / sigma_a: at the
                # initial values (e.g. sigma_a = 2 for features of size 0.5) the empty slots'
                # A would send sigma_a's first update far off (up to 27 for 0.5 measured)
                self.started = True
                Z, base, noise_a = self.search.start(rng, Z, X, noise, self.n_tune, owned)
                if base is not None:
                    X, offset, point = self.search.start_offsets(base, X, offset, point, owned)
                    trXX = self.data.trXX(X, noise)
            if searched and self.mask is not None:  # the A draw below sees the search's fill
                X = column_mean_fill(X, self.mask)
                for _ in range(3):
                    fill_from_z(Z, X, self.mask, Z.sum(axis=0), noise_a)
                trXX = self.data.trXX(X, noise)
            Z = self.search.restart(rng, Z, X, trXX, noise, self.sweeps)
            m = Z.sum(axis=0).astype(np.int64)
            noise_z = self.search.annealed(noise, self.sweeps)
        if self.update_z and not (searched or given):
            if self.sweep is None:
                raise RuntimeError(f"{self.who}: this linear-Gaussian update only starts chains.")
            flips, births, deaths, hit, denied = self.sweep(rng, Z, X, m, noise_z)
            if self.mask is not None:  # the sweep may have re-drawn the missing entries
                trXX = self.data.trXX(X, noise)
            if self.mode.counts:
                moved = kernels.linear_gaussian_moves(rng, Z, X, m, noise_z, self.mode.alpha,
                                                      self.mode.beta, trXX, self.moves)
            if self.search.repairs_now(self.sweeps, self.n_tune):
                self.search.dissolve_combinations(rng, Z, X, trXX, noise, M=self.mask)
                m[:] = Z.sum(axis=0)
        else:
            m = Z.sum(axis=0).astype(np.int64)
        # A | Z, X: active rows from the exact Gaussian conditional, empty slots from the prior
        act = np.flatnonzero(m > 0)
        G, RX = self.data.feature_stats(Z, X, act)
        widths = np.diff(noise.cols)
        sa_col = np.sqrt(np.repeat(noise_a.sa2, widths))
        A = rng.standard_normal((self.k_max, self.d)) * sa_col
        if act.size:
            A[act] = kernels.draw_active_features(rng, G, RX, noise_a)
        new = dict(point)
        if self.update_z:
            new[self.z_name] = Z.astype(z_in.dtype, copy=False)
        sx_col = np.sqrt(np.repeat(noise_a.sx2, widths))
        for c0, c1, a_name, miss, mask in self.blocks:
            new[a_name] = A[:, c0:c1]
            if miss is not None:
                mean = Z @ A[:, c0:c1] + (0.0 if offset is None else offset.columns(c0, c1))
                sd = np.broadcast_to(sx_col[c0:c1], mean.shape)[mask]
                new[miss] = mean[mask] + sd * rng.standard_normal(sd.shape)
        # label-invariant statistics, with the hyperparameters this sweep used
        log_joint, loglik = self.mode.log_joint(G, RX, Z, m, act, trXX, noise)
        if hit and not self.warned and self.sweeps >= self.n_tune:  # kept draws only
            self.warned = True
            advice = self._probe(rng, Z, X, noise)
            warn_slots_in_use(self.who, self.z_name, self.k_max, self._slot_knob, advice=advice)
        self.sweeps += 1
        return new, UpdateInfo(int(flips), int(births), int(deaths), bool(hit), moved,
                               int(act.size), float(log_joint), float(loglik), float(denied),
                               self.suggested)

    def _probe(self, rng, Z, X, noise):
        """Run :func:`~pymc_ibp.inference.k_max.probe_k_max` from the chain's state (IBP prior
        and data on this process only), keep its suggestion and return its advice.  The probe
        draws from a generator spawned from the chain's (``Generator.spawn`` leaves the
        parent's stream as it is): the chain's draws are the same with or without it."""
        if self.k_max_probe <= 0 or not self.mode.counts or self.search.sharded is not None:
            return None
        v0 = self.search.data_var(noise)
        probe = probe_k_max(rng.spawn(1)[0], Z, X, noise, self.mode.alpha, self.mode.beta,
                            sweeps=self.k_max_probe, free_alpha=self._free_alpha,
                            estimate_noise=lambda Z_, X_, m_, nz: self.search.noise_estimate(
                                Z_, X_, m_, nz, v0))
        self.suggested = probe.suggested
        return probe.advice()
