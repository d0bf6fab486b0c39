"""The Bernoulli-logit pattern of :class:`pymc_ibp.PolyaGammaGibbs`
(:func:`find_bernoulli_logit`): ``X ~ Bernoulli(logit_p = Z @ A (+ b))``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.traversal import ancestors
from pytensor.scalar.basic import Add
from pytensor.scalar.math import Sigmoid
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import BernoulliRV, NormalRV

from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.matching.cache import cached
from pymc_ibp.matching.graph import (
    block_data,
    column_scale,
    first_axis_index,
    is_zero_constant,
    mean_terms,
    row_indexed_variable,
    same_for_every_row,
    strip,
    unmask,
)
from pymc_ibp.matching.priors import match_prior

__all__ = ["LOGIT_PATTERN", "BernoulliLogitIBP", "find_bernoulli_logit",
           "matched_logit_models"]


LOGIT_PATTERN = (
    "Z = pmi.IBP('Z', alpha, dims=('obs', 'feature')) or pm.Bernoulli('Z', p=P, "
    "dims=('obs', 'feature')); A = pm.Normal('A', 0, sigma_a, dims=('feature', 'dim')); "
    "pm.Bernoulli('X', logit_p=Z @ A (+ offset), observed=X), sigma_a a scalar or one per "
    "column, the offset e.g. b = pm.Normal('b', mu, sigma, dims='dim') or b[group] with b of "
    "shape (G, D)"
)


@dataclass
class BernoulliLogitIBP:
    """A matched Bernoulli-logit latent feature model ``X ~ Bernoulli(σ(Z A + offset))``: the
    binary matrix, its prior, the feature matrix and the data (one observed matrix)."""

    z_rv: object
    prior: object  # IBPPrior or LogOddsPrior
    obs_rv: object  # the observed Bernoulli (or X_observed)
    a_rv: object  # K_max x D, pm.Normal(0, sigma_a)
    sigma_a: object  # symbolic, one per column (D,)
    X: np.ndarray  # N x D, 0/1 with NaN at missing entries
    k_max: int
    missing_rv: object = None  # X_unobserved free RV, or None
    missing_mask: np.ndarray | None = None  # N x D bool, True where missing
    b_rv: object = None  # an offset pm.Normal updated with A, or None
    b_mu: object = None  # its symbolic mean, shaped as b: (D,), (G, D), () or (G,)
    b_sigma: object = None  # its symbolic scale, shaped as b_mu
    b_group: object = None  # the symbolic group of every row when the offset is b[group]
    b_tied: bool = False  # one value for all columns: a scalar b, or b[group][:, None]
    offset: object = None  # other symbolic terms added to Z @ A (+ b), or None

    @property
    def shape(self):
        return self.X.shape

    @property
    def rvs(self):
        """The variables the Pólya-Gamma step updates: ``Z``, ``A``, ``b``, imputed ``X``."""
        return [rv for rv in (self.z_rv, self.a_rv, self.b_rv, self.missing_rv)
                if rv is not None]


def _logit_of(p):
    """``(logit, mask)`` of a Bernoulli probability ``sigmoid(logit)`` (PyMC's
    ``logit_p=``), optionally indexed by PyMC's imputation mask; ``None`` otherwise."""
    unmasked = unmask(p)
    if unmasked is None:
        return None
    p, mask = unmasked
    if not (p.owner is not None and isinstance(p.owner.op, Elemwise)
            and isinstance(p.owner.op.scalar_op, Sigmoid)):
        return None
    return p.owner.inputs[0], mask


def _offset_vector(model, off, likelihood, n, d, ip):
    """``(b, mu_b, sigma_b, group, tied)`` when the offset term ``off`` is a free
    ``pm.Normal`` that only this likelihood uses, with one value per column (shape ``(D,)``;
    ``group = None``), one per group of rows and column (``b[group]`` with ``b`` of shape
    ``(G, D)``; ``group`` the symbolic index), or one value for all columns (``tied``): a
    scalar ``b``, or one per group, ``b[group][:, None]`` with ``b`` of shape ``(G,)``.
    ``mu_b`` and ``sigma_b`` broadcast to ``b``'s shape; else ``None``."""
    b, group = strip(off), None
    if row_indexed_variable(model, off, n, d) is not None:
        b, group = strip(off).owner.inputs[0], first_axis_index(strip(off))
    elif not same_for_every_row(off):  # e.g. b[:, None]: one value per row
        return None
    shape = ip[model.rvs_to_values[b].name].shape if b in model.free_RVs else None
    tied = b.ndim == (0 if group is None else 1)
    if not (b.owner is not None and isinstance(b.owner.op, NormalRV) and b in model.free_RVs
            and shape is not None and (tied or (shape[-1:] == (d,) and b.ndim == (
                1 if group is None else 2)))):
        return None
    deps = [r for r in model.basic_RVs if r is not b and b in set(ancestors([r]))]
    if not set(deps) <= set(likelihood):
        return None
    _, _, mu, sigma = b.owner.inputs
    return b, pt.broadcast_to(mu, shape), pt.broadcast_to(sigma, shape), group, tied


