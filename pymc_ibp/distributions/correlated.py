r"""Correlated feature models: features that come in motifs (Doshi-Velez 2009, ch. 7).

In the plain IBP the features of a row are a priori independent given their popularity.  In
the correlated models of Doshi-Velez (2009, ch. 7) and Doshi-Velez & Ghahramani (2009,
"Correlated non-parametric latent feature models") the rows draw *categories* and the
categories own the features, so typical combinations of features recur.

:func:`dp_ibp` builds the DP-IBP: each observation ``n`` has one category ``c_n`` from a
Chinese restaurant process and inherits that category's row of a category-feature matrix
``M`` drawn from an IBP,

.. math::

    c \sim \mathrm{CRP}(\alpha_C), \qquad M \sim \mathrm{IBP}(\alpha_M, \beta), \qquad
    z_{n\cdot} = m_{c_n\cdot}.

With ``L_max`` labels (:class:`pymc_ibp.CRP`) ``M`` has ``L_max`` rows, one per label, whether
occupied or not.  Because the IBP is exchangeable and projective over rows and the CRP's labels
are uniformly random distinct slots, the rows of the occupied categories are distributed as an
IBP over ``K`` rows, as in the thesis's model where ``M`` has one row per occupied category;
the empty categories' rows are drawn from their prior and are used as Neal's (2000)
auxiliary categories when a label moves to a new category.

:func:`ibp_ibp` builds the IBP-IBP, where an observation may belong to several categories
and has a feature when any of its categories does, and :func:`noisy_or_ibp_ibp` its noisy-or
relaxation, where each category owning a feature switches it on independently with
probability ``1 - q``:

.. math::

    C \sim \mathrm{IBP}(\alpha_C),\quad M \sim \mathrm{IBP}(\alpha_M),\quad
    z_{nk} = \mathbb 1[c_n^\top m_k > 0]
    \quad\text{or}\quad z_{nk} \sim \mathrm{Bernoulli}(1 - q^{c_n^\top m_k}).

The builders only write ordinary PyMC variables: a model written by hand as
``Z = pm.Deterministic("Z", M[c])`` is the same model and gets the same samplers
(:class:`pymc_ibp.CRPGibbs` for ``c``, :class:`pymc_ibp.IBPGibbs` for ``M`` with each
category's likelihood the sum over its observations).

References
----------
F. Doshi-Velez (2009). *The Indian buffet process: scalable inference and extensions.*
MPhil/PhD thesis, University of Cambridge, ch. 7.

F. Doshi-Velez and Z. Ghahramani (2009). Correlated non-parametric latent feature models.
*Proceedings of the 25th Conference on Uncertainty in Artificial Intelligence (UAI)*.

R. M. Neal (2000). Markov chain sampling methods for Dirichlet process mixture models.
*Journal of Computational and Graphical Statistics* 9(2), 249-265.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_ibp.distributions._shape import shape_from_dims
from pymc_ibp.distributions.crp import CRP
from pymc_ibp.distributions.ibp import IBP

__all__ = ["dp_ibp", "ibp_ibp", "noisy_or_ibp_ibp"]


def _obs_and_features(name, model, shape, dims):
    """``(N, K_max)`` from ``shape`` or from the model's coords for ``dims``."""
    if (shape is None) == (dims is None):
        raise ValueError(f"{name}: pass exactly one of shape=(N, K_max) or "
                         "dims=('obs', 'feature').")
    if dims is not None:
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        if len(dims) != 2:
            raise ValueError(f"{name}: dims names the observation and feature axes; got {dims}.")
        shape = shape_from_dims({"dims": dims}, name)["shape"]
    shape = tuple(int(v) for v in np.atleast_1d(shape))
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"{name}: Z is an N x K_max matrix with N, K_max >= 1; got shape "
                         f"{shape}.")
    return shape, dims


def _category_coord(model, name, l_max, what):
    """The coord ``{name}_category`` of length ``l_max`` (added to the model if absent)."""
    cat = f"{name}_category"
    if cat in model.coords and len(model.coords[cat]) != l_max:
        raise ValueError(f"{what}: the model's coord {cat!r} has length "
                         f"{len(model.coords[cat])}, not l_max={l_max}.")
    if cat not in model.coords:
        model.add_coord(cat, range(l_max))
    return cat


