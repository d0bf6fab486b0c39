r"""Hamiltonian Monte Carlo for the Gaussian-process hyperparameters of a dependent IBP.

Williamson, Orbanz & Ghahramani (2010, §4) sample the length scales ``ℓ_k`` of the features'
Gaussian processes by Hybrid Monte Carlo (Duane et al. 1987).  Given the processes ``g``, the
target is

.. math:: \log p(\theta \mid g) = \sum_k \log\mathcal N(g_k; \mu_k, \Sigma_k(\theta))
          + \log p(\theta) \;[+ \log P(Z \mid b, g, \theta)],

the last term only when the prior variance ``Σ_k(t, t)`` depends on ``θ`` (a free GP
amplitude); for stationary kernels and the length scales it is constant.
:class:`GPLengthScaleHMC` builds this target from the model's own logp terms, restricted to
the variables whose density depends on ``θ`` (the hyperparameters' priors, the processes
and, if they depend on ``θ``, the binary matrix), so a leapfrog step costs a few Cholesky
factors of the ``T x T`` kernels and nothing of the likelihood of the data.  Gradients come
from PyTensor, in the unconstrained space of PyMC's transforms (``log ℓ``).

One iteration: momentum ``p ~ N(0, M)`` with a diagonal mass matrix ``M``,
``L = ⌈λ/ε⌉`` leapfrog steps of a jittered size ``ε·u``, ``u ~ U(0.9, 1.1)`` (``λ`` the path
length), and acceptance with probability ``min(1, exp(-ΔH))``,
``H = -log p(θ) + ½ pᵀM⁻¹p``.  During tuning ``ε`` follows the dual-averaging scheme of
Hoffman & Gelman (2014, §3.2) towards an acceptance of 0.65, the optimum for HMC (Neal 2011,
§5.4.4), and ``M⁻¹`` is set to the variance of the draws in doubling windows (25, 50, 100,
... iterations, regularised towards ``10⁻³`` as in Stan), with the dual averaging restarted
after each update; the features' length scales have posterior widths that differ by orders
of magnitude, which a unit mass matrix would serve with the smallest step.  The averaged
``ε`` is used after tuning.  Unlike ``pm.HamiltonianMC``, whose sample stats
clash with NUTS's when both are in one ``pm.sample`` call, every stat is a scalar with an
``ibp_hmc_`` prefix.

References
----------
S. Duane, A. D. Kennedy, B. J. Pendleton and D. Roweth (1987). Hybrid Monte Carlo. *Physics
Letters B* 195(2), 216-222.

R. M. Neal (2011). MCMC using Hamiltonian dynamics. In *Handbook of Markov Chain Monte Carlo*,
ch. 5. Chapman & Hall/CRC.

M. D. Hoffman and A. Gelman (2014). The No-U-Turn sampler. *Journal of Machine Learning
Research* 15, 1593-1623 (dual averaging, §3.2).

S. Williamson, P. Orbanz and Z. Ghahramani (2010). Dependent Indian buffet processes. *AISTATS
2010*.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import MvNormalRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.dependent import DependentIBPRV
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.graph import rv_users
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["GPLengthScaleHMC", "gp_hyperparameter_users"]

_TARGET = 0.65
_FLOATS = ("float16", "float32", "float64")


def gp_hyperparameter_users(model, rv):
    """The random variables whose density depends on ``rv``, if ``rv`` is a hyperparameter of
    the processes of a :class:`pymc_ibp.DependentIBP` (its users are ``pm.MvNormal``
    processes feeding a DependentIBP, and possibly the DependentIBP itself); else raise."""
    users = rv_users(model, rv)
    z_rvs = {u for u in model.basic_RVs if isinstance(u.owner.op, DependentIBPRV)}
    g_of_z = set()
    for z in z_rvs:
        g_of_z |= set(ancestors([z.owner.inputs[3]], blockers=[*model.basic_RVs]))
    ok = users and any(isinstance(u.owner.op, MvNormalRV) and u in g_of_z for u in users) and all(
        (isinstance(u.owner.op, MvNormalRV) and u in g_of_z) or u in z_rvs for u in users)
    if not ok:
        raise ModelPatternError(
            f"{rv.name!r} must enter the model only through the covariance of the processes g "
            f"of a pmi.DependentIBP (found {[u.name for u in users]}); e.g. the length scales "
            "written by pmi.dependent_ibp.")
    return users


@dataclass_state
class GPLengthScaleHMCState(StepMethodState):
    """``rng``, the step size, the dual-averaging state and the mass-matrix adaptation."""

    step_size: float
    log_step_bar: float
    h_bar: float
    adapt_iter: int
    mu: float
    tune: bool
    inv_mass: np.ndarray
    window_n: int
    window_mean: np.ndarray
    window_m2: np.ndarray
    window_end: int
    tune_iter: int


@refuses_potentials
class GPLengthScaleHMC(BlockedStep):
    r"""HMC for Gaussian-process hyperparameters (length scales, amplitudes), with the target
    restricted to the model terms that depend on them and step-size adaptation to 65%
    acceptance (module docstring).  Assigned automatically to the hyperparameters of the
    processes of a :class:`pymc_ibp.DependentIBP` (e.g. ``{name}_ls`` of
    :func:`pymc_ibp.dependent_ibp`).

    Parameters
    ----------
    vars : list
        Continuous variables.
    path_length : float, default 1.5
        ``λ``: the number of leapfrog steps is ``⌈λ/ε⌉`` (at most ``max_steps``).
    step_size : float, default 0.25
        Initial leapfrog step ``ε`` (adapted during tuning).
    max_steps : int, default 64
    """

    name = "ibp_gp_hmc"
    default_blocked = True
    _state_class = GPLengthScaleHMCState
    stats_dtypes_shapes = {
        "ibp_hmc_accept": (np.float64, []),
        "ibp_hmc_step_size": (np.float64, []),
        "ibp_hmc_n_steps": (np.int64, []),
        "ibp_hmc_energy_error": (np.float64, []),
        "ibp_hmc_diverging": (bool, []),
    }

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, path_length=1.5, step_size=0.25, max_steps=64):
        model = pm.modelcontext(model)
        value_vars = get_value_vars_from_user_vars(vars, model)
        for v in value_vars:
            if v.dtype not in _FLOATS:
                raise ModelPatternError(f"GPLengthScaleHMC samples continuous variables; "
                                        f"{v.name!r} is {v.dtype}.")
        self.vars = value_vars
        self.names = [v.name for v in value_vars]
        rvs = [model.values_to_rvs[v] for v in value_vars]
        terms = list(dict.fromkeys(rvs + [u for rv in rvs for u in rv_users(model, rv)]))
        logp = model.logp(vars=terms, jacobian=True)
        grads = pt.grad(logp, value_vars)
        self._fn = compile_point_fn(model, [logp, *grads], compile_kwargs=compile_kwargs)
        ip = model.initial_point() if initial_point is None else initial_point
        self._shapes = [np.shape(ip[n]) for n in self.names]
        self._sizes = [int(np.prod(s, dtype=int)) for s in self._shapes]
        if not (path_length > 0 and step_size > 0 and max_steps >= 1):
            raise ValueError("path_length and step_size must be > 0 and max_steps >= 1.")
        self.path_length, self.step_size0, self.max_steps = path_length, step_size, max_steps
        self._dim = sum(self._sizes)
        self._reset_adaptation()
        self.rng = get_random_generator(rng)

    def _reset_adaptation(self):
        self.step_size = self.step_size0
        self.log_step_bar = 0.0
        self.h_bar = 0.0
        self.adapt_iter = 0
        self.mu = math.log(10 * self.step_size0)
        self.tune = True
        self.inv_mass = np.ones(self._dim)
        self.window_n = 0
        self.window_mean = np.zeros(self._dim)
        self.window_m2 = np.zeros(self._dim)
        self.window_end = 25
        self.tune_iter = 0

    def _pack(self, point):
        return np.concatenate([np.ravel(point[n]) for n in self.names]).astype(np.float64)

    def _unpack(self, q, point):
        out = dict(point)
        i = 0
        for name, shape, size in zip(self.names, self._shapes, self._sizes, strict=True):
            out[name] = q[i:i + size].reshape(shape).astype(point[name].dtype)
            i += size
        return out

    def _logp_grad(self, q, point):
        lp, *grads = self._fn(self._unpack(q, point))
        return float(lp), np.concatenate([np.ravel(g) for g in grads])

    def step(self, point):
        q0 = self._pack(point)
        lp0, g = self._logp_grad(q0, point)
        if not np.isfinite(lp0):
            raise ModelPatternError(f"GPLengthScaleHMC: the log density of {self.names} is "
                                    f"{lp0} at the current point.")
        eps = self.step_size * self.rng.uniform(0.9, 1.1)
        n_steps = int(min(self.max_steps, max(1, math.ceil(self.path_length / eps))))
        v = self.inv_mass
        p0 = self.rng.standard_normal(q0.size) / np.sqrt(v)
        q, p, lp = q0.copy(), p0.copy(), lp0
        diverging = False
        for _ in range(n_steps):
            p += 0.5 * eps * g
            q += eps * v * p
            lp, g = self._logp_grad(q, point)
            if not (np.isfinite(lp) and np.all(np.isfinite(g))):
                diverging = True
                break
            p += 0.5 * eps * g
        if diverging:
            energy_error, accept = np.inf, 0.0
        else:
            energy_error = (-lp + 0.5 * (v * p) @ p) - (-lp0 + 0.5 * (v * p0) @ p0)
            accept = float(math.exp(min(0.0, -energy_error))) if np.isfinite(energy_error) \
                else 0.0
            diverging = bool(energy_error > 1000)
        moved = self.rng.random() < accept
        q_new = q if moved else q0
        if self.tune:
            self._adapt(accept)
            self._adapt_mass(q_new)
        new = self._unpack(q, point) if moved else point
        return new, [{"ibp_hmc_accept": accept, "ibp_hmc_step_size": float(eps),
                      "ibp_hmc_n_steps": np.int64(n_steps),
                      "ibp_hmc_energy_error": float(energy_error),
                      "ibp_hmc_diverging": bool(diverging)}]

    def _adapt(self, accept):
        """Dual averaging (Hoffman & Gelman 2014, Alg. 5: γ = 0.05, t0 = 10, κ = 0.75)."""
        self.adapt_iter += 1
        m = self.adapt_iter
        w = 1.0 / (m + 10.0)
        self.h_bar = (1.0 - w) * self.h_bar + w * (_TARGET - accept)
        log_eps = self.mu - math.sqrt(m) / 0.05 * self.h_bar
        eta = m ** -0.75
        self.log_step_bar = eta * log_eps + (1.0 - eta) * self.log_step_bar
        self.step_size = math.exp(log_eps)

    def _adapt_mass(self, q):
        """Welford variance of the draws in the current window; at the window's end the
        inverse mass becomes the regularised variance and the next window is twice as long."""
        self.tune_iter += 1
        self.window_n += 1
        delta = q - self.window_mean
        self.window_mean = self.window_mean + delta / self.window_n
        self.window_m2 = self.window_m2 + delta * (q - self.window_mean)
        if self.tune_iter >= self.window_end and self.window_n >= 10:
            n = self.window_n
            var = self.window_m2 / (n - 1)
            self.inv_mass = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))
            self.window_n = 0
            self.window_mean = np.zeros(self._dim)
            self.window_m2 = np.zeros(self._dim)
            self.window_end = self.tune_iter + 2 * (self.window_end - self.tune_iter + n)
            self.mu = math.log(10 * self.step_size)  # restart the dual averaging
            self.h_bar, self.log_step_bar, self.adapt_iter = 0.0, 0.0, 0

    def stop_tuning(self):
        if self.tune and self.adapt_iter:
            self.step_size = math.exp(self.log_step_bar)
        self.tune = False

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self._reset_adaptation()

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or var.dtype not in _FLOATS or not has_grad:
            return Competence.INCOMPATIBLE
        try:
            gp_hyperparameter_users(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
