r"""Dependent IBP over a covariate (Williamson, Orbanz & Ghahramani 2010).

Items are indexed by a covariate ``t`` (time, position, GDP, ...).  Feature ``k`` has a stick
``b_k`` (the truncated stick-breaking IBP, :class:`pymc_ibp.IBPStickBreaking`) and a Gaussian
process ``g_k`` over the covariate; item ``n`` at ``t_n`` has the feature when a noisy copy of
the process falls below a threshold (eq. 4 of the paper, with ``Γ = ρ² I``):

.. math::

    h_{nk} = g_k(t_n) + \varepsilon_{nk},\quad \varepsilon_{nk}\sim\mathcal N(0,\rho^2),\qquad
    z_{nk} = \mathbb 1\big[h_{nk} < \tilde b_k(t_n)\big],\qquad
    \tilde b_k(t) = \sqrt{\Sigma_k(t,t)+\rho^2}\;\Phi^{-1}(b_k).

``h`` is Gaussian with variance ``Σ_k(t,t) + ρ²`` marginally over the GP, so
``P(z_nk = 1 | b) = b_k`` at every ``t`` and each *row* is distributed as a row of the
stick-breaking IBP.  A matrix of rows is an IBP draw only when its rows read independent
processes: rows that read the same ``g_k(t)`` (the bag-of-items model) have feature ``k``
together more often than ``b_k²``, so a cross-section ``Z(t)`` of several items is not IBP
distributed; in the tracking model (one process per item) the items at one ``t`` are.  Items
at nearby ``t`` share the feature more or less often as ``g_k`` moves.  Integrating
``h`` out given ``g`` (eq. 9 of the paper) gives independent entries

.. math::

    P(z_{nk}=1\mid b_k, g_k) = \gamma_{nk} = \Phi\Big(\frac{\tilde b_k(t_n) - g_k(t_n)}{\rho}\Big),

which is the distribution :class:`DependentIBP` of ``Z`` given ``(b, g)``; its logp is
``Σ z log Φ(u) + (1 - z) log Φ(-u)`` with ``u = (b̃ - g)/ρ``, evaluated in log space
(finite for ``|u|`` in the hundreds).

``g`` is a ``(K, M)`` matrix: one Gaussian process value per feature and *GP location*;
``index[n]`` says at which location row ``n`` reads it.  In the exchangeable "bag of items"
model of the paper the locations are the ``M`` distinct covariate values; in the "tracking
items" model (eq. 5: ``Σ_k = 0``, one process per item) each item has its own process over the
covariate, so the locations are (item, covariate value) pairs and ``g`` is the flattened
``(K, items, T)`` array of the items' processes.  :func:`dependent_ibp` builds both.

Scale non-identifiability: multiplying the GP amplitude ``σ`` and ``ρ`` by the same ``c``
scales ``h``, ``g`` and the thresholds together and changes no ``z``.  Fix one of them; the
builder fixes ``σ² = 1`` and ``ρ² = 0.1`` by default, and the ratio ``σ²/(σ² + ρ²)`` sets how
closely items follow their feature's shared profile.

References
----------
S. Williamson, P. Orbanz and Z. Ghahramani (2010). Dependent Indian buffet processes.
*Proceedings of the 13th International Conference on Artificial Intelligence and Statistics
(AISTATS)*, JMLR W&CP 9, 924-931.

Y. W. Teh, D. Görür and Z. Ghahramani (2007). Stick-breaking construction for the Indian buffet
process. *AISTATS 2007*.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.dist_math import check_parameters, normal_lcdf
from pymc.distributions.distribution import Discrete
from pytensor.graph.basic import Variable
from pytensor.tensor.random.basic import MvNormalRV
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp._numba_utils import source_cache_key
from pymc_ibp.distributions._shape import shape_from_dims
from pymc_ibp.distributions.normal_math import ndtr, ndtri
from pymc_ibp.distributions.stick_breaking import IBPStickBreaking
from pymc_ibp.exceptions import DataError

__all__ = ["DependentIBP", "DependentIBPModel", "DependentIBPRV", "dependent_ibp", "sticks_from_z",
           "dibp_logodds_numeric", "dibp_threshold", "dibp_u"]

_SQRT2 = math.sqrt(2.0)
_DEFAULT_RHO = math.sqrt(0.1)  # ρ² = 0.1 with σ² = 1 (see the module docstring)


# --------------------------------------------------------------------------------------------
# The formulas (one home each; symbolic for the logp, numeric for the samplers)
# --------------------------------------------------------------------------------------------
def dibp_threshold(sticks, g_var, rho):
    r"""``b̃_k(l) = √(Σ_k(l,l) + ρ²) Φ⁻¹(b_k)`` (``K x M``): the threshold uses the standard
    deviation of ``h``, not its variance.  Works on PyTensor variables and NumPy arrays."""
    if isinstance(sticks, Variable) or isinstance(g_var, Variable) or isinstance(rho, Variable):
        q = -_SQRT2 * pt.erfcinv(2.0 * sticks)  # Φ⁻¹, accurate for small sticks
        return pt.sqrt(g_var + rho**2) * q[..., :, None]
    from scipy.special import ndtri as sp_ndtri

    return np.sqrt(np.asarray(g_var) + rho**2) * sp_ndtri(np.asarray(sticks))[..., :, None]


def sticks_from_z(Z):
    """Sticks that agree with a binary ``N x K`` matrix ``Z`` whose features are in decreasing
    order of use (a start for the sticks given a ``Z``): each column's frequency, clipped to
    [0.01, 0.99] and made strictly decreasing, as sticks ``b_k = v_1 ... v_k`` with ``v`` in
    (0, 1) are (running minimum, times ``0.999^k``)."""
    freq = np.clip(np.asarray(Z, dtype=np.float64).mean(axis=0), 0.01, 0.99)
    return np.minimum.accumulate(freq) * 0.999 ** np.arange(freq.shape[0])


def dibp_u(sticks, g, g_var, rho):
    """``u = (b̃ - g)/ρ`` (``K x M``), so that ``P(z = 1 | b, g) = Φ(u)``."""
    return (dibp_threshold(sticks, g_var, rho) - g) / rho


def _entry_u(sticks, g, g_var, rho, index):
    """``u`` per entry of ``Z`` (``N x K``)."""
    u = dibp_u(sticks, g, g_var, rho)
    return u[..., :, index].swapaxes(-1, -2) if not isinstance(u, Variable) \
        else pt.swapaxes(u[..., :, index], -1, -2)


def dibp_support_point(sticks, g, g_var, rho, index):
    """``Z``'s support point (``N x K``, int8): each entry at its more probable value,
    ``z = 1[u >= 0]`` (``Φ(u) >= 1/2``).  Works on PyTensor variables and NumPy arrays: the
    distribution's ``support_point`` (PyMC's default start) and the steps' test of whether a
    chain's ``Z`` is still that start use this one definition."""
    u = _entry_u(sticks, g, g_var, rho, index)
    if isinstance(u, Variable):
        return pt.cast(pt.ge(u, 0.0), "int8")
    return (u >= 0.0).astype(np.int8)


