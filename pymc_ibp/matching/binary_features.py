"""The pattern of :class:`pymc_ibp.BinaryFeatureGibbs`: a binary ``A`` that enters a binary
likelihood only through the counts ``S = Z @ A`` (Doshi-Velez 2009, App. A.3 and §7.3)."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.math import Dot
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.cache import cached
from pymc_ibp.matching.graph import boolean_masked, observed_data, rv_users

__all__ = ["PATTERN", "BinaryFeatureLikelihood", "binary_features_of",
           "match_binary_features"]

PATTERN = ("A = pm.Bernoulli('A', p, shape=(K, D)) used only in observed "
           "pm.Bernoulli('X', p=f(Z @ A), observed=X) (NaN for missing entries), f element-wise "
           "with per-column parameters, e.g. pmi.likelihoods.leaky_noisy_or(Z, A, leak, "
           "activation) or pmi.likelihoods.noisy_detection(Z, A, f, m)")


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


class BinaryFeatureLikelihood:
    """The likelihood of a binary ``A`` of :data:`PATTERN` as
    :class:`pymc_ibp.BinaryFeatureGibbs` reads it: the data ``x`` (int8, ``N x D``; imputed
    entries in ``missing = (mask, value name)`` or ``None``), point functions of ``Z``
    (:attr:`z`), of the probability given the counts ``S`` (:meth:`tables`) and of ``A``'s
    prior log-odds (:attr:`prior_lo`).  Built from the model's graph; the pattern
    (probability a function of ``S`` element-wise, with parameters constant along the rows)
    is checked numerically (:meth:`check`), so a model that does not have it raises
    :class:`~pymc_ibp.exceptions.ModelPatternError`."""

    def __init__(self, model, a_rv, initial_point=None, compile_kwargs=None):
        parts, z_graph, p_of_s, s_in = match_binary_features(model, a_rv)
        self.a_name = model.rvs_to_values[a_rv].name
        ip = model.initial_point() if initial_point is None else initial_point
        self.k_max, self.d = (int(v) for v in ip[self.a_name].shape)
        # the data: fully observed, or its observed part and the imputed entries' variable
        self.missing = None  # (mask of the imputed entries, their value variable's name)
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
                self.missing = (mask, model.rvs_to_values[rv].name)
        name = x_rv.name.removesuffix("_observed")
        if X.ndim != 2 or not np.all(np.isfinite(X)):
            raise ModelPatternError(f"BinaryFeatureGibbs needs {name!r} as an N x D array with "
                                    f"finite values (NaN for missing ones). Needed: {PATTERN}.")
        if np.any((X != 0) & (X != 1)):
            bad = tuple(int(i) for i in np.argwhere((X != 0) & (X != 1))[0])
            raise ModelPatternError(f"{name!r} holds {X[bad]} at {bad}; a binary "
                                    "likelihood needs data in {0, 1}.")
        self.x = X.astype(np.int8)
        [z_v, p_v, lo_v] = model.replace_rvs_by_values(
            [z_graph, p_of_s, pt.log(a_rv.owner.inputs[-1]) - pt.log1p(-a_rv.owner.inputs[-1])])
        self.z = compile_point_fn(model, z_v, compile_kwargs=compile_kwargs)
        self._p = compile_point_fn(model, p_v, extra_inputs=[s_in], compile_kwargs=compile_kwargs)
        self._s_name = s_in.name
        self.prior_lo = compile_point_fn(model, lo_v, compile_kwargs=compile_kwargs)
        self.check(model, name)

    def _p_of(self, point, S):
        return np.asarray(self._p({**point, self._s_name: S}), dtype=float)

    def tables(self, point):
        """``(log p_d(s), log(1 - p_d(s)))`` for ``s = 0..K`` (rows) and every column."""
        n, top = self.x.shape[0], self.k_max
        if n > top:  # one evaluation: row i holds the count min(i, K)
            s = np.repeat(np.minimum(np.arange(n), top).astype(float)[:, None], self.d, axis=1)
            p = np.broadcast_to(self._p_of(point, s), s.shape)[: top + 1]
        else:
            p = np.stack([np.broadcast_to(self._p_of(point, np.full((n, self.d), float(c))),
                                          (n, self.d))[0] for c in range(top + 1)])
        with np.errstate(divide="ignore"):
            return np.log(p), np.log1p(-p)

    def check(self, model, x_name):
        """The probability at random counts equals the table lookup (element-wise in ``S``,
        parameters constant along the rows), at a point with the binary matrices random."""
        rng = np.random.default_rng(0)
        point = {k: (rng.integers(0, 2, np.shape(v)).astype(v.dtype)
                     if np.issubdtype(np.asarray(v).dtype, np.integer) else v)
                 for k, v in model.initial_point().items()}
        n = self.x.shape[0]
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


def binary_features_of(model, a_rv):
    """The :class:`BinaryFeatureLikelihood` of ``a_rv`` in ``model``, or the
    :class:`~pymc_ibp.exceptions.ModelPatternError` saying why it has none; built once per
    state of the model (:func:`~pymc_ibp.matching.cache.cached`: every ``competence`` call of
    ``pm.sample`` consults it)."""
    def build(model):
        try:
            return BinaryFeatureLikelihood(model, a_rv)
        except ModelPatternError as err:
            return err

    return cached(model, ("binary_features", a_rv.name), build)
