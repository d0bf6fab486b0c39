"""Uncollapsed Gibbs for a binary feature matrix under any PyMC likelihood.

Every entry ``z_nk`` is drawn from its exact full conditional given everything else, with the
likelihood taken from the model's own compiled element-wise logp.  Rows must be conditionally
independent given the other variables (the likelihood factorises over the rows of ``Z``), which
lets one compiled evaluation with column ``k`` flipped in every row, next to the rows' values at
the current ``Z``, give the likelihood ratios of all ``N`` entries of that column at once; the
rows are then sampled in sequence (numba) because the IBP prior couples them through the column
counts.  Observed arrays with missing entries (PyMC's ``X_observed`` + imputed
``X_unobserved``, whose logps are 1-D over the masked entries) are mapped back to the rows of
``Z`` through PyMC's boolean mask.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp import kernels
from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.distributions.dependent import DependentIBPRV
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.distributions.ibp_math import (
    ibp_entry_logodds,
    log_birth_rate,
)
from pymc_ibp.distributions.stick_breaking import IBPStickBreakingRV
from pymc_ibp.exceptions import ModelPatternError, warn_slots_in_use
from pymc_ibp.init.chained import ChainedStart
from pymc_ibp.init.given import StartDefaults, check_binary_start
from pymc_ibp.init.parameters import StartCheck
from pymc_ibp.init.policy import INIT_Z, init_z_policy
from pymc_ibp.init.pruning import prune_features
from pymc_ibp.init.surrogate import SurrogateStart
from pymc_ibp.kernels.columns import bernoulli_column_gibbs, ibp_column_gibbs
from pymc_ibp.matching.correlated import match_correlated
from pymc_ibp.matching.graph import one_value_var, slot_knob
from pymc_ibp.matching.linear_gaussian import find_linear_gaussian
from pymc_ibp.matching.logit import find_bernoulli_logit
from pymc_ibp.matching.potentials import potential_names, potentials_on
from pymc_ibp.matching.priors import BINARY_MATRIX_OPS, IBPPrior, match_prior
from pymc_ibp.matching.rows import RowLikelihood
from pymc_ibp.step_methods.feature_moves import FeatureParameterMoves
from pymc_ibp.step_methods.ibp_gibbs_moves import RowMoves
from pymc_ibp.step_methods.linear_gaussian_update import LinearGaussianUpdate
from pymc_ibp.step_methods.noisy_or_moves import ChildBlockMoves
from pymc_ibp.step_methods.potentials import PotentialTerms
from pymc_ibp.step_methods.stats import model_logp_fn, per_matrix_stats

__all__ = ["IBPGibbs"]

_log = logging.getLogger("pymc")


def _linear_gaussian_spec(model, z_rv):
    """The linear-Gaussian model of ``z_rv`` (the AcceleratedGibbs pattern), or ``None``; logs
    one line saying why the fast linear-Gaussian step does (not) apply."""
    try:
        spec = find_linear_gaussian(model, z_rv)
    except ModelPatternError as err:
        reason = err.reason
        logit = ""
        if any(isinstance(rv.owner.op, BernoulliRV) for rv in model.observed_RVs
               if z_rv in set(ancestors([rv]))):
            try:
                find_bernoulli_logit(model, z_rv)
                logit = "; PolyaGammaGibbs would apply"
            except ModelPatternError as why:
                logit = f"; PolyaGammaGibbs does not apply: {why.reason}"
        _log.info(f"IBPGibbs for {z_rv.name!r} (uncollapsed; AcceleratedGibbs does not "
                  f"apply: {reason}{logit})")
        return None
    pots = potentials_on(model, [z_rv, *spec.a_rvs, *spec.missing_rvs])
    why = (f"AcceleratedGibbs cannot include the model's pm.Potential {potential_names(pots)}"
           if pots else "chosen explicitly; AcceleratedGibbs would apply")
    _log.info(f"IBPGibbs for {z_rv.name!r} ({why})")
    return spec


def _linear_gaussian_start(model, spec, initial_point, init_z, compile_kwargs):
    """The linear-Gaussian update of ``Z`` and ``A`` that IBPGibbs runs once, for its start
    search, when the model is linear-Gaussian (``spec``, data on the driver); else ``None``."""
    if spec is None or spec.sharded is not None:
        return None
    return LinearGaussianUpdate(
        model, spec, who="IBPGibbs", update_z=True, sweep=None,
        moves=kernels.Moves(5, "sequential", 0, 3, 64, 3), initial_point=initial_point,
        compile_kwargs=compile_kwargs, init_z=init_z)


def _chained_start(model, m_rv, hyper, initial_point):
    """The :class:`~pymc_ibp.init.chained.ChainedStart` of ``m_rv`` when it is a correlated
    model's category-feature matrix (features by a plain IBP on the surrogate first, the
    categories fitted to them second; ``hyper`` its ``alpha``, ``beta`` at the initial
    point), else ``None``; logs why it does not apply to such a matrix."""
    match = match_correlated(model, m_rv)
    if match is None:
        return None
    alpha0, beta0 = (float(np.asarray(h)) for h in hyper)
    try:
        return ChainedStart(model, m_rv, match, alpha0, beta0, "IBPGibbs", initial_point)
    except ModelPatternError as err:
        _log.info(f"IBPGibbs for {m_rv.name!r}: no chained start (features first, then "
                  f"categories): {err}")
        return None


#: the kinds of moves whose accepted proposals are the ``ibp_<kind>_accepted`` stats
_MOVE_KINDS = ("split_merge", "combination", "block", "turn_on", "feature_move",
               "feature_split_merge", "feature_fold", "feature_triple")


def _move_counts(applies, **counts):
    """The proposals per sweep ``counts`` as ints, all 0 where the moves do not apply; a
    negative count is a ``ValueError`` naming it."""
    for name, value in counts.items():
        if int(value) < 0:
            raise ValueError(f"{name} must be >= 0; got {value!r}.")
    return [int(value) if applies else 0 for value in counts.values()]


@dataclass_state
class IBPGibbsState(StepMethodState):
    """``rng``, whether the truncation warning was given in this chain (and the ``K_max`` its
    probe suggested) and whether the chain has made its first move (the start search, if any,
    comes before it)."""

    warned: bool
    suggested: int
    started: bool


class IBPGibbs(BlockedStep):
    r"""Uncollapsed Gibbs sampler for a binary ``N x K_max`` matrix under any likelihood.

    .. math:: \frac{P(z_{nk}=1\mid\cdot)}{P(z_{nk}=0\mid\cdot)} = \text{prior odds}\times
        \frac{p(\text{children}\mid z_{nk}=1)}{p(\text{children}\mid z_{nk}=0)}

    Each entry is drawn from this exact full conditional, with the prior odds of
    :class:`pymc_ibp.IBP` truncated to ``K_max`` slots (Griffiths & Ghahramani 2011) or
    ``p/(1-p)`` for ``Z = pm.Bernoulli(p=...)`` and the likelihood ratio from the model's logp;
    Metropolis–Hastings moves follow each sweep.  Missing data are imputed by their own step
    (data augmentation, Tanner & Wong 1987).  A ``pm.Potential`` on ``Z`` (or on what the
    moves change) enters each entry's conditional and each move's acceptance ratio (the
    noisy-or block moves': a second stage), and one on ``Z`` prunes the features of a searched
    start where the step has ``A`` (docs page *Composing IBP models*).

    Use it for IBP models that are neither linear-Gaussian (:class:`pymc_ibp.AcceleratedGibbs`)
    nor Bernoulli-logit (:class:`pymc_ibp.PolyaGammaGibbs`), or that have a potential on
    ``Z``, where ``pm.sample`` picks it; it updates ``Z`` only and mixes more slowly than a
    collapsed sampler (docs page *IBPGibbs*).

    Its parts, each an object with its own state (``None`` where it does not apply):
    ``rows`` (the per-row log-likelihood, :class:`pymc_ibp.matching.rows.RowLikelihood`),
    ``row_moves``, ``child_moves`` and ``features`` (the Metropolis–Hastings moves of ``Z``,
    of a child binary matrix with it, and of ``Z`` with ``A``), ``surrogate`` (the
    surrogate start, :class:`pymc_ibp.init.surrogate.SurrogateStart`) and ``chained`` (the
    chained start of a correlated model's ``M``, :class:`pymc_ibp.init.chained.ChainedStart`).

    Parameters
    ----------
    vars : list
        The binary matrix (a ``pmi.IBP`` or a 2-D ``pm.Bernoulli``).
    model, rng, initial_point, compile_kwargs, blocked
        As for PyMC's steps.
    split_merge, combination_moves : int
        Split–merge and dissolve / compose proposals on ``Z`` per sweep (``pmi.IBP`` only;
        default 5 each); see the docs page.
    factorise : bool, optional
        Whether the likelihood factorises over the rows of ``Z`` (default ``None``: checked;
        if not, entry-wise updates); see the docs page.
    block_moves : bool, optional
        Joint flips of ``z_nk`` and a Bernoulli child matrix (Doshi-Velez 2009, §7.2.3; default
        ``None``: on where one exists); see the docs page.
    turn_on_moves : int
        Passes of turn-on / turn-off moves with the block moves (default 1); see the docs page.
    feature_moves, feature_rows, feature_split_merge, feature_triples : int
        Per sweep, birth / death proposals of a feature with its parameters (default 3, each
        of at most ``feature_rows`` = 10 rows), split / merge proposals each followed by a
        fold / unfold of a duplicated feature (default 3), and merge / unmerge proposals of
        two overlapping features and their merged triple (default 0: off); see the docs page.
    feature_params : bool, optional
        Whether to look for the features' parameter matrix ``A`` (default ``None``: look;
        ``True``: raise if it is missing; ``False``: no feature moves); see the docs page.
    init_z : {"auto", "point", "prior", "surrogate"}
        Where a chain starts (default ``"auto"``: a given ``Z``, else a start search where one
        applies); see :mod:`pymc_ibp.init.policy` and the docs page.

    Raises
    ------
    ModelPatternError
        If ``vars`` is not one binary matrix, or ``factorise=True`` and it does not hold.
    ValueError
        If observed data contain ``inf`` (or a NaN that PyMC did not impute).

    References
    ----------
    T. L. Griffiths and Z. Ghahramani (2011). The Indian buffet process: an introduction and
    review. *Journal of Machine Learning Research* 12, 1185-1224.

    J. A. Christen and C. Fox (2005). Markov chain Monte Carlo using an approximation.
    *Journal of Computational and Graphical Statistics* 14(4), 795-810.

    M. A. Tanner and W. H. Wong (1987). The calculation of posterior distributions by data
    augmentation. *Journal of the American Statistical Association* 82(398), 528-540.
    """

    name = "ibp_gibbs"
    default_blocked = False  # one instance per variable when PyMC assigns several
    _state_class = IBPGibbsState
    stats_dtypes_shapes = {
        "ibp_n_active": (np.int64, []),
        "ibp_flips": (np.int64, []),
        "ibp_log_lik": (np.float64, []),
        "ibp_model_logp": (np.float64, []),
        "ibp_kmax_hit": (bool, []),
        "ibp_kmax_suggested": (np.int64, []),
        **{f"ibp_{kind}_accepted": (np.int64, []) for kind in _MOVE_KINDS},
    }

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, split_merge=5, combination_moves=5, factorise=None,
                 block_moves=None, turn_on_moves=1, feature_moves=3, feature_rows=10,
                 feature_split_merge=3, feature_triples=0, feature_params=None,
                 init_z="auto"):
        model = pm.modelcontext(model)
        z_val, z_rv = one_value_var(vars, model, "IBPGibbs updates one binary matrix at a time")
        op = z_rv.owner.op
        prior = match_prior(model, z_rv) if isinstance(op, BINARY_MATRIX_OPS) else None
        if prior is None:
            raise ModelPatternError(
                f"IBPGibbs needs a 2-D binary matrix: pmi.IBP('Z', ...), pm.Bernoulli('Z', p, "
                f"shape=(N, K)) or pmi.DependentIBP; {z_rv.name!r} is a {type(op).__name__} "
                f"with ndim={z_rv.ndim}."
            )
        self.vars = [z_val]
        self.z_name = z_val.name
        self._slot_knob = slot_knob(model, z_rv.name)  # named by a TruncationWarning
        self.is_ibp = isinstance(prior, IBPPrior)
        ip = model.initial_point() if initial_point is None else initial_point
        self.n, self.k_max = ip[self.z_name].shape
        if initial_point is not None:  # the first chain's start, before any step runs
            check_binary_start(ip[self.z_name], self.z_name, "IBPGibbs")
        self.rows = RowLikelihood(model, z_rv, self.n, ip, compile_kwargs=compile_kwargs)
        children = self.rows.children
        self.joint = factorise is False
        if not self.joint:
            try:
                self.rows.compile()
                self.rows.check_matrix_factorisation(ip)
            except ModelPatternError as err:
                if factorise:
                    raise
                self.joint = True
                # what the likelihood is, not what the row-wise updates would need: the
                # entry-wise updates are exact (e.g. the IBP-IBP's M, seen through C @ M)
                why = str(err).split(" IBPGibbs needs")[0].rstrip(".")
                _log.info(f"IBPGibbs for {z_rv.name!r}: entry-wise updates with the whole "
                          f"likelihood ({self.n * self.k_max} evaluations per sweep; exact), "
                          f"since it is not one term per row of {z_rv.name!r}: "
                          f"{why[0].lower()}{why[1:]}")
        if self.joint:
            self._total_ll = self.rows.total_fn()
        if self.is_ibp:
            hyper = model.replace_rvs_by_values([prior.alpha, prior.beta])
        else:  # per-entry prior log-odds, computed in log space
            hyper = model.replace_rvs_by_values([prior.log_p1 - prior.log_p0])
        self._hyper = compile_point_fn(model, hyper, compile_kwargs=compile_kwargs)
        self._model_logp = None
        # one match of the linear-Gaussian pattern, for the log line and the start search
        spec = _linear_gaussian_spec(model, z_rv)
        if init_z not in INIT_Z:
            init_z_policy(init_z, "IBPGibbs", on_the_model=False)  # raises, naming the values
        if init_z == "prior" and spec is None:  # no linear-Gaussian search: the surrogate's
            init_z = "surrogate"
        starts = self.is_ibp and not self.joint and init_z not in ("point", "surrogate")
        # the log joint density of the model (no Jacobians) at the point step() returns
        self._model_logp = model_logp_fn(model, compile_kwargs)
        self._starter = (_linear_gaussian_start(model, spec, ip, init_z, compile_kwargs)
                         if starts else None)
        row_moves = self.is_ibp and not self.joint  # the moves score rows separately
        (self.split_merge, self.combination_moves, self.feature_moves,
         self.feature_split_merge, self.feature_triples) = _move_counts(
            row_moves, split_merge=split_merge, combination_moves=combination_moves,
            feature_moves=feature_moves, feature_split_merge=feature_split_merge,
            feature_triples=feature_triples)
        self.row_moves = RowMoves(self.rows, self.z_name, self.k_max) if row_moves else None
        self.child_moves = None
        if self.is_ibp and not self.joint and block_moves is not False:
            self.child_moves = ChildBlockMoves.find(model, self.rows, ip, compile_kwargs,
                                               block_moves)
        elif block_moves:
            raise ModelPatternError(
                f"IBPGibbs(block_moves=True) needs {z_rv.name!r} to be a pmi.IBP whose "
                "likelihood factorises over its rows.")
        (self.turn_on_moves,) = _move_counts(self.child_moves is not None,
                                             turn_on_moves=turn_on_moves)
        if int(feature_rows) < 1:
            raise ValueError(f"feature_rows must be >= 1; got {feature_rows!r}.")
        self.features = None
        # the surrogate start: asked for, or by default where the linear-Gaussian
        # search does not apply (not linear-Gaussian); it needs A too (its rows set given the
        # Z found), so A is looked for whether or not the moves are on
        auto = init_z == "auto" and spec is None and row_moves
        if ((self.feature_moves or self.feature_split_merge or self.feature_triples
             or feature_params or auto
             or (row_moves and init_z == "surrogate")) and feature_params is not False):
            if not row_moves:
                raise ModelPatternError(
                    f"IBPGibbs(feature_params=True) needs {z_rv.name!r} to be a pmi.IBP whose "
                    "likelihood factorises over its rows.")
            self.features = FeatureParameterMoves.find(self.row_moves, model, z_rv, ip,
                                                    compile_kwargs,
                                                    required=bool(feature_params),
                                                    max_rows=feature_rows)
        if self.features is None:
            self.feature_moves = self.feature_split_merge = self.feature_triples = 0
        self.init_z = init_z
        self.surrogate = None
        auto = auto and self.features is not None  # by default only where the pattern holds
        if init_z == "surrogate" or auto:
            try:
                if not row_moves or self.features is None:
                    raise ModelPatternError(
                        f"IBPGibbs(init_z='surrogate') needs {z_rv.name!r} to be a pmi.IBP "
                        "whose likelihood factorises over its rows, and one parameter matrix A "
                        "of it (a free continuous variable with K_max rows, row k reaching the "
                        f"likelihood only through column k of {z_rv.name!r}, e.g. mu = Z @ A).")
                alpha0, beta0 = (float(np.asarray(h)) for h in self._hyper(ip))
                self.surrogate = SurrogateStart(model, z_rv, children, (self.n, self.k_max),
                                                 alpha0, beta0, "IBPGibbs", initial_point)
            except ModelPatternError:
                if not auto:
                    raise
        # the chained start of a correlated model's category-feature matrix M
        self.chained = (_chained_start(model, z_rv, self._hyper(ip), initial_point)
                        if self.is_ibp and init_z != "point" else None)
        # the model's potentials on what this step changes (Z, and A or Y through its moves):
        # in each entry's conditional and in the moves' acceptance ratios; the noisy-or
        # block moves (several row tests each) are accepted in a second stage by their ratio
        changed = [z_rv] + ([self.features.a_rv] if self.features is not None else [])
        if self.child_moves is not None:
            changed += [rv for rv in model.free_RVs
                        if model.rvs_to_values[rv].name == self.child_moves.y_name]
        pots = potentials_on(model, changed)
        self._phi = PotentialTerms(model, pots, compile_kwargs) if pots else None
        self._prune = bool(potentials_on(model, [z_rv])) and self.features is not None
        if self.row_moves is not None:
            self.row_moves.potentials = self._phi
        if pots:
            _log.info(f"IBPGibbs for {z_rv.name!r} includes the model's pm.Potential "
                      f"{self._phi.names} (in every update and move it makes)")
        # the model's own start of Z (and A): whether the user gave a chain's start of Z
        # ("auto" then starts there) and of A (else fitted to a given Z) is told per chain
        self._starts = StartDefaults(
            model, [z_rv] + ([self.features.a_rv] if self.features is not None else []))
        self._stat_names = per_matrix_stats(self, model, z_rv.name)
        self._start_check = StartCheck(model, z_rv, "IBPGibbs")
        self.rng = get_random_generator(rng)
        self.warned = self.started = False
        self.suggested = 0

    @interrupt_safe  # the column kernels take the step's Generator (see _numba_utils)
    def step(self, point):
        if not self.started:
            self.started = True
            self._start_check.check(point)
            check_binary_start(point[self.z_name], self.z_name, "IBPGibbs")
            z_given = self._starts.given(point, self.z_name)
            if self.chained is not None and (self.init_z in ("prior", "surrogate") or not (
                    z_given or self.chained.given)):
                return self._chained_start(point)
            if self.surrogate is not None and (self.init_z == "surrogate" or not z_given):
                return self._surrogate_start(point)
            if self._starter is not None:
                start = self._search_start(point)
                if start is not None:
                    return start
            if (z_given and self.features is not None and np.any(point[self.z_name])
                    and not self._starts.given(point, self.features.a_name)):
                return self._given_z_start(point)
        Z = np.array(point[self.z_name], copy=True)  # the value's dtype: the logp's input
        hyper = self._hyper(point)
        flips = 0
        if self.is_ibp:
            alpha, beta = (float(np.asarray(h)) for h in hyper)
            m = Z.sum(axis=0).astype(np.int64)
            n_active = int((m > 0).sum())
        else:
            prior_lo = np.broadcast_to(np.asarray(hyper[0], dtype=float), Z.shape)
        trial = dict(point)
        seen = self.rows.rows_seen(trial)  # the labels do not change within the step
        loglik = 0.0
        if self._phi is not None:
            self._phi.reset({**trial, self.z_name: Z})
        if self.joint:
            flips, loglik, n_active = self._joint_sweep(
                Z, trial, (alpha, beta) if self.is_ibp else None,
                None if self.is_ibp else prior_lo)
        # the rows' log-likelihoods at the current Z (None: not known); since the likelihood
        # factorises over rows, one evaluation with column k flipped in every row gives each
        # row's other option, so a column costs one evaluation, not two
        cur = None if self.joint else self.rows.at(trial, Z)
        for k in ([] if self.joint else self.rng.permutation(self.k_max)):
            col = Z[:, k].copy()
            Z[:, k] = col == 0
            flipped = self.rows.at(trial, Z)
            Z[:, k] = col
            on = col == 1
            ll1 = np.where(on, cur, flipped)
            ll0 = np.where(on, flipped, cur)
            if self._phi is not None:
                f, n_active = self._column_with_potential(
                    Z, k, col, ll1, ll0, m, n_active, (alpha, beta) if self.is_ibp else None,
                    None if self.is_ibp else prior_lo[:, k], trial)
            elif self.is_ibp:
                f, n_active = ibp_column_gibbs(self.rng, Z, k, ll1, ll0, m, n_active, alpha, beta)
            else:
                f = bernoulli_column_gibbs(self.rng, Z, k, ll1, ll0, prior_lo[:, k])
            flips += f
            cur = np.where(Z[:, k] == 1, ll1, ll0)
            loglik = float(cur.sum())
        sm_acc = 0
        for _ in range(self.split_merge):
            accepted, Z = self.row_moves.split_merge_move(self.rng, Z, trial, alpha, beta, cur)
            sm_acc += accepted
            cur = None if accepted else cur
        cm_acc = 0
        for _ in range(self.combination_moves):
            accepted, Z = self.row_moves.combination_move(self.rng, Z, trial, alpha, beta,
                                                             cur)
            cm_acc += accepted
            cur = None if accepted else cur
        block_acc = turn_acc = 0
        if self.child_moves is not None:
            for k in self.rng.permutation(self.k_max):
                saved = self._saved(Z, trial)
                accepted = self.child_moves.block_move(self.rng, Z, trial, alpha, beta, k)
                block_acc += self._second_stage(accepted, Z, trial, saved)
            for _ in range(self.turn_on_moves):
                saved = self._saved(Z, trial)
                accepted = self.child_moves.turn_on_move(self.rng, Z, trial, alpha, beta)
                turn_acc += self._second_stage(accepted, Z, trial, saved)
        fm_acc = fsm_acc = fold_acc = triple_acc = 0
        if self.features is not None:
            self.features.new_sweep()
        for _ in range(self.feature_moves):
            accepted, Z = self.features.birth_death(self.rng, Z, trial, alpha, beta)
            fm_acc += accepted
        for _ in range(self.feature_split_merge):
            accepted, Z = self.features.split_merge(self.rng, Z, trial, alpha, beta)
            fsm_acc += accepted
            accepted, Z = self.features.fold(self.rng, Z, trial, alpha, beta, seen)
            fold_acc += accepted
        for _ in range(self.feature_triples):
            accepted, Z = self.features.pair_triple(self.rng, Z, trial, alpha, beta)
            triple_acc += accepted
        moved = fm_acc or fsm_acc or fold_acc or triple_acc
        if sm_acc or cm_acc or block_acc or turn_acc or moved:
            trial[self.z_name] = Z
            loglik = float(np.sum(self.rows(trial)))
        n_active = int((Z.sum(axis=0) > 0).sum())
        hit = n_active == self.k_max  # the slots of Z itself
        n_active = self._k_plus(Z, seen, n_active)
        if hit and self.is_ibp and not self.warned:
            self.warned = True
            warn_slots_in_use("IBPGibbs", self.z_name, self.k_max, self._slot_knob,
                              advice=self._k_max_advice(Z, alpha, beta))
        new = dict(point)
        new[self.z_name] = Z
        if block_acc or turn_acc:
            y_name = self.child_moves.y_name
            new[y_name] = np.asarray(trial[y_name], dtype=point[y_name].dtype)
        if moved:
            a_name = self.features.a_name
            new[a_name] = np.asarray(trial[a_name], dtype=point[a_name].dtype)
        counts = (sm_acc, cm_acc, block_acc, turn_acc, fm_acc, fsm_acc, fold_acc, triple_acc)
        stats_ = {"ibp_n_active": n_active, "ibp_flips": int(flips), "ibp_log_lik": loglik,
                  "ibp_kmax_hit": bool(hit), "ibp_kmax_suggested": self.suggested,
                  **{f"ibp_{kind}_accepted": int(c) for kind, c in zip(_MOVE_KINDS, counts,
                                                                        strict=True)}}
        return new, self._stats(stats_, new)

    def _search_start(self, point):
        """The chain's first iteration when the initialisation policy (``init_z``) calls for
        the linear-Gaussian start search: ``Z`` from the best of the annealed searches, ``A``
        and the imputed entries from their exact conditional given it (one iteration of the
        linear-Gaussian update, which makes no other move right after its search).
        ``None`` when the chain starts at its initial point instead."""
        starter = self._starter
        if not starter.search.will_search(np.asarray(point[self.z_name], dtype=np.int8)):
            return None
        starter.reset(0)
        new, _ = starter.step(self.rng, point)  # the chain's own stream
        Z = np.asarray(new[self.z_name], dtype=point[self.z_name].dtype)
        new[self.z_name] = Z
        return self._start_at(new)

    def _surrogate_start(self, point):
        """The chain's first iteration under ``init_z="surrogate"``: ``Z`` from the best of the
        annealed searches on the linear-Gaussian surrogate of the data
        (:class:`~pymc_ibp.init.surrogate.SurrogateStart`), then the active rows of ``A`` set
        to their Laplace means given it (two passes over the columns) or, on continuous data
        where that fits the rows better (a higher log-likelihood), to the surrogate's rows of
        ``A`` (a likelihood whose location is ``Z @ A``), then to their joint mode given
        ``Z`` (:meth:`_at_joint_mode`); a model's offset that is one free
        variable the same for every row starts at the surrogate's fitted offset, and so does
        every group's row of one indexed by the rows' groups (``b[group]``), unless the user
        gave it; every other variable keeps its value (measurements: docs page
        "IBPGibbs")."""
        draw = self.surrogate.draw(self.rng, point)
        Z = draw.z.astype(point[self.z_name].dtype)
        new = self.features.start_rows({**point, **draw.offsets, self.z_name: Z}, draw.features)
        return self._start_at(self._at_joint_mode(new))

    def _chained_start(self, point):
        """The chain's first iteration for the category-feature matrix ``M`` of a correlated
        model (:class:`~pymc_ibp.init.chained.ChainedStart`): the features by the surrogate
        start of a plain IBP, the categories (``c`` or ``C``) and ``M`` fitted to them, ``A``
        as in :meth:`_surrogate_start` where this step has it (else at the surrogate's
        features on continuous data, unless the user gave ``A``)."""
        draw = self.chained.draw(self.rng, point)
        new = {**point, **draw.values}
        a_name = self.chained.a_name
        if self.features is not None:
            new = self._at_joint_mode(self.features.start_rows(new, draw.features))
        elif a_name is not None and draw.features is not None:
            new[a_name] = draw.features.astype(np.asarray(point[a_name]).dtype)
        return self._start_at(new)

    def _given_z_start(self, point):
        """The chain's first iteration when the user gave its ``Z`` but not ``A``: ``Z`` kept
        and the active rows of ``A`` set to their joint mode given it
        (:meth:`FeatureParameterMoves.joint_mode`), every other variable kept.  (From ``A``'s
        own start, e.g. 0, the likelihood would not tell the features apart, and the first
        sweep would redraw the given ``Z`` from its prior.)"""
        new = self._at_joint_mode(point)
        return new, self._start_stats(new)

    def _at_joint_mode(self, point):
        """``point`` with the active rows of ``A`` at their joint mode given its ``Z``
        (:meth:`FeatureParameterMoves.joint_mode`, from ``point[A]``)."""
        a_name = self.features.a_name
        new = dict(point)
        new[a_name] = np.asarray(self.features.joint_mode(point, point[self.z_name]),
                                 dtype=point[a_name].dtype)
        return new

    def _start_at(self, new):
        """The chain's first iteration at a searched start ``new``, which the searches fit
        without the model's potentials: where potentials on ``Z`` price its features, with
        the features the model's log density drops (:func:`~pymc_ibp.init.pruning.
        prune_features`, the other features' rows of ``A`` at their joint mode) emptied."""
        if self._prune and self._model_logp is not None:
            new = prune_features(new, self.z_name, self._model_logp, self._at_joint_mode)
        return new, self._start_stats(new)

    def _start_stats(self, new):
        """The stats of a chain's first iteration when it is a start search (no moves)."""
        Z = new[self.z_name]
        n_active = int((Z.sum(axis=0) > 0).sum())
        hit = n_active == self.k_max
        n_active = self._k_plus(Z, self.rows.rows_seen(new), n_active)
        # no move was made: every "accepted" counter the class declares is 0
        stats_ = {k: 0 for k in type(self).stats_dtypes_shapes if k.endswith("_accepted")}
        loglik = float(self._total_ll(new) if self.joint else np.sum(self.rows(new)))
        stats_.update(ibp_n_active=n_active, ibp_flips=0, ibp_log_lik=loglik, ibp_kmax_hit=hit,
                      ibp_kmax_suggested=self.suggested)
        return self._stats(stats_, new)

    def _stats(self, stats_, new):
        """The recorded stats of one iteration, with the model's log density at ``new``."""
        stats_["ibp_model_logp"] = (float(self._model_logp(new)) if self._model_logp is not None
                                    else np.nan)
        return [{self._stat_names[k]: v for k, v in stats_.items()}]

    def _column_with_potential(self, Z, k, col, ll1, ll0, m, n_active, ibp, prior_lo, trial):
        """Gibbs update of column ``k`` entry by entry with the potentials ``φ`` in each
        entry's conditional: prior log-odds (``ibp = (α, β)`` or the per-entry ``prior_lo``)
        plus ``ll1 - ll0`` (the row's log-likelihoods) plus ``φ(z_nk = 1) - φ(z_nk = 0)``
        (one evaluation of the potentials per entry).  Returns ``(flips, active columns)``;
        ``Z`` and ``m`` in place."""
        n = self.n
        log_lam = log_birth_rate(ibp[0], ibp[1], n) if ibp is not None else 0.0
        trial[self.z_name] = Z
        flips = 0
        for i in range(n):
            old = int(Z[i, k])
            if ibp is not None:
                mk = int(m[k]) - old
                others = n_active - (1 if m[k] > 0 else 0)
                lo = ibp_entry_logodds(mk, others, n, self.k_max, log_lam, ibp[1])
            else:
                lo = float(prior_lo[i])
            Z[i, k] = 1 - old
            d_phi, other = self._phi.entry_log_odds(trial, old)
            x = lo + ll1[i] - ll0[i] + d_phi
            new = self._draw_entry(x)
            Z[i, k] = new
            if new != old:
                flips += 1
                self._phi.moved_to(other)
                if ibp is not None:
                    m[k] += new - old
                    n_active = others + (1 if m[k] > 0 else 0)
        return flips, n_active

    def _k_max_advice(self, Z, alpha, beta):
        """The ``K_max`` to suggest where the slots bind: the surrogate's probe from ``Z``
        (:meth:`~pymc_ibp.init.surrogate.SurrogateStart.probe_k_max`, with a generator
        spawned from the chain's, whose draws it leaves as they are); ``None`` (twice
        ``K_max``) without a surrogate."""
        if self.surrogate is None:
            return None
        probe = self.surrogate.probe_k_max(self.rng.spawn(1)[0], Z, alpha, beta)
        self.suggested = probe.suggested
        return probe.advice()

    @staticmethod
    def _k_plus(Z, seen, n_active):
        """The ``ibp_n_active`` stat: ``n_active`` (the columns of ``Z`` in use), or for a
        matrix the likelihood sees through labels (``Z = M[c]``) the features of the rows it
        uses (``seen``: :meth:`RowLikelihood.rows_seen`)."""
        return n_active if seen is None else int((Z[seen].sum(axis=0) > 0).sum())

    def _draw_entry(self, x):
        """An entry drawn from its conditional log-odds ``x`` (one uniform of the chain's
        generator)."""
        return int(self.rng.random() < (1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0))

    def _saved(self, Z, trial):
        """What a noisy-or block move may change (``Z`` and ``Y``), kept for its second
        acceptance stage (``None`` without potentials)."""
        if self._phi is None:
            return None
        y_name = self.child_moves.y_name
        return Z.copy(), np.array(trial[y_name], copy=True)

    def _second_stage(self, accepted, Z, trial, saved):
        """Delayed acceptance (Christen & Fox 2005) of a noisy-or block move, which leaves
        the model without its potentials invariant (reversibly) by several row tests: an
        accepted move is kept with probability ``min(1, exp(φ' - φ))``, else ``Z`` (in place)
        and ``Y`` are restored.  Returns the number of rows accepted."""
        if saved is None or not accepted:
            return accepted
        new = self._phi({**trial, self.z_name: Z})
        if math.log(self.rng.random()) < new - self._phi.value:
            self._phi.moved_to(new)
            return accepted
        Z[...] = saved[0]
        trial[self.child_moves.y_name] = saved[1]
        return 0

    def _joint_sweep(self, Z, trial, ibp, prior_lo):
        """Entry-wise Gibbs sweep (in place) for a likelihood that does not factorise over the
        rows of ``Z``: each entry's conditional from the whole likelihood with the entry
        flipped (one evaluation per entry) and its prior log-odds (``ibp = (α, β)`` for
        :class:`pymc_ibp.IBP`, else the per-entry ``prior_lo``).  Returns ``(flips,
        log-likelihood, active columns)``."""
        n, k_max = Z.shape
        trial[self.z_name] = Z
        total = float(self._total_ll(trial))
        phi = self._phi  # the potentials, in each entry's conditional (held at Z)
        m = Z.sum(axis=0).astype(np.int64)
        n_active = int((m > 0).sum())
        log_lam = log_birth_rate(ibp[0], ibp[1], n) if ibp is not None else 0.0
        flips = 0
        for k in self.rng.permutation(k_max):
            for i in range(n):
                old = int(Z[i, k])
                if ibp is not None:
                    mk = int(m[k]) - old
                    others = n_active - (1 if m[k] > 0 else 0)
                    lo = ibp_entry_logodds(mk, others, n, k_max, log_lam, ibp[1])
                else:
                    lo = float(prior_lo[i, k])
                Z[i, k] = 1 - old
                flipped = float(self._total_ll(trial))
                ll1, ll0 = (flipped, total) if old == 0 else (total, flipped)
                x = lo + ll1 - ll0
                if phi is not None:
                    d_phi, other = phi.entry_log_odds(trial, old)
                    x += d_phi
                new = self._draw_entry(x)
                Z[i, k] = new
                total = ll1 if new else ll0
                if phi is not None and new != old:
                    phi.moved_to(other)
                if new != old:
                    flips += 1
                    if ibp is not None:
                        m[k] += new - old
                        n_active = others + (1 if m[k] > 0 else 0)
        return flips, total, n_active

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.warned = self.started = False
        self.suggested = 0

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        # any likelihood: preferred for pmi.IBP; AcceleratedGibbs wins where it applies (IDEAL)
        if isinstance(var.owner.op, IBPRV):
            return Competence.PREFERRED
        if isinstance(var.owner.op, DependentIBPRV):
            return Competence.PREFERRED  # PyMC's binary steps ignore its structure
        if isinstance(var.owner.op, BernoulliRV) and var.ndim == 2:
            # a Bernoulli matrix whose probabilities come from the plugin's priors (the sticks
            # of pmi.IBPStickBreaking, the noisy-or's 1 - q^(C M)): column-wise updates beat
            # PyMC's BinaryGibbsMetropolis (one whole-model evaluation per entry)
            plugin = (IBPRV, IBPStickBreakingRV, CRPRV)
            if any(a.owner is not None and isinstance(a.owner.op, plugin)
                   for a in ancestors([var.owner.inputs[-1]])):
                return Competence.IDEAL
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE
