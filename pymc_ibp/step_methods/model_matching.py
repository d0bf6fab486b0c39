"""Find the structure a step method needs in a PyMC model, in two independent parts.

**What prior ``Z`` has** (:func:`match_prior`, extensible through :data:`PRIOR_MATCHERS`):

* :class:`IBPPrior` — ``Z = pmi.IBP("Z", alpha, beta, dims=("obs", "feature"))``: the IBP's
  column counts and births;
* :class:`LogOddsPrior` — ``Z = pm.Bernoulli("Z", p=P, dims=("obs", "feature"))`` with ``P``
  broadcastable to ``N x K`` (e.g. ``P = pmi.IBPStickBreaking(...)``): independent entries
  with per-entry prior log-odds ``log P/(1-P)``, no births.

**What the likelihood is** (:func:`find_linear_gaussian`): the linear-Gaussian model the
collapsed and accelerated samplers need::

    A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))      # K x D, scalar sigma_a
    pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)             # scalar sigma_x

The prior's parameters, ``sigma_a`` and ``sigma_x`` may be constants or free variables with any
transform; they are read from the current point at every step.  Observed arrays with NaNs
(PyMC's automatic imputation, ``X_observed`` + ``X_unobserved``) are supported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.ops import ViewOp
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.tensor.basic import Alloc
from pytensor.tensor.blas import Dot22
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.random.basic import BernoulliRV, NormalRV
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.exceptions import DataError, ModelPatternError

__all__ = [
    "PRIOR_MATCHERS",
    "IBPPrior",
    "LinearGaussianIBP",
    "LogOddsPrior",
    "find_linear_gaussian",
    "match_prior",
    "matched_models",
]

PATTERN = (
    "Z = pmi.IBP('Z', alpha, dims=('obs', 'feature')) or pm.Bernoulli('Z', p=P, "
    "dims=('obs', 'feature')); "
    "A = pm.Normal('A', 0, sigma_a, dims=('feature', 'dim')) with scalar sigma_a; "
    "pm.Normal('X', mu=Z @ A, sigma=sigma_x, observed=X) with scalar sigma_x"
)


@dataclass
class IBPPrior:
    """``Z ~ pmi.IBP(alpha, beta)``: column counts with births (symbolic ``alpha``, ``beta``)."""

    alpha: object
    beta: object


@dataclass
class LogOddsPrior:
    """``Z ~ Bernoulli(p)`` entry-wise: ``p`` is symbolic, broadcast to the shape of ``Z``."""

    p: object


def _match_ibp(model, z_rv):
    if isinstance(z_rv.owner.op, IBPRV):
        _, _, alpha, beta, _, _ = z_rv.owner.inputs
        return IBPPrior(alpha=alpha, beta=beta)
    return None


def _match_bernoulli(model, z_rv):
    if isinstance(z_rv.owner.op, BernoulliRV) and z_rv.ndim == 2:
        return LogOddsPrior(p=pt.broadcast_to(z_rv.owner.inputs[-1], z_rv.shape))
    return None


#: Functions ``(model, z_rv) -> prior or None``, tried in order by :func:`match_prior`; a new
#: prior (e.g. a dependent IBP) plugs in by appending its matcher here and a mode to
#: :mod:`pymc_ibp.step_methods.prior_modes`.
PRIOR_MATCHERS = [_match_ibp, _match_bernoulli]


def match_prior(model, z_rv):
    """The prior of the binary matrix ``z_rv`` (:class:`IBPPrior` or :class:`LogOddsPrior`),
    or ``None`` if no matcher recognises it."""
    if z_rv.owner is None or z_rv.ndim != 2:
        return None
    for matcher in PRIOR_MATCHERS:
        prior = matcher(model, z_rv)
        if prior is not None:
            return prior
    return None


@dataclass
class LinearGaussianIBP:
    """The pieces of a matched linear-Gaussian latent feature model."""

    z_rv: object
    prior: object  # IBPPrior or LogOddsPrior
    a_rv: object
    like_rvs: list  # observed Normal RVs (one, or X_observed) and imputed X_unobserved
    sigma_x: object
    sigma_a: object
    X: np.ndarray  # N x D with NaN at missing entries
    missing_rv: object = None  # X_unobserved free RV, or None
    missing_mask: np.ndarray | None = None  # N x D bool, True where missing
    k_max: int = 0
    offset: object = None  # symbolic terms added to Z @ A (broadcast to N x D), or None
    z_data: np.ndarray | None = None  # the known Z of an observed pmi.IBP / Bernoulli, or None

    def z_value(self, point, z_name):
        """``Z`` at ``point`` (the data when ``Z`` is observed)."""
        return self.z_data if self.z_data is not None else point[z_name]

    def compile_offset(self, model, **compile_kwargs):
        """A point function giving the offset as an ``N x D`` array, or ``None``."""
        if self.offset is None:
            return None
        n, d = self.X.shape
        [off] = model.replace_rvs_by_values([pt.broadcast_to(self.offset, (n, d))])
        return model.compile_fn(off, inputs=model.value_vars, on_unused_input="ignore",
                                point_fn=True, **compile_kwargs)


def _strip(var):
    """Remove what does not change values: casts, ``pm.Deterministic`` (a ``ViewOp``) and
    dimshuffles that only add or drop broadcastable axes (not transpositions)."""
    while var.owner is not None:
        op = var.owner.op
        if isinstance(op, DimShuffle):
            kept = [i for i in op.new_order if i != "x"]
            if kept != sorted(kept):
                break
        elif not (isinstance(op, ViewOp) or (
                isinstance(op, Elemwise) and type(op.scalar_op).__name__ == "Cast")):
            break
        var = var.owner.inputs[0]
    return var


def _is_matmul(var):
    if var.owner is None:
        return False
    op = var.owner.op
    name = type(op).__name__
    return isinstance(op, (Dot, Dot22)) or name in ("Matmul", "Dot", "Dot22") or (
        name == "Blockwise" and type(op.core_op).__name__ in ("Dot", "Matmul"))


def _mean_terms(mu):
    """Split a likelihood mean into ``(left, right, offset, mask)`` when it is
    ``left @ right (+ terms not involving the product)``, optionally masked by PyMC's
    imputation (a constant boolean index); ``offset`` is the sum of the other terms (or
    ``None``).  Returns ``None`` for any other form."""
    mu = _strip(mu)
    mask = None
    if mu.owner is not None and isinstance(mu.owner.op, AdvancedSubtensor):
        base, *idx = mu.owner.inputs
        if len(idx) == 1 and isinstance(idx[0], Constant) and idx[0].data.dtype == bool:
            mask = np.asarray(idx[0].data)
            mu = _strip(base)
        else:
            return None
    terms = [mu]
    while any(t.owner is not None and isinstance(t.owner.op, Elemwise)
              and type(t.owner.op.scalar_op).__name__ == "Add" for t in terms):
        flat = []
        for t in terms:
            if t.owner is not None and isinstance(t.owner.op, Elemwise) and type(
                    t.owner.op.scalar_op).__name__ == "Add":
                flat += [_strip(u) for u in t.owner.inputs]
            else:
                flat.append(t)
        terms = flat
    products = [t for t in terms if _is_matmul(t)]
    if len(products) != 1:
        return None
    left, right = (_strip(v) for v in products[0].owner.inputs[:2])
    others = [t for t in terms if t is not products[0]]
    offset = None
    if others:
        offset = others[0] if len(others) == 1 else pt.add(*others)
    return left, right, offset, mask


def _is_scalar(var):
    return all(var.type.broadcastable)


def _scalar_of(var):
    """Peel the broadcasting wrappers PyMC adds around a scalar parameter."""
    while var.owner is not None and isinstance(
        var.owner.op, (DimShuffle, Subtensor, Alloc)
    ) and _is_scalar(var.owner.inputs[0]):
        var = var.owner.inputs[0]
    return pt.as_tensor_variable(var).squeeze() if var.ndim else var


def _is_zero_constant(var):
    try:
        val = pt.get_underlying_scalar_constant_value(var)
    except Exception:  # noqa: BLE001 - pytensor raises NotScalarConstantError
        try:
            if not [v for v in ancestors([var]) if v.owner is None and not isinstance(v, Constant)]:
                val = np.asarray(var.eval())
                return bool(np.all(val == 0))
        except Exception:  # noqa: BLE001
            return False
        return False
    return float(val) == 0.0


def _data_of(value_var):
    if isinstance(value_var, Constant):
        return np.asarray(value_var.data, dtype=float)
    if hasattr(value_var, "get_value"):
        return np.asarray(value_var.get_value(), dtype=float)
    return np.asarray(value_var.eval(), dtype=float)


def find_linear_gaussian(model, z_rv) -> LinearGaussianIBP:
    """Match the linear-Gaussian pattern around ``z_rv`` or raise :class:`ModelPatternError`."""
    if z_rv.ndim != 2:
        raise ModelPatternError(
            f"{z_rv.name!r} must be a single N x K_max matrix (got ndim={z_rv.ndim})."
        )
    prior = match_prior(model, z_rv)
    if prior is None:
        raise ModelPatternError(
            f"{z_rv.name!r} is a {type(z_rv.owner.op).__name__}, not a pmi.IBP or 2-D "
            f"pm.Bernoulli variable. Needed pattern: {PATTERN}."
        )
    candidates = [
        rv for rv in model.observed_RVs + model.free_RVs
        if rv is not z_rv and z_rv in set(ancestors([rv]))
    ]
    like, missing_rv = [], None
    a_rv = None
    sigma_x = None
    offset = None
    found = []
    for rv in candidates:
        found.append(f"{rv.name} ~ {type(rv.owner.op).__name__}")
        if not isinstance(rv.owner.op, NormalRV):
            continue
        _, _, mu, sigma = rv.owner.inputs
        mm = _mean_terms(mu)
        if mm is None:
            continue
        left, right, off, mask = mm
        if left is not z_rv:
            continue
        if off is not None:
            if {z_rv, right} & set(ancestors([off])):
                raise ModelPatternError(
                    f"In {rv.name!r} the mean is Z @ A plus terms that depend on Z or A; the "
                    f"fast samplers need Z @ A + an offset not involving them. "
                    f"Needed pattern: {PATTERN}."
                )
            offset = off if offset is None else offset
        if (right.owner is None or not isinstance(right.owner.op, NormalRV)
                or right not in model.free_RVs):
            raise ModelPatternError(
                f"In {rv.name!r} the mean is Z @ {right.name or right}, "
                "but the right factor must be "
                f"a free pm.Normal feature matrix. Needed pattern: {PATTERN}."
            )
        if a_rv is not None and right is not a_rv:
            raise ModelPatternError("Z @ A uses two different feature matrices.")
        a_rv = right
        if not _is_scalar(sigma):
            raise ModelPatternError(
                f"{rv.name!r} has a non-scalar noise sigma (shape {sigma.type.shape}); "
                "the collapsed "
                f"linear-Gaussian samplers need one scalar sigma_x. Needed pattern: {PATTERN}."
            )
        sigma_x = _scalar_of(sigma) if sigma_x is None else sigma_x
        if rv in model.observed_RVs:
            like.append((rv, mask))
        else:
            missing_rv = (rv, mask)
    if a_rv is None:
        raise ModelPatternError(
            f"No Normal likelihood with mean Z @ A found for {z_rv.name!r}. Needed pattern: "
            f"{PATTERN}. Found children: {', '.join(found) or 'none'}."
        )
    _, _, a_mu, a_sigma = a_rv.owner.inputs
    if not _is_zero_constant(a_mu):
        raise ModelPatternError(f"{a_rv.name!r} must have mean 0. Needed pattern: {PATTERN}.")
    if not _is_scalar(a_sigma):
        raise ModelPatternError(
            f"{a_rv.name!r} must have one scalar sigma_a (got shape {a_sigma.type.shape}). "
            f"Needed pattern: {PATTERN}."
        )
    ip = model.initial_point()
    z_val = model.rvs_to_values[z_rv]
    n, k_max = (ip[z_val.name] if z_val.name in ip else _data_of(z_val)).shape
    a_shape = tuple(int(s) for s in ip[model.rvs_to_values[a_rv].name].shape)
    if len(a_shape) != 2 or a_shape[0] != k_max:
        raise ModelPatternError(
            f"Shape mismatch: {z_rv.name!r} is {n} x {k_max} but "
            f"{a_rv.name!r} has shape {a_shape}; "
            f"A must be K_max x D = {k_max} x D."
        )
    d = a_shape[1]
    X = np.full((n, d), np.nan)
    missing_mask = None
    if len(like) != 1:
        raise ModelPatternError(
            f"Expected exactly one observed Normal with mean Z @ A, found {len(like)}."
        )
    obs_rv, obs_mask = like[0]
    data = _data_of(model.rvs_to_values[obs_rv])
    if obs_mask is None:
        if data.shape != (n, d):
            raise ModelPatternError(
                f"Shape mismatch: observed {obs_rv.name!r} has shape {data.shape} "
                f"but Z @ A is {n} x {d}."
            )
        X[:] = data
    else:
        if obs_mask.shape != (n, d):
            raise ModelPatternError(
                f"Mask shape {obs_mask.shape} does not match Z @ A ({n} x {d})."
            )
        X[obs_mask] = data
    if missing_rv is not None:
        missing_mask = np.asarray(missing_rv[1])
        if missing_mask.shape != (n, d):
            raise ModelPatternError("Imputed entries do not index Z @ A.")
    bad = ~np.isfinite(X)
    if missing_mask is not None:
        bad &= ~missing_mask
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        kind = "inf" if np.isinf(X[r, c]) else "NaN that is not imputed"
        raise DataError(
            f"The observed data of {obs_rv.name!r} contains {kind} at (row {r}, column {c}) "
            f"({int(bad.sum())} non-finite entries in all). Remove infinite values; pass "
            "missing values as NaN (or a masked array) so that PyMC imputes them."
        )
    return LinearGaussianIBP(
        z_rv=z_rv, prior=prior, like_rvs=[obs_rv], a_rv=a_rv, sigma_x=sigma_x,
        sigma_a=_scalar_of(a_sigma), X=X, missing_rv=None if missing_rv is None else missing_rv[0],
        missing_mask=missing_mask, k_max=k_max, offset=offset,
        z_data=(_data_of(model.rvs_to_values[z_rv]).astype(np.int64)
                if z_rv in model.observed_RVs else None),
    )


def matched_models(model):
    """Yield a :class:`LinearGaussianIBP` for every binary matrix of ``model`` with a known prior
    (:func:`match_prior`) and the linear-Gaussian pattern (the others are skipped)."""
    for z_rv in model.free_RVs + model.observed_RVs:
        if match_prior(model, z_rv) is None:
            continue
        try:
            spec = find_linear_gaussian(model, z_rv)
        except ModelPatternError:
            continue  # not this pattern; data errors (DataError) propagate
        yield spec
