"""The correlated feature models seen from their category-feature matrix ``M``: which of them
``M`` belongs to and what its chained start (:class:`pymc_ibp.init.chained.ChainedStart`)
needs to know.

:func:`match_correlated` recognises, in any model (built by :func:`pymc_ibp.dp_ibp`,
:func:`pymc_ibp.ibp_ibp`, :func:`pymc_ibp.noisy_or_ibp_ibp` or written by hand), one observed
likelihood whose location is ``Z @ A (+ other terms)`` with

* ``Z = M[c]``, ``c`` a free label vector (the DP-IBP, Doshi-Velez 2009, §7.2.1);
* ``Z = 1[C M > 0]``, ``C`` a free binary matrix (the IBP-IBP, §7.2.2);
* ``Z ~ Bernoulli(1 - q^(C M))`` (the noisy-or IBP-IBP, §7.2.3).
"""

from __future__ import annotations

from typing import NamedTuple

from pytensor.graph.traversal import ancestors
from pytensor.scalar import GT
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.random.basic import BernoulliRV
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp.matching.graph import first_axis_index, linked_mean_terms, strip

__all__ = ["CorrelatedMatch", "match_correlated"]


class CorrelatedMatch(NamedTuple):
    """What :func:`match_correlated` finds: ``kind`` (``"dp_ibp"``, ``"ibp_ibp"`` or
    ``"noisy_or"``); ``z`` the binary matrix the likelihood multiplies by ``A`` (symbolic,
    ``N x K_max``); ``labels`` the free variable that picks the categories of each row (``c``
    or ``C``); ``z_rv`` the noisy-or's own ``Z`` (``None`` otherwise); ``child`` the observed
    likelihood; ``a_rv`` the free variable ``A`` (``None`` when the right factor is not one)."""

    kind: str
    z: object
    labels: object
    z_rv: object
    child: object
    a_rv: object


def _dot_with(var, m_rv):
    """``C`` when ``var`` is ``C @ M`` (``pt.dot``) with ``C`` a random variable."""
    var = strip(var)
    node = var.owner
    if node is None or not isinstance(node.op, Dot) or node.inputs[1] is not m_rv:
        return None
    left = node.inputs[0]
    return left if left.owner is not None and isinstance(left.owner.op, RandomVariable) else None


def _classify(model, left, m_rv):
    """``(kind, labels, z_rv)`` of the left factor ``left`` of the likelihood's product, or
    ``None`` when it is not a correlated model's ``Z`` built on ``M``."""
    free = set(model.free_RVs)
    index = first_axis_index(left)
    if index is not None and left.owner.inputs[0] is m_rv:
        return ("dp_ibp", index, None) if index in free else None
    node = left.owner
    if (node is not None and isinstance(node.op, Elemwise)
            and isinstance(node.op.scalar_op, GT)):
        C = _dot_with(node.inputs[0], m_rv)
        return ("ibp_ibp", C, None) if C in free else None
    if node is not None and isinstance(node.op, BernoulliRV) and left in free:
        for var in ancestors([node.inputs[-1]], blockers=[m_rv]):
            C = _dot_with(var, m_rv)
            if C is not None and C in free:
                return "noisy_or", C, left
    return None


def match_correlated(model, m_rv):
    """The :class:`CorrelatedMatch` of the category-feature matrix ``m_rv``, or ``None`` when
    ``m_rv`` is not the ``M`` of one of the correlated models above (exactly one observed
    likelihood of location ``Z @ A``, possibly through a link such as ``exp``, depending on
    it)."""
    found = []
    for child in model.observed_RVs:
        if child.owner is None or m_rv not in set(ancestors([child])):
            continue
        for param in child.owner.inputs[2:]:  # after rng and size
            if m_rv not in set(ancestors([param])):
                continue
            terms = linked_mean_terms(param, m_rv)[0]
            if terms is None or m_rv not in set(ancestors([terms[0]])):
                continue
            kind = _classify(model, terms[0], m_rv)
            if kind is not None:
                right = terms[1]
                a_rv = right if right in set(model.free_RVs) else None
                found.append(CorrelatedMatch(kind[0], terms[0], kind[1], kind[2], child, a_rv))
    return found[0] if len(found) == 1 else None
