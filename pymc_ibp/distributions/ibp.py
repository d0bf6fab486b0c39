"""The Indian Buffet Process over binary ``N x K_max`` matrices.

The IBP of Griffiths & Ghahramani [1]_ [2]_, in the two-parameter form of Ghahramani,
Griffiths & Sollich [3]_.  PyMC models have fixed shapes, so :class:`IBP` is the IBP
*restricted to at most ``K_max`` active features*, with the active columns placed in uniformly
random distinct column slots (this package's construction; the docs page
``distributions/ibp`` explains why).  It is a proper pmf over all ``2**(N*K_max)`` binary
matrices.

Derivation of the pmf
---------------------
Let ``Z`` be a labelled binary ``N x K_max`` matrix with ``K+`` non-zero columns, ``m_k`` the
column sums and ``K_h`` the number of non-zero columns with history ``h``.  The two-parameter
IBP gives the left-ordered class ``[Z]`` the probability ([3]_; written this way in Reed [4]_,
eq. 2.7; eq. 14 of [2]_ is the case ``β = 1``)

    P([Z]) = (αβ)^{K+} / ∏_h K_h! · exp(-α S_N(β)) · ∏_{k: m_k>0} B(m_k, N - m_k + β),

with ``S_N(β) = Σ_{i=1..N} β/(β+i-1)`` (``S_N(1) = H_N``).
A class with ``K+ <= K_max`` contains ``K_max! / ((K_max - K+)! ∏_h K_h!)`` labelled
``N x K_max`` matrices (choose the slots of the non-zero columns; identical columns are
interchangeable), each equally likely under random slot placement, so

    P(Z) = P([Z]) · (K_max - K+)! ∏_h K_h! / K_max! / P(K+ <= K_max)

and the ``K_h!`` terms cancel.

*Poisson factorisation.*  With ``λ_h = αβ B(m_h, N - m_h + β)`` for each non-zero history
``h`` (``m_h`` its number of ones), ``P([Z]) = ∏_h λ_h^{K_h} e^{-λ_h} / K_h!``: the
``(αβ)^{K+} ∏_k B(...)`` part is ``∏_h λ_h^{K_h}``, and the rates sum to the mass,
``Σ_h λ_h = αβ Σ_{m=1..N} C(N, m) B(m, N-m+β) = α S_N(β)``.  So the ``K_h`` are independent
Poisson variables, ``K+ ~ Poisson(α S_N(β))`` (``Poisson(α H_N)`` for ``β = 1``, as in [2]_),
and the truncation normaliser is the Poisson CDF at ``K_max``.  Hence

    log P(Z) = K+ log(αβ) - α S_N(β) + Σ_k log B(m_k, N-m_k+β)
               + log (K_max - K+)! - log K_max! - log PoissonCDF(K_max; α S_N(β)).

Every term is differentiable in α and β, so NUTS can sample them.

Exact random draws
------------------
By the Poisson factorisation the IBP is a Poisson process over non-zero histories with rates
``λ_h = αβ B(m_h, N-m_h+β)``.  Conditioned on ``K+ <= K_max``: draw ``K+`` from the Poisson law
truncated at ``K_max``, then ``K+`` i.i.d. histories with probabilities ``∝ λ_h``, i.e. the
number of owners ``m`` with probability ``∝ C(N, m) B(m, N-m+β)`` and a uniform ``m``-subset of
rows, then place the columns in random distinct slots.

References
----------
.. [1] Griffiths, T. L. and Ghahramani, Z. (2005). Infinite latent feature models and the
   Indian buffet process. *Advances in Neural Information Processing Systems 18*.
.. [2] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *Journal of Machine Learning Research* 12, 1185–1224.
.. [3] Ghahramani, Z., Griffiths, T. L. and Sollich, P. (2007). Bayesian nonparametric latent
   feature models. *Bayesian Statistics 8*, 201–226.
.. [4] Reed, C. (2013). *Submodular MAP inference for scalable latent feature models*. MPhil
   thesis, University of Cambridge.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytensor.tensor as pt
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Discrete
from pytensor.graph.basic import Variable
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp._numba_utils import (
    categorical_logp,
    interrupt_safe,
    partial_shuffle,
    source_cache_key,
)
from pymc_ibp.distributions import ibp_math
from pymc_ibp.distributions._shape import shape_from_dims
from pymc_ibp.distributions.ibp_math import ibp_logp_symbolic, ibp_mass, log_beta_term

__all__ = ["IBP", "IBPRV", "ibp_draw_core"]


# --------------------------------------------------------------------------------------------
# numba core sampler
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def ibp_draw_core(rng, alpha, beta, n, k_max):
    """One exact draw of an ``n x k_max`` IBP(α, β) matrix conditioned on ``K+ <= k_max``."""
    out = np.zeros((n, k_max), dtype=np.int8)
    if n == 0 or k_max == 0:
        return out
    lam = ibp_mass(alpha, beta, n)
    # K+ ~ Poisson(lam) truncated to 0..k_max (inversion in log space)
    logw = np.empty(k_max + 1)
    for k in range(k_max + 1):
        logw[k] = k * np.log(lam) - lam - _log_factorial(k)
    kplus = categorical_logp(rng, logw, k_max + 1)
    # owners-count law: P(m) ∝ C(n, m) B(m, n-m+β), m = 1..n
    logm = np.empty(n)
    for m in range(1, n + 1):
        logm[m - 1] = (_log_factorial(n) - _log_factorial(m) - _log_factorial(n - m)
                       + log_beta_term(m, n, beta))
    slots = np.arange(k_max)
    partial_shuffle(rng, slots, kplus)  # random distinct column slots
    rows = np.arange(n)
    for c in range(kplus):
        m = categorical_logp(rng, logm, n) + 1
        partial_shuffle(rng, rows, m)  # uniform m-subset of rows
        for i in range(m):
            out[rows[i], slots[c]] = 1
    return out


@numba.njit(cache=True)
def _log_factorial(k):
    return math.lgamma(k + 1.0)



# --------------------------------------------------------------------------------------------
# RandomVariable
# --------------------------------------------------------------------------------------------
class IBPRV(RandomVariable):
    """Two-parameter IBP(α, β) over binary ``N x K_max`` matrices, ``K+ <= K_max``."""

    name = "ibp"
    signature = "(),(),(),()->(n,k)"  # alpha, beta, N, K_max -> (N, K_max)
    dtype = "int8"  # one byte per entry in the sampler and the trace (see the class docstring)
    _print_name = ("IBP", "\\operatorname{IBP}")

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        _, _, n, k_max = dist_params
        return (n, k_max)

    @classmethod
    @interrupt_safe  # the numba core takes the Generator (see pymc_ibp._numba_utils)
    def rng_fn(cls, rng, alpha, beta, n, k_max, size):
        n = int(np.asarray(n).flat[0])
        k_max = int(np.asarray(k_max).flat[0])
        alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
        batch = np.broadcast_shapes(alpha.shape, beta.shape) if size is None else tuple(size)
        alpha = np.broadcast_to(alpha, batch)
        beta = np.broadcast_to(beta, batch)
        out = np.empty(batch + (n, k_max), dtype=np.int8)
        for idx in np.ndindex(*batch):
            out[idx] = ibp_draw_core(rng, float(alpha[idx]), float(beta[idx]), n, k_max)
        return out


ibp_rv = IBPRV()


def _register_numba():
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.random import numba_core_rv_funcify

    @numba_core_rv_funcify.register(IBPRV)
    def _ibp_core(op, node):
        @numba_basic.numba_njit
        def random(rng, alpha, beta, n, k_max):
            return ibp_draw_core(rng, float(alpha), float(beta), int(n), int(k_max))

        return random, source_cache_key(__file__, ibp_math.__file__)


_register_numba()


class IBP(Discrete):
    r"""Indian Buffet Process prior over binary ``N x K_max`` matrices.

    The IBP of Griffiths & Ghahramani (2011), in the two-parameter form of Ghahramani,
    Griffiths & Sollich (2007), restricted to ``K+ <= K_max`` with the active columns in
    uniformly random slots:

    .. math::

        \log P(Z) = K_+\log(\alpha\beta) - \alpha S_N(\beta)
            + \sum_{k:m_k>0}\log B(m_k, N-m_k+\beta)
            + \log\frac{(K_{max}-K_+)!}{K_{max}!} - \log P(K_+\le K_{max}),

    with :math:`S_N(\beta)=\sum_{i=1}^N \beta/(\beta+i-1)`.  The derivation is in the module
    docstring and on the docs page *Distributions → pmi.IBP*.  ``beta=1`` is the
    one-parameter IBP(α).

    ``Z`` has dtype ``int8`` (one byte per entry in the samplers and in the trace: at
    ``N = 10^6`` rows and ``K_max = 20`` a draw takes 20 MB instead of 160 MB).  PyTensor and
    NumPy upcast ``Z @ A`` and ``Z.sum()`` to wider types, but an integer product such as
    ``Z.T @ Z`` stays ``int8`` and overflows beyond 127: cast first (``Z.astype("int64")``).

    Parameters
    ----------
    alpha : tensor_like of float
        Mass parameter, ``alpha > 0``; ``E[K+] = α H_N`` for ``beta = 1``.
    beta : tensor_like of float, default 1
        Concentration of the two-parameter IBP, ``beta > 0``.
    shape : tuple of int, optional
        ``(N, K_max)``: the observations and the feature slots (the last two dimensions).
    dims : tuple of str, optional
        E.g. ``("obs", "feature")``; the model's coords give ``N`` and ``K_max``.

    Examples
    --------
    >>> import pymc as pm, pymc_ibp as pmi
    >>> with pm.Model(coords={"obs": range(5), "feature": range(4)}):
    ...     Z = pmi.IBP("Z", alpha=2.0, dims=("obs", "feature"))

    References
    ----------
    Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction and
    review. *Journal of Machine Learning Research* 12, 1185–1224.

    Ghahramani, Z., Griffiths, T. L. and Sollich, P. (2007). Bayesian nonparametric latent
    feature models. *Bayesian Statistics 8*, 201–226.
    """

    rv_op = ibp_rv

    def __new__(cls, name, *args, **kwargs):
        kwargs = shape_from_dims(
            kwargs, "pmi.IBP", min_ndim=2,
            too_few="pmi.IBP is a distribution over N x K_max matrices; got dims={dims!r}. "
                    "Use dims=('obs', 'feature').")
        shape = kwargs.get("shape")
        if kwargs.get("observed") is not None:
            _check_binary(name, kwargs["observed"], shape=shape)
        initval = kwargs.get("initval")
        if initval is not None and not isinstance(initval, str | Variable):
            # a binary start of any integer or float dtype, stored as the variable's int8
            _check_binary(name, initval, what="initial value", shape=shape)
            kwargs["initval"] = np.asarray(initval).astype(np.int8)
        return super().__new__(cls, name, *args, **kwargs)

    @classmethod
    def dist(cls, alpha, beta=1.0, *, shape=None, size=None, **kwargs):
        if shape is None:
            raise ValueError(
                "pmi.IBP needs the matrix shape: pass shape=(N, K_max) or dims=('obs', 'feature')."
            )
        shape_t = tuple(shape) if not isinstance(shape, int) else (shape,)
        if len(shape_t) < 2:
            raise ValueError(
                f"pmi.IBP is a distribution over N x K_max matrices; got shape={shape!r} with "
                f"{len(shape_t)} dimension(s). Use shape=(N, K_max)."
            )
        n, k_max = shape_t[-2], shape_t[-1]
        for label, v in (("N", n), ("K_max", k_max)):
            try:
                iv = int(v)
                whole = not isinstance(v, bool | np.bool_) and iv == v
            except TypeError as err:
                raise ValueError(f"pmi.IBP needs a fixed (integer) {label}; got {v!r}.") from err
            if not whole:
                raise ValueError(f"pmi.IBP needs an integer {label}; got {v!r}.")
            if iv < 1:
                raise ValueError(f"pmi.IBP needs {label} >= 1; got {label}={iv}.")
        _check_positive_constant("alpha", alpha)
        _check_positive_constant("beta", beta)
        alpha = pt.as_tensor_variable(alpha, dtype="floatX")
        beta = pt.as_tensor_variable(beta, dtype="floatX")
        batch = shape_t[:-2] if size is None else tuple(np.atleast_1d(size))
        for label, v in (("alpha", alpha), ("beta", beta)):
            if v.ndim > len(batch) or any(
                    b not in (None, 1, d) for b, d in zip(v.type.shape[::-1], batch[::-1],
                                                          strict=False)):
                raise ValueError(
                    f"pmi.IBP's {label} is one number for the whole N x K_max matrix (its "
                    f"{'mass' if label == 'alpha' else 'concentration'}); got {label} of shape "
                    f"{v.type.shape} for shape={tuple(shape_t)!r}. For one {label} per feature "
                    "use pmi.IBPStickBreaking or a pm.Bernoulli matrix; several IBP matrices "
                    "take one pmi.IBP each (or a batch: shape=(B, N, K_max) with one "
                    f"{label} per batch entry).")
        n = pt.as_tensor_variable(int(n), dtype="int64")
        k_max = pt.as_tensor_variable(int(k_max), dtype="int64")
        return super().dist([alpha, beta, n, k_max], shape=shape, size=size, **kwargs)

    def support_point(rv, size, alpha, beta, n, k_max):
        # the all-zero matrix always has finite log-probability
        return pt.zeros_like(rv)

    def logp(value, alpha, beta, n, k_max):
        # N and K_max are one number each, even where PyMC broadcasts them to a batch shape
        n, k_max = (v if v.ndim == 0 else v.flatten()[0] for v in map(pt.as_tensor, (n, k_max)))
        lp = ibp_logp_symbolic(value, alpha, beta, n, k_max)
        shape_ok = pt.eq(value.shape[-2], n) & pt.eq(value.shape[-1], k_max)
        return check_parameters(lp, alpha > 0, beta > 0, shape_ok,
                                msg="alpha > 0, beta > 0, a value of the shape (N, K_max) of Z")


def _check_binary(name, observed, what="observed value", shape=None):
    """An observed IBP (or its initial value) must be a known binary ``N x K_max`` matrix (of
    the variable's ``shape`` when given): reject anything that would otherwise be cast
    silently to int8 (e.g. 0.5 -> 0)."""
    from pymc_ibp.exceptions import DataError

    try:
        arr = np.asarray(observed, dtype=float)
    except (TypeError, ValueError):
        return  # symbolic data (pm.Data): checked by the logp (-inf for non-binary values)
    if arr.ndim < 2:
        raise DataError(
            f"The {what} of pmi.IBP {name!r} must be an N x K_max binary matrix; got "
            f"shape {arr.shape}."
        )
    try:
        want = None if shape is None else tuple(int(v) for v in np.atleast_1d(shape))
    except (TypeError, ValueError):
        want = None  # a symbolic shape
    if want is not None and arr.shape != want:
        raise DataError(f"The {what} of pmi.IBP {name!r} has shape {arr.shape}; the variable "
                        f"has shape {want}.")
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"The {what} of pmi.IBP {name!r} must be binary (0/1); it has "
            f"{arr[pos]!r} at {pos} ({int(bad.sum())} non-binary entries in all)."
        )


def _check_positive_constant(name, value):
    """Raise early for constant non-positive parameters (symbolic ones are checked in logp)."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return
    if arr.dtype == object:
        return
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"pmi.IBP needs {name} > 0 (finite); got {name}={value!r}.")

