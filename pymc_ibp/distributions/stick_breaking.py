"""Truncated stick-breaking construction of the IBP feature probabilities.

The construction of Teh, Görür & Ghahramani [1]_: ``v_j ~ Beta(α, 1)`` i.i.d. and
``π_k = ∏_{j<=k} v_j``, so ``1 >= π_1 >= ... >= π_K >= 0`` and
``E[π_k] = (α/(1+α))^k``.  The joint density of the first ``K`` sticks is (Williamson, Orbanz
& Ghahramani [2]_, eq. 10)

    p(π_1..π_K | α) = α^K π_K^α ∏_{k=1..K} π_k^{-1}      on 1 >= π_1 >= ... >= π_K >= 0,

by the change of variables ``v_k = π_k/π_{k-1}`` (density ``α v^{α-1}`` each, Jacobian
``∏_k π_{k-1}``).  Binary features then follow as
``Z = pm.Bernoulli("Z", p=pi, dims=("obs", "feature"))``.  Truncating at ``K`` sticks changes
the distribution of ``Z`` by at most ``1 - exp(-N α (α/(1+α))^K)`` in total variation
(Doshi-Velez [3]_, eq. 6.9; see the docs page *Distributions → pmi.IBPStickBreaking*).

References
----------
.. [1] Teh, Y. W., Görür, D. and Ghahramani, Z. (2007). Stick-breaking construction for the
   Indian buffet process. *AISTATS 2007*.
.. [2] Williamson, S., Orbanz, P. and Ghahramani, Z. (2010). Dependent Indian buffet
   processes. *AISTATS 2010*.
.. [3] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and
   extensions*. MSc thesis, University of Cambridge.
"""

from __future__ import annotations

import numba
import numpy as np
import pytensor.tensor as pt
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Continuous
from pymc.logprob.transforms import Transform
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp._numba_utils import source_cache_key
from pymc_ibp.distributions._shape import shape_from_dims

__all__ = ["IBPStickBreaking", "IBPStickBreakingRV", "StickBreakingTransform"]


@numba.njit(cache=True)
def stick_breaking_draw_core(rng, alpha, k):
    out = np.empty(k)
    acc = 1.0
    for j in range(k):
        acc *= rng.beta(alpha, 1.0)
        out[j] = acc
    return out


class IBPStickBreakingRV(RandomVariable):
    """Decreasing stick weights ``π_k = ∏_{j<=k} v_j``, ``v_j ~ Beta(α, 1)``."""

    name = "ibp_stick_breaking"
    signature = "(),()->(k)"  # alpha, K -> (K,)
    dtype = "floatX"
    _print_name = ("IBPStickBreaking", "\\operatorname{IBPStickBreaking}")

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (dist_params[1],)

    @classmethod
    def rng_fn(cls, rng, alpha, k, size):
        k = int(np.asarray(k).flat[0])
        alpha = np.asarray(alpha, dtype=float)
        batch = alpha.shape if size is None else tuple(size)
        v = rng.beta(np.broadcast_to(alpha, batch)[..., None], 1.0, size=batch + (k,))
        return np.cumprod(v, axis=-1)


ibp_stick_breaking = IBPStickBreakingRV()


def _register_numba():
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.random import numba_core_rv_funcify

    @numba_core_rv_funcify.register(IBPStickBreakingRV)
    def _core(op, node):
        @numba_basic.numba_njit
        def random(rng, alpha, k):
            return stick_breaking_draw_core(rng, float(alpha), int(k))

        return random, source_cache_key(__file__)


_register_numba()


class StickBreakingTransform(Transform):
    r"""Unconstrained ``y in R^K`` ↔ decreasing ``π in (0,1)^K``.

    ``v_k = sigmoid(y_k)``, ``π_k = ∏_{j<=k} v_j``; the inverse is ``y_k = logit(π_k/π_{k-1})``.
    The Jacobian of ``y -> π`` is triangular with diagonal ``π_{k-1} v_k (1 - v_k)``, so

    .. math:: \log|J| = \sum_k \big[\log\pi_{k-1} + \log v_k + \log(1-v_k)\big],\quad \pi_0 = 1.
    """

    name = "stickbreaking"
    ndim_supp = 1

    def forward(self, value, *inputs):
        logpi = pt.log(value)
        prev = pt.concatenate([pt.zeros_like(logpi[..., :1]), logpi[..., :-1]], axis=-1)
        logv = logpi - prev
        # logit(v) = log v - log(1 - v), with log(1 - v) = log1mexp(log v)
        return logv - pt.log1mexp(logv)

    def backward(self, value, *inputs):
        return pt.exp(pt.cumsum(-pt.softplus(-value), axis=-1))

    def log_jac_det(self, value, *inputs):
        logv = -pt.softplus(-value)
        log1mv = -pt.softplus(value)
        logpi = pt.cumsum(logv, axis=-1)
        prev = pt.concatenate([pt.zeros_like(logpi[..., :1]), logpi[..., :-1]], axis=-1)
        return (prev + logv + log1mv).sum(axis=-1)