def dibp_log_probs(sticks, g, g_var, rho, index):
    """Symbolic ``(log P(z=1), log P(z=0))`` per entry (``N x K`` each), in log space."""
    u = _entry_u(sticks, g, g_var, rho, index)
    return normal_lcdf(0.0, 1.0, u), normal_lcdf(0.0, 1.0, -u)


def dibp_logodds_numeric(sticks, g, g_var, rho, index):
    """NumPy ``log P(z=1) - log P(z=0)`` per entry (``N x K``)."""
    from scipy.special import log_ndtr

    u = _entry_u(np.asarray(sticks, float), np.asarray(g, float), np.asarray(g_var, float),
                 float(rho), np.asarray(index))
    return log_ndtr(u) - log_ndtr(-u)


# --------------------------------------------------------------------------------------------
# Draws
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def dibp_draw_core(rng, sticks, g, g_var, rho, index):
    """``z_nk = 1[h_nk < b̃_k(l_n)]`` with ``h_nk ~ N(g_k(l_n), ρ²)``, i.e. Bernoulli(Φ(u))."""
    k_max = sticks.shape[0]
    n = index.shape[0]
    out = np.zeros((n, k_max), dtype=np.int8)
    for k in range(k_max):
        q = ndtri(sticks[k])
        for i in range(n):
            loc = index[i]
            thr = math.sqrt(g_var[k, loc] + rho * rho) * q
            u = (thr - g[k, loc]) / rho
            if rng.random() < ndtr(u):
                out[i, k] = 1
    return out


