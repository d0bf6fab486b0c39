r"""Exact Gibbs updates of binary feature–dimension links under a binary likelihood, on cached
counts (Doshi-Velez 2009, App. A.3 and §7.3).

In the binary likelihoods of the thesis — the leaky noisy-or
:func:`pymc_ibp.likelihoods.leaky_noisy_or` and the noisy tag detection
:func:`pymc_ibp.likelihoods.noisy_detection` — the probability of ``x_nd = 1`` depends on the
links ``A`` (``K x D``, binary) only through the count ``s_nd = (Z A)_nd`` of active parents,
and on the dimension's own parameters:

.. math:: P(x_{nd}=1\mid Z, A) = p_d(s_{nd}),\qquad s_{nd} = \sum_k z_{nk} a_{kd}.

Flipping ``a_kd`` changes ``s_nd`` by one in the ``m_k`` rows that own feature ``k`` and
nowhere else, so its exact full conditional is

.. math:: \log\frac{P(a_{kd}=1\mid\cdot)}{P(a_{kd}=0\mid\cdot)} = \operatorname{logit} p^A_{kd}
    + \sum_{n:\,z_{nk}=1}\Big[\ell_d(x_{nd}, s^{(1)}_{nd}) - \ell_d(x_{nd}, s^{(0)}_{nd})\Big],

with ``ℓ_d(x, s) = log p_d(s)^x (1 - p_d(s))^{1-x}`` read from a table over ``s = 0..K``
(one evaluation of the model's own probability graph per step) and ``S`` kept up to date
after every element: ``O(m_k)`` per element, ``O(N K D)`` per sweep, instead of the whole
model per element that PyMC's ``BinaryGibbsMetropolis`` evaluates.
"""

from __future__ import annotations

import numba
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.util import get_random_generator
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.math import Dot
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp._numba_utils import bernoulli_logodds, column_rows, interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.graph import boolean_masked, observed_data, one_value_var, rv_users

__all__ = ["BinaryFeatureGibbs", "binary_feature_sweep"]

PATTERN = ("A = pm.Bernoulli('A', p, shape=(K, D)) used only in observed "
           "pm.Bernoulli('X', p=f(Z @ A), observed=X) (NaN for missing entries), f element-wise "
           "with per-column parameters, e.g. pmi.likelihoods.leaky_noisy_or(Z, A, leak, "
           "activation) or pmi.likelihoods.noisy_detection(Z, A, f, m)")


@numba.njit(cache=True)
def binary_feature_sweep(rng, Z, A, S, X, log_p1, log_p0, prior_lo):
    """One Gibbs scan of every element of the binary ``A`` (``K x D``, in place) given ``Z``
    (``N x K``), keeping the counts ``S = Z A`` (``N x D``) up to date.  ``log_p1[s, d]`` and
    ``log_p0[s, d]``: log-probabilities of ``x_nd = 1`` and ``0`` with ``s`` active parents;
    ``prior_lo`` (``K x D``): prior log-odds of ``a_kd = 1``.  Returns the number of flips."""
    n, k_max = Z.shape
    d = A.shape[1]
    rows = np.empty(n, dtype=np.int64)
    flips = 0
    for k in range(k_max):
        m = column_rows(Z, k, rows)
        for j in range(d):
            old = A[k, j]
            delta = 0.0
            for t in range(m):
                i = rows[t]
                s0 = S[i, j] - old
                if X[i, j] != 0:
                    delta += log_p1[s0 + 1, j] - log_p1[s0, j]
                else:
                    delta += log_p0[s0 + 1, j] - log_p0[s0, j]
            new = bernoulli_logodds(rng, prior_lo[k, j] + delta)
            if new != old:
                flips += 1
                A[k, j] = new
                for t in range(m):
                    S[rows[t], j] += new - old
    return flips


def _find_dot(p, a_rv):
    """The single ``Z @ A`` node of the probability graph ``p`` through which ``A`` enters."""
    dots = [v for v in ancestors([p]) if v.owner is not None and isinstance(v.owner.op, Dot)
            and v.owner.inputs[1] is a_rv]
    if len(dots) != 1:
        raise ModelPatternError(f"{a_rv.name!r} must enter the probability of its likelihood "
                                f"through exactly one Z @ {a_rv.name}. Needed: {PATTERN}.")
    return dots[0]


