r"""Slice sampling of the failure probability ``q`` of the noisy-or IBP-IBP (Doshi-Velez 2009,
§7.2.3).

In :func:`pymc_ibp.noisy_or_ibp_ibp` the features are ``z_nk ~ Bernoulli(1 - q^{s_nk})`` with
``s_nk = c_n^T m_k`` the number of categories of observation ``n`` that own feature ``k``.
Given ``C``, ``M`` and ``Z``, ``q`` enters the model only through these Bernoulli terms:

.. math::

    \log p(q\mid\cdot) = \log p(q) + \sum_{n,k:\,z_{nk}=1}\log\big(1-q^{s_{nk}}\big)
        + \log q \sum_{n,k:\,z_{nk}=0} s_{nk} + \text{const},

so two sufficient statistics — the histogram of ``s`` over the entries that are on, and the
sum of ``s`` over the entries that are off — give the exact conditional in ``O(#distinct s)``
per evaluation.  :class:`NoisyOrQSlice` slice-samples it (Neal 2003) on ``q``'s transformed
value, the prior and its Jacobian taken from the model, so any prior on ``(0, 1)`` works (the
thesis puts "vague priors" on it).  Chosen automatically by ``pm.sample`` for such a ``q``;
NUTS would need the gradient of the whole model.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.graph.replace import graph_replace
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.kernels.slice import adapt_width, slice_sample
from pymc_ibp.matching.graph import observed_data, one_value_var, rv_users
from pymc_ibp.matching.priors import BINARY_MATRIX_OPS
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["NoisyOrQSlice", "noisy_or_log_lik"]

Q_PATTERN = ("a scalar q on (0, 1) (e.g. pm.Beta('q', a, b)) used only as the failure "
             "probability of Bernoulli matrices with p = 1 - q ** S, S >= 0 not depending on q, "
             "as in pmi.noisy_or_ibp_ibp('Z', alpha_c, alpha_m, q, l_max=...)")


def noisy_or_log_lik(log_q, on_counts, on_values, off_sum):
    r"""``Σ_{z=1} log(1 - q^s) + log q Σ_{z=0} s`` from its sufficient statistics: the
    distinct values ``on_values`` of ``s`` over the entries that are on with their counts
    ``on_counts``, and ``off_sum`` the sum of ``s`` over the entries that are off.  Computed
    with ``log1p(-exp(s log q))`` (``-inf`` for an entry that is on with ``s = 0``)."""
    if on_values.size == 0:
        return log_q * off_sum
    with np.errstate(divide="ignore"):
        on = np.log(-np.expm1(on_values * log_q))
    return float(np.dot(on_counts, on)) + log_q * off_sum


def _children_exponents(model, q_rv):
    """For every user of ``q``: ``(value name, S graph of the value variables)``, with
    ``p = 1 - q^S`` checked numerically (``S`` found at ``q = 1/e`` and compared with the one
    found at ``q = 0.3`` at a point with the other binary matrices set to ones)."""
    users = rv_users(model, q_rv)
    if not users:
        raise ModelPatternError(f"No variable depends on {q_rv.name!r}. Needed: {Q_PATTERN}.")
    out = []
    free = set(model.free_RVs)
    for child in users:
        if not isinstance(child.owner.op, BernoulliRV) or child.ndim < 1:
            raise ModelPatternError(
                f"{q_rv.name!r} is used by {child.name!r}, a {type(child.owner.op).__name__}. "
                f"Needed: {Q_PATTERN}.")
        p = child.owner.inputs[-1]
        exps = []
        for q_ref in (math.exp(-1.0), 0.3):
            p_ref = graph_replace(p, {q_rv: pt.constant(q_ref, dtype=q_rv.dtype)}, strict=False)
            exps.append(pt.log1p(-p_ref) / math.log(q_ref))
        [s_e, s_3] = model.replace_rvs_by_values(exps)
        fn = compile_point_fn(model, [s_e, s_3])
        ip = model.initial_point()
        ones = {k: (np.ones_like(v) if k in _binary_values(model) else v) for k, v in ip.items()}
        for point in (ip, ones):
            a, b = (np.asarray(x, dtype=float) for x in fn(point))
            if not (np.all(np.isfinite(a)) and np.all(a > -1e-9)
                    and np.allclose(a, b, rtol=1e-6, atol=1e-8)):
                raise ModelPatternError(
                    f"The success probability of {child.name!r} is not 1 - {q_rv.name} ** S "
                    f"with S >= 0 free of {q_rv.name!r}. Needed: {Q_PATTERN}.")
        out.append((model.rvs_to_values[child].name, child in free, child, s_e))
    return out


def _binary_values(model):
    return {model.rvs_to_values[rv].name for rv in model.free_RVs
            if isinstance(rv.owner.op, (*BINARY_MATRIX_OPS, BernoulliRV))}


def _match_q(model, q_rv):
    if q_rv.ndim != 0 or not q_rv.dtype.startswith("float"):
        raise ModelPatternError(f"{q_rv.name!r} must be a scalar float. Needed: {Q_PATTERN}.")
    if q_rv not in model.free_RVs:
        raise ModelPatternError(f"{q_rv.name!r} must be a free variable. Needed: {Q_PATTERN}.")
    return _children_exponents(model, q_rv)


@dataclass_state
class NoisyOrQSliceState(StepMethodState):
    """The adapted slice width, its tuning count and ``tune``."""

    width: float
    n_tuned: int
    tune: bool


@refuses_potentials
class NoisyOrQSlice(BlockedStep):
    r"""Exact slice-sampling update of the failure probability ``q`` of the noisy-or IBP-IBP.

    Targets

    .. math:: p(q\mid C, M, Z) \propto p(q)\prod_{n,k:\,s_{nk}>0}
        \big(1-q^{s_{nk}}\big)^{z_{nk}}\, q^{s_{nk}(1-z_{nk})},
        \qquad s_{nk} = c_n^\top m_k

    (Doshi-Velez 2009, §7.2.3, eq. 7.7; slice sampling of Neal 2003 with stepping out and
    shrinkage, on ``q``'s transformed value with the prior and Jacobian from the model).  Each
    evaluation costs ``O(#distinct s)`` after one ``O(NK)`` pass for the sufficient statistics
    (:func:`noisy_or_log_lik`).  Chosen automatically for a ``q`` that enters the model only
    as such a failure probability (several matrices may share it); the pattern is checked
    numerically at construction.

    Parameters
    ----------
    vars : list
        ``q``.
    width : float, default 1.0
        Initial slice width on the transformed scale (adapted during tuning to twice the
        average move).
    """

    name = "ibp_noisy_or_q_slice"
    default_blocked = False
    stats_dtypes_shapes = {"ibp_q_evals": (np.int64, [])}
    _state_class = NoisyOrQSliceState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, width=1.0):
        model = pm.modelcontext(model)
        value_var, q_rv = one_value_var(vars, model, "NoisyOrQSlice updates one q at a time")
        children = _match_q(model, q_rv)
        self.vars = [value_var]
        self.value_name = value_var.name
        self._children = [(name, fn) for name, fn in (
            (name, compile_point_fn(model, s, compile_kwargs=compile_kwargs))
            for name, _, _, s in children)]
        self._data = {name: observed_data(model.rvs_to_values[rv])
                      for name, free, rv, _ in children if not free}
        [prior] = model.logp(vars=[q_rv], jacobian=True, sum=False)
        self._prior = compile_point_fn(model, prior, compile_kwargs=compile_kwargs)
        transform = model.rvs_to_transforms.get(q_rv)
        u = pt.dscalar("u")
        back = transform.backward(u, *q_rv.owner.inputs) if transform is not None else u
        self._back = pytensor.function([u], back, mode="FAST_COMPILE",
                                       on_unused_input="ignore")
        self.init_width = float(width)
        if not self.init_width > 0:
            raise ValueError(f"width must be > 0; got {width!r}.")
        self.width = self.init_width
        self.n_tuned = 0
        self.tune = False
        self.rng = get_random_generator(rng)

    def sufficient_stats(self, point):
        """``(on_counts, on_values, off_sum)`` of :func:`noisy_or_log_lik` over every matrix
        that ``q`` governs."""
        on_s, off_sum = [], 0.0
        for name, s_fn in self._children:
            z = self._data[name] if name in self._data else point[name]
            s = np.broadcast_to(np.asarray(s_fn(point), dtype=float), np.shape(z))
            on = np.asarray(z) == 1
            on_s.append(s[on])
            off_sum += float(s[~on].sum())
        values, counts = np.unique(np.concatenate(on_s), return_counts=True)
        return counts.astype(float), values, off_sum

    def step(self, point):
        counts, values, off_sum = self.sufficient_stats(point)
        name = self.value_name
        dtype = point[name].dtype

        def logp(u):
            q = float(self._back(u))
            if not 0.0 < q < 1.0:
                return -np.inf
            prior = float(self._prior({**point, name: np.asarray(u, dtype=dtype)}))
            return prior + noisy_or_log_lik(math.log(q), counts, values, off_sum)

        u0 = float(point[name])
        u1, evals = slice_sample(self.rng, logp, u0, self.width, name=repr(name))
        if self.tune:
            self.n_tuned += 1
            self.width = adapt_width(self.width, u1 - u0, self.n_tuned)
        new = dict(point)
        new[name] = np.asarray(u1, dtype=dtype)
        return new, [{"ibp_q_evals": int(evals)}]

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.tune = bool(tune)
        self.width = self.init_width
        self.n_tuned = 0

    def stop_tuning(self):
        self.tune = False

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or var.ndim != 0:
            return Competence.INCOMPATIBLE
        try:
            _match_q(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