class DependentIBPRV(RandomVariable):
    """``Z | b, g`` of the dependent IBP: ``z_nk ~ Bernoulli(Φ((b̃_k(l_n) - g_k(l_n))/ρ))``."""

    name = "dependent_ibp"
    signature = "(k),(k,m),(k,m),(),(n)->(n,k)"  # sticks, g, g_var, rho, index -> (N, K)
    dtype = "int8"
    _print_name = ("DependentIBP", "\\operatorname{DependentIBP}")

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        sticks, _, _, _, index = dist_params
        return (index.shape[-1], sticks.shape[-1])

    @classmethod
    def rng_fn(cls, rng, sticks, g, g_var, rho, index, size):
        sticks = np.asarray(sticks, dtype=float)
        g = np.asarray(g, dtype=float)
        g_var = np.asarray(g_var, dtype=float)
        rho = np.asarray(rho, dtype=float)
        index = np.asarray(index, dtype=np.int64)
        batch = np.broadcast_shapes(sticks.shape[:-1], g.shape[:-2], g_var.shape[:-2],
                                    rho.shape, index.shape[:-1])
        if size is not None:
            batch = tuple(size)
        k_max, n = sticks.shape[-1], index.shape[-1]
        sticks = np.broadcast_to(sticks, batch + (k_max,))
        g = np.broadcast_to(g, batch + g.shape[-2:])
        g_var = np.broadcast_to(g_var, batch + g_var.shape[-2:])
        rho = np.broadcast_to(rho, batch)
        index = np.broadcast_to(index, batch + (n,))
        out = np.empty(batch + (n, k_max), dtype=np.int8)
        for idx in np.ndindex(*batch):
            out[idx] = dibp_draw_core(rng, np.ascontiguousarray(sticks[idx]),
                                      np.ascontiguousarray(g[idx]),
                                      np.ascontiguousarray(g_var[idx]), float(rho[idx]),
                                      np.ascontiguousarray(index[idx]))
        return out


dependent_ibp_rv = DependentIBPRV()


def _register_numba():
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.random import numba_core_rv_funcify

    @numba_core_rv_funcify.register(DependentIBPRV)
    def _core(op, node):
        @numba_basic.numba_njit
        def random(rng, sticks, g, g_var, rho, index):
            return dibp_draw_core(rng, np.ascontiguousarray(sticks), np.ascontiguousarray(g),
                                  np.ascontiguousarray(g_var), float(rho),
                                  np.ascontiguousarray(index).astype(np.int64))

        return random, source_cache_key(__file__)


_register_numba()


# --------------------------------------------------------------------------------------------
# Distribution
# --------------------------------------------------------------------------------------------
def gp_marginal_variance(g):
    """``Σ(l, l)`` of a ``pm.MvNormal`` GP ``g`` (the diagonal of its covariance, broadcast to
    ``g``'s shape), or ``None`` when ``g`` is not an MvNormal random variable."""
    if g.owner is None or not isinstance(g.owner.op, MvNormalRV):
        return None
    cov = g.owner.inputs[-1]
    return pt.broadcast_to(pt.diagonal(cov, axis1=-2, axis2=-1), g.shape)


def _static_int(x):
    try:
        return int(pt.get_underlying_scalar_constant_value(x))
    except Exception:  # noqa: BLE001 - symbolic length
        return None