def match_binary_features(model, a_rv):
    """``(parts, z graph, p graph of S, S input)`` for a binary ``A`` of :data:`PATTERN`;
    ``parts``: ``[(rv, mask)]``, the observed ``X`` (mask ``None``) or, for data with NaN
    entries, PyMC's ``X_observed`` and ``X_unobserved`` with their boolean masks over the
    full array."""
    if not isinstance(a_rv.owner.op, BernoulliRV) or a_rv.ndim != 2:
        raise ModelPatternError(f"{a_rv.name!r} must be a K x D pm.Bernoulli. Needed: {PATTERN}.")
    users = rv_users(model, a_rv)
    observed = [u for u in users if u in model.observed_RVs]
    if (not users or len(observed) != 1 or len(users) > 2
            or not all(isinstance(u.owner.op, BernoulliRV) for u in users)):
        raise ModelPatternError(
            f"{a_rv.name!r} must be used only by one observed pm.Bernoulli (found "
            f"{[u.name for u in users]}). Needed: {PATTERN}.")
    bases, parts = [], []
    for u in users:
        base, mask = boolean_masked(u.owner.inputs[-1]) or (u.owner.inputs[-1], None)
        if (mask is None) != (len(users) == 1):
            raise ModelPatternError(
                f"{a_rv.name!r} is used by {[u.name for u in users]}, which are not one "
                f"observed array split by PyMC for its missing entries. Needed: {PATTERN}.")
        bases.append(base)
        parts.append((u, mask))
    if len(users) == 2:
        m0, m1 = parts[0][1], parts[1][1]
        if not (bases[0] is bases[1] and m0.shape == m1.shape and m0.ndim == 2
                and np.all(m0 ^ m1)):
            raise ModelPatternError(
                f"The probabilities of {[u.name for u in users]} are not one array split by "
                f"two complementary masks. Needed: {PATTERN}.")
    p = bases[0]
    dot = _find_dot(p, a_rv)
    s_in = pt.matrix("__ibp_S", dtype="float64")
    p_of_s = graph_replace(p, {dot: s_in.astype(dot.dtype)}, strict=False)
    if a_rv in set(ancestors([p_of_s])):
        raise ModelPatternError(f"{a_rv.name!r} enters the probability of "
                                f"{observed[0].name!r} other than through Z @ {a_rv.name}. "
                                f"Needed: {PATTERN}.")
    return parts, dot.owner.inputs[0], p_of_s, s_in


