"""Where a linear-Gaussian chain starts: the annealed start search and the multi-start burn-in.

:class:`AnnealedSearch` holds every decision about the start of ``Z`` in the linear-Gaussian
samplers (:class:`pymc_ibp.AcceleratedGibbs`, :class:`pymc_ibp.CollapsedGibbs`,
:class:`pymc_ibp.DataParallelGibbs`, and :class:`pymc_ibp.IBPGibbs` through the first):

* a chain whose ``Z`` the user did not give starts at the best of ``init_restarts`` annealed
  searches (sweeps with split–merge, birth/death and pair-swap moves from a prior draw, the
  noise variance cooled from the data's variance to ``σx²``, then feature-drop hill climbing,
  :mod:`pymc_ibp.init.refine`), on a subset of the rows for a large data set, the other rows
  then assigned to the features found; a free ``σx`` or ``σa`` is estimated along the way,
  free offsets get a fitted baseline (:mod:`pymc_ibp.init.baselines`), missing entries an
  EM-style fill;
* with a per-entry prior (the stick-breaking or dependent IBP) the search runs with the IBP's
  counts and births at the mass those probabilities imply, and puts its features in the slots
  in decreasing order of use; it runs at a free ``α``'s value at the chain's initial point, not
  at the chain's current ``α`` (drawn given PyMC's all-zero start before the first update of
  ``Z``); PyMC's default start, the prior's support point, counts as "not given";
* ``init_method="vi"``: a variational fit instead of the searches;
* with ``init_sweeps=0``, a prior draw and a multi-start burn-in in the first half of tuning;
* greedy repairs of combination modes at two tuning iterations.

Each of these only chooses where the kept chain starts: every draw after tuning is the exact
kernel.  The search is a :class:`~pymc.step_methods.state.WithSamplingState` whose state
(:class:`AnnealedSearchState`) is nested in the step's, so that checkpoints resume a chain in
the middle of its multi-start burn-in.
"""

from __future__ import annotations

import math

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_ibp import kernels
from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.inference.variational import variational_z
from pymc_ibp.init.baselines import any_grouped, baseline, group_values
from pymc_ibp.init.policy import init_z_policy
from pymc_ibp.init.refine import drop_features
from pymc_ibp.kernels.offsets import RowOffset, joint_groups
from pymc_ibp.kernels.split_merge import SPLIT_MERGE_PROPOSALS

__all__ = ["AnnealedSearch", "AnnealedSearchState", "column_mean_fill", "fill_from_z"]

# The start search's cooling schedule (AnnealedSearch.schedule):
#: fraction of ``init_sweeps`` over which the noise variance cools, up to this many e-folds
SEARCH_COOL_FRACTION = 0.6
#: e-folds of ``v0 / σx²`` cooled over ``SEARCH_COOL_FRACTION · init_sweeps`` sweeps; a larger
#: ratio cools over proportionally more sweeps (the same rate per sweep)
SEARCH_COOL_EFOLDS = 1.5
#: the longest cooling, in units of ``init_sweeps``
SEARCH_COOL_MAX = 5.0
#: sweeps at ``σx²`` after the cooling, in units of ``init_sweeps``
SEARCH_SETTLE_FRACTION = 0.4
#: sweeps (with moves) after each feature the search's last stage empties (:meth:`refine`)
REFINE_SWEEPS = 5
#: the most sweeps of that stage, in units of one search's sweeps
REFINE_BUDGET = 3


def column_mean_fill(X, M):
    """A copy of ``X`` with the entries ``M`` set to their column's mean over the others."""
    X = np.array(X, dtype=np.float64, copy=True)
    obs = ~M
    n_obs = obs.sum(axis=0)
    mean = np.where(obs, X, 0.0).sum(axis=0) / np.maximum(n_obs, 1)
    X[M] = np.broadcast_to(mean, X.shape)[M]
    return X


def prediction(Z, X, m, noise):
    """``Z μ`` (``N x D``), ``μ`` the feature posterior mean given ``Z`` and ``X`` at ``noise``;
    ``None`` when no feature is in use (start search only)."""
    act = np.flatnonzero(np.asarray(m) > 0)
    if act.size == 0:
        return None
    G, RX = kernels.suff_stats(Z, X, act)
    _, mu = kernels.posterior_from_stats(G, RX, noise)
    return Z[:, act].astype(np.float64) @ mu