def _check_index(index, n_loc):
    """A constant index must be integers in ``0..M-1``: say which entry is wrong otherwise."""
    try:
        arr = np.asarray(index)
    except (TypeError, ValueError):
        return
    if arr.dtype == object:
        return
    if arr.ndim != 1:
        raise DataError(f"pmi.DependentIBP: index must be a vector (one GP location per row of "
                        f"Z); got shape {arr.shape}.")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise DataError(f"pmi.DependentIBP: index has a non-finite value at row {bad} "
                            f"({arr[bad]}); every row needs a covariate position.")
        if not np.all(arr == np.round(arr)):
            raise DataError("pmi.DependentIBP: index must hold integer positions 0..M-1 of the "
                            "covariate values (pmi.dependent_ibp maps raw covariates to them).")
    if arr.size and (arr.min() < 0 or (n_loc is not None and arr.max() >= n_loc)):
        row = int(np.flatnonzero((arr < 0) | (arr >= (n_loc or np.inf)))[0])
        raise DataError(f"pmi.DependentIBP: index[{row}] = {arr[row]} is out of range for g's "
                        f"{n_loc} GP locations (valid: 0..{(n_loc or 0) - 1}).")


class DependentIBP(Discrete):
    r"""Binary features that change smoothly with a covariate (Williamson, Orbanz & Ghahramani
    2010): the distribution of ``Z`` given the sticks ``b`` and the GPs ``g``, with the
    auxiliary ``h`` integrated out,

    .. math::

        P(z_{nk}=1\mid b, g) = \Phi\Big(\frac{\sqrt{\Sigma_k(l_n,l_n)+\rho^2}\,\Phi^{-1}(b_k)
            - g_k(l_n)}{\rho}\Big)

    (eq. 9 of the paper; ``l_n = index[n]``).  Marginally over ``g ~ GP(0, Σ_k)`` each entry
    is Bernoulli(``b_k``), so each row of ``Z`` is distributed as a row of the stick-breaking
    IBP when ``b`` are stick-breaking sticks; rows that read correlated process values (one
    location, or nearby ones) are dependent, so a matrix of rows is an IBP draw only when its
    rows read independent processes.  The logp is computed with ``log Φ`` and stays finite
    far in the tails.  Model, variants and samplers: module docstring and the docs page
    *Distributions → pmi.DependentIBP*; :func:`pymc_ibp.dependent_ibp` builds the whole model
    in one call.

    Parameters
    ----------
    sticks : tensor_like of float, shape ``(K,)``
        Feature probabilities in ``(0, 1]``, usually :class:`pymc_ibp.IBPStickBreaking`.
    g : tensor_like of float, shape ``(K, M)``
        Each feature's Gaussian process at the ``M`` GP locations, usually a
        ``pm.MvNormal(0, cov, shape=(K, M))`` with a per-feature covariance ``(K, M, M)``.
    rho : tensor_like of float
        Standard deviation ``ρ > 0`` of the item noise ``h - g``.
    index : array_like of int, shape ``(N,)``
        GP location of each row of ``Z`` (``0..M-1``).
    g_var : tensor_like of float, optional
        ``Σ_k(l, l)``, the prior variance of ``g`` at each location (broadcast to
        ``(K, M)``).  Read from ``g``'s ``pm.MvNormal`` covariance when omitted.
    shape, dims : optional
        ``(N, K)`` or e.g. ``("obs", "feature")``.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_ibp as pmi
    >>> t = np.repeat(np.arange(4.0), 3)  # 4 covariate values, 3 items each
    >>> with pm.Model(coords={"obs": range(12), "feature": range(5)}):
    ...     model = pmi.dependent_ibp("Z", t, alpha=2.0, dims=("obs", "feature"))

    References
    ----------
    Williamson, S., Orbanz, P. and Ghahramani, Z. (2010). Dependent Indian buffet processes.
    *AISTATS 2010*, JMLR W&CP 9, 924–931.
    """

    rv_op = dependent_ibp_rv

    def __new__(cls, name, *args, **kwargs):
        kwargs = shape_from_dims(kwargs, "pmi.DependentIBP")
        return super().__new__(cls, name, *args, **kwargs)

    @classmethod
    def dist(cls, sticks, g, rho, index, g_var=None, *, shape=None, size=None, **kwargs):
        if isinstance(rho, int | float | np.ndarray) and (
                not np.all(np.isfinite(rho)) or np.any(np.asarray(rho) <= 0)):
            raise ValueError(f"pmi.DependentIBP needs rho > 0 (finite); got rho={rho!r}.")
        sticks = pt.as_tensor_variable(sticks)
        g = pt.as_tensor_variable(g)
        if g_var is None:
            g_var = gp_marginal_variance(g)
            if g_var is None:
                raise ValueError(
                    "pmi.DependentIBP needs the prior variance of g at each location: pass "
                    "g_var=Σ(l, l) (K x M, or broadcastable), or make g a pm.MvNormal whose "
                    "covariance gives it.")
        if sticks.ndim != 1 or g.ndim != 2:
            raise ValueError(f"pmi.DependentIBP needs sticks of shape (K,) and g of shape (K, M);"
                             f" got ndim {sticks.ndim} and {g.ndim}.")
        k_s, (k_g, n_loc) = sticks.type.shape[0], g.type.shape
        if k_s is not None and k_g is not None and k_s != k_g:
            raise ValueError(f"pmi.DependentIBP: g has {k_g} rows but there are {k_s} sticks; "
                             "g must be (features x GP locations).")
        _check_index(index, n_loc)
        index = pt.as_tensor_variable(np.asarray(index, dtype=np.int64)
                                      if not isinstance(index, Variable) else index)
        g_var = pt.broadcast_to(pt.as_tensor_variable(g_var, dtype="floatX"), g.shape)
        rho = pt.as_tensor_variable(rho, dtype="floatX")
        if shape is not None:
            shape_t = tuple(shape)
            n_idx = index.type.shape[0]
            if len(shape_t) != 2 or (n_idx is not None and int(shape_t[0]) != n_idx) or (
                    k_s is not None and int(shape_t[1]) != k_s):
                raise ValueError(f"pmi.DependentIBP: shape {shape_t} must be (N, K) = "
                                 f"({n_idx}, {k_s}): one row per index entry, one column per "
                                 "stick.")
        return super().dist([sticks, g, g_var, rho, index], shape=shape, size=size, **kwargs)

    def support_point(rv, size, sticks, g, g_var, rho, index):
        # each entry at its more probable value: finite log-probability
        return dibp_support_point(sticks, g, g_var, rho, index)

    def logp(value, sticks, g, g_var, rho, index):
        log1, log0 = dibp_log_probs(sticks, g, g_var, rho, index)
        lp = pt.switch(pt.eq(value, 1), log1, pt.switch(pt.eq(value, 0), log0, -np.inf))
        return check_parameters(lp.sum(axis=(-2, -1)), rho > 0, pt.all(sticks >= 0),
                                pt.all(sticks <= 1), msg="rho > 0, 0 <= sticks <= 1")