class BinaryFeatureGibbs(BlockedStep):
    r"""Exact element-wise Gibbs sampler of a binary feature–dimension matrix ``A`` under a
    binary likelihood whose success probability depends on ``A`` only through the counts
    ``S = Z @ A`` (:func:`pymc_ibp.likelihoods.leaky_noisy_or`,
    :func:`pymc_ibp.likelihoods.noisy_detection`; Doshi-Velez 2009, App. A.3, §7.3).

    Each ``a_kd`` is drawn from

    .. math:: \log\frac{P(a_{kd}=1\mid\cdot)}{P(a_{kd}=0\mid\cdot)} =
        \operatorname{logit} p^A_{kd} + \sum_{n:\,z_{nk}=1}
        \big[\ell_d(x_{nd}, s_{nd}^{(1)}) - \ell_d(x_{nd}, s_{nd}^{(0)})\big]

    with ``S`` kept up to date (``O(m_k)`` per element, ``O(NKD)`` per sweep) and
    ``ℓ_d(x, s)`` tabulated over ``s = 0..K`` from the model's own probability graph once per
    step.  ``Z`` may be any binary matrix expression (a ``pmi.IBP``, ``M[c]`` of
    :func:`pymc_ibp.dp_ibp`, ``1[C M > 0]`` of :func:`pymc_ibp.ibp_ibp`, …); ``A``'s prior
    probability may be a constant or a variable (e.g. ``pm.Beta``).  Chosen automatically for
    such an ``A`` (PyMC's ``BinaryGibbsMetropolis`` otherwise, which evaluates the whole
    model per element).  The pattern (probability a function of ``S`` element-wise, with
    parameters constant along the rows) is checked numerically at construction.  Stat
    ``ibp_link_flips``.
    """

    name = "ibp_binary_feature_gibbs"
    default_blocked = False
    stats_dtypes_shapes = {"ibp_link_flips": (np.int64, [])}
    _state_class = StepMethodState

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True):
        model = pm.modelcontext(model)
        a_val, a_rv = one_value_var(vars, model, "BinaryFeatureGibbs updates one matrix A")
        parts, z_graph, p_of_s, s_in = match_binary_features(model, a_rv)
        self.vars = [a_val]
        self.a_name = a_val.name
        ip = model.initial_point() if initial_point is None else initial_point
        self.k_max, self.d = (int(v) for v in ip[a_val.name].shape)
        # the data: fully observed, or its observed part and the imputed entries' variable
        self._missing = None  # (mask of the imputed entries, their value variable's name)
        x_rv = next(rv for rv, _ in parts if rv in model.observed_RVs)
        X = None
        for rv, mask in parts:
            if rv in model.observed_RVs:
                obs = observed_data(model.rvs_to_values[rv])
                if mask is None:
                    X = obs
                else:
                    X = np.zeros(mask.shape)
                    X[mask] = obs
            else:
                self._missing = (mask, model.rvs_to_values[rv].name)
        name = x_rv.name.removesuffix("_observed")
        if X.ndim != 2 or not np.all(np.isfinite(X)):
            raise ModelPatternError(f"BinaryFeatureGibbs needs {name!r} as an N x D array with "
                                    f"finite values (NaN for missing ones). Needed: {PATTERN}.")
        if np.any((X != 0) & (X != 1)):
            bad = tuple(int(i) for i in np.argwhere((X != 0) & (X != 1))[0])
            raise ModelPatternError(f"{name!r} holds {X[bad]} at {bad}; a binary "
                                    "likelihood needs data in {0, 1}.")
        self._x = X.astype(np.int8)
        [z_v, p_v, lo_v] = model.replace_rvs_by_values(
            [z_graph, p_of_s, pt.log(a_rv.owner.inputs[-1]) - pt.log1p(-a_rv.owner.inputs[-1])])
        self._z = compile_point_fn(model, z_v, compile_kwargs=compile_kwargs)
        self._p = compile_point_fn(model, p_v, extra_inputs=[s_in], compile_kwargs=compile_kwargs)
        self._s_name = s_in.name
        self._prior_lo = compile_point_fn(model, lo_v, compile_kwargs=compile_kwargs)
        self._check_pattern(model, name)
        self.rng = get_random_generator(rng)

    def _p_of(self, point, S):
        return np.asarray(self._p({**point, self._s_name: S}), dtype=float)

    def tables(self, point):
        """``(log p_d(s), log(1 - p_d(s)))`` for ``s = 0..K`` (rows) and every column."""
        n, top = self._x.shape[0], self.k_max
        if n > top:  # one evaluation: row i holds the count min(i, K)
            s = np.repeat(np.minimum(np.arange(n), top).astype(float)[:, None], self.d, axis=1)
            p = np.broadcast_to(self._p_of(point, s), s.shape)[: top + 1]
        else:
            p = np.stack([np.broadcast_to(self._p_of(point, np.full((n, self.d), float(c))),
                                          (n, self.d))[0] for c in range(top + 1)])
        with np.errstate(divide="ignore"):
            return np.log(p), np.log1p(-p)

    def _check_pattern(self, model, x_name):
        """The probability at random counts equals the table lookup (element-wise in ``S``,
        parameters constant along the rows), at a point with the binary matrices random."""
        rng = np.random.default_rng(0)
        point = {k: (rng.integers(0, 2, np.shape(v)).astype(v.dtype)
                     if np.issubdtype(np.asarray(v).dtype, np.integer) else v)
                 for k, v in model.initial_point().items()}
        n = self._x.shape[0]
        S = rng.integers(0, self.k_max + 1, size=(n, self.d)).astype(float)
        try:
            full = np.broadcast_to(self._p_of(point, S), (n, self.d))
            lp1, _ = self.tables(point)
        except Exception as err:  # noqa: BLE001 (a shape assertion of the compiled graph)
            raise ModelPatternError(f"The probability of {x_name!r} cannot be evaluated "
                                    f"from the counts Z @ A alone ({err}). Needed: "
                                    f"{PATTERN}.") from err
        looked = np.exp(lp1[S.astype(int), np.arange(self.d)[None, :]])
        if not np.allclose(full, looked, rtol=1e-10, atol=1e-12):
            raise ModelPatternError(
                f"The probability of {x_name!r} is not an element-wise function of Z @ A "
                f"with parameters constant along the rows. Needed: {PATTERN}.")

    @interrupt_safe
    def step(self, point):
        Z = np.asarray(self._z(point))
        if Z.ndim != 2 or Z.shape[1] != self.k_max:
            raise ModelPatternError(f"Z has shape {Z.shape}; expected (N, {self.k_max}).")
        Z = Z.astype(np.int8)
        A = np.array(point[self.a_name], dtype=np.int64)
        S = (Z.astype(np.int64) @ A).astype(np.int64)
        log_p1, log_p0 = self.tables(point)
        lo = np.broadcast_to(np.asarray(self._prior_lo(point), dtype=float),
                             A.shape).astype(float)
        X = self._x
        if self._missing is not None:  # the imputed entries at their current values
            mask, name = self._missing
            X = X.copy()
            X[mask] = np.asarray(point[name]).astype(np.int8)
        flips = binary_feature_sweep(self.rng, Z, A, S, X, log_p1, log_p0, lo)
        new = dict(point)
        new[self.a_name] = A.astype(point[self.a_name].dtype)
        return new, [{"ibp_link_flips": int(flips)}]

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or not isinstance(var.owner.op, BernoulliRV) or var.ndim != 2:
            return Competence.INCOMPATIBLE
        try:  # the whole check, numerical part included (compiles three small functions)
            model = pm.modelcontext(None)
            BinaryFeatureGibbs([var], model=model)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