stick_breaking_transform = StickBreakingTransform()


class IBPStickBreaking(Continuous):
    r"""Truncated stick-breaking IBP feature probabilities (Teh, Görür & Ghahramani 2007).

    .. math::

        v_j \sim \mathrm{Beta}(\alpha, 1),\quad \pi_k = \prod_{j\le k} v_j,\qquad
        p(\pi_{1:K}\mid\alpha) = \alpha^K \pi_K^{\alpha}\prod_{k=1}^K \pi_k^{-1}

    on ``1 >= π_1 >= ... >= π_K > 0``: the construction of Teh, Görür & Ghahramani (2007),
    whose density is eq. 10 of Williamson, Orbanz & Ghahramani (2010).  The default transform
    (:class:`StickBreakingTransform`) maps the ordered simplex-like region to ``R^K`` so NUTS
    can sample it.  Truncation error:
    ``1 - exp(-N α (α/(1+α))^K)`` (Doshi-Velez 2009, eq. 6.9) bounds the total-variation
    distance of the induced ``Z`` from the infinite IBP.

    Parameters
    ----------
    alpha : tensor_like of float
        IBP mass, ``alpha > 0``.
    shape : tuple of int, optional
        ``(K,)``: the number of represented sticks (the last dimension).
    dims : str or tuple of str, optional
        E.g. ``"feature"``; the model's coords give ``K``.

    Examples
    --------
    >>> import pymc as pm, pymc_ibp as pmi
    >>> with pm.Model(coords={"obs": range(10), "feature": range(6)}):
    ...     pi = pmi.IBPStickBreaking("pi", alpha=2.0, dims="feature")
    ...     Z = pm.Bernoulli("Z", p=pi, dims=("obs", "feature"))

    References
    ----------
    Teh, Y. W., Görür, D. and Ghahramani, Z. (2007). Stick-breaking construction for the Indian
    buffet process. *AISTATS 2007*.

    Williamson, S., Orbanz, P. and Ghahramani, Z. (2010). Dependent Indian buffet processes.
    *AISTATS 2010*.

    Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and extensions*.
    MSc thesis, University of Cambridge.
    """

    rv_op = ibp_stick_breaking

    def __new__(cls, name, *args, **kwargs):
        kwargs.setdefault("default_transform", stick_breaking_transform)
        kwargs = shape_from_dims(kwargs, "pmi.IBPStickBreaking")
        return super().__new__(cls, name, *args, **kwargs)

    @classmethod
    def dist(cls, alpha, *, shape=None, size=None, **kwargs):
        if shape is None:
            raise ValueError("pmi.IBPStickBreaking needs the truncation level: shape=(K,) or dims.")
        shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
        if len(shape_t) < 1:
            raise ValueError("pmi.IBPStickBreaking needs shape=(K,) with K >= 1.")
        k = shape_t[-1]
        if int(k) < 1:
            raise ValueError(f"pmi.IBPStickBreaking needs K >= 1; got K={int(k)}.")
        try:
            a = np.asarray(alpha, dtype=float)
            if a.dtype != object and (np.any(a <= 0) or not np.all(np.isfinite(a))):
                raise ValueError(f"pmi.IBPStickBreaking needs alpha > 0; got alpha={alpha!r}.")
        except (TypeError, ValueError) as err:
            if "needs alpha" in str(err):
                raise
        alpha = pt.as_tensor_variable(alpha, dtype="floatX")
        k = pt.as_tensor_variable(int(k), dtype="int64")
        return super().dist([alpha, k], shape=shape, size=size, **kwargs)

    def support_point(rv, size, alpha, k):
        # the prior mean E[π_k] = (α/(1+α))^k: decreasing and strictly inside (0, 1)
        ks = pt.arange(1, k + 1, dtype="float64")
        r = alpha / (1.0 + alpha)
        mean = pt.power(r[..., None], ks)
        return pt.broadcast_to(mean, rv.shape)

    def logp(value, alpha, k):
        kf = pt.cast(k, "floatX")
        logpi = pt.log(value)
        lp = kf * pt.log(alpha) + alpha * logpi[..., -1] - logpi.sum(axis=-1)
        prev = pt.concatenate([pt.ones_like(value[..., :1]), value[..., :-1]], axis=-1)
        ok = pt.all(pt.gt(value, 0) & pt.le(value, prev), axis=-1)
        lp = pt.switch(ok, lp, -np.inf)
        return check_parameters(lp, alpha > 0, msg="alpha > 0")