# --------------------------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------------------------
class DependentIBPModel(NamedTuple):
    """The variables written by :func:`dependent_ibp`."""

    Z: Variable
    sticks: Variable
    g: Variable
    length_scale: Variable
    covariate_values: np.ndarray
    index: np.ndarray


def _kernel_matrix(kind, t, ls, amplitude):
    """``(K, T, T)`` covariance of ``g`` with one length scale per feature."""
    t = np.asarray(t, dtype=float)
    r = np.abs(t[:, None] - t[None, :])
    ls_ = ls[:, None, None]
    if kind == "expquad":  # Williamson et al. eq. 8: no factor 2 in the exponent
        base = pt.exp(-(r**2) / ls_**2)
    elif kind == "matern52":
        s = math.sqrt(5.0) * r / ls_
        base = (1.0 + s + s**2 / 3.0) * pt.exp(-s)
    elif callable(kind):  # ls -> pm.gp.cov covariance function
        base = pt.stack([kind(ls[k])(t[:, None]) for k in range(int(ls.type.shape[0]))])
        return amplitude**2 * base
    else:
        raise ValueError(f"pmi.dependent_ibp: cov must be 'expquad', 'matern52' or a function "
                         f"ls -> pm.gp.cov covariance; got {kind!r}.")
    return amplitude**2 * base


