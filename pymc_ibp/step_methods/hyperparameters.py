"""Hyperparameter updates for IBP models (Doshi-Velez 2009, §5.1).

``ExponentialRateGibbs`` updates the rate ``λ ~ Gamma(a, b)`` of exponential features
``A ~ Exponential(λ)`` (the exponential-Gaussian likelihood of Doshi-Velez 2009, App. A) from
its conjugate conditional ``Gamma(a + #A, b + ΣA)``.

``DetectionRateGibbs`` updates the false-detection and miss rates ``f, m ~ Beta(a, b)`` of the
noisy tag-detection likelihood (:func:`pymc_ibp.likelihoods.noisy_detection`; Doshi-Velez 2009,
§7.3) from their conjugate Beta conditionals.

``IBPAlphaGibbs`` updates the IBP mass ``alpha ~ Gamma(a, b)`` given ``Z``.  Under the untruncated
IBP the conditional is ``Gamma(a + K+, b + S_N(β))`` (Doshi-Velez 2009, §5.1; ``S_N(1) = H_N``,
*not* the ``b + N`` of the public PyIBP ``sampleAlpha``).  :class:`pymc_ibp.IBP` is truncated at
``K_max``, which
multiplies the likelihood by ``1/P(K+ <= K_max | α)``; we therefore use that Gamma as an
independence Metropolis–Hastings proposal, whose acceptance ratio reduces to

    min(1, PoissonCDF(K_max; α S) / PoissonCDF(K_max; α' S)),

equal to one whenever the truncation has negligible mass.

``CRPAlphaGibbs`` updates the mass ``alpha ~ Gamma(a, b)`` of a :class:`pymc_ibp.CRP` given the
labels, by the auxiliary variable of Escobar & West (1995) with the same kind of truncation
correction (the CRP restricted to ``L_max`` occupied tables).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.util import get_random_generator
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import BernoulliRV, BetaRV, ExponentialRV, GammaRV

from pymc_ibp._pytensor_utils import compile_point_fn, constant_value
from pymc_ibp.distributions.crp import CRPRV, crp_log_normaliser
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.distributions.ibp_math import harmonic_mass, log_poisson_cdf
from pymc_ibp.distributions.stick_breaking import IBPStickBreakingRV
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.graph import boolean_masked, observed_data, one_value_var, rv_users, strip
from pymc_ibp.step_methods.potentials import refuses_potentials
from pymc_ibp.step_methods.stats import per_matrix_stats

__all__ = ["CRPAlphaGibbs", "DetectionRateGibbs", "ExponentialRateGibbs", "IBPAlphaGibbs",
           "alpha_update", "crp_alpha_update"]

ALPHA_PATTERN = (
    "alpha = pm.Gamma('alpha', a, b) with constant a, b, used only as pmi.IBP('Z', alpha, ...) "
    "or pmi.IBPStickBreaking('b', alpha, ...)"
)


def alpha_update(rng, alpha, kplus, a, b, s, k_max):
    """One independence-MH update of α (see :class:`IBPAlphaGibbs`); returns ``(α, accept_prob)``.

    ``s = Σ_{i=1..N} β/(β+i-1)``; the proposal is ``Gamma(a + K+, b + s)`` (shape, rate).
    """
    prop = rng.gamma(a + kplus, 1.0 / (b + s))  # numpy takes scale = 1/rate
    log_acc = log_poisson_cdf(k_max, alpha * s) - log_poisson_cdf(k_max, prop * s)
    acc = math.exp(min(0.0, log_acc))
    return (prop if rng.random() < acc else alpha), acc


def _constant_value(var, scalar=True):
    """The value of a graph without free inputs (a float, or an array with ``scalar=False``),
    else ``None``."""
    free = [v for v in ancestors([var]) if v.owner is None and not isinstance(v, Constant)]
    if free:
        return None
    value = np.asarray(constant_value(var), dtype=float)
    return float(value) if scalar else value


def _scalar_transform(model, rv):
    """Compiled ``(forward, backward)`` of the value transform of the scalar ``rv``."""
    transform = model.rvs_to_transforms.get(rv)
    x = pt.dscalar("x")
    fwd = transform.forward(x, *rv.owner.inputs) if transform is not None else x
    bwd = transform.backward(x, *rv.owner.inputs) if transform is not None else x
    return (pytensor.function([x], fwd, mode="FAST_COMPILE"),
            pytensor.function([x], bwd, mode="FAST_COMPILE"))


def _gamma_prior(rv, pattern):
    """``(a, b)`` (shape, rate) of a scalar ``pm.Gamma`` with constant parameters, else raise."""
    if not isinstance(rv.owner.op, GammaRV) or rv.ndim != 0:
        raise ModelPatternError(f"{rv.name!r} is not a scalar pm.Gamma. Needed: {pattern}.")
    _, _, shape, scale = rv.owner.inputs
    a, sc = _constant_value(shape), _constant_value(scale)
    if a is None or sc is None:
        raise ModelPatternError(
            f"{rv.name!r} must have constant Gamma parameters. Needed: {pattern}.")
    return a, 1.0 / sc


RATE_PATTERN = ("lam = pm.Gamma('lam', a, b) with constant a, b, used only as the rate of "
                "pm.Exponential variables: A = pm.Exponential('A', lam, ...)")


def _strip_rate(scale):
    """``lam`` if ``scale`` is ``1/lam`` up to broadcasting, else ``None``."""
    scale = strip(scale)
    if scale.owner is None or type(getattr(scale.owner.op, "scalar_op", None)).__name__ \
            != "Reciprocal":
        return None
    return strip(scale.owner.inputs[0])


@refuses_potentials
class ExponentialRateGibbs(BlockedStep):
    r"""Exact Gibbs update of the rate ``λ`` of exponential variables under a ``Gamma(a, b)``
    prior (shape, rate):

    .. math:: \lambda\mid A \sim \mathrm{Gamma}\Big(a + \#A,\ b + \sum A\Big),

    ``#A`` the number of elements of the ``pm.Exponential`` variables with rate ``λ`` (all slots
    of a feature matrix, used or not) and ``ΣA`` their sum.  Chosen automatically for such a
    ``λ``, e.g. the rate of the non-negative features of the exponential-Gaussian likelihood
    (Doshi-Velez 2009, App. A and ch. 7), whose elements
    :class:`pymc_ibp.NonNegativeFeatureGibbs` updates.
    """

    name = "ibp_rate_gibbs"
    default_blocked = False
    stats_dtypes_shapes = {}
    _state_class = StepMethodState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, rate_rv = one_value_var(vars, model,
                                           "ExponentialRateGibbs updates one rate at a time")
        self.a, self.b, users = _match_rate(model, rate_rv)
        self.vars = [value_var]
        self.value_name = value_var.name
        values = model.replace_rvs_by_values(users)
        total = pt.add(*[v.sum() for v in values]) if len(values) > 1 else values[0].sum()
        self.count = sum(int(np.prod(model.initial_point()[model.rvs_to_values[u].name].shape))
                         for u in users)
        self._sum = compile_point_fn(model, total, compile_kwargs=compile_kwargs)
        self._fwd, _ = _scalar_transform(model, rate_rv)
        self.rng = get_random_generator(rng)

    def step(self, point):
        total = float(np.asarray(self._sum(point)))
        lam = self.rng.gamma(self.a + self.count, 1.0 / (self.b + total))  # numpy: scale=1/rate
        new = dict(point)
        new[self.value_name] = np.asarray(self._fwd(lam), dtype=point[self.value_name].dtype)
        return new, [{}]  # one (empty) stats slot per step, as PyMC expects

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if not isinstance(var.owner.op, GammaRV):
            return Competence.INCOMPATIBLE
        try:
            _match_rate(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL


def _match_rate(model, rate_rv):
    """``(a, b, [Exponential RVs])`` if ``rate_rv`` is a Gamma-prior exponential rate."""
    a, b = _gamma_prior(rate_rv, RATE_PATTERN)
    users = rv_users(model, rate_rv)
    ok = users and all(isinstance(u.owner.op, ExponentialRV)
                       and _strip_rate(u.owner.inputs[2]) is rate_rv for u in users)
    if not ok:
        raise ModelPatternError(
            f"{rate_rv.name!r} must enter the model only as the rate of pm.Exponential "
            f"variables (found {[u.name for u in users]}). Needed: {RATE_PATTERN}.")
    return a, b, users


def _match_alpha(model, alpha_rv):
    """Return ``(a, b, user_rv)`` if ``alpha_rv`` is a Gamma-prior IBP mass (of one pmi.IBP or
    one pmi.IBPStickBreaking), else raise."""
    a, b = _gamma_prior(alpha_rv, ALPHA_PATTERN)
    users = rv_users(model, alpha_rv)
    if (len(users) != 1 or not isinstance(users[0].owner.op, (IBPRV, IBPStickBreakingRV))
            or users[0].owner.inputs[2] is not alpha_rv):
        raise ModelPatternError(
            f"{alpha_rv.name!r} must enter the model only as the alpha of one pmi.IBP or "
            f"pmi.IBPStickBreaking (found {[u.name for u in users]}). Needed: {ALPHA_PATTERN}."
        )
    return a, b, users[0]


@refuses_potentials
class IBPAlphaGibbs(BlockedStep):
    r"""Exact update of the IBP mass ``alpha`` under a ``Gamma(a, b)`` prior (Doshi-Velez 2009,
    §5.1).

    Proposal :math:`\alpha'\sim\mathrm{Gamma}(a+K_+,\ b+\sum_{i=1}^N\frac{\beta}{\beta+i-1})`
    (shape, rate), accepted with probability
    :math:`\min\{1, F(K_{max};\alpha S)/F(K_{max};\alpha' S)\}` where ``F`` is the Poisson CDF:
    the truncation correction of :class:`pymc_ibp.IBP`.  For the mass of
    :class:`pymc_ibp.IBPStickBreaking` sticks ``b_1 >= ... >= b_K`` the density
    ``α^K b_K^α ∏ b_k^{-1}`` (Williamson, Orbanz & Ghahramani 2010, eq. 10) gives the exact
    conditional :math:`\alpha\mid b\sim\mathrm{Gamma}(a+K,\ b-\log b_K)`, drawn directly
    (summed over independent stick vectors).  Chosen automatically for such ``alpha``
    variables.
    """

    name = "ibp_alpha_gibbs"
    default_blocked = False  # one instance per variable when PyMC assigns several
    stats_dtypes_shapes = {"ibp_alpha_accept": (np.float64, [])}
    _state_class = StepMethodState  # the update keeps no state but its rng

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, alpha_rv = one_value_var(vars, model,
                                            "IBPAlphaGibbs updates one alpha at a time")
        self.a, self.b, z_rv = _match_alpha(model, alpha_rv)
        self.vars = [value_var]
        self.alpha_value_name = value_var.name
        self.z_name = model.rvs_to_values[z_rv].name
        # an observed pmi.IBP: Z is the data
        self._z_data = (observed_data(model.rvs_to_values[z_rv])
                        if z_rv in model.observed_RVs else None)
        self._fwd, self._bwd = _scalar_transform(model, alpha_rv)
        self.sticks = isinstance(z_rv.owner.op, IBPStickBreakingRV)
        if self.sticks:  # the last stick of each stick vector, on the natural scale
            [sticks_v] = model.replace_rvs_by_values([z_rv])
            self._sticks_fn = compile_point_fn(model, sticks_v, compile_kwargs=compile_kwargs)
            self._stat_names = {"ibp_alpha_accept": "ibp_alpha_accept"}
            self.rng = get_random_generator(rng)
            return
        beta, n, k_max = z_rv.owner.inputs[3:6]
        self.n = int(pt.get_underlying_scalar_constant_value(n))
        self.k_max = int(pt.get_underlying_scalar_constant_value(k_max))
        [beta_v] = model.replace_rvs_by_values([beta])
        self._beta_fn = compile_point_fn(model, beta_v, compile_kwargs=compile_kwargs)
        self._stat_names = per_matrix_stats(self, model, z_rv.name)
        self.rng = get_random_generator(rng)

    def step(self, point):
        if self.sticks:
            b = np.asarray(self._sticks_fn(point), dtype=float)
            shape = self.a + b.size  # K per stick vector
            rate = self.b - float(np.log(b.reshape(-1, b.shape[-1])[:, -1]).sum())
            new_alpha = self.rng.gamma(shape, 1.0 / rate)  # numpy: scale = 1/rate
            new = dict(point)
            new[self.alpha_value_name] = np.asarray(self._fwd(new_alpha),
                                                    dtype=point[self.alpha_value_name].dtype)
            return new, [{"ibp_alpha_accept": 1.0}]
        beta = float(np.asarray(self._beta_fn(point)))
        Z = self._z_data if self._z_data is not None else point[self.z_name]
        kplus = int((Z.sum(axis=0) > 0).sum())
        s = harmonic_mass(beta, self.n)
        alpha = float(self._bwd(point[self.alpha_value_name]))
        new_alpha, acc = alpha_update(self.rng, alpha, kplus, self.a, self.b, s, self.k_max)
        new = dict(point)
        if new_alpha != alpha:
            new[self.alpha_value_name] = np.asarray(self._fwd(new_alpha),
                                                    dtype=point[self.alpha_value_name].dtype)
        return new, [{self._stat_names["ibp_alpha_accept"]: float(acc)}]

    @staticmethod
    def competence(var, has_grad):
        if not isinstance(var.owner.op, GammaRV):
            return Competence.INCOMPATIBLE
        try:
            model = pm.modelcontext(None)
            _match_alpha(model, var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL


CRP_ALPHA_PATTERN = (
    "alpha = pm.Gamma('alpha', a, b) with constant a, b, used only as pmi.CRP('c', alpha, ...)"
)


def crp_alpha_update(rng, alpha, k, n, a, b, log_trunc):
    r"""One update of the CRP mass (see :class:`CRPAlphaGibbs`); returns
    ``(α, accept_prob)``.  ``log_trunc(α) = log P(K <= L_max | α)`` (``None``: no
    truncation)."""
    eta = rng.beta(alpha + 1.0, n)
    rate = b - math.log(eta)
    odds = (a + k - 1.0) / (n * rate)
    shape = a + k if rng.random() < odds / (1.0 + odds) else a + k - 1.0
    prop = rng.gamma(shape, 1.0 / rate)  # numpy takes scale = 1/rate
    if log_trunc is None:
        return prop, 1.0
    acc = math.exp(min(0.0, log_trunc(alpha) - log_trunc(prop)))
    return (prop if rng.random() < acc else alpha), acc


def _match_crp_alpha(model, alpha_rv):
    """``(a, b, crp_rv)`` if ``alpha_rv`` is the Gamma-prior mass of one pmi.CRP, else raise."""
    a, b = _gamma_prior(alpha_rv, CRP_ALPHA_PATTERN)
    users = rv_users(model, alpha_rv)
    if (len(users) != 1 or not isinstance(users[0].owner.op, CRPRV)
            or users[0].owner.inputs[2] is not alpha_rv or users[0].ndim != 1):
        raise ModelPatternError(
            f"{alpha_rv.name!r} must enter the model only as the alpha of one pmi.CRP "
            f"(found {[u.name for u in users]}). Needed: {CRP_ALPHA_PATTERN}.")
    return a, b, users[0]


@refuses_potentials
class CRPAlphaGibbs(BlockedStep):
    r"""Exact update of the mass ``alpha ~ Gamma(a, b)`` of a :class:`pymc_ibp.CRP` given its
    labels (the ``α_C`` of :func:`pymc_ibp.dp_ibp`; Doshi-Velez 2009, §7.2.1).

    With ``K`` occupied tables among ``N`` labels the untruncated CRP gives
    :math:`p(\alpha\mid c) \propto p(\alpha)\,\alpha^K\,\Gamma(\alpha)/\Gamma(\alpha+N)`,
    which Escobar & West (1995, §6) sample with an auxiliary
    :math:`\eta\mid\alpha \sim \mathrm{Beta}(\alpha+1, N)` and then
    :math:`\alpha\mid\eta` from the two-component mixture
    :math:`\pi\,\mathrm{Gamma}(a+K,\ b-\log\eta) + (1-\pi)\,\mathrm{Gamma}(a+K-1,\
    b-\log\eta)` (shape, rate), :math:`\pi/(1-\pi) = (a+K-1)/(N(b-\log\eta))`.  The
    CRP restricted to ``L_max < N`` tables divides the likelihood by
    :math:`P(K\le L_{max}\mid\alpha) = \sum_{k\le L_{max}}\alpha^k|s(N,k)|\,
    \Gamma(\alpha)/\Gamma(\alpha+N)`, a function of ``α`` alone: ``η`` keeps its Beta
    conditional and the mixture draw becomes an independence proposal for ``α | η``,
    accepted with probability :math:`\min\{1, P(K\le L_{max}\mid\alpha)/
    P(K\le L_{max}\mid\alpha')\}` (one when ``L_max >= N``).  Chosen automatically.

    References
    ----------
    M. D. Escobar and M. West (1995). Bayesian density estimation and inference using
    mixtures. *Journal of the American Statistical Association* 90(430), 577-588.
    """

    name = "ibp_crp_alpha_gibbs"
    default_blocked = False
    stats_dtypes_shapes = {"ibp_crp_alpha_accept": (np.float64, [])}
    _state_class = StepMethodState  # no state but its rng

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, alpha_rv = one_value_var(vars, model,
                                            "CRPAlphaGibbs updates one alpha at a time")
        self.a, self.b, crp = _match_crp_alpha(model, alpha_rv)
        self.vars = [value_var]
        self.alpha_value_name = value_var.name
        self.n, self.l_max = (int(pt.get_underlying_scalar_constant_value(x))
                              for x in crp.owner.inputs[3:5])
        if crp in model.observed_RVs:
            self.c_name, self._c_data = None, np.asarray(observed_data(model.rvs_to_values[crp]))
        else:
            self.c_name, self._c_data = model.rvs_to_values[crp].name, None
        self._fwd, self._bwd = _scalar_transform(model, alpha_rv)
        self._log_trunc = None
        if self.l_max < self.n:
            x = pt.dscalar("alpha")
            log_p = (crp_log_normaliser(x, self.n, self.l_max)
                     - (pt.gammaln(x + self.n) - pt.gammaln(x)))
            fn = pytensor.function([x], log_p)
            self._log_trunc = lambda alpha: float(fn(alpha))
        self.rng = get_random_generator(rng)

    def step(self, point):
        c = self._c_data if self._c_data is not None else point[self.c_name]
        k = int(np.unique(np.asarray(c)).size)
        alpha = float(self._bwd(point[self.alpha_value_name]))
        new_alpha, acc = crp_alpha_update(self.rng, alpha, k, self.n, self.a, self.b,
                                          self._log_trunc)
        new = dict(point)
        if new_alpha != alpha:
            new[self.alpha_value_name] = np.asarray(self._fwd(new_alpha),
                                                    dtype=point[self.alpha_value_name].dtype)
        return new, [{"ibp_crp_alpha_accept": float(acc)}]

    @staticmethod
    def competence(var, has_grad):
        if not isinstance(var.owner.op, GammaRV):
            return Competence.INCOMPATIBLE
        try:
            _match_crp_alpha(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL


DETECTION_PATTERN = (
    "f = pm.Beta('f', a, b) and m = pm.Beta('m', a, b) with constant a, b (scalars or one per "
    "column), used only in pm.Bernoulli('X', p=pmi.likelihoods.noisy_detection(Z, A, f, m), "
    "observed=X) (X may have missing entries: a masked array)"
)


def _beta_prior(rv):
    if not isinstance(rv.owner.op, BetaRV):
        raise ModelPatternError(f"{rv.name!r} is not a pm.Beta. Needed: {DETECTION_PATTERN}.")
    a, b = (_constant_value(x, scalar=False) for x in rv.owner.inputs[2:4])
    if a is None or b is None:
        raise ModelPatternError(
            f"{rv.name!r} must have constant Beta parameters. Needed: {DETECTION_PATTERN}.")
    return a, b


class DetectionPart(NamedTuple):
    """One Bernoulli variable of the detection likelihood: the whole observed ``X`` (``mask``
    ``None``), or one side of PyMC's imputation split (``X_observed`` / ``X_unobserved``),
    which reads the entries ``mask`` of the ``N x D`` success probabilities (row-major)."""

    rv: object
    mask: np.ndarray | None


def _detection_parts(x_rvs, rate_name):
    """``(parts, switch)``: each Bernoulli's success probability must be the ``Switch`` of
    :func:`pymc_ibp.likelihoods.noisy_detection`, indexed by a constant boolean mask for the two
    sides of an imputation split, and all of them the same ``Switch``."""
    parts, switches = [], []
    for x_rv in x_rvs:
        p, mask = strip(x_rv.owner.inputs[-1]), None
        if boolean_masked(p) is not None:
            p, mask = boolean_masked(p)
            p = strip(p)
        if p.owner is None or type(getattr(p.owner.op, "scalar_op", None)).__name__ != "Switch":
            raise ModelPatternError(f"{x_rv.name!r}'s success probability is not the switch of "
                                    f"noisy_detection. Needed: {DETECTION_PATTERN}.")
        parts.append(DetectionPart(x_rv, mask))
        switches.append(p)
    if any(sw is not switches[0] for sw in switches[1:]):
        raise ModelPatternError(f"{rate_name!r} enters {[x.name for x in x_rvs]} through "
                                f"different probabilities. Needed: {DETECTION_PATTERN}.")
    masks = [part.mask for part in parts]
    if len(parts) > 2 or (len(parts) == 2 and (
            masks[0] is None or masks[1] is None or masks[0].shape != masks[1].shape
            or (masks[0] & masks[1]).any())):
        raise ModelPatternError(f"{rate_name!r} must enter one observed pm.Bernoulli (possibly "
                                f"split by PyMC into observed and missing entries). Needed: "
                                f"{DETECTION_PATTERN}.")
    return parts, switches[0]


def _match_detection(model, rate_rv):
    """``(a, b, parts, condition, role)``: ``parts`` the Bernoulli variables of the likelihood
    (:class:`DetectionPart`; two with missing entries), ``role`` is ``"miss"`` for ``m`` (the
    rate of ``x = 0`` where the condition ``Z @ A > 0`` holds) or ``"false"`` for ``f`` (the
    rate of ``x = 1`` where it does not)."""
    a, b = _beta_prior(rate_rv)
    users = rv_users(model, rate_rv)
    observed = [u for u in users if u in model.observed_RVs]
    if not users or len(observed) != 1 or \
            not all(isinstance(u.owner.op, BernoulliRV) for u in users):
        raise ModelPatternError(f"{rate_rv.name!r} must enter the model only through one observed "
                                f"pm.Bernoulli. Needed: {DETECTION_PATTERN}.")
    parts, p = _detection_parts(users, rate_rv.name)
    cond, on, off = p.owner.inputs
    on, off = strip(on), strip(off)
    if off is rate_rv:
        role = "false"
    elif (on.owner is not None and type(getattr(on.owner.op, "scalar_op", None)).__name__ == "Sub"
          and _constant_value(on.owner.inputs[0]) == 1.0 and strip(on.owner.inputs[1]) is rate_rv):
        role = "miss"
    else:
        raise ModelPatternError(f"{rate_rv.name!r} is neither the false rate nor the miss rate of "
                                f"{parts[0].rv.name!r}. Needed: {DETECTION_PATTERN}.")
    if rate_rv.ndim > 1:
        raise ModelPatternError(f"{rate_rv.name!r} must be a scalar or one rate per column.")
    return a, b, parts, cond, role


@refuses_potentials
class DetectionRateGibbs(BlockedStep):
    r"""Exact Gibbs update of a false-detection or miss rate of the noisy tag-detection
    likelihood :func:`pymc_ibp.likelihoods.noisy_detection` (Doshi-Velez 2009, §7.3) under a
    ``Beta(a, b)`` prior.  With ``y = 1[Z @ A > 0]``,

    .. math::

        m \mid \cdot \sim \mathrm{Beta}\big(a + \#\{y = 1, x = 0\},\ b + \#\{y = 1, x = 1\}\big),
        \qquad
        f \mid \cdot \sim \mathrm{Beta}\big(a + \#\{y = 0, x = 1\},\ b + \#\{y = 0, x = 0\}\big),

    counted per column for a rate per column.  With missing entries in ``X`` (a masked array:
    PyMC's ``X_observed`` / ``X_unobserved`` split) the counts run over the observed entries and
    the current imputed values, the rate's full conditional given the chain's state.  Chosen
    automatically for such rates (NUTS otherwise).
    """

    name = "ibp_detection_rate_gibbs"
    default_blocked = False
    stats_dtypes_shapes = {}
    _state_class = StepMethodState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        value_var, rate_rv = one_value_var(vars, model,
                                           "DetectionRateGibbs updates one rate at a time")
        self.a, self.b, parts, cond, self.role = _match_detection(model, rate_rv)
        self.vars = [value_var]
        self.value_name = value_var.name
        [cond_v] = model.replace_rvs_by_values([cond])
        self._cond = compile_point_fn(model, cond_v, compile_kwargs=compile_kwargs)
        ip = model.initial_point() if initial_point is None else initial_point
        shape = np.broadcast_shapes(np.shape(self._cond(ip)),
                                    *(pt_.mask.shape for pt_ in parts if pt_.mask is not None))
        # the observed entries once, and where each free part's current values go
        self._x = np.zeros(shape)
        covered = np.zeros(shape, dtype=bool)  # entries that some part of X holds
        self._free = []
        for part in parts:
            covered[... if part.mask is None else part.mask] = True
            if part.rv in model.observed_RVs:
                data = np.asarray(observed_data(model.rvs_to_values[part.rv]), dtype=float)
                if not np.all(np.isfinite(data)):
                    raise ModelPatternError(f"DetectionRateGibbs: {part.rv.name!r} has "
                                            f"non-finite values. Needed: {DETECTION_PATTERN}.")
                if part.mask is None:
                    self._x = np.broadcast_to(data, shape).copy()
                else:
                    self._x[part.mask] = data
            else:
                self._free.append((model.rvs_to_values[part.rv].name, part.mask))
        self._covered = None if covered.all() else covered
        self.ndim = rate_rv.ndim
        transform = model.rvs_to_transforms.get(rate_rv)
        x = pt.dvector("x") if self.ndim else pt.dscalar("x")
        fwd = transform.forward(x, *rate_rv.owner.inputs) if transform is not None else x
        self._fwd = pytensor.function([x], fwd, mode="FAST_COMPILE")
        self.rng = get_random_generator(rng)

    def step(self, point):
        x = self._x
        if self._free:  # the imputed entries' current values
            x = x.copy()
            for name, mask in self._free:
                x[mask] = point[name]
        y = np.broadcast_to(np.asarray(self._cond(point), dtype=bool), x.shape)
        hit = x == (0.0 if self.role == "miss" else 1.0)
        sel = y if self.role == "miss" else ~y
        if self._covered is not None:
            sel = sel & self._covered
        axis = tuple(range(x.ndim - 1)) if self.ndim else None
        n_sel = sel.sum(axis=axis)
        n_hit = (sel & hit).sum(axis=axis)
        rate = self.rng.beta(self.a + n_hit, self.b + n_sel - n_hit)
        new = dict(point)
        new[self.value_name] = np.asarray(self._fwd(rate), dtype=point[self.value_name].dtype)
        return new, [{}]  # one (empty) stats slot per step, as PyMC expects

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or not isinstance(var.owner.op, BetaRV):
            return Competence.INCOMPATIBLE
        try:
            _match_detection(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