def dp_ibp(name, alpha_c, alpha_m, *, l_max, beta=1.0, shape=None, dims=None):
    r"""The DP-IBP correlated feature model: ``Z = M[c]``, returned as a deterministic.

    Creates three visible variables in the current model:

    * ``{name}_c`` — the category of each observation, :class:`pymc_ibp.CRP` with
      concentration ``alpha_c`` and at most ``l_max`` categories (dims: the observation dim);
    * ``{name}_M`` — the ``l_max x K_max`` category-feature matrix, :class:`pymc_ibp.IBP` with
      ``alpha_m`` and ``beta`` (dims: ``{name}_category`` and the feature dim);
    * ``{name}`` — ``Z = M[c]`` (``pm.Deterministic``, int8), the binary matrix a likelihood
      uses, e.g. ``pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X)``.

    .. math:: c \sim \mathrm{CRP}(\alpha_C),\quad M \sim \mathrm{IBP}(\alpha_M, \beta),\quad
        z_{nk} = m_{c_n k}.

    ``pm.sample`` assigns :class:`pymc_ibp.CRPGibbs` to the labels and
    :class:`pymc_ibp.IBPGibbs` to ``M`` (each category's likelihood is the sum over its
    observations); the same happens for a model written by hand with ``Z = M[c]``.

    Parameters
    ----------
    name : str
        Name of ``Z``; the labels and ``M`` are ``{name}_c`` and ``{name}_M``.
    alpha_c : tensor_like of float
        CRP concentration of the categories (a number or a PyMC variable).
    alpha_m : tensor_like of float
        IBP mass of the category-feature matrix (a number or a PyMC variable).
    l_max : int
        At most this many categories (the rows of ``M``).
    beta : tensor_like of float, default 1
        IBP concentration of ``M``.
    shape : tuple of int, optional
        ``(N, K_max)``.
    dims : tuple of str, optional
        ``(obs_dim, feature_dim)``, e.g. ``("obs", "feature")``; the model's coords give ``N``
        and ``K_max``.  A coord ``{name}_category`` of length ``l_max`` is added.

    Returns
    -------
    TensorVariable
        ``Z``, the ``N x K_max`` binary matrix.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_ibp as pmi
    >>> X = np.random.default_rng(0).normal(size=(20, 4))
    >>> with pm.Model(coords={"obs": range(20), "feature": range(6), "dim": range(4)}):
    ...     Z = pmi.dp_ibp("Z", alpha_c=1.0, alpha_m=2.0, l_max=8, dims=("obs", "feature"))
    ...     A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
    ...     X_obs = pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X, dims=("obs", "dim"))

    References
    ----------
    F. Doshi-Velez and Z. Ghahramani (2009). Correlated non-parametric latent feature models.
    *Proceedings of the 25th Conference on Uncertainty in Artificial Intelligence (UAI)*.
    """
    model = pm.modelcontext(None)
    if not (isinstance(l_max, int | np.integer) and int(l_max) >= 1):
        raise ValueError(f"pmi.dp_ibp needs an integer l_max >= 1; got l_max={l_max!r}.")
    (n, k_max), dims = _obs_and_features("pmi.dp_ibp", model, shape, dims)
    l_max = int(l_max)
    if dims is None:
        c = CRP(f"{name}_c", alpha_c, l_max=l_max, shape=n)
        M = IBP(f"{name}_M", alpha_m, beta, shape=(l_max, k_max))
        return pm.Deterministic(name, M[c])
    cat = _category_coord(model, name, l_max, "pmi.dp_ibp")
    c = CRP(f"{name}_c", alpha_c, l_max=l_max, dims=dims[0])
    M = IBP(f"{name}_M", alpha_m, beta, dims=(cat, dims[1]))
    return pm.Deterministic(name, M[c], dims=dims)


def _categories_and_features(name, model, alpha_c, alpha_m, l_max, beta_c, beta_m, shape,
                             dims, what):
    """The ``N x L_max`` category matrix ``C`` and the ``L_max x K_max`` matrix ``M`` of the
    IBP-IBP models, with their coords."""
    if not (isinstance(l_max, int | np.integer) and int(l_max) >= 1):
        raise ValueError(f"{what} needs an integer l_max >= 1; got l_max={l_max!r}.")
    (n, k_max), dims = _obs_and_features(what, model, shape, dims)
    l_max = int(l_max)
    if dims is None:
        C = IBP(f"{name}_C", alpha_c, beta_c, shape=(n, l_max))
        C.tag.slot_knob = f"l_max= of {what}"  # what a TruncationWarning of C says to raise
        M = IBP(f"{name}_M", alpha_m, beta_m, shape=(l_max, k_max))
        return C, M, None
    cat = _category_coord(model, name, l_max, what)
    C = IBP(f"{name}_C", alpha_c, beta_c, dims=(dims[0], cat))
    C.tag.slot_knob = f"l_max= of {what}"
    M = IBP(f"{name}_M", alpha_m, beta_m, dims=(cat, dims[1]))
    return C, M, dims


