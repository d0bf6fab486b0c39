r"""Pólya-Gamma Gibbs step for Bernoulli-logit latent feature models.

Model (:data:`~pymc_ibp.matching.logit.LOGIT_PATTERN`)::

    Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))      # or pm.Bernoulli("Z", p=P, ...)
    A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
    b = pm.Normal("b", mu_b, sigma_b, dims="dim")         # optional
    pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)      # NaN entries: imputed

One step is a sequence of exact conditional draws of the model augmented with Pólya-Gamma
variables (Polson, Scott & Windle 2013): ``ω_nd ~ PG(1, ψ_nd)`` for every observed entry,
``ψ = Z A + b (+ offset)``; then every entry of ``Z`` by Gibbs sampling with ``A`` and ``b``
integrated out given ``ω`` (:func:`~pymc_ibp.kernels.logit_collapsed_sweep`: the
accelerated sampler of Doshi-Velez & Ghahramani 2009 with one Gaussian posterior per column;
``b`` enters as a column of ones with its own prior); then ``(A, b)`` jointly from their
Gaussian conditional given ``Z`` and ``ω``
(:func:`~pymc_ibp.kernels.draw_logit_weights`), and ``b`` again given ``A`` by
slice sampling under the exact likelihood
(:func:`~pymc_ibp.kernels.logit_offset_slice`); then ``feature_sweeps`` Gibbs
sweeps of ``Z`` given ``A`` and ``b`` under the exact Bernoulli likelihood, without ``ω``
(:func:`~pymc_ibp.kernels.logit_feature_sweep`); then the imputed entries of
``X`` from ``Bernoulli(σ(ψ))``.  ``ω`` is redrawn at every step from its full conditional, so
it is not part of the chain's state.  The first Z draw does not condition on ``A`` and ``b``
and the next draw replaces them: a partially collapsed Gibbs sampler (van Dyk & Park 2008)
whose blocks each leave ``p(Z, A, b, X_{mis} | X_{obs})`` invariant.  Missing entries are
left out of the augmentation (their likelihood integrates to one) and drawn last.  A ``b``
with one value for all columns (a scalar, or ``b[group][:, None]``) couples the columns, so
the sweep and the draw of ``A`` hold it fixed and it moves by the slice update alone.

The two Z sweeps move differently: given ``ω`` the pseudo-observations pin the linear
predictor near its current value, so the collapsed sweep changes ``Z`` in ways that ``A``
can follow, while the sweep given ``A`` uses the exact likelihood and no ``ω``.  On the
digits example the pair raises the log-likelihood reached in a given number of iterations
(``docs/step-methods/polya-gamma-gibbs.md``).

Because ``A`` is integrated out in the Z sweep, a new feature is proposed with its parameters
averaged over their posterior, not with the current draw of an empty slot's parameters (as in
:class:`pymc_ibp.IBPGibbs`), so chains create the features they need from PyMC's empty start.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pytensor.tensor.random.basic import BernoulliRV, NormalRV
from scipy import special

from pymc_ibp import kernels
from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.dependent import DependentIBPRV
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.exceptions import DataError, ModelPatternError, warn_slots_in_use
from pymc_ibp.init.given import StartDefaults, check_binary_start
from pymc_ibp.init.parameters import StartCheck
from pymc_ibp.init.policy import init_z_policy
from pymc_ibp.init.surrogate import SurrogateStart
from pymc_ibp.kernels.offsets import group_labels, non_finite_entry
from pymc_ibp.matching.graph import slot_knob
from pymc_ibp.matching.logit import LOGIT_PATTERN, find_bernoulli_logit, matched_logit_models
from pymc_ibp.matching.prior_modes import prior_mode
from pymc_ibp.matching.priors import match_prior
from pymc_ibp.step_methods.potentials import refuses_potentials
from pymc_ibp.step_methods.stats import (
    group_by_matrix,
    model_logp_fn,
    one_step_per_matrix,
    per_matrix_stats,
)

__all__ = ["PolyaGammaGibbs", "PolyaGammaGibbsState"]


def _writable(a, shape):
    """``a`` broadcast to ``shape`` as a C-contiguous *writable* array (``a`` itself when it is
    one already): numba compiles a kernel once per argument type, and a read-only array (what
    ``np.broadcast_to`` returns, even when it changes nothing) is another type than a
    writable one: mixing them had compiled ``logit_targets`` four times in one test run."""
    if a.shape == shape and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(np.broadcast_to(a, shape), order="C")


@dataclass_state
class PolyaGammaGibbsState(StepMethodState):
    """Everything a :class:`PolyaGammaGibbs` step changes during a run (plus ``rng``)."""

    sweeps: int
    n_tune: int
    warned: bool
    started: bool


def _group_by_logit_matrix(model, vars_):
    """Split ``vars_`` by the Bernoulli-logit model they belong to (its ``Z``, ``A``, ``b``
    and imputed ``X``); variables of no matched model form a last group."""
    return group_by_matrix(model, vars_, [spec.rvs for spec in matched_logit_models(model)])


@refuses_potentials
class PolyaGammaGibbs(BlockedStep):
    r"""Gibbs sampler for a Bernoulli-logit latent feature model by Pólya-Gamma augmentation.

    Given ``ω_nd ~ PG(1, ψ_nd)`` the likelihood of ``ψ = Z A + b`` is Gaussian: pseudo-data
    ``y_nd = κ_nd/ω_nd - μ_{b,d}`` (``κ = x - 1/2``) with noise precision ``ω_nd`` (Polson,
    Scott & Windle 2013).  Each entry of ``Z`` is drawn with ``A`` and ``b`` integrated out,

    .. math:: \frac{P(z_{nk}=1\mid\cdot)}{P(z_{nk}=0\mid\cdot)} = \text{prior odds}\times
        \prod_d \frac{\mathcal N\big(y_{nd};\ z_n\mu_{d,-n},\
        z_n P_{d,-n} z_n^\top + \omega_{nd}^{-1}\big)\big|_{z_{nk}=1}}
        {\mathcal N(\cdots)\big|_{z_{nk}=0}},

    :math:`(P_{d,-n}, \mu_{d,-n})` the posterior of column ``d`` of ``[A; b]`` given the other
    rows (rank-one updates; Doshi-Velez & Ghahramani 2009) and the prior odds of
    :class:`pymc_ibp.IBP` (Griffiths & Ghahramani 2011) or ``p/(1-p)``.  Then ``[A; b]`` is
    drawn from its Gaussian conditional, ``b`` again by slice sampling (Neal 2003), ``Z`` again
    given ``A`` and ``b``, and the missing ``X``; every draw is exact (a partially collapsed
    Gibbs sampler, van Dyk & Park 2008).

    Use it for binary data with a logistic link: ``pm.sample`` assigns it to ``Z``, ``A``,
    ``b`` and the imputed ``X`` of every model with the pattern
    :data:`~pymc_ibp.matching.logit.LOGIT_PATTERN`, and to ``A`` and ``b`` alone when ``Z``
    has another step.  Details: the docs page *PolyaGammaGibbs*.

    Parameters
    ----------
    vars : list
        ``Z`` (then ``A``, ``b`` and the imputed ``X`` too), ``Z`` with some of those, ``A``
        (and ``b``), or ``b`` alone; see the docs page *PolyaGammaGibbs*.
    model, rng, initial_point, compile_kwargs, blocked
        As for PyMC's steps.
    init_z : {"auto", "point", "prior", "surrogate"}
        Where a chain starts (default ``"auto"``: a given ``Z``, else the surrogate start of
        :mod:`pymc_ibp.init.surrogate`; ``"prior"`` is ``"surrogate"`` here); see
        :mod:`pymc_ibp.init.policy`.
    feature_sweeps : int
        Gibbs sweeps of ``Z`` given ``A`` and ``b`` under the exact likelihood per step
        (default 1; 0: none); see the docs page *PolyaGammaGibbs*.
    offset_sweeps : int
        Slice-sampling updates of every entry of ``b`` per step (default 1; 0: none); see
        :func:`~pymc_ibp.kernels.logit_offset_slice` and Johndrow et al. (2019).

    References
    ----------
    N. G. Polson, J. G. Scott and J. Windle (2013). Bayesian inference for logistic models
    using Pólya-Gamma latent variables. *Journal of the American Statistical Association*
    108(504), 1339-1349.

    F. Doshi-Velez and Z. Ghahramani (2009). Accelerated sampling for the Indian buffet
    process. *ICML*, 273-280.

    D. A. van Dyk and T. Park (2008). Partially collapsed Gibbs samplers: theory and methods.
    *Journal of the American Statistical Association* 103(482), 790-796.

    T. L. Griffiths and Z. Ghahramani (2011). The Indian buffet process: an introduction and
    review. *Journal of Machine Learning Research* 12, 1185-1224.

    R\. M. Neal (2003). Slice sampling. *Annals of Statistics* 31, 705-767.

    J. E. Johndrow, A. Smith, N. Pillai and D. B. Dunson (2019). MCMC for imbalanced
    categorical data. *Journal of the American Statistical Association* 114(527), 1394-1403.
    """

    name = "ibp_polya_gamma"
    stats_dtypes_shapes = {
        "ibp_n_active": (np.int64, []),
        "ibp_flips": (np.int64, []),
        "ibp_log_lik": (np.float64, []),
        "ibp_model_logp": (np.float64, []),
        "ibp_kmax_hit": (bool, []),
        "ibp_refreshes": (np.int64, []),
    }
    _state_class = PolyaGammaGibbsState

    def __new__(cls, *args, **kwargs):
        # with several feature matrices: one instance per matrix
        split = one_step_per_matrix(cls, args, kwargs, _group_by_logit_matrix)
        return split if split is not None else super().__new__(cls, *args, **kwargs)

    def __init__(self, vars=None, *, model=None, rng=None, initial_point=None,
                 compile_kwargs=None, blocked=True, init_z="auto",
                 feature_sweeps=1, offset_sweeps=1):
        model = pm.modelcontext(model)
        if vars is None:
            specs = list(matched_logit_models(model))
            if len(specs) != 1:
                raise ModelPatternError(
                    f"PolyaGammaGibbs() without vars needs exactly one Bernoulli-logit latent "
                    f"feature model; found {len(specs)}. Needed pattern: {LOGIT_PATTERN}.")
            vars = [specs[0].z_rv]
        value_vars = get_value_vars_from_user_vars(vars, model)
        z_vals = [v for v in value_vars if match_prior(model, model.values_to_rvs[v]) is not None]
        if len(z_vals) > 1:
            raise ModelPatternError(
                f"PolyaGammaGibbs updates exactly one binary feature matrix; got "
                f"{[v.name for v in z_vals]}.")
        if z_vals:
            spec = find_bernoulli_logit(model, model.values_to_rvs[z_vals[0]])
        else:
            spec = next((s for s in matched_logit_models(model)
                         if {model.rvs_to_values[rv] for rv in s.rvs} & set(value_vars)), None)
            if spec is None:
                raise ModelPatternError(
                    f"None of {[v.name for v in value_vars]} is the binary matrix or the "
                    f"feature matrix of a Bernoulli-logit model. Needed pattern: "
                    f"{LOGIT_PATTERN}.")
        self.update_z = bool(z_vals)
        owned = spec.rvs if self.update_z else [rv for rv in spec.rvs if rv is not spec.z_rv]
        owned_vals = [model.rvs_to_values[rv] for rv in owned]
        for v in value_vars:
            if v not in owned_vals:
                raise ModelPatternError(
                    f"PolyaGammaGibbs updates {[o.name for o in owned_vals]}; it cannot also "
                    f"update {v.name!r}. Assign {v.name!r} to another step.")
        # without Z: A (with b when given) and / or the imputed X, each given the rest
        a_val = model.rvs_to_values[spec.a_rv]
        self.update_a = self.update_z or a_val in value_vars
        if self.update_z and len(value_vars) > 1 and a_val not in value_vars:
            # Z with some of the others but not A: A was given to another step, and the sweep
            # of Z integrates A out and must draw it afterwards (it cannot leave A alone)
            z_name = z_vals[0].name
            raise ModelPatternError(
                f"PolyaGammaGibbs got {[v.name for v in value_vars]} but not {a_val.name!r}, "
                f"which another step updates: its sweep of {z_name!r} integrates "
                f"{a_val.name!r} out and must draw it afterwards. Give {a_val.name!r} to "
                f"PolyaGammaGibbs too, or update {z_name!r} given {a_val.name!r} with "
                f"pmi.IBPGibbs([{z_name}]).")
        if not self.update_z or len(value_vars) > 1:
            # without Z, or Z with some of the others (pm.sample passes those no other step
            # has): those only; a b or imputed X that the user gave another step stays with
            # it (b then a fixed offset here)
            owned_vals = [v for v in owned_vals if v in value_vars]
        if int(offset_sweeps) != offset_sweeps or offset_sweeps < 0:
            raise ValueError(f"offset_sweeps must be an integer >= 0; got {offset_sweeps!r}.")
        self.offset_sweeps = int(offset_sweeps)
        # b this step's: drawn with A when both are, and it has one value per column (or per
        # group and column); else a fixed offset there, updated by the slice update alone
        self.own_b = spec.b_rv is not None and model.rvs_to_values[spec.b_rv] in owned_vals
        self._tied = spec.b_tied  # one value for all columns (a scalar b, b[group][:, None])
        self._b_cols = 1 if self._tied else spec.shape[1]  # b's columns as G x cols
        self.with_b = self.own_b and not self._tied
        if self.own_b and self.offset_sweeps == 0 and (self._tied or not self.update_a):
            raise ModelPatternError(
                f"PolyaGammaGibbs updates {spec.b_rv.name!r} by its slice update alone "
                + ("(one value for all columns, which the draw of "
                   f"{spec.a_rv.name!r} cannot take)" if self._tied else
                   f"(without {spec.a_rv.name!r}, which it is drawn with)")
                + "; leave offset_sweeps >= 1"
                + ("." if self._tied else f", or give it {spec.a_rv.name!r} too."))
        self.vars = owned_vals
        self.z_name = model.rvs_to_values[spec.z_rv].name
        self._slot_knob = slot_knob(model, spec.z_rv.name)  # named by a TruncationWarning
        self.a_name = model.rvs_to_values[spec.a_rv].name
        self.b_name = model.rvs_to_values[spec.b_rv].name if spec.b_rv is not None else None
        self.miss_name = (model.rvs_to_values[spec.missing_rv].name
                          if spec.missing_rv is not None and model.rvs_to_values[spec.missing_rv]
                          in owned_vals else None)
        self.n, self.d = spec.shape
        self.k_max = spec.k_max
        self.mode = prior_mode(spec.prior, self.n, self.k_max)
        self._observed = ~np.isnan(spec.X) if spec.missing_mask is None else ~spec.missing_mask
        # the data as one byte per entry (0 where missing: never read there)
        self._x = np.where(self._observed, np.nan_to_num(spec.X), 0.0).astype(np.int8)
        self._mask = spec.missing_mask
        d = self.d
        b_terms = ([spec.b_mu, spec.b_sigma] if spec.b_rv is not None
                   else [pt.zeros(d), pt.ones(d)])
        off = spec.offset if spec.offset is not None else pt.zeros((1, d))
        # b[group]: one offset per group of rows (the group vector read at every step, as
        # pm.set_data may change it); its coefficients go with indicator columns of the groups
        self._grouped = spec.b_group is not None
        group = [spec.b_group] if self._grouped else []
        self._n_fixed = 0 if not self.with_b else (
            int(spec.b_mu.type.shape[0]) if self._grouped else 1)
        outs = model.replace_rvs_by_values([spec.sigma_a, *b_terms, pt.as_tensor(off), *group,
                                            *self.mode.symbolic])
        self._hyper_fn = compile_point_fn(model, outs, compile_kwargs=compile_kwargs)
        # the ibp_model_logp stat (recorded with the Z move only): PyTensor's graph for every
        # term but the data's, whose log-likelihood the step has from its own kernel
        self._model_logp = (model_logp_fn(model, compile_kwargs, without=[spec.obs_rv])
                            if self.update_z else None)
        self._stat_names = per_matrix_stats(self, model, spec.z_rv.name,
                                            only=None if self.update_z else ())
        init_z = self.init_z = init_z_policy(init_z, "PolyaGammaGibbs", on_the_model=False)
        if int(feature_sweeps) != feature_sweeps or feature_sweeps < 0:
            raise ValueError(f"feature_sweeps must be an integer >= 0; got {feature_sweeps!r}.")
        self.feature_sweeps = int(feature_sweeps)
        # the surrogate start: by default for a pmi.IBP whose Z the user did not give
        # (whether the user gave a chain's start of Z is told per chain, at its first step)
        ip = model.initial_point()
        self._starts = StartDefaults(model, [spec.z_rv]) if self.update_z else None
        self.surrogate = None
        auto = (init_z == "auto" and self.update_z and self.mode.counts
                and not self._starts.initval[self.z_name] and spec.missing_rv is None)
        if init_z == "surrogate" or auto:
            if not (self.update_z and self.mode.counts):
                raise ModelPatternError(
                    f"PolyaGammaGibbs(init_z='surrogate') needs to update {self.z_name!r}, a "
                    "pmi.IBP.")
            self._values(ip)
            self.surrogate = SurrogateStart(
                model, spec.z_rv, [spec.obs_rv], (self.n, self.k_max), self.mode.alpha,
                self.mode.beta, "PolyaGammaGibbs")
        self._start_check = StartCheck(model, spec.z_rv, "PolyaGammaGibbs")
        self.rng = get_random_generator(rng)
        self._reset_chain(0)

    def _reset_chain(self, tune):
        """Per-chain state (:class:`PolyaGammaGibbsState`), set by :meth:`setup_chain`."""
        self.sweeps, self.n_tune, self.warned, self.started = 0, int(tune), False, False

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self._reset_chain(tune)

    def reset_tuning(self):
        pass

    def _values(self, point):
        """``(σ_a², μ_b, σ_b², offset, group)`` at ``point`` (the prior mode's parameters set
        from the same point): ``σ_a²`` per column, ``μ_b`` and ``σ_b²`` as ``G x D`` (``G = 1``
        unless the offset is ``b[group]``; ``G x 1`` when ``b`` has one value for all
        columns), the offset as ``1 x D`` (one row for all) or
        ``N x D``, ``group`` every row's group in ``0 .. G-1`` (as ``b[group]`` indexes;
        ``None`` unless ``b[group]``)."""
        sa, b_mu, b_sigma, off, *rest = self._hyper_fn(point)
        group = rest.pop(0) if self._grouped else None
        self.mode.set_params(*rest)
        shape = (self.d,)
        sa = np.broadcast_to(np.asarray(sa, dtype=np.float64), shape)
        b_sigma = np.asarray(b_sigma, dtype=np.float64).reshape(-1, self._b_cols)
        b_mu = np.ascontiguousarray(np.asarray(b_mu, dtype=np.float64).reshape(-1, self._b_cols))
        group = None if group is None else group_labels(group, len(b_mu))
        off = np.asarray(off, dtype=np.float64)
        off = _writable(off, (self.n if off.ndim == 2 and off.shape[0] == self.n else 1, self.d))
        for name, v in (("sigma", sa), ("sigma", b_sigma)):
            if not np.all(np.isfinite(v)) or np.any(v <= 0):
                raise FloatingPointError(f"PolyaGammaGibbs: a prior {name} of "
                                         f"{self.a_name!r} or its offset is not positive.")
        for what, v in (("the offset added to Z @ A (the terms besides Z @ A and b)", off),
                         (f"the prior mean of the offset {self.b_name!r}", b_mu)):
            found = non_finite_entry(v)
            if found is not None:
                (r, c), count = found
                raise DataError(f"PolyaGammaGibbs: {what} is {v[r, c]} at (row {r}, column "
                                f"{c}) ({count} non-finite entries in all); it must be finite.")
        return np.ascontiguousarray(sa * sa), b_mu, np.ascontiguousarray(b_sigma ** 2), off, group

    def _shift(self, off, vec, group):
        """``(shift, offset, rows)``, the kernels' reading of ``vec`` (one row per group,
        ``G x D``, or a row for all; ``G x 1`` or one value when ``b`` is tied across the
        columns) added to ``off``: ``shift`` (``D``) plus ``offset`` (``1 x D`` or ``N x D``),
        or with ``b[group]`` the offset's table ``vec + off`` (``G x D``) read at ``rows =
        group`` (``vec[group] + off`` as ``N x D`` when ``off`` itself differs between
        rows)."""
        vec = np.asarray(vec, dtype=np.float64).reshape(-1, self._b_cols)
        vec = np.broadcast_to(vec, (len(vec), self.d))  # one value for all columns
        if group is None:
            return np.array(vec[0]), off, kernels.NO_ROWS  # a writable copy of the view
        if off.shape[0] == 1:  # a table of one row per group, no N x D array
            return np.zeros(self.d), np.ascontiguousarray(vec + off), group
        return np.zeros(self.d), np.ascontiguousarray(vec[group] + off), kernels.NO_ROWS

    def _fixed_columns(self, group):
        """The ``N x n_fixed`` columns beside ``Z`` whose coefficients are ``b``: one of ones
        (an offset per column), one indicator per group (``b[group]``), or none."""
        F = np.zeros((self.n, self._n_fixed), dtype=np.int8)
        if self._n_fixed:
            F[np.arange(self.n), group if group is not None else 0] = 1
        return F

    @interrupt_safe  # the kernels take the step's Generator (see _numba_utils)
    def step(self, point):
        sa2, b_mu, b_var, off, group = self._values(point)
        z_in = np.asarray(point[self.z_name])
        Z = np.array(z_in, dtype=np.int8, copy=True)  # one byte per entry
        if not self.started:
            self.started = True
            if self.update_z:
                self._start_check.check(point)
                check_binary_start(z_in, self.z_name, "PolyaGammaGibbs")
            if self.surrogate is not None and (
                    self.init_z == "surrogate" or not self._starts.given(point, self.z_name)):
                # 0/1 data: the surrogate has no offset and its A is on no useful scale
                Z = self.surrogate.draw(self.rng).z
        A = np.ascontiguousarray(point[self.a_name], dtype=np.float64)
        b = (np.asarray(point[self.b_name], dtype=np.float64) if self.b_name is not None
             else np.zeros(self.d))
        x, obs = self._x, self._observed
        # two N x D float buffers: ``buf`` holds ψ, then the pseudo-observations, then κ for
        # the draw of A, then ψ again; ``W`` the Pólya-Gamma draws
        buf = kernels.logit_linear_predictor(Z, A, *self._shift(off, b, group),
                                             np.empty((self.n, self.d)))
        W = kernels.polya_gamma_matrix(self.rng, buf, obs) if self.update_a else None
        flips = refreshes = 0
        # b (when this step's) is integrated out with A, and drawn with it: the coefficients
        # of fixed columns beside Z (ones, or one indicator per group) with b's prior
        F = self._fixed_columns(group)
        V = np.empty((self.d, self.k_max + self._n_fixed))
        V[:, :self.k_max] = sa2[:, None]
        if self._n_fixed:
            V[:, self.k_max:] = b_var.T
        if self.update_z:
            # pseudo-observations, b's prior mean moved into them
            Zs = np.concatenate([Z, F], axis=1)
            Y = kernels.logit_targets(x, obs, W, *self._shift(off, b_mu if self.with_b else b,
                                                              group), True, buf)
            m = Z.sum(axis=0).astype(np.int64)
            flips, refreshes, _ = kernels.logit_collapsed_sweep(
                self.rng, Zs, Y, W, V, m, self.mode.sweep_prior, self._n_fixed)
            Z = np.ascontiguousarray(Zs[:, :self.k_max])
        new = dict(point)
        if self.update_a:
            # what the (A, b) draw conditions on: the offset, and b when not this step's
            fixed = ((np.zeros(self.d), off, kernels.NO_ROWS) if self.with_b
                     else self._shift(off, b, group))
            kappa = kernels.logit_targets(x, obs, W, *fixed, False, buf)
            mean = np.zeros_like(V)
            if self._n_fixed:
                mean[:, self.k_max:] = b_mu.T
            # the sweep leaves [Z F] in Zs
            ZF = Zs if self.update_z else np.concatenate([Z, F], axis=1)
            C = kernels.draw_logit_weights(self.rng, ZF, kappa, W, V, mean)
            A = np.ascontiguousarray(C[:self.k_max])
            new[self.a_name] = A.astype(point[self.a_name].dtype, copy=False)
            if self.with_b:
                b = C[self.k_max:].reshape(point[self.b_name].shape)
                new[self.b_name] = b.astype(point[self.b_name].dtype, copy=False)
        del W
        psi = kernels.logit_linear_predictor(Z, A, *self._shift(off, b, group), buf)
        if self.own_b and self.offset_sweeps:
            # b given A by slice sampling under the exact likelihood: where an entry's rows
            # hold (nearly) only zeros or ones, its draws given ω move slowly
            B = np.array(b, dtype=np.float64).reshape(-1, self._b_cols)
            labels = np.zeros(self.n, dtype=np.int64) if group is None else group
            rows = np.argsort(labels, kind="stable")  # the rows of each group, in turn
            starts = np.zeros(len(B) + 1, dtype=np.int64)
            np.cumsum(np.bincount(labels, minlength=len(B)), out=starts[1:])
            for _ in range(self.offset_sweeps):
                kernels.logit_offset_slice(self.rng, x, obs, psi, B, rows, starts, b_mu, b_var)
            b = B.reshape(point[self.b_name].shape)
            new[self.b_name] = b.astype(point[self.b_name].dtype, copy=False)
        if self.update_z and self.feature_sweeps:
            # m: the column counts, kept by the collapsed sweep
            for _ in range(self.feature_sweeps):
                flips += kernels.logit_feature_sweep(self.rng, Z, x, obs, psi, A, m,
                                                     self.mode.sweep_prior)
        if self.update_z:
            new[self.z_name] = Z.astype(z_in.dtype, copy=False)
        if self.miss_name is not None:
            p = special.expit(psi[self._mask])
            new[self.miss_name] = (self.rng.random(p.shape) < p).astype(
                point[self.miss_name].dtype)
        self.sweeps += 1
        if not self.update_z:
            return new, [{}]
        n_active = int((Z.sum(axis=0) > 0).sum())
        hit = n_active == self.k_max
        if hit and self.mode.counts and not self.warned and self.sweeps > self.n_tune:
            self.warned = True
            warn_slots_in_use("PolyaGammaGibbs", self.z_name, self.k_max, self._slot_knob)
        loglik = float(kernels.logit_log_lik(x, obs, psi))
        stats_ = {"ibp_n_active": n_active, "ibp_flips": int(flips), "ibp_log_lik": loglik,
                  "ibp_model_logp": (float(self._model_logp(new)) + loglik
                                     if self._model_logp is not None else np.nan),
                  "ibp_kmax_hit": bool(hit),
                  "ibp_refreshes": int(refreshes)}
        return new, [{self._stat_names[k]: v for k, v in stats_.items()}]

    @staticmethod
    def potential_scope(model, var):
        """The variables this step samples together with ``var`` (its model's ``Z``, ``A``,
        ``b`` and imputed entries)."""
        for spec in matched_logit_models(model):
            if var in spec.rvs:
                return list(spec.rvs)
        return [var]

    @staticmethod
    def competence(var, has_grad):
        # IDEAL for the Z, A, b and imputed X of a Bernoulli-logit model (the dependent IBP
        # keeps its own step for Z, whose sticks and processes move with it)
        if var.owner is None or not isinstance(
                var.owner.op, (IBPRV, BernoulliRV, DependentIBPRV, NormalRV)):
            return Competence.INCOMPATIBLE
        try:
            model = pm.modelcontext(None)
        except TypeError:
            return Competence.INCOMPATIBLE
        for spec in matched_logit_models(model):
            if var is spec.z_rv and isinstance(var.owner.op, DependentIBPRV):
                return Competence.INCOMPATIBLE
            if var in spec.rvs:
                return Competence.IDEAL
        return Competence.INCOMPATIBLE