def dependent_ibp(name, covariate, *, alpha, k=None, item=None, variant="bag", cov="expquad",
                  amplitude=1.0, rho=_DEFAULT_RHO, length_scale=None, jitter=1e-6,
                  item_amplitude=0.5,
                  shape=None, dims=None):
    r"""Build a dependent IBP over a covariate in one call.

    Writes ``{name}_sticks`` (:class:`pymc_ibp.IBPStickBreaking` with mass ``alpha``),
    ``{name}_ls`` (one GP length scale per feature, log-normal centred on 5 times the median
    spacing of the distinct covariate values unless ``length_scale`` is given), ``{name}_g``
    (``pm.MvNormal`` processes with covariance ``amplitude² k(t, t'; ℓ_k) + jitter·amplitude²``)
    and the binary matrix ``name`` (:class:`DependentIBP`).

    Parameters
    ----------
    name : str
        Name of ``Z``; the other variables are prefixed with it.
    covariate : array_like, shape ``(N,)``
        Covariate value of every row of ``Z`` (numbers; NaN is an error).
    alpha : tensor_like of float
        IBP mass (a number or a PyMC variable, e.g. ``pm.Gamma``).
    k : int, optional
        Truncation level ``K``; taken from ``shape``/``dims`` when omitted.
    item : array_like of int, shape ``(N,)``, optional
        For ``variant="tracking"`` and ``"hierarchical"``: which item each row is (rows of
        one item at different covariate values are the same item, tracked over the
        covariate).
    variant : {"bag", "tracking", "hierarchical"}
        ``"bag"``: exchangeable items, one process per feature over the distinct covariate
        values (eq. 4 with ``Γ = ρ² I``); ``"tracking"``: one process per item and feature
        over the covariate, coupled across items only through the sticks (eq. 5);
        ``"hierarchical"``: the general model of eq. 4, a shared process per feature plus a
        process per item and feature (``{name}_item_g``, amplitude ``item_amplitude``, own
        length scales ``{name}_item_ls``), items tracked over the covariate.
    cov : {"expquad", "matern52"} or callable
        The kernel: ``exp(-(t-t')²/ℓ²)`` (eq. 8 of the paper), Matérn 5/2, or a function
        ``ls -> pm.gp.cov.Covariance`` (e.g. ``lambda ls: pm.gp.cov.Matern32(1, ls=ls)``).
    amplitude, rho : float
        GP amplitude ``σ`` and item noise ``ρ``; only their ratio matters (see the module
        docstring), the defaults fix ``σ² = 1`` and ``ρ² = 0.1``.
    length_scale : tensor_like, optional
        Fixed length scale(s) instead of the log-normal prior.
    jitter : float, default 1e-6
        Added to the diagonal of each kernel matrix, relative to ``amplitude²`` (the
        covariance is ``amplitude² (k + jitter·I)``), so that its Cholesky factor exists.
    item_amplitude : float, default 0.5
        Amplitude of the per-item processes of ``variant="hierarchical"`` (ignored otherwise).
    shape, dims :
        ``(N, K)`` or e.g. ``("obs", "feature")`` for ``Z``.

    Returns
    -------
    DependentIBPModel
        ``(Z, sticks, g, length_scale, covariate_values, index)``.
    """
    model = pm.modelcontext(None)
    t = np.asarray(covariate, dtype=float)
    if t.ndim != 1:
        raise DataError(f"pmi.dependent_ibp: covariate must be a vector (one value per row); got "
                        f"shape {t.shape}.")
    if not np.all(np.isfinite(t)):
        bad = int(np.flatnonzero(~np.isfinite(t))[0])
        raise DataError(f"pmi.dependent_ibp: covariate[{bad}] = {t[bad]}; every row needs a "
                        "finite covariate value.")
    values, t_index = np.unique(t, return_inverse=True)
    n = t.size
    if dims is not None:
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        shape = shape_from_dims({"dims": dims}, "pmi.dependent_ibp")["shape"]
    if shape is not None:
        if len(shape) != 2 or shape[0] != n:
            raise ValueError(f"pmi.dependent_ibp: Z's shape {tuple(shape)} must be (N, K) with "
                             f"N = {n} rows, one per covariate value.")
        k = int(shape[1]) if k is None else k
    if k is None:
        raise ValueError("pmi.dependent_ibp needs the truncation level: k=K, shape=(N, K) or "
                         "dims=('obs', 'feature').")
    feature_dim = dims[1] if dims is not None else None
    spacing = np.diff(values)
    median_spacing = float(np.median(spacing)) if spacing.size else 1.0
    t_dim = f"{name}_t"
    if t_dim not in model.coords:
        model.add_coord(t_dim, values)
    sticks = IBPStickBreaking(f"{name}_sticks", alpha, shape=(k,),
                              dims=feature_dim)
    if length_scale is None:
        ls = pm.LogNormal(f"{name}_ls", mu=math.log(5.0 * median_spacing), sigma=1.0,
                          shape=(k,), dims=feature_dim)
    else:
        try:
            given = np.asarray(length_scale, dtype=float)
        except (TypeError, ValueError):
            given = None  # symbolic: a variable with its own prior, or pm.Data
        if given is not None and given.dtype != object and not (
                np.all(np.isfinite(given)) and np.all(given > 0)):
            raise ValueError(f"pmi.dependent_ibp needs length_scale > 0 (finite); got "
                             f"length_scale={length_scale!r}.")
        ls = pt.broadcast_to(pt.as_tensor_variable(length_scale, dtype="floatX"), (k,))
    base = _kernel_matrix(cov, values, ls, amplitude)
    cov_k = base + (jitter * amplitude**2) * np.eye(values.size)
    if variant == "bag":
        g = pm.MvNormal(f"{name}_g", mu=0.0, cov=cov_k, shape=(k, values.size),
                        dims=(feature_dim, t_dim) if feature_dim else None)
        g_flat, index = g, t_index
    elif variant in ("tracking", "hierarchical"):
        if item is None:
            raise ValueError(f"pmi.dependent_ibp(variant={variant!r}) needs item=: which item "
                             "each row is.")
        item = np.asarray(item)
        items, item_index = np.unique(item, return_inverse=True)
        n_items = items.size
        pairs = item_index * values.size + t_index
        if np.unique(pairs).size != n:
            raise DataError(f"pmi.dependent_ibp(variant={variant!r}): an item appears twice at "
                            "the same covariate value.")
        index = pairs
        if variant == "tracking":
            g = pm.MvNormal(f"{name}_g", mu=0.0, cov=cov_k[:, None],
                            shape=(k, n_items, values.size))
            g_flat = g.reshape((k, n_items * values.size))
        else:  # shared process per feature plus one per item and feature (eq. 4)
            g = pm.MvNormal(f"{name}_g", mu=0.0, cov=cov_k, shape=(k, values.size),
                            dims=(feature_dim, t_dim) if feature_dim else None)
            ls_item = pm.LogNormal(f"{name}_item_ls", mu=math.log(5.0 * median_spacing),
                                   sigma=1.0, shape=(k,), dims=feature_dim)
            item_cov = (_kernel_matrix(cov, values, ls_item, item_amplitude)
                        + (jitter * item_amplitude**2) * np.eye(values.size))
            f = pm.MvNormal(f"{name}_item_g", mu=0.0, cov=item_cov[:, None],
                            shape=(k, n_items, values.size))
            loc_t = np.tile(np.arange(values.size), n_items)
            g_flat = g[:, loc_t] + f.reshape((k, n_items * values.size))
            cov_k = cov_k + item_cov  # the marginal variance at each location adds up
            item_var = item_amplitude**2 * (1.0 + jitter)
    else:
        raise ValueError(f"pmi.dependent_ibp: variant must be 'bag', 'tracking' or "
                         f"'hierarchical'; got "
                         f"{variant!r}.")
    if callable(cov):
        diag = pt.diagonal(cov_k, axis1=-2, axis2=-1)  # (K, T)
    else:  # stationary built-in kernels: the prior variance does not depend on ℓ, so the
        # length scales' HMC target does not include Z's logp
        var = amplitude**2 * (1.0 + jitter) + (item_var if variant == "hierarchical" else 0.0)
        diag = pt.broadcast_to(pt.as_tensor_variable(var, dtype="floatX"), (k, values.size))
    g_var = pt.tile(diag, (1, n_items)) if variant != "bag" else diag
    Z = DependentIBP(name, sticks, g_flat, rho, index, g_var=g_var, shape=(n, k), dims=dims)
    if length_scale is not None:  # a given (e.g. pm.Data) length scale: checked at the start
        Z.tag.positive_parameters = (("pmi.dependent_ibp", "length_scale", ls),)
    return DependentIBPModel(Z, sticks, g, ls, values, np.asarray(index))