def fill_from_z(Z, X, M, m, noise):
    """Set the entries ``M`` of ``X`` (in place) to the prediction ``Z μ`` (start search)."""
    pred = prediction(Z, X, m, noise)
    if pred is not None:
        X[M] = pred[M]


@dataclass_state
class AnnealedSearchState(DataClassState):
    """The search's per-chain state: the multi-start segments (how many, their length) and
    the segment ends collected so far."""

    restarts: int
    segment: int
    candidates: list


class AnnealedSearch(WithSamplingState):
    """The start of ``Z`` in a linear-Gaussian IBP step (module docstring).

    Built by the step with the model's pieces: ``spec`` (the matched
    :class:`~pymc_ibp.matching.linear_gaussian.LinearGaussianIBP`), ``mode`` (the prior mode
    of ``Z``, whose parameters the step sets at every iteration), ``starts`` (a
    :class:`~pymc_ibp.init.given.StartDefaults` telling whether the user gave a chain's ``Z``),
    ``baselines`` (:func:`~pymc_ibp.init.baselines.search_baselines`), whether the scales are
    free, the search's ``α`` (``search_alpha``; ``None``: the current one) and the step's
    start options.  ``assign_rows(rng, Z, X, noise, ibp)`` assigns the rows outside a subset
    search (default :meth:`assign_local`; the data-parallel step sweeps them on its workers);
    ``refine``: each search ends with :meth:`refine`.
    Every method that draws takes the chain's generator ``rng``."""

    _state_class = AnnealedSearchState

    def __init__(self, *, spec, mode, starts, z_name, init_z="auto", init_restarts=4,
                 init_anneal=True, init_subsample=1000, init_sweeps=100, init_method="anneal",
                 moves=(5, 5, 3, 5), split_merge_proposal="sequential", birth_rows=64,
                 tuning_repairs=True, baselines=(), free_sx=False, free_sa=False,
                 search_alpha=None, assign_rows=None, refine=True):
        self.spec, self.mode, self.starts, self.z_name = spec, mode, starts, z_name
        #: whether each search ends with :meth:`refine`
        self.refines = bool(refine)
        self.n, self.k_max = spec.shape[0], spec.k_max
        self.mask, self.sharded = spec.missing_mask, spec.sharded
        self.init_z = init_z_policy(init_z, "the start search", on_the_model=True)
        self.init_restarts = int(init_restarts)
        if self.init_restarts < 1:
            raise ValueError(f"init_restarts must be >= 1; got {init_restarts!r}.")
        self.init_anneal = bool(init_anneal)
        if init_method not in ("anneal", "vi"):
            raise ValueError(f"init_method must be 'anneal' or 'vi'; got {init_method!r}.")
        self.init_method = init_method if mode.counts else "anneal"
        self.init_subsample = int(init_subsample or 0)
        self.init_sweeps = int(init_sweeps)
        if split_merge_proposal not in SPLIT_MERGE_PROPOSALS:
            raise ValueError(f"split_merge_proposal must be one of "
                             f"{sorted(SPLIT_MERGE_PROPOSALS)}; got {split_merge_proposal!r}.")
        self.birth_rows = int(birth_rows)
        #: the search's moves per sweep (``moves``: split–merge, column split–merge,
        #: birth/death and pair-swap proposals)
        n_sm, n_csm, n_bd, n_ps = (int(v) for v in moves)
        self.moves = kernels.Moves(n_sm, split_merge_proposal, n_csm, n_bd, self.birth_rows,
                                   n_ps)
        self.tuning_repairs = bool(tuning_repairs) and mode.counts
        self.baselines = baselines
        self.free_sx, self.free_sa = free_sx, free_sa
        self.search_alpha = search_alpha
        self.assign_rows = self.assign_local if assign_rows is None else assign_rows
        #: the rows' groups of each per-group offset (``b[group]``), set by the step at every
        #: iteration; ``None`` without per-group offsets
        self.groups = None
        self._col_var = {}  # data variance of a block of columns, for the annealing
        self.reset()

    def reset(self):
        """Forget the multi-start segments (a new chain)."""
        self.restarts, self.segment, self.candidates = 1, 0, []

    def from_prior(self, Z):
        """Whether the chain starts from the prior (initialisation policy in the module
        docstring), given the chain's initial ``Z``."""
        # PyMC's default start, the prior's support point, counts as not given also when
        # another step (e.g. the dependent IBP's sticks and processes) has moved a per-entry
        # prior's probabilities before Z's first update
        if self.init_z != "auto":
            return self.init_z == "prior"
        return not self.starts.given({self.z_name: Z}, self.z_name, self.mode.is_support_point)

    def will_search(self, Z):
        """Whether :meth:`start` runs the annealed start search for the initial ``Z`` (on
        ``X`` minus the offset's starting value, if any, and with a baseline beside ``Z``
        where the offset is a free variable: :meth:`anneal`)."""
        return (self.from_prior(Z) and self.init_method == "anneal"
                and self.init_sweeps > 0)

    def start(self, rng, Z, X, noise, n_tune, owned=False):
        """``(Z, base, fit)``: the chain's first ``Z`` (initialisation policy in the module
        docstring), the search's baseline (:meth:`anneal`; ``None`` without one) and the
        scales the chain's first ``A`` is drawn at (``noise`` with a free ``σx`` or ``σa`` at
        the search's estimate of it after a search or given a ``Z`` with features, else
        ``noise``).  From
        the prior with ``init_sweeps > 0``: the best of ``init_restarts`` annealed searches
        (:meth:`search`), before the first sweep, so that runs with little or no tuning
        start from it too.  With ``init_sweeps=0``: a prior draw and the multi-start schedule
        of :meth:`restart` (``R`` segments of ``L >= 10`` sweeps in the first half of
        tuning).  ``owned``: ``X`` is the step's own array, which the start search may shift in
        place (:meth:`search`)."""
        if not self.from_prior(Z):
            if not Z.any() or self.sharded is not None:
                return Z, None, noise
            # a given Z: A is drawn at the free scales' estimates given it, not at their
            # initial values (the scales' own steps then start from that A)
            m = Z.sum(axis=0).astype(np.int64)
            v0 = kernels.block_variances(X, tuple(noise.cols))
            return Z, None, self.noise_estimate(Z, X, m, noise, v0)
        if self.will_search(Z):
            found, base, fit = self.search(rng, X, noise, restarts=self.init_restarts,
                                            in_place=owned)
            if not self.mode.counts and not np.isfinite(self.mode.log_prior(found)):
                return Z, None, noise  # the search (under the IBP's counts) broke a hard zero
            return found, base, fit
        # no multi-start segments with sharded data: they score Z on all rows
        R = self.init_restarts if self.init_method == "anneal" and self.sharded is None else 1
        while R > 1 and n_tune // (2 * R) < 10:
            R -= 1
        self.restarts, self.segment = R, (n_tune // (2 * R) if R > 1 else 0)
        return self.fresh_start(rng, X, noise), None, noise

    def search(self, rng, X, noise, restarts=1, in_place=False):
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
        fitted beside ``Z`` where the offset is a free variable (:meth:`anneal`), to be
        added to that offset's current value (:meth:`full_baseline`: one row added to every
        row, or with per-group offsets one row per group read through the rows' groups).
        ``in_place``: ``X`` is the chain's own array (the chain's first search), which is
        then left minus the baseline in the columns of the offsets whose initial value the
        user did not give (:meth:`offset_base`), what the chain's first ``A`` draw sees,
        instead of an ``N x D`` copy each for the rows' assignment and
        for that shift (275 MB each at N = 10^6, D = 36).  ``fit``: ``noise`` with a free
        ``σx`` or ``σa`` at the best search's final estimate of it (:meth:`noise_estimate`)."""
        ns = self.init_subsample
        if self.init_method == "vi":
            return self.vi_start(rng, X, noise), None, noise
        if not self.init_sweeps:
            return self.mode.draw(rng), None, noise
        sub = bool(ns) and self.n > ns
        rows = np.sort(rng.choice(self.n, size=ns, replace=False)) if sub else None
        if not sub and self.sharded is not None:  # sharded data: the rows fetched
            rows, sub = np.arange(self.n), True
        Xs = np.ascontiguousarray(X[rows]) if sub else X
        Ms = None if self.mask is None else (self.mask[rows] if sub else self.mask)
        trXs = kernels.block_sq_norms(Xs, noise)
        gs = (None if self.groups is None
              else [g if g is None or not sub else g[rows] for g in self.groups])
        best, best_score, best_noise, best_base = None, -np.inf, noise, None
        ibp = self.search_prior()
        for _ in range(restarts):
            # each search scored at the noise it ended with (its estimate of a free σx: the
            # chain's initial σx can be far off and would favour too few or too many features)
            # and refined (a pieces mode of one search may refine into the best start), unless
            # it fills every slot (K_max binds: more features are wanted, not fewer; on the
            # continuous digits the stage cost 4x the search there and changed nothing)
            Zs, Xf, end_noise, base = self.anneal(rng, Xs, noise, trXs, Ms, gs)
            score = (self.refine(rng, Zs, Xf, end_noise, ibp, Ms)[0]
                     if self.refines and not Zs.any(axis=0).all() else
                     self.log_joint(Zs, Xf, kernels.block_sq_norms(Xf, end_noise), end_noise,
                                    ibp, Ms)[0])
            if best is None or score > best_score:
                best, best_score, best_noise, best_base = Zs, score, end_noise, base
        if not self.mode.counts:  # the most used features in the first slots
            best = np.ascontiguousarray(best[:, np.argsort(-best.sum(axis=0), kind="stable")])
        if not sub:
            if in_place and best_base is not None:
                for c0, c1, *_, given, _ in self.baselines:
                    if not given:
                        X[:, c0:c1] -= best_base[:, c0:c1]
            return best, self.full_baseline(best_base, slice(None)), best_noise
        Z = np.zeros((self.n, self.k_max), dtype=np.int8)
        Z[rows] = best
        best_base = self.full_baseline(best_base, rows)
        if best_base is None or not in_place:
            if rows.size < self.n:
                self.assign_rows(rng, Z,
                                 X if best_base is None else best_base.subtract_from(X),
                                 best_noise, ibp)
            return Z, best_base, best_noise
        best_base.subtract_from(X, out=X)  # the rows assigned on the data minus the whole
        if rows.size < self.n:  # baseline, then the columns of offsets the user gave put back
            self.assign_rows(rng, Z, X, best_noise, ibp)
        for c0, c1, *_, given, _ in self.baselines:
            if given:
                best_base.add_to(X, c0, c1)
        return Z, best_base, best_noise

    def fresh_start(self, rng, X, noise, restarts=1):
        """:meth:`search`'s ``Z``."""
        return self.search(rng, X, noise, restarts)[0]

    def anneal(self, rng, X, noise, trXX, M=None, groups=None):
        """Sweeps with split–merge and birth/death moves from a prior draw, the noise variance
        falling geometrically from the data's variance to ``σx²`` over the first ``span`` of
        them and staying there (a simulated-annealing search for a starting point; ``span``
        and the number of sweeps from :meth:`schedule`).

        With missing entries (mask ``M``) the search starts them at their column's observed
        mean and re-imputes them after every sweep as ``Z μ``, ``μ`` the feature posterior
        mean given the current ``Z`` (an EM-style fill: the chain's own imputed values, drawn
        once at the start, would otherwise steer the search towards features that fit them).
        Where the offset is a free variable, the same for every row (``b`` in ``Z @ A + b``,
        shape ``(D,)`` or ``()``), the search also fits a *baseline*, the correction of that
        offset's current value: the data's mean to begin with, then after every sweep the
        mean of what the features' posterior mean leaves (an EM-style update, as for the
        missing entries).  Without it, data far from the offset's initial value are explained
        by features that every row uses, which ``b`` cannot take over (``b`` and such a
        feature's row of ``A`` only trade along a ridge).

        Returns ``(Z, X, noise, base)`` with ``X`` as filled last (minus the baseline),
        ``noise`` the final noise (a free ``σx`` or ``σa`` re-estimated after every sweep and
        at the end, given the current ``Z``: :meth:`residual_variance`,
        :meth:`feature_variance`) and ``base`` the baseline (:func:`_baseline`) or ``None``;
        ``groups``: the rows' groups for each per-group offset (:func:`_baseline`)."""
        alpha, beta = self.search_prior()
        nr = X.shape[0]
        Z = ibp_draw_core(rng, alpha, beta, nr, self.k_max)
        if M is not None:
            X = column_mean_fill(X, M)
            trXX = kernels.block_sq_norms(X, noise)
        base = None
        if self.baselines:
            base = baseline(X, self.baselines, groups)
            X = X - base  # a new array: the caller's X is left alone
            trXX = kernels.block_sq_norms(X, noise)
        v0 = kernels.block_variances(X, noise.cols)
        span, sweeps = self.schedule(v0, noise)
        target = noise
        for t in range(sweeps):
            m = Z.sum(axis=0).astype(np.int64)
            if M is not None and t > 0:
                fill_from_z(Z, X, M, m, target)
                trXX = kernels.block_sq_norms(X, noise)
            if base is not None and t > 0:  # the baseline given the current Z
                pred = prediction(Z, X, m, target)
                shift = baseline(X if pred is None else X - pred, self.baselines, groups)
                X -= shift
                base += shift
                trXX = kernels.block_sq_norms(X, noise)
            if t > 0:  # a free σx or σa: its estimate given the current Z
                target = self.noise_estimate(Z, X, m, target, v0)
            s2 = self.tempered(target, min(1.0, t / span), v0)
            kernels.accelerated_sweep(rng, Z, X, m, s2, kernels.SweepPrior.counts(alpha, beta),
                                      kernels.refresh_interval(nr), miss=M)
            kernels.linear_gaussian_moves(rng, Z, X, m, s2, alpha, beta, trXX, self.moves)
            if t >= span and (t - span) % 10 == 0 or t == sweeps - 1:
                self.dissolve_combinations(rng, Z, X, trXX, s2, (alpha, beta), M)
        if M is not None:
            fill_from_z(Z, X, M, Z.sum(axis=0), target)
        return Z, X, self.noise_estimate(Z, X, Z.sum(axis=0), target, v0), base

    def refine(self, rng, Z, X, noise, ibp, M=None):
        """The search's last stage (``Z`` in place): :func:`~pymc_ibp.init.refine.drop_features`
        with ``REFINE_SWEEPS`` sweeps and moves at ``noise`` after each emptied feature, scored
        by :meth:`log_joint` under the search's prior ``ibp``, at most as many tries as cost
        the sweeps of ``REFINE_BUDGET`` searches.  Returns :func:`drop_features`'s ``(score, tries,
        improvements)``."""
        alpha, beta = ibp
        trXX = kernels.block_sq_norms(X, noise)
        prior = kernels.SweepPrior.counts(alpha, beta)
        refresh = kernels.refresh_interval(X.shape[0])

        def resweep(rng, trial):
            for _ in range(REFINE_SWEEPS):
                m = trial.sum(axis=0).astype(np.int64)
                kernels.accelerated_sweep(rng, trial, X, m, noise, prior, refresh, miss=M)
                kernels.linear_gaussian_moves(rng, trial, X, m, noise, alpha, beta, trXX,
                                              self.moves)

        budget = REFINE_BUDGET * self.schedule(kernels.block_variances(X, noise.cols), noise)[1]
        return drop_features(rng, Z, lambda trial: self.log_joint(trial, X, trXX, noise, ibp,
                                                                   M)[0],
                             resweep, max(1, budget // REFINE_SWEEPS))

    def schedule(self, v0, noise):
        """``(span, sweeps)`` of a start search: the noise variance falls from the data's
        variance ``v0`` to ``σx²`` over ``span`` sweeps, then ``sweeps - span = 0.4 ·
        init_sweeps`` sweeps follow at ``σx²``.  ``span = 0.6 · init_sweeps`` when
        ``log(v0 / σx²) <= 1.5`` (e.g. block images at their noise) and proportionally more
        for a larger ratio (at most ``5 · init_sweeps``): the same cooling rate per sweep
        whatever the signal-to-noise ratio (measurements: docs page "AcceleratedGibbs")."""
        s = self.init_sweeps
        efolds = float(np.max(np.log(np.maximum(v0, noise.sx2) / noise.sx2)))
        stretch = min(max(1.0, efolds / SEARCH_COOL_EFOLDS),
                      SEARCH_COOL_MAX / SEARCH_COOL_FRACTION)
        span = int(math.ceil(SEARCH_COOL_FRACTION * s * stretch))
        return max(1, span), span + int(math.ceil(SEARCH_SETTLE_FRACTION * s))

    def search_prior(self):
        """``(α, β)`` of the IBP prior the start search uses: the model's, or for a per-entry
        prior the mass it implies (:meth:`LogOddsMode.search_mass`) with ``β = 1``."""
        if self.mode.counts:
            alpha = self.mode.alpha if self.search_alpha is None else self.search_alpha
            return alpha, self.mode.beta
        return self.mode.search_mass(), 1.0

    def tempered(self, noise, w, v0):
        """``noise`` with each block's ``σx²`` moved geometrically towards ``v0`` (weight
        ``1 - w``; never below ``σx²``)."""
        v0 = np.maximum(v0, noise.sx2)
        return noise._replace(sx2=np.exp(w * np.log(noise.sx2) + (1.0 - w) * np.log(v0)))

    def noise_estimate(self, Z, X, m, noise, v0):
        """``noise`` with a free ``σx`` and a free ``σa`` replaced by their estimates given
        ``Z`` (:meth:`residual_variance`, then :meth:`feature_variance`); ``v0`` the data's
        variance per block."""
        if self.free_sx:
            noise = noise._replace(sx2=self.residual_variance(Z, X, m, noise, v0))
        if self.free_sa:
            noise = noise._replace(sa2=self.feature_variance(Z, X, m, noise))
        return noise

    @staticmethod
    def residual_variance(Z, X, m, noise, v0):
        """Per block, the mean squared residual ``X - Z μ`` with ``μ`` the feature posterior
        mean given ``Z`` (at least ``10⁻⁴`` of the data's variance ``v0``, or the current
        ``σx²`` where the data are constant, ``v0 = 0``): the start search's estimate of a free
        ``σx²``."""
        pred = prediction(Z, X, m, noise)
        R = X if pred is None else X - pred
        ms = kernels.block_sq_norms(R, noise) / (R.shape[0] * np.diff(noise.cols))
        return np.maximum(ms, np.where(v0 > 0, 1e-4 * v0, noise.sx2))

    @staticmethod
    def feature_variance(Z, X, m, noise):
        """Per block, ``E‖a_k‖² / d_b`` averaged over the active features under their
        posterior given ``Z`` (``‖μ_k‖² + d_b Σ_kk``; an EM update of a Normal(0, σa²) prior's
        variance): the start search's estimate of a free ``σa²``, as
        :meth:`residual_variance` is of a free ``σx²`` (a far-off initial ``σa`` otherwise
        shapes the start).  Unchanged without active features."""
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

    def dissolve_combinations(self, rng, Z, X, trXX, noise, ibp=None, M=None):
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
        best = self.log_joint(Z, X, trXX, noise, ibp, M)[0]
        for _ in range(self.k_max):
            m = Z.sum(axis=0)
            act = np.flatnonzero(m > 0)
            if act.size < 2:
                return
            G, RX = kernels.suff_stats(Z, X, act)
            _, mu = kernels.posterior_from_stats(G, RX, noise)
            improved = False
            for ci in rng.permutation(act.size):
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
                        score = self.joint_from_stats(
                            np.ascontiguousarray(G2[np.ix_(k2, k2)]),
                            np.ascontiguousarray(RX2[k2]), Z2, m2, act[k2], trXX, noise, ibp)[0]
                    else:
                        score = self.log_joint(Z2, X, trXX, noise, ibp, M)[0]
                    if score > best:
                        Z[:] = Z2
                        best, improved = score, True
                        break
                if improved:
                    break
            if not improved:
                return

    def log_joint(self, Z, X, trXX, noise, ibp=None, M=None):
        """``(log p(X | Z, σ) + log P(Z), log p(X | Z, σ))``, ``A`` integrated out; with
        ``ibp = (α, β)`` under the IBP prior at that mass whatever the model's prior (the
        start search of a per-entry prior, whose features are not yet in their slots).  With
        a mask ``M`` of missing entries the likelihood is that of the observed entries alone
        (:func:`~pymc_ibp.kernels.observed_loglik`): values imputed from one
        ``Z`` would favour it over the others."""
        m = Z.sum(axis=0)
        act = np.flatnonzero(m > 0)
        G, RX = kernels.suff_stats(Z, X, act)
        joint, ll = self.joint_from_stats(G, RX, Z, m, act, trXX, noise, ibp)
        if M is None:
            return joint, ll
        obs = kernels.observed_loglik(Z, X, M, noise)
        return joint - ll + obs, obs

    def joint_from_stats(self, G, RX, Z, m, act, trXX, noise, ibp=None):
        """:meth:`log_joint` (complete data) from the statistics ``G``, ``RX`` of the active
        columns ``act``."""
        if ibp is not None and not self.mode.counts:
            return kernels.collapsed_log_joint(G, RX, m[act].astype(np.int64), trXX, Z.shape[0],
                                               noise, ibp[0], ibp[1], self.k_max)
        return self.mode.log_joint(G, RX, Z, m, act, trXX, noise)

    def vi_start(self, rng, X, noise):
        """A fresh start from a finite variational fit (:func:`pymc_ibp.inference.variational_z`),
        at the current scales as starting values; on a random subset of ``init_subsample``
        rows when ``N > 2 · init_subsample``, the other rows then assigned to its features by
        :attr:`assign_rows` (at the scales a free ``σx`` or ``σa`` would have given the fitted
        rows, as after the search)."""
        ns = self.init_subsample
        rows = (np.sort(rng.choice(self.n, size=ns, replace=False))
                if ns and self.n > 2 * ns else np.arange(self.n))
        widths = np.diff(noise.cols)
        Xs = X if rows.size == self.n else X[rows]  # no copy of X when fitting every row
        Z = np.zeros((self.n, self.k_max), dtype=np.int8)
        Z[rows] = Zs = variational_z(Xs, np.repeat(noise.sx2, widths),
                                     np.repeat(noise.sa2, widths), self.mode.alpha, self.k_max,
                                     rng, cols=noise.cols)
        if rows.size < self.n:
            fit = self.noise_estimate(Zs, Xs, Zs.sum(axis=0), noise,
                                       kernels.block_variances(Xs, noise.cols))
            self.assign_rows(rng, Z, X, fit, self.search_prior())
        return Z

    def assign_local(self, rng, Z, X, noise, ibp):
        """After a start fitted on a subset of the rows (the search, the variational start),
        one sweep of all rows given the fitted features, at the fit's estimate of the noise
        and without births (``Z`` in place): the start then covers every row (left empty,
        the other rows would make the first updates of the scales see a ``Z`` that explains
        almost nothing)."""
        miss = kernels.NO_MISS if self.mask is None else self.mask
        kernels.accelerated_sweep_core(
            rng, Z, X, Z.sum(axis=0).astype(np.int64), noise, kernels.SweepPrior.counts(*ibp),
            kernels.OtherRows.none(self.n),
            kernels.SweepOptions(kernels.refresh_interval(self.n), False, False), miss)

    def full_baseline(self, base, rows):
        """The baseline ``base`` (:func:`_baseline`) fitted on the rows ``rows`` (an index
        array, or ``slice(None)``: all of them), for all rows, as a :class:`RowOffset`: one
        row (no per-group offset), or each group's value of a per-group offset at every row
        of the group (0 for a group that ``rows`` miss), held as one row per combination of
        the offsets' groups (:func:`joint_groups`; ``b[group]``: ``G x D`` rather than
        ``N x D``, 275 MB at N = 10^6, D = 36)."""
        if base is None or not any_grouped(self.groups):
            return None if base is None else RowOffset(base)
        first, index = joint_groups(*(g for g in self.groups if g is not None))
        full = np.zeros((first.size, base.shape[1]))
        for (c0, c1, *_), g in zip(self.baselines, self.groups, strict=True):
            if g is None:
                full[:, c0:c1] = base[0, c0:c1]
                continue
            seen, values = group_values(base, g[rows], c0, c1)
            at_first = g[first]  # each combination's group of this offset
            at = np.minimum(np.searchsorted(seen, at_first), len(seen) - 1)
            hit = seen[at] == at_first  # groups that ``rows`` hold (others: 0)
            for j in range(c1 - c0):  # a column at a time: no N x D temporary
                full[:, c0 + j] = np.where(hit, values[at, j], 0.0)
        return RowOffset(full, index)

    def start_offsets(self, base, X, offset, point, shifted):
        """``(X, offset, point)`` after a start search that fitted the baseline ``base``: the
        offset variables whose initial value the user did not give start at that value plus
        the baseline, and the data the first ``A`` draw (and that iteration's imputed entries
        and statistics) sees follows them; a value the user gave is left as it is.
        ``shifted``: the search already took the baseline off ``X`` in place (``X`` is the
        step's own array); otherwise ``X`` is the model's and a shifted copy is returned."""
        point = dict(point)
        base = self.offset_base(base)
        groups = self.groups or [None] * len(self.baselines)
        for (c0, c1, per_column, name, given, _), g in zip(self.baselines, groups, strict=True):
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

    def offset_base(self, base):
        """The baseline ``base`` (a :class:`RowOffset` of the search's own table, changed in
        place) made zero in the columns of the offsets whose initial value the user gave: the
        part of it the chain's offset takes over."""
        for c0, c1, *_, given, _ in self.baselines:
            if given:
                base.table[:, c0:c1] = 0.0
        return base

    def restart(self, rng, Z, X, trXX, noise, sweeps):
        """Multi-start burn-in (tuning only): the first ``R·L`` tuning sweeps are ``R``
        segments of ``L`` sweeps, each from its own prior draw of ``Z``; after the last one the
        chain continues from the segment end with the highest collapsed log joint (evaluated
        at the current hyperparameters).  Only the starting point of the post-tuning chain is
        chosen this way: after the ``R·L``-th sweep every sweep is the exact kernel."""
        s, L, R = sweeps, self.segment, self.restarts
        if not L or s == 0 or s > R * L or s % L:
            return Z
        self.candidates.append(Z)  # Z is the step's own copy of the point's value
        if s < R * L:
            return self.fresh_start(rng, X, noise)
        scores = [self.log_joint(c, X, trXX, noise, M=self.mask)[0] for c in self.candidates]
        best = self.candidates[int(np.argmax(scores))]
        self.candidates = []
        return best

    def repairs_now(self, sweeps, n_tune):
        """Whether this iteration ends with the greedy repair of :meth:`dissolve_combinations`
        on all rows: at the middle and the last tuning iteration (``tuning_repairs``, IBP
        prior, data on the driver; at least 10 tuning iterations).  Tuning only, like the
        restarts: it only chooses where the kept chain starts.  It catches what the start
        search cannot see when it ran on a subset of the rows (``N > init_subsample``): a
        feature the first full sweeps split between two slots."""
        t, T = sweeps, n_tune
        return (self.tuning_repairs and T >= 10 and t in (T // 2, T - 1)
                and self.sharded is None)

    def annealed(self, noise, sweeps):
        """Noise variances for the Z moves.  Inside a multi-start segment (tuning only, with
        ``init_anneal``) each block's falls geometrically from the data's variance to its
        ``σx²`` over the first 60% of the segment's sweeps, so that features appear largest
        first instead of all slots filling with noise in the first sweep; ``σx²`` itself
        everywhere else."""
        L = self.segment
        if not (L and self.init_anneal) or sweeps >= self.restarts * L:
            return noise
        t, span = sweeps % L, max(1, int(math.ceil(0.6 * L)))
        if t >= span:
            return noise
        return self.tempered(noise, t / span, self.data_var(noise))

    def data_var(self, noise):
        """The observed data's variance in each block of ``noise`` (cached)."""
        key = tuple(noise.cols)
        if key not in self._col_var:
            self._col_var[key] = kernels.block_variances(self.spec.X, key)
        return self._col_var[key]
