r"""Success probabilities of the binary likelihoods of the thesis, as PyTensor expressions.

Both are ordinary PyMC models once the probability is written down, e.g.
``pm.Bernoulli("X", p=pmi.likelihoods.leaky_noisy_or(Z, A, leak, activation), observed=X)``;
any step that handles a row-factorising likelihood (:class:`pymc_ibp.IBPGibbs` for ``Z``,
PyMC's samplers for the rest) then applies.  The helpers exist to fix the parameterisation,
which is easy to get wrong.

* :func:`leaky_noisy_or` — the binary leaky noisy-or of Doshi-Velez (2009, App. A.3, eq. A.4)
  and Wood, Griffiths & Ghahramani (2006): every active feature ``k`` of row ``n`` with
  ``a_kd > 0`` tries to switch dimension ``d`` on, and a leak may switch it on alone,

  .. math:: P(x_{nd}=1\mid Z,A) = 1-(1-\epsilon)(1-\lambda)^{z_n^\top a_{\cdot d}},

  with ``leak`` = ε the probability that the leak fires and ``activation`` = λ the
  probability that one parent fires.  The thesis prints the same model as
  ``1 - ε' λ'^{z A}`` with ``ε' = 1 - ε`` (the leak does *not* fire) and ``λ' = 1 - λ`` (a
  parent fails): a small value passed as the thesis's ε' makes ``P(x = 1) ≈ 1``.  ``A`` is
  binary (``pm.Bernoulli``) in the thesis; non-negative real ``A`` (Reed 2013, §5.3) counts a
  parent ``a_kd`` times.
* :func:`noisy_detection` — the robot-data likelihood of Doshi-Velez (2009, §7.3): a tag is
  truly present, ``y_nd = 1[z_n · a_·d > 0]``, when any active feature carries it (the number
  of such features does not matter), and is observed with per-dimension false-detection and
  missed-detection probabilities,

  .. math:: P(x_{nd}=1\mid y_{nd}=1) = 1-m_d,\qquad P(x_{nd}=1\mid y_{nd}=0) = f_d.

References
----------
F. Doshi-Velez (2009). *The Indian Buffet Process: Scalable Inference and Extensions.* MSc
thesis, University of Cambridge, App. A.3 and §7.3.

F. Wood, T. L. Griffiths and Z. Ghahramani (2006). A non-parametric Bayesian method for
inferring hidden causes. *Proceedings of the 22nd Conference on Uncertainty in Artificial
Intelligence (UAI)*.

C. Reed (2013). *Submodular MAP Inference for Scalable Latent Feature Models.* MPhil thesis,
University of Cambridge.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

__all__ = ["leaky_noisy_or", "noisy_detection"]


def _check_probability(name, value, open_low=False):
    try:
        v = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return  # a symbolic variable: its own prior keeps it in range
    if v.dtype == object:
        return
    if not np.all(np.isfinite(v)) or np.any(v > 1) or np.any(v <= 0 if open_low else v < 0):
        bound = "0 < " if open_low else "0 <= "
        raise ValueError(f"{name} must satisfy {bound}{name} <= 1; got {value!r}.")


def leaky_noisy_or(Z, A, leak, activation):
    r"""``P(x = 1) = 1 - (1 - leak) (1 - activation)^(Z @ A)``, element-wise (``N x D``).

    Parameters
    ----------
    Z : tensor_like
        The ``N x K`` binary feature matrix.
    A : tensor_like
        ``K x D`` binary (or non-negative) feature–dimension links.
    leak : tensor_like of float
        Probability that a dimension is switched on with no parent (scalar or ``(D,)``).
    activation : tensor_like of float
        Probability that one parent switches its dimension on (scalar or ``(D,)``).

    Returns
    -------
    TensorVariable
        The success probabilities, for ``pm.Bernoulli(..., p=...)``.
    """
    _check_probability("leak", leak)
    _check_probability("activation", activation)
    s = pt.dot(Z, A)
    return 1.0 - (1.0 - pt.as_tensor_variable(leak)) * pt.pow(
        1.0 - pt.as_tensor_variable(activation), s)


def noisy_detection(Z, A, false_rate, miss_rate):
    r"""``P(x = 1) = y (1 - miss_rate) + (1 - y) false_rate`` with ``y = 1[Z @ A > 0]``.

    Parameters
    ----------
    Z : tensor_like
        The ``N x K`` binary feature matrix.
    A : tensor_like
        ``K x D`` binary feature–tag links.
    false_rate : tensor_like of float
        ``f_d``: probability of detecting an absent tag (scalar or ``(D,)``).
    miss_rate : tensor_like of float
        ``m_d``: probability of missing a present tag (scalar or ``(D,)``).

    Returns
    -------
    TensorVariable
        The success probabilities, for ``pm.Bernoulli(..., p=...)``.
    """
    _check_probability("false_rate", false_rate)
    _check_probability("miss_rate", miss_rate)
    y = pt.gt(pt.dot(Z, A), 0)
    return pt.switch(y, 1.0 - pt.as_tensor_variable(miss_rate), pt.as_tensor_variable(false_rate))