def find_bernoulli_logit(model, z_rv) -> BernoulliLogitIBP:
    """Match the Bernoulli-logit pattern around ``z_rv`` (:data:`LOGIT_PATTERN`) or raise
    :class:`ModelPatternError` (:class:`DataError` for data that are not 0/1)."""
    if z_rv.ndim != 2:
        raise ModelPatternError(
            f"{z_rv.name!r} must be a single N x K_max matrix (got ndim={z_rv.ndim}).")
    prior = match_prior(model, z_rv)
    if prior is None:
        raise ModelPatternError(
            f"{z_rv.name!r} is a {type(z_rv.owner.op).__name__}, not a pmi.IBP or 2-D "
            f"pm.Bernoulli variable. Needed pattern: {LOGIT_PATTERN}.")
    children = [rv for rv in model.observed_RVs + model.free_RVs
                if rv is not z_rv and z_rv in set(ancestors([rv]))]
    matched, other = [], []
    for rv in children:
        form = _logit_of(rv.owner.inputs[-1]) if isinstance(rv.owner.op, BernoulliRV) else None
        terms = mean_terms(form[0], left=z_rv) if form is not None else None
        if terms is None or terms[0] is not z_rv:
            other.append(f"{rv.name} ~ {type(rv.owner.op).__name__}")
            continue
        matched.append((rv, form[1], terms))
    if not matched:
        raise ModelPatternError(
            f"No Bernoulli likelihood with logit_p = {z_rv.name} @ A found for {z_rv.name!r}. "
            f"Needed pattern: {LOGIT_PATTERN}. Found children: {', '.join(other) or 'none'}.")
    if other:
        raise ModelPatternError(
            f"{z_rv.name!r} also reaches {other}; the Pólya-Gamma sampler needs the Bernoulli "
            f"likelihood to be the only variable depending on it. Needed pattern: "
            f"{LOGIT_PATTERN}.")
    a_rvs = {terms[1] for _, _, terms in matched}
    if len(a_rvs) != 1:
        raise ModelPatternError(
            f"{z_rv.name!r} reaches {len(matched)} Bernoulli likelihoods with different "
            f"feature matrices; the Pólya-Gamma sampler takes one. Needed pattern: "
            f"{LOGIT_PATTERN}.")
    [a_rv] = a_rvs
    likelihood = [rv for rv, _, _ in matched]
    observed = [(rv, mask) for rv, mask, _ in matched if rv in model.observed_RVs]
    missing = [(rv, mask) for rv, mask, _ in matched if rv not in model.observed_RVs]
    if len(observed) != 1 or len(missing) > 1:
        raise ModelPatternError(
            f"Expected exactly one observed Bernoulli with logit_p = {z_rv.name} @ "
            f"{a_rv.name}, found {len(observed)}.")
    (obs_rv, obs_mask), off = observed[0], matched[0][2][2]
    if (a_rv.owner is None or not isinstance(a_rv.owner.op, NormalRV)
            or a_rv not in model.free_RVs):
        raise ModelPatternError(
            f"In {obs_rv.name!r} logit_p is {z_rv.name} @ {a_rv.name or a_rv}, but the right "
            f"factor must be a free pm.Normal feature matrix. Needed pattern: {LOGIT_PATTERN}.")
    deps = [r for r in model.basic_RVs if r is not a_rv and a_rv in set(ancestors([r]))]
    if not set(deps) <= set(likelihood):
        raise ModelPatternError(
            f"{a_rv.name!r} also reaches {[r.name for r in deps if r not in likelihood]}; the "
            f"Pólya-Gamma sampler draws it from its conditional given the likelihood alone.")
    if off is not None and {z_rv, a_rv} & set(ancestors([off])):
        raise ModelPatternError(
            f"In {obs_rv.name!r} logit_p is {z_rv.name} @ {a_rv.name} plus terms that depend on "
            f"them; the Pólya-Gamma sampler needs an offset not involving them. Needed "
            f"pattern: {LOGIT_PATTERN}.")
    _, _, a_mu, a_sigma = a_rv.owner.inputs
    if not is_zero_constant(a_mu):
        raise ModelPatternError(
            f"{a_rv.name!r} must have mean 0. Needed pattern: {LOGIT_PATTERN}.")
    ip = model.initial_point()
    n, k_max = ip[model.rvs_to_values[z_rv].name].shape
    a_shape = tuple(int(s) for s in ip[model.rvs_to_values[a_rv].name].shape)
    if len(a_shape) != 2 or a_shape[0] != k_max:
        raise ModelPatternError(
            f"Shape mismatch: {z_rv.name!r} is {n} x {k_max} but {a_rv.name!r} has shape "
            f"{a_shape}; A must be K_max x D = {k_max} x D.")
    d = a_shape[1]
    X = block_data(model, z_rv, obs_rv, obs_mask, (n, d))
    missing_rv = missing_mask = None
    if missing:
        missing_rv, missing_mask = missing[0][0], np.asarray(missing[0][1])
        if missing_mask.shape != X.shape:
            raise ModelPatternError("Imputed entries do not index Z @ A.")
    seen = ~np.isnan(X) if missing_mask is None else ~missing_mask
    bad = seen & ~np.isin(np.nan_to_num(X, nan=-1.0), (0.0, 1.0))
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(
            f"The observed data of {obs_rv.name!r} (a pm.Bernoulli likelihood) contains "
            f"{X[r, c]} at (row {r}, column {c}); {int(bad.sum())} value(s) other than 0 and 1 "
            "in all. Binarise the data first (e.g. X > threshold); pass missing values as NaN "
            "so that PyMC imputes them.")
    sigma_a = pt.broadcast_to(
        column_scale(a_sigma, f"The sigma of {a_rv.name!r}", LOGIT_PATTERN), (d,))
    b_rv = b_mu = b_sigma = b_group = None
    b_tied = False
    if off is not None:
        terms = [off]
        if off.owner is not None and isinstance(off.owner.op, Elemwise) and isinstance(
                off.owner.op.scalar_op, Add):
            terms = list(off.owner.inputs)
        for i, t in enumerate(terms):
            found = _offset_vector(model, t, likelihood, n, d, ip)
            if found is not None:
                b_rv, b_mu, b_sigma, b_group, b_tied = found
                rest = terms[:i] + terms[i + 1:]
                off = None if not rest else (rest[0] if len(rest) == 1 else pt.add(*rest))
                break
    return BernoulliLogitIBP(
        z_rv=z_rv, prior=prior, obs_rv=obs_rv, a_rv=a_rv, sigma_a=sigma_a, X=X, k_max=k_max,
        missing_rv=missing_rv, missing_mask=missing_mask, b_rv=b_rv, b_mu=b_mu,
        b_sigma=b_sigma, b_group=b_group, b_tied=b_tied, offset=off)


def matched_logit_models(model):
    """A :class:`BernoulliLogitIBP` for every free binary matrix of ``model`` with a known
    prior and the Bernoulli-logit pattern (the others are skipped), matched once per state of
    the model (:func:`pymc_ibp.matching.cache.cached`)."""
    return cached(model, "logit", lambda m: tuple(_matched_logit_models(m)))


def _matched_logit_models(model):
    for z_rv in model.free_RVs:
        if match_prior(model, z_rv) is None:
            continue
        try:
            spec = find_bernoulli_logit(model, z_rv)
        except ModelPatternError:
            continue
        yield spec
