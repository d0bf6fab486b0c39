"""A feature matrix given any binary ``Z``: ``A`` whose only child is ``X ~ Normal(Z @ A
(+ offset), σx)`` with ``Z`` any binary-valued expression (a ``pmi.IBP``, a Bernoulli matrix,
the DP-IBP's ``M[c]``, the IBP-IBP's ``1[C M > 0]``), under ``A ~ Exponential`` or
``HalfNormal`` (:class:`pymc_ibp.NonNegativeFeatureGibbs`, :func:`find_nonnegative_features`)
or ``A ~ Normal(0, σa)`` (:class:`pymc_ibp.GaussianFeatureGibbs`,
:func:`find_gaussian_features`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import ExponentialRV, HalfNormalRV, NormalRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.matching.graph import block_data, column_scale, is_zero_constant, mean_terms
from pymc_ibp.matching.linear_gaussian import GaussianBlock

__all__ = ["GAUSSIAN_FEATURES_PATTERN", "NONNEGATIVE_PATTERN", "FeaturesGivenZ",
           "find_gaussian_features", "find_nonnegative_features"]


NONNEGATIVE_PATTERN = (
    "A = pm.Exponential('A', lam, shape=(K, D)) or pm.HalfNormal('A', sigma_a, shape=(K, D)); "
    "pm.Normal('X', mu=Z @ A (+ offset), sigma=sigma_x, observed=X) with Z any binary matrix "
    "(pmi.IBP, a Bernoulli matrix, M[c], ...), sigma_x a scalar or one per column, and no other "
    "variable depending on A"
)

GAUSSIAN_FEATURES_PATTERN = (
    "A = pm.Normal('A', 0, sigma_a, shape=(K, D)) with sigma_a a scalar, one per column, one "
    "per feature (shape (K, 1)) or one per entry; "
    "pm.Normal('X', mu=Z @ A (+ offset), sigma=sigma_x, observed=X) with Z any binary matrix "
    "(M[c], 1[C M > 0], a Bernoulli matrix, ...), sigma_x a scalar or one per column, and no "
    "other variable depending on A"
)


@dataclass
class FeaturesGivenZ:
    """A feature matrix ``A`` (K x D) whose only child is a linear-Gaussian likelihood
    ``X ~ Normal(Z @ A (+ offset), σx)`` with ``Z`` any binary-valued expression."""

    a_rv: object
    #: "exponential" (rate = 1/scale), "halfnormal" or "normal" (mean 0, scale = sigma_a)
    prior: str
    scale: object  # symbolic prior scale of A, broadcast to K x D
    z: object  # symbolic Z (in the model's random variables)
    block: GaussianBlock  # the likelihood (sigma_a unused)

    def compile(self, model, compile_kwargs=None):
        """Point function giving ``(Z, prior scale K x D, σx per column, offset N x D)``."""
        b = self.block
        n, d = b.shape
        k = int(model.initial_point()[model.rvs_to_values[self.a_rv].name].shape[0])
        off = pt.zeros((n, d)) if b.offset is None else pt.broadcast_to(b.offset, (n, d))
        outs = model.replace_rvs_by_values([
            self.z, pt.broadcast_to(self.scale, (k, d)), pt.broadcast_to(b.sigma_x, (d,)), off])
        return compile_point_fn(model, outs, compile_kwargs=compile_kwargs)

    def binary_z(self, Z, who):
        """``Z`` as a C-ordered int8 array, or :class:`DataError` when it holds a value other
        than 0 and 1 (the kernels count a non-zero entry as 1: an integer ``Z`` such as
        ``C @ M`` would be sampled as if it were ``1[C M > 0]``)."""
        Z = np.asarray(Z)
        if Z.size and (Z.min() < 0 or Z.max() > 1):
            raise DataError(
                f"{who}: Z in the mean of {self.block.obs_rv.name!r} holds {Z.max()} (or "
                f"{Z.min()}); the step needs a binary Z. Write Z as 0/1 (e.g. "
                f"pt.gt(C @ M, 0)), or give {self.a_rv.name!r} to NUTS "
                f"(step=[pm.NUTS([{self.a_rv.name}])]).")
        return np.ascontiguousarray(Z, dtype=np.int8)

    def point_data(self, model):
        """A function of a point giving ``X`` with PyMC's imputed entries at their current
        values (the model's array itself, to be read only, when none are missing)."""
        b = self.block
        X = b.filled()
        if b.missing_rv is None:
            return lambda point: X
        name, mask = model.rvs_to_values[b.missing_rv].name, b.missing_mask

        def data(point):
            out = X.copy()
            out[mask] = point[name]
            return out

        return data


def find_nonnegative_features(model, a_rv) -> FeaturesGivenZ:
    """Match the non-negative linear-Gaussian pattern around the feature matrix ``a_rv``
    (``pm.Exponential`` or ``pm.HalfNormal``, K x D) or raise :class:`ModelPatternError`."""
    op = a_rv.owner.op if a_rv.owner is not None else None
    if not isinstance(op, (ExponentialRV, HalfNormalRV)) or a_rv.ndim != 2:
        raise ModelPatternError(
            f"{a_rv.name!r} is not a 2-D pm.Exponential or pm.HalfNormal feature matrix. "
            f"Needed pattern: {NONNEGATIVE_PATTERN}.")
    if isinstance(op, HalfNormalRV):
        _, _, loc, scale = a_rv.owner.inputs
        if not is_zero_constant(loc):
            raise ModelPatternError(f"{a_rv.name!r} must be a HalfNormal with loc 0. Needed "
                                    f"pattern: {NONNEGATIVE_PATTERN}.")
        prior = "halfnormal"
    else:
        _, _, scale = a_rv.owner.inputs
        prior = "exponential"
    return _features_given_z(model, a_rv, prior, scale, NONNEGATIVE_PATTERN)


def find_gaussian_features(model, a_rv) -> FeaturesGivenZ:
    """Match ``A ~ Normal(0, σa)`` (K x D, ``σa`` anything that broadcasts to it) whose only
    child is ``X ~ Normal(Z @ A (+ offset), σx)`` with ``Z`` any binary matrix, or raise
    :class:`ModelPatternError`."""
    op = a_rv.owner.op if a_rv.owner is not None else None
    if not isinstance(op, NormalRV) or a_rv.ndim != 2:
        raise ModelPatternError(f"{a_rv.name!r} is not a 2-D pm.Normal feature matrix. "
                                f"Needed pattern: {GAUSSIAN_FEATURES_PATTERN}.")
    _, _, loc, scale = a_rv.owner.inputs
    if not is_zero_constant(loc):
        raise ModelPatternError(f"{a_rv.name!r} must have mean 0. Needed pattern: "
                                f"{GAUSSIAN_FEATURES_PATTERN}.")
    return _features_given_z(model, a_rv, "normal", scale, GAUSSIAN_FEATURES_PATTERN)


def _features_given_z(model, a_rv, prior, scale, pattern) -> FeaturesGivenZ:
    """The likelihood of ``a_rv`` (prior ``prior`` with scale ``scale``) matched against
    ``X ~ Normal(Z @ A (+ offset), σx)``, ``Z`` any binary matrix."""
    if a_rv not in model.free_RVs:
        raise ModelPatternError(f"{a_rv.name!r} is observed; nothing to sample.")
    children = [rv for rv in model.basic_RVs if rv is not a_rv and a_rv in set(ancestors([rv]))]
    obs, missing, z, sigma, offset = [], [], None, None, None
    for rv in children:
        mm = mean_terms(rv.owner.inputs[2]) if isinstance(rv.owner.op, NormalRV) else None
        if mm is None or mm[1] is not a_rv or a_rv in set(ancestors([mm[0]])) or (
                mm[2] is not None and a_rv in set(ancestors([mm[2]]))):
            raise ModelPatternError(
                f"{rv.name!r} ({type(rv.owner.op).__name__}) depends on {a_rv.name!r} other "
                f"than through a Normal mean Z @ {a_rv.name}. Needed pattern: "
                f"{pattern}.")
        left, _, off, mask = mm
        if not left.type.dtype.startswith(("int", "uint", "bool")):
            raise ModelPatternError(
                f"In {rv.name!r} the left factor of Z @ {a_rv.name} has dtype "
                f"{left.type.dtype}; it must be a binary (integer) matrix. Needed pattern: "
                f"{pattern}.")
        z = left if z is None else z
        sigma = sigma if sigma is not None else column_scale(
            rv.owner.inputs[3], f"The noise sigma of {rv.name!r}", pattern,
            masked=mask is not None)
        offset = off if offset is None else offset
        (obs if rv in model.observed_RVs else missing).append((rv, mask))
    if len(obs) != 1 or len(missing) > 1:
        raise ModelPatternError(
            f"Expected exactly one observed Normal with mean Z @ {a_rv.name}, found "
            f"{len(obs)}. Needed pattern: {pattern}.")
    ip = model.initial_point()
    a_shape = ip[model.rvs_to_values[a_rv].name].shape
    z_shape = tuple(z.type.shape)
    if None in z_shape:  # no static shape: evaluate Z once (this runs in competence too)
        [z_val] = model.replace_rvs_by_values([z])
        z_shape = compile_point_fn(model, z_val)(ip).shape
    if len(z_shape) != 2 or z_shape[1] != a_shape[0]:
        raise ModelPatternError(f"Shape mismatch: Z is {z_shape} but {a_rv.name!r} is "
                                f"{a_shape}; A must be K x D with K the columns of Z.")
    obs_rv, obs_mask = obs[0]
    X = block_data(model, a_rv, obs_rv, obs_mask, (z_shape[0], a_shape[1]))
    missing_rv, missing_mask = missing[0] if missing else (None, None)
    bad = ~np.isfinite(X) & (True if missing_mask is None else ~np.asarray(missing_mask))
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(f"The observed data of {obs_rv.name!r} contains {X[r, c]} at (row {r}, "
                        f"column {c}); pass missing values as NaN so that PyMC imputes them.")
    block = GaussianBlock(obs_rv=obs_rv, a_rv=a_rv, sigma_x=sigma, sigma_a=None, X=X,
                          missing_rv=missing_rv,
                          missing_mask=None if missing_mask is None else np.asarray(missing_mask),
                          offset=offset)
    return FeaturesGivenZ(a_rv=a_rv, prior=prior, scale=scale, z=z, block=block)