def ibp_ibp(name, alpha_c, alpha_m, *, l_max, beta_c=1.0, beta_m=1.0, shape=None, dims=None):
    r"""The IBP-IBP correlated feature model: ``Z = 1[C M > 0]``, returned as a deterministic.

    Creates ``{name}_C`` (the ``N x L_max`` category matrix, :class:`pymc_ibp.IBP` with
    ``alpha_c``), ``{name}_M`` (the ``L_max x K_max`` category-feature matrix,
    :class:`pymc_ibp.IBP` with ``alpha_m``) and ``{name}`` (``Z``, int8):

    .. math:: C \sim \mathrm{IBP}(\alpha_C),\quad M \sim \mathrm{IBP}(\alpha_M),\quad
        z_{nk} = \mathbb 1\big[\textstyle\sum_l c_{nl} m_{lk} > 0\big]

    (Doshi-Velez 2009, §7.2.2, eq. 7.6).  An observation may belong to several categories and
    has every feature of each.  ``pm.sample`` assigns :class:`pymc_ibp.IBPGibbs` to both
    matrices: ``C`` row by row (the likelihood factorises over observations), ``M`` entry by
    entry with the whole likelihood (one row of ``M`` touches every observation of its
    category).

    Parameters
    ----------
    name : str
        Name of ``Z``; the matrices are ``{name}_C`` and ``{name}_M``.
    alpha_c, alpha_m : tensor_like of float
        IBP masses of the categories and of the category-feature matrix.
    l_max : int
        Category slots (the columns of ``C``, the rows of ``M``).
    beta_c, beta_m : tensor_like of float, default 1
        IBP concentrations.
    shape : tuple of int, optional
        ``(N, K_max)``.
    dims : tuple of str, optional
        ``(obs_dim, feature_dim)``; a coord ``{name}_category`` of length ``l_max`` is added.

    Returns
    -------
    TensorVariable
        ``Z``, the ``N x K_max`` binary matrix.

    References
    ----------
    F. Doshi-Velez and Z. Ghahramani (2009). Correlated non-parametric latent feature models.
    *Proceedings of the 25th Conference on Uncertainty in Artificial Intelligence (UAI)*.
    """
    model = pm.modelcontext(None)
    C, M, dims = _categories_and_features(name, model, alpha_c, alpha_m, l_max, beta_c, beta_m,
                                          shape, dims, "pmi.ibp_ibp")
    z = pt.gt(pt.dot(C, M), 0).astype("int8")
    return pm.Deterministic(name, z, dims=dims)


def noisy_or_ibp_ibp(name, alpha_c, alpha_m, q, *, l_max, beta_c=1.0, beta_m=1.0, shape=None,
                     dims=None):
    r"""The noisy-or IBP-IBP correlated feature model: ``Z ~ Bernoulli(1 - q^(C M))``.

    Creates ``{name}_C`` and ``{name}_M`` as :func:`ibp_ibp` does and the random binary
    matrix ``{name}``:

    .. math:: z_{nk} \sim \mathrm{Bernoulli}\big(1 - q^{\,c_n^\top m_k}\big),

    each category of observation ``n`` owning feature ``k`` switching it on independently
    with probability ``1 - q``, no leak (``0^0 = 1``: no owning category, no feature;
    Doshi-Velez 2009, §7.2.3, eq. 7.7).  ``q -> 0`` recovers the IBP-IBP.  ``q`` may be a
    number or a free variable on ``(0, 1)``, e.g. ``pm.Beta("q", 1, 1)`` (updated by
    :class:`pymc_ibp.NoisyOrQSlice`).  ``pm.sample`` assigns :class:`pymc_ibp.IBPGibbs` to
    ``C`` (row by row, with the joint block moves of §7.2.3: ``c_nl`` flipped together with
    the features of row ``n`` that it parents, redrawn from ``Bernoulli(1 - q^s')``, and the
    turn-on / turn-off moves that switch a feature and one of its parents together) and ``M``
    (entry by entry), and to ``Z`` its column-wise updates with prior odds
    ``(1 - q^s)/q^s`` (eq. 7.9; AcceleratedGibbs under a linear-Gaussian likelihood).

    Parameters
    ----------
    name : str
        Name of ``Z``.
    alpha_c, alpha_m : tensor_like of float
        IBP masses of the categories and of the category-feature matrix.
    q : tensor_like of float
        Probability that one owning category fails to switch a feature on, ``0 < q < 1``.
    l_max : int
        Category slots.
    beta_c, beta_m, shape, dims
        As in :func:`ibp_ibp`.

    Returns
    -------
    TensorVariable
        ``Z``, the ``N x K_max`` Bernoulli matrix.

    References
    ----------
    F. Doshi-Velez (2009). *The Indian Buffet Process: Scalable Inference and Extensions.*
    MSc thesis, University of Cambridge, §7.2.3.
    """
    model = pm.modelcontext(None)
    try:
        qv = float(q)
    except (TypeError, ValueError):
        qv = None
    if qv is not None and not 0.0 < qv < 1.0:
        raise ValueError(f"pmi.noisy_or_ibp_ibp needs 0 < q < 1; got q={q!r}.")
    C, M, dims = _categories_and_features(name, model, alpha_c, alpha_m, l_max, beta_c, beta_m,
                                          shape, dims, "pmi.noisy_or_ibp_ibp")
    s = pt.dot(C, M)
    p = 1.0 - pt.pow(q, s)
    if dims is None:
        return pm.Bernoulli(name, p=p)
    return pm.Bernoulli(name, p=p, dims=dims)
