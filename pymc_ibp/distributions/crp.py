"""The Chinese restaurant process over the labels of ``N`` observations.

The CRP(α) of Aldous [1]_ and Pitman [2]_ (the partition induced by a Dirichlet process, the
prior of DP mixtures and of the DP-IBP of Doshi-Velez [3]_, ch. 7).  PyMC models have fixed
shapes, so :class:`CRP` is the CRP *restricted to at most ``L_max`` occupied tables*, with the
tables given uniformly random distinct labels in ``0..L_max-1``: the same construction as
:class:`pymc_ibp.IBP`'s truncation.  It is a proper pmf over all ``L_max**N`` labellings.

Derivation of the pmf
---------------------
Seat customers ``1..N`` in turn: customer ``i`` joins an occupied table with probability
``n_j/(α+i-1)`` (``n_j`` its size) and opens a new one with probability ``α/(α+i-1)``.  The
partition ``π`` with ``K`` blocks of sizes ``n_1..n_K`` then has probability ([2]_, eq. 3.4)

    P(π) = α^K Γ(α)/Γ(α+N) · ∏_j Γ(n_j),

and ``K`` has ``P(K = k) = α^k |s(N, k)| Γ(α)/Γ(α+N)``, with ``|s(N, k)|`` the unsigned Stirling
numbers of the first kind (``Σ_π: |π|=k ∏_j (n_j-1)! = |s(N, k)|``: partitions weighted by
their cyclic orders count permutations with ``k`` cycles).  A labelling ``c`` with ``K <= L_max``
occupied labels is one of ``L_max!/(L_max-K)!`` equally likely labellings of its partition
(the blocks take distinct labels), so conditioning on ``K <= L_max``

    P(c) = P(π(c)) · (L_max-K)!/L_max! / P(K <= L_max)

and ``Γ(α)/Γ(α+N)`` cancels:

    log P(c) = K log α + Σ_j log Γ(n_j) + log (L_max-K)! - log L_max!
               - log Σ_{k=1..min(N, L_max)} α^k |s(N, k)|.

For ``L_max >= N`` the last sum is the rising factorial ``Γ(α+N)/Γ(α)`` and ``P(c)`` is the
untruncated CRP with random labels.  Every term is differentiable in α (the Stirling numbers
are constants, computed once in log space), so NUTS or slice sampling can update α.

Exact random draws
------------------
Draw ``K`` from ``P(K = k | K <= L_max) ∝ α^k |s(N, k)|``; given ``K`` the partition has
``P(π | K) ∝ ∏_j (n_j-1)!``, the cycle partition of a uniform permutation with ``K`` cycles.
Customers are seated in turn with the counts of the completions: with ``j`` tables after
customer ``m``, let ``W(m, j)`` be the number of ways customers ``m+1..N`` end with ``K`` tables
(``W(N, j) = [j = K]``, ``W(m, j) = W(m+1, j+1) + m·W(m+1, j)``: customer ``m+1`` opens a table,
or follows one of the ``m`` seated customers in a cycle).  Customer ``m+1`` opens a table with
probability ``W(m+1, j+1)/W(m, j)`` and otherwise joins table ``t`` with probability ``∝ n_t``.
The ``K`` tables then get distinct labels drawn uniformly from ``0..L_max-1``.

References
----------
.. [1] Aldous, D. J. (1985). Exchangeability and related topics. *École d'Été de Probabilités
   de Saint-Flour XIII*, Lecture Notes in Mathematics 1117, 1–198.
.. [2] Pitman, J. (2006). *Combinatorial Stochastic Processes*. Lecture Notes in Mathematics
   1875, Springer.
.. [3] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and extensions*.
   MPhil thesis, University of Cambridge.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytensor.tensor as pt
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Discrete
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp._numba_utils import (
    categorical_logp,
    interrupt_safe,
    partial_shuffle,
    source_cache_key,
)
from pymc_ibp.distributions._shape import shape_from_dims

__all__ = ["CRP", "CRPRV", "crp_draw_core", "crp_expected_tables", "crp_log_normaliser",
           "crp_logp_symbolic", "log_stirling1"]


# --------------------------------------------------------------------------------------------
# formulas (the one home of the CRP's normaliser and table-count law)
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def log_stirling1(n, k_max):
    """``log |s(n, k)|`` for ``k = 0..k_max`` (unsigned Stirling numbers of the first kind,
    ``-inf`` where zero), by the recursion ``|s(i, k)| = |s(i-1, k-1)| + (i-1)|s(i-1, k)|`` in
    log space (``O(n k_max)``)."""
    row = np.full(k_max + 1, -np.inf)
    row[0] = 0.0  # |s(0, 0)| = 1
    for i in range(1, n + 1):
        top = min(i, k_max)
        log_im1 = math.log(i - 1) if i > 1 else -np.inf
        for k in range(top, 0, -1):
            a = row[k - 1]
            b = log_im1 + row[k]
            hi = max(a, b)
            row[k] = hi + math.log(math.exp(a - hi) + math.exp(b - hi)) if hi > -np.inf else hi
        row[0] = -np.inf
    return row


@numba.njit(cache=True)
def _log_s(n, l_max):
    """The Stirling row the truncated CRP needs (``l_max < n``); a dummy row otherwise."""
    return log_stirling1(n, l_max) if l_max < n else np.zeros(1)


def crp_expected_tables(alpha, n):
    """``E[K] = Σ_{i=1..n} α/(α+i-1)`` for the untruncated CRP(α) with ``n`` customers."""
    i = np.arange(1, int(n) + 1)
    return float(np.sum(alpha / (alpha + i - 1.0)))


# --------------------------------------------------------------------------------------------
# numba core sampler
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def crp_draw_core(rng, alpha, n, l_max, log_s):
    """One exact draw of the labels (``int64``, ``n``) of a CRP(α) restricted to at most
    ``l_max`` occupied tables (module docstring); ``log_s = log_stirling1(n, l_max)`` when
    ``l_max < n`` (unused otherwise: the plain sequential CRP)."""
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    table = np.empty(n, dtype=np.int64)
    if l_max >= n:  # no truncation: seat the customers one by one
        table[0] = 0
        K = 1
        for m in range(1, n):
            if rng.random() * (alpha + m) < alpha:
                table[m] = K
                K += 1
            else:
                table[m] = table[int(rng.random() * m)]
        return _label_tables(rng, table, K, l_max)
    top = min(n, l_max)
    logw = np.empty(top)
    for k in range(1, top + 1):
        logw[k - 1] = k * math.log(alpha) + log_s[k]
    K = categorical_logp(rng, logw, top) + 1
    # log W(m, j), m = 1..n, j = 0..K (customers m+1..n complete to K tables)
    logW = np.full((n + 1, K + 2), -np.inf)
    logW[n, K] = 0.0
    for m in range(n - 1, 0, -1):
        lm = math.log(m)
        for j in range(1, K + 1):
            a = logW[m + 1, j + 1]
            b = lm + logW[m + 1, j]
            hi = max(a, b)
            if hi > -np.inf:
                logW[m, j] = hi + math.log(math.exp(a - hi) + math.exp(b - hi))
    table[0] = 0
    j = 1
    for m in range(1, n):  # seat customer m+1 (0-based index m) after m seated customers
        p_new = math.exp(logW[m + 1, j + 1] - logW[m, j]) if j < K else 0.0
        if rng.random() < p_new:
            table[m] = j
            j += 1
        else:  # follow a uniformly chosen seated customer: table t with probability n_t / m
            table[m] = table[int(rng.random() * m)]
    return _label_tables(rng, table, K, l_max)


@numba.njit(cache=True)
def _label_tables(rng, table, K, l_max):
    """Distinct uniform labels in ``0..l_max-1`` for the ``K`` tables."""
    labels = np.arange(l_max)
    partial_shuffle(rng, labels, K)
    out = np.empty(table.shape[0], dtype=np.int64)
    for i in range(table.shape[0]):
        out[i] = labels[table[i]]
    return out


# --------------------------------------------------------------------------------------------
# RandomVariable
# --------------------------------------------------------------------------------------------
class CRPRV(RandomVariable):
    """CRP(α) over the labels of ``N`` observations, at most ``L_max`` occupied tables."""

    name = "crp"
    signature = "(),(),()->(n)"  # alpha, N, L_max -> (N,)
    dtype = "int64"
    _print_name = ("CRP", "\\operatorname{CRP}")

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        _, n, _ = dist_params
        return (n,)

    @classmethod
    @interrupt_safe  # the numba core takes the Generator (see pymc_ibp._numba_utils)
    def rng_fn(cls, rng, alpha, n, l_max, size):
        n = int(np.asarray(n).flat[0])
        l_max = int(np.asarray(l_max).flat[0])
        alpha = np.asarray(alpha, dtype=float)
        batch = alpha.shape if size is None else tuple(size)
        alpha = np.broadcast_to(alpha, batch)
        log_s = _log_s(n, l_max)
        out = np.empty(batch + (n,), dtype=np.int64)
        for idx in np.ndindex(*batch):
            out[idx] = crp_draw_core(rng, float(alpha[idx]), n, l_max, log_s)
        return out


crp_rv = CRPRV()


def _register_numba():
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.random import numba_core_rv_funcify

    @numba_core_rv_funcify.register(CRPRV)
    def _crp_core(op, node):
        @numba_basic.numba_njit
        def random(rng, alpha, n, l_max):
            n_, l_ = int(n), int(l_max)
            return crp_draw_core(rng, float(alpha), n_, l_, _log_s(n_, l_))

        return random, source_cache_key(__file__)


_register_numba()


def crp_log_normaliser(alpha, n, l_max):
    """``log Σ_{k=1..min(n, L_max)} α^k |s(n, k)|`` (symbolic in ``alpha``): the rising
    factorial ``log Γ(α+n) - log Γ(α)`` when ``L_max >= n``, else a log-sum-exp over the
    constant Stirling row (``O(n L_max)`` once)."""
    if l_max >= n:
        return pt.gammaln(alpha + n) - pt.gammaln(alpha)
    log_s = log_stirling1(n, l_max)
    k = np.arange(1, l_max + 1)
    return pt.logsumexp(k * pt.log(alpha)[..., None] + log_s[1:], axis=-1)


def crp_logp_symbolic(value, alpha, n, l_max):
    """``log P(c)`` of :class:`CRP` (module docstring) for labels ``value`` (``..., N``);
    ``-inf`` for labels outside ``0..L_max-1``.  Cost ``O(N + L_max)`` per row of labels."""
    L = int(l_max)
    in_range = pt.all(pt.ge(value, 0) & pt.lt(value, L), axis=-1)
    safe = pt.clip(value, 0, L - 1)
    if value.ndim == 1:
        counts = pt.bincount(safe, minlength=L)
    else:  # batched labels: one-hot counts (..., L)
        counts = pt.eq(safe[..., None], pt.arange(L)).sum(axis=-2)
    occupied = pt.gt(counts, 0)
    K = occupied.sum(axis=-1)
    lg = pt.switch(occupied, pt.gammaln(pt.maximum(counts, 1)), 0.0).sum(axis=-1)
    lp = (K * pt.log(alpha) + lg + pt.gammaln(L - K + 1.0) - math.lgamma(L + 1.0)
          - crp_log_normaliser(alpha, int(n), L))
    return pt.switch(in_range, lp, -np.inf)


class CRP(Discrete):
    r"""Chinese restaurant process prior over the labels of ``N`` observations.

    The CRP(α) of Aldous (1985) and Pitman (2006), restricted to at most ``L_max`` occupied
    tables, with the tables' labels uniformly random distinct values in ``0..L_max-1``:

    .. math::

        \log P(c) = K\log\alpha + \sum_{j}\log\Gamma(n_j)
            + \log\frac{(L_{max}-K)!}{L_{max}!}
            - \log\sum_{k=1}^{\min(N, L_{max})}\alpha^k\,|s(N,k)|,

    with ``K`` the number of distinct labels, ``n_j`` the size of label ``j``'s block and
    ``|s(N, k)|`` the unsigned Stirling numbers of the first kind.  With ``L_max >= N`` (the
    default ``L_max = N``) it is the untruncated CRP with random labels, and
    ``E[K] = Σ_{i=1..N} α/(α+i-1)``.  Derivation and exact sampler: module docstring; docs page
    *Distributions → pmi.CRP*.  The logp is differentiable in ``alpha``.

    Parameters
    ----------
    alpha : tensor_like of float
        Concentration, ``alpha > 0``.
    l_max : int, optional
        ``L_max``, the number of labels (at most that many occupied tables; default ``N``).
    shape : int or tuple of int, optional
        ``N``: the observations (the last dimension; leading dimensions are independent
        batches).
    dims : str or tuple of str, optional
        E.g. ``"obs"``; the model's coords give ``N``.

    Examples
    --------
    >>> import pymc as pm, pymc_ibp as pmi
    >>> with pm.Model(coords={"obs": range(6)}):
    ...     c = pmi.CRP("c", alpha=1.5, l_max=4, dims="obs")

    References
    ----------
    Aldous, D. J. (1985). Exchangeability and related topics. *École d'Été de Probabilités de
    Saint-Flour XIII*, Lecture Notes in Mathematics 1117, 1–198.

    Pitman, J. (2006). *Combinatorial Stochastic Processes*. Lecture Notes in Mathematics 1875,
    Springer.
    """

    rv_op = crp_rv

    def __new__(cls, name, *args, **kwargs):
        kwargs = shape_from_dims(kwargs, "pmi.CRP")
        return super().__new__(cls, name, *args, **kwargs)

    @classmethod
    def dist(cls, alpha, l_max=None, *, shape=None, size=None, **kwargs):
        if shape is None:
            raise ValueError("pmi.CRP needs the number of observations: pass shape=N or "
                             "dims='obs'.")
        shape_t = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
        if len(shape_t) < 1:
            raise ValueError(f"pmi.CRP labels an axis of N observations (the last); got "
                             f"shape={shape!r}. Use shape=N.")
        try:
            n = int(shape_t[-1])
        except TypeError as err:
            raise ValueError(f"pmi.CRP needs a fixed (integer) N; got {shape_t[-1]!r}.") from err
        if n < 1:
            raise ValueError(f"pmi.CRP needs N >= 1; got N={n}.")
        l_max = n if l_max is None else l_max
        if not (isinstance(l_max, int | np.integer) and int(l_max) >= 1):
            raise ValueError(f"pmi.CRP needs an integer l_max >= 1; got l_max={l_max!r}.")
        try:
            a = np.asarray(alpha, dtype=float)
        except (TypeError, ValueError):
            a = None
        if a is not None and a.dtype != object and (not np.all(np.isfinite(a)) or np.any(a <= 0)):
            raise ValueError(f"pmi.CRP needs alpha > 0 (finite); got alpha={alpha!r}.")
        alpha = pt.as_tensor_variable(alpha, dtype="floatX")
        n_t = pt.as_tensor_variable(n, dtype="int64")
        l_t = pt.as_tensor_variable(int(l_max), dtype="int64")
        return super().dist([alpha, n_t, l_t], shape=shape_t, size=size, **kwargs)

    def support_point(rv, size, alpha, n, l_max):
        # every observation at one table, label 0: finite log-probability
        return pt.zeros_like(rv)

    def logp(value, alpha, n, l_max):
        n_ = int(pt.get_underlying_scalar_constant_value(n))
        l_ = int(pt.get_underlying_scalar_constant_value(l_max))
        lp = crp_logp_symbolic(value, alpha, n_, l_)
        return check_parameters(lp, alpha > 0, msg="alpha > 0")
