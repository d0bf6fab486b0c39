"""Collapsed and accelerated Gibbs steps for linear-Gaussian IBP models (spec §3.1, §4.3, §4.4).

Both steps update ``Z`` and ``A`` together: a sweep of ``Z`` with ``A`` integrated out, then
``A`` drawn from its exact Gaussian conditional given the new ``Z`` (so the trace holds ``A``
and every other step sees a consistent state), then imputed entries of ``X`` (if any) drawn
from ``N(Z A, σx²)`` — a data-augmentation Gibbs step that keeps the posterior of the observed
entries exact.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pytensor.tensor.random.basic import NormalRV

from pymc_ibp.distributions.ibp import IBPRV, ibp_draw_core
from pymc_ibp.step_methods import kernels
from pymc_ibp.exceptions import ModelPatternError, TruncationWarning
from pymc_ibp.step_methods.model_matching import (
    PATTERN,
    find_linear_gaussian,
    matched_models,
)

__all__ = ["AcceleratedGibbs", "CollapsedGibbs"]


@dataclass_state
class LinearGaussianIBPState(StepMethodState):
    sweeps: int
    started: bool
    warned: bool


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
    }
    _state_class = LinearGaussianIBPState

    def __init__(self, vars=None, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, init_z="prior", split_merge=5,
                 split_merge_proposal="sequential", init_restarts=4, init_anneal=True):
        model = pm.modelcontext(model)
        if vars is None:
            vars = [rv for rv in model.free_RVs if isinstance(rv.owner.op, IBPRV)]
        value_vars = get_value_vars_from_user_vars(vars, model)
        z_vals = [v for v in value_vars if isinstance(model.values_to_rvs[v].owner.op, IBPRV)]
        if len(z_vals) > 1:
            raise ModelPatternError(
                f"{type(self).__name__} updates exactly one pmi.IBP matrix; got "
                f"{[v.name for v in z_vals]}. Needed pattern: {PATTERN}."
            )
        if z_vals:
            spec = find_linear_gaussian(model, model.values_to_rvs[z_vals[0]])
        else:
            # Z is updated by another step (e.g. IBPGibbs): draw only A (and imputed X) exactly
            spec = self._spec_owning(model, value_vars)
        self.spec = spec
        self.update_z = bool(z_vals)
        owned = ([spec.z_rv] if self.update_z else []) + [spec.a_rv] + (
            [spec.missing_rv] if spec.missing_rv is not None else [])
        owned_vals = [model.rvs_to_values[rv] for rv in owned]
        for v in value_vars:
            if v not in owned_vals:
                raise ModelPatternError(
                    f"{type(self).__name__} updates {[o.name for o in owned_vals]}; it cannot also "
                    f"update {v.name!r}. Assign {v.name!r} to another step."
                )
        self.vars = owned_vals
        self.z_name = model.rvs_to_values[spec.z_rv].name
        self.a_name = model.rvs_to_values[spec.a_rv].name
        self.miss_name = (model.rvs_to_values[spec.missing_rv].name
                          if spec.missing_rv is not None else None)
        for rv in [spec.a_rv, spec.missing_rv]:
            if rv is not None and model.rvs_to_transforms.get(rv) is not None:
                raise ModelPatternError(f"{rv.name!r} must not be transformed.")
        hyper = model.replace_rvs_by_values([spec.sigma_x, spec.sigma_a, spec.alpha, spec.beta])
        self._hyper_fn = model.compile_fn(hyper, inputs=model.value_vars, on_unused_input="ignore",
                                          point_fn=True, **(compile_kwargs or {}))
        self.n, self.d = spec.X.shape
        self.k_max = spec.k_max
        self._X = np.where(np.isnan(spec.X), 0.0, spec.X)
        self._mask = spec.missing_mask
        self._trXX = float(np.sum(self._X**2)) if self._mask is None else None
        if init_z not in ("prior", "point"):
            raise ValueError(f"init_z must be 'prior' or 'point'; got {init_z!r}.")
        self.init_z = init_z
        self.init_restarts = int(init_restarts)
        if self.init_restarts < 1:
            raise ValueError(f"init_restarts must be >= 1; got {init_restarts!r}.")
        self._restarts, self._segment, self._candidates, self._n_tune = 1, 0, [], 0
        self.init_anneal = bool(init_anneal)
        self._data_var = float(np.nanvar(spec.X))
        self.split_merge = int(split_merge)
        kinds = {"sequential": kernels.sequential_split_merge,
                 "random": kernels.random_split_merge}
        if split_merge_proposal not in kinds:
            raise ValueError(f"split_merge_proposal must be one of {sorted(kinds)}; got "
                             f"{split_merge_proposal!r}.")
        self._split_merge_fn = kinds[split_merge_proposal]
        self.sweeps, self.started, self.warned = 0, False, False
        self.rng = get_random_generator(rng)
        self.tune = False

    # --- helpers --------------------------------------------------------------------------
    @staticmethod
    def _spec_owning(model, value_vars):
        """The matched model whose A (or imputed X) is among ``value_vars``."""
        for spec in matched_models(model):
            mine = {model.rvs_to_values[rv] for rv in (spec.a_rv, spec.missing_rv) if rv is not None}
            if mine & set(value_vars):
                return spec
        raise ModelPatternError(
            f"No pmi.IBP matrix among {[v.name for v in value_vars]} and none of them is the "
            f"feature matrix of a linear-Gaussian IBP model. Needed pattern: {PATTERN}."
        )

    def _hyper(self, point):
        sx, sa, alpha, beta = (float(np.asarray(v)) for v in self._hyper_fn(point))
        return sx * sx, sa * sa, alpha, beta

    def _complete_data(self, point):
        if self._mask is None:
            return self._X
        X = self._X.copy()
        X[self._mask] = point[self.miss_name]
        return X

    def _sweep(self, Z, X, m, sx2, sa2, alpha, beta):  # pragma: no cover - abstract
        raise NotImplementedError

    def _log_joint(self, Z, X, trXX, sx2, sa2, alpha, beta):
        """Collapsed ``log p(X | Z, σ) + log P(Z | α, β)`` and ``log p(X | Z, σ)``."""
        return kernels.log_joint_of(Z, X, sx2, sa2, alpha, beta, trXX)

    def _log_joint_stats(self, G, RX, m_act, trXX, sx2, sa2, alpha, beta):
        """:meth:`_log_joint` from the active columns' ``ZᵀZ``, ``ZᵀX`` and sizes."""
        return kernels.collapsed_log_joint(G, RX, np.asarray(m_act, dtype=np.int64), trXX,
                                           self.n, self.d, sx2, sa2, alpha, beta, self.k_max)

    def _restart(self, Z, X, trXX, sx2, sa2, alpha, beta):
        """Multi-start burn-in (tuning only): the first ``R·L`` tuning sweeps are ``R``
        segments of ``L`` sweeps, each from its own prior draw of ``Z``; after the last one the
        chain continues from the segment end with the highest collapsed log joint (evaluated
        at the current hyperparameters).  Only the starting point of the post-tuning chain is
        chosen this way: after the ``R·L``-th sweep every sweep is the exact kernel."""
        s, L, R = self.sweeps, self._segment, self._restarts
        if not L or s == 0 or s > R * L or s % L:
            return Z
        self._candidates.append(Z)  # Z is the step's own copy of the point's value
        if s < R * L:
            return ibp_draw_core(self.rng, alpha, beta, self.n, self.k_max)
        scores = [self._log_joint(c, X, trXX, sx2, sa2, alpha, beta)[0] for c in self._candidates]
        best = self._candidates[int(np.argmax(scores))]
        self._candidates = []
        return best

    def _annealed(self, sx2):
        """Noise variance for the Z moves.  Inside a multi-start segment (tuning only, with
        ``init_anneal``) it falls geometrically from the data's variance to ``σx²`` over the
        first 60% of the segment's sweeps, so that features appear largest first instead of
        all slots filling with noise in the first sweep; ``σx²`` itself everywhere else."""
        L = self._segment
        if not (L and self.init_anneal) or self.sweeps >= self._restarts * L:
            return sx2
        t, span = self.sweeps % L, max(1, int(math.ceil(0.6 * L)))
        if t >= span or self._data_var <= sx2:
            return sx2
        w = t / span
        return math.exp(w * math.log(sx2) + (1.0 - w) * math.log(self._data_var))

    def step(self, point):
        sx2, sa2, alpha, beta = self._hyper(point)
        Z = np.array(point[self.z_name], dtype=np.int64, copy=True)
        X = self._complete_data(point)
        trXX = self._trXX if self._trXX is not None else float(np.sum(X * X))
        flips = births = deaths = hit = sm_acc = 0
        if self.update_z:
            if not self.started:
                self.started = True
                if self.init_z == "prior":
                    Z = ibp_draw_core(self.rng, alpha, beta, self.n, self.k_max)
            Z = self._restart(Z, X, trXX, sx2, sa2, alpha, beta)
            m = Z.sum(axis=0).astype(np.int64)
            sx2_z = self._annealed(sx2)
            flips, births, deaths, hit = self._sweep(Z, X, m, sx2_z, sa2, alpha, beta)
            if self.split_merge > 0:
                sm_acc = self._split_merge_fn(self.rng, Z, X, m, sx2_z, sa2, alpha, beta,
                                              self.split_merge, trXX)
        else:
            m = Z.sum(axis=0).astype(np.int64)
        # A | Z, X: active rows from the exact Gaussian conditional, empty slots from the prior
        act = np.flatnonzero(m > 0)
        G, RX = kernels.suff_stats(Z, X, act)
        A = self.rng.normal(0.0, math.sqrt(sa2), size=(self.k_max, self.d))
        if act.size:
            A[act] = kernels.draw_active_features(self.rng, G, RX, sx2, sa2)
        new = dict(point)
        if self.update_z:
            new[self.z_name] = Z
        new[self.a_name] = A
        if self._mask is not None:
            mean = (Z @ A)[self._mask]
            new[self.miss_name] = mean + math.sqrt(sx2) * self.rng.standard_normal(mean.shape)
        # label-invariant statistics, with the hyperparameters this sweep used
        log_joint, loglik = self._log_joint_stats(G, RX, m[act], trXX, sx2, sa2, alpha, beta)
        if hit and not self.warned and self.sweeps >= self._n_tune:  # kept draws only
            self.warned = True
            warnings.warn(
                f"{type(self).__name__}: all K_max={self.k_max} feature slots of "
                f"{self.z_name!r} were in use; the truncation may bias the posterior. Raise K_max "
                f"(the length of the 'feature' dim / the last entry of shape=) and re-run; the "
                f"sample stat 'ibp_kmax_hit' marks the affected draws.",
                TruncationWarning,
                stacklevel=2,
            )
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
        }
        return new, [stats_]

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.started = False
        self.warned = False
        self.sweeps = 0
        self._n_tune = int(tune)
        # multi-start burn-in schedule: R segments of L >= 10 sweeps in the first half of tuning
        R = self.init_restarts if (self.update_z and self.init_z == "prior") else 1
        while R > 1 and tune // (2 * R) < 10:
            R -= 1
        self._restarts, self._segment = R, (tune // (2 * R) if R > 1 else 0)
        self._candidates = []

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        # IDEAL for the Z, A and imputed X of a model with the linear-Gaussian pattern; other
        # IBP models go to IBPGibbs (any likelihood)
        if not isinstance(var.owner.op, (IBPRV, NormalRV)):
            return Competence.INCOMPATIBLE
        try:
            model = pm.modelcontext(None)
        except TypeError:
            return Competence.INCOMPATIBLE
        for spec in matched_models(model):
            if var is spec.z_rv or var is spec.a_rv or var is spec.missing_rv:
                return Competence.IDEAL
        return Competence.INCOMPATIBLE


class AcceleratedGibbs(_LinearGaussianIBPStep):
    r"""Accelerated collapsed Gibbs sampler for the linear-Gaussian IBP (spec §4.4, [001]).

    Samples from exactly the same conditionals as :class:`CollapsedGibbs`,

    .. math:: P(z_{nk}=1\mid\cdot) \propto \frac{m_{-n,k}}{N-1-m_{-n,k}+\beta}\,
        \mathcal N\big(x_n;\ z_n\mu_{-n},\ (z_n\Sigma_{-n}z_n^\top+\sigma_x^2) I_D\big),

    but keeps the feature posterior :math:`(\Sigma, \mu)` of all the data and removes/re-adds one
    row at a time by rank-one updates (window :math:`W=1` by default, corrected E1–E3), so a sweep costs
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
        uses the matrix-normal window likelihood of [000 eq 4.2] at ``O(W³ + W²D)`` per entry).
    refresh : int, optional
        Rows between from-scratch recomputations of the posterior.
    greedy : bool
        Take the most probable value instead of sampling (the deterministic variant of
        [000 §4.5]); not a valid MCMC sampler, useful for fast initialisation.
    init_z : {"prior", "point"}
        Start each chain from a draw of the IBP prior (default; custom-step runs are not
        jittered by PyMC) or from the given initial point.
    split_merge : int
        Split–merge Metropolis–Hastings proposals after each sweep (spec §4.6; default 5, 0 to
        disable).  They move between modes that single-site Gibbs cannot, e.g. two halves of
        one feature merging.
    split_merge_proposal : {"sequential", "random"}
        ``"sequential"`` (default): anchored, sequentially-allocated proposals whose owners
        are allocated by their collapsed predictive (:mod:`pymc_ibp.step_methods.kernels.split_merge`);
        they split and merge features of any size.  ``"random"``: the spec's uniform
        allocation, whose acceptance decays like ``3^{-m}`` in the feature size ``m``.
    init_restarts : int
        Multi-start burn-in (default 4; 1 disables it): with ``init_z="prior"``, the first half
        of the tuning sweeps is split into ``init_restarts`` segments of at least 10 sweeps,
        each from its own prior draw of ``Z``, and the chain continues from the segment end with
        the highest collapsed log joint.  It only chooses the starting point of the kept chain
        (poor local modes, e.g. a union feature plus "negative" features, are otherwise
        practically never left); fewer segments are used when tuning is short.
    init_anneal : bool
        Within each multi-start segment, anneal the noise variance used by the ``Z`` moves
        from the data's variance down to the current ``σx²`` over the segment's first 60%
        (default True): features then emerge largest first, instead of the first sweep from a
        prior draw filling every slot when ``σx`` is small.  Tuning only, like the restarts.
    """

    name = "accelerated_gibbs"

    def __init__(self, vars=None, *, window=1, refresh=None, greedy=False, **kwargs):
        super().__init__(vars, **kwargs)
        self.window = int(window)
        if self.window < 1:
            raise ValueError(f"AcceleratedGibbs needs window >= 1; got window={window!r}.")
        if greedy and self.window > 1:
            raise ValueError("greedy=True is implemented for window=1 only.")
        self.refresh = int(refresh) if refresh is not None else max(5, self.n // 10)
        self.greedy = bool(greedy)

    def _sweep(self, Z, X, m, sx2, sa2, alpha, beta):
        if self.window > 1:
            return kernels.accelerated_sweep_window(self.rng, Z, X, m, sx2, sa2, alpha, beta,
                                                    self.refresh, self.window)
        return kernels.accelerated_sweep(self.rng, Z, X, m, sx2, sa2, alpha, beta, self.refresh,
                                         self.greedy, kernels.NO_LOGODDS)


class CollapsedGibbs(_LinearGaussianIBPStep):
    r"""Classic collapsed Gibbs sampler for the linear-Gaussian IBP (spec §4.3, [000 §3.2]).

    .. math:: P(z_{nk}=1\mid\cdot) \propto \frac{m_{-n,k}}{N-1-m_{-n,k}+\beta}\,p(X\mid Z),

    with :math:`p(X\mid Z)` evaluated in full (spec §3.1, E14) from cached :math:`Z^\top Z`,
    :math:`Z^\top X` at :math:`O(K^3+K^2D)` per element (E35), so a sweep costs
    :math:`O(NK(K^3+K^2D))`.  The correctness reference for :class:`AcceleratedGibbs` and a
    reasonable choice for small ``N``.  Births as in :class:`AcceleratedGibbs`.
    """

    name = "collapsed_gibbs"

    @staticmethod
    def competence(var, has_grad):
        # never chosen automatically: AcceleratedGibbs is the same chain, faster
        return Competence.INCOMPATIBLE

    def _sweep(self, Z, X, m, sx2, sa2, alpha, beta):
        return kernels.collapsed_sweep(self.rng, Z, X, m, sx2, sa2, alpha, beta,
                                       float((X * X).sum()))
