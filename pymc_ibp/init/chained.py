"""The chained start of the correlated feature models: features first, categories second.

In the DP-IBP, the IBP-IBP and the noisy-or IBP-IBP (:mod:`pymc_ibp.distributions.correlated`)
the likelihood sees the categories ``c`` (or ``C``) and the category-feature matrix ``M`` only
through ``Z``.  From PyMC's start (one category, no features, ``A = 0``) the likelihood does
not tell the features apart, and each update of ``c`` or ``M`` alone moves ``Z`` only where a
whole category agrees, so chains settle in merged modes.  Doshi-Velez (2009, §7.3) initialises
these models in a chain: fit the features with a plain IBP first, then the categories to the
features found.  :class:`ChainedStart` does that for one chain, with the chain's own generator:

1. the surrogate start of the plain IBP (:class:`~pymc_ibp.init.surrogate.SurrogateStart`: the
   annealed search and sweeps of the linear-Gaussian surrogate of the data) finds ``Z*`` and,
   on continuous data, its features ``A*``;
2. ``Z*`` is factorised exactly where it can be: for the DP-IBP each distinct row of ``Z*`` is a
   category (``M`` its rows, ``c`` the rows' patterns; beyond ``L_max`` patterns, the rarest go
   to the nearest kept one); for the IBP-IBP each feature in use is its own category
   (``C = Z*``, ``M = I``), or with more features than ``L_max`` each pattern is (one category
   per row with features); the noisy-or's ``Z`` is ``Z*`` where ``C M > 0`` (all of ``Z*``
   when the categories reproduce it; a feature a row's category lacks cannot be on).

It only chooses where a chain starts; the chain's steps then target the model's posterior.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_ibp.init.given import initial_value_given
from pymc_ibp.init.surrogate import SurrogateStart

__all__ = ["ChainedDraw", "ChainedStart", "categories_of_rows", "owners_of_features"]


class ChainedDraw(NamedTuple):
    """What :meth:`ChainedStart.draw` returns: ``values`` ``{name: value}`` of ``M``, the
    labels (``c`` or ``C``), the noisy-or's ``Z`` and the model's offset where it starts at
    the surrogate's; ``features`` the surrogate's ``A`` (``K_max x D``) on continuous data,
    else ``None``."""

    values: dict
    features: np.ndarray | None


def categories_of_rows(Z, l_max):
    """``(c, M)`` with ``M[c]`` equal to ``Z`` (``N x K``) when it has at most ``l_max``
    distinct rows: the patterns in decreasing order of use are the categories; a rarer pattern
    beyond ``l_max`` goes to the nearest kept one (Hamming distance, the more used on ties)."""
    pats, inv, counts = np.unique(Z, axis=0, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    order = np.argsort(-counts, kind="stable")
    keep = order[:l_max]
    rank = np.empty(len(pats), dtype=np.int64)
    rank[keep] = np.arange(len(keep))
    for j in order[l_max:]:
        dist = np.abs(pats[keep].astype(np.int64) - pats[j]).sum(axis=1)
        rank[j] = int(np.argmin(dist))  # keep is sorted by use: the first minimum is the most used
    M = np.zeros((l_max, Z.shape[1]), dtype=np.int8)
    M[:len(keep)] = pats[keep]
    return rank[inv], M


def owners_of_features(Z, l_max):
    """``(C, M)`` with ``1[C M > 0]`` equal to ``Z`` (``N x K``): each feature in use its own
    category (``C`` its column, ``M`` one owner per feature) when there are at most ``l_max``;
    else one category per row with features, its pattern (:func:`categories_of_rows` over
    those rows), and none for a row without features."""
    n, k = Z.shape
    C = np.zeros((n, l_max), dtype=np.int8)
    M = np.zeros((l_max, k), dtype=np.int8)
    act = np.flatnonzero(Z.sum(axis=0))
    if act.size <= l_max:
        C[:, :act.size] = Z[:, act]
        M[np.arange(act.size), act] = 1
        return C, M
    rows = np.flatnonzero(Z.any(axis=1))
    c, M = categories_of_rows(Z[rows], l_max)
    C[rows, c] = 1
    return C, M


class ChainedStart:
    """The chained start (module docstring) of the category-feature matrix ``m_rv`` of the
    correlated model ``match`` (:func:`pymc_ibp.matching.correlated.match_correlated`), with
    the plain IBP's ``alpha``, ``beta`` those of ``M``.  ``who`` names the step in messages.
    Raises :class:`~pymc_ibp.exceptions.ModelPatternError` when the surrogate does not apply
    (e.g. missing entries).  ``given``: whether the user gave the start of ``M``, the labels or
    the noisy-or's ``Z`` (told at the first chain's initial point; the labels' own step may
    move them before ``M``'s first update)."""

    def __init__(self, model, m_rv, match, alpha, beta, who, initial_point=None):
        ip = model.initial_point() if initial_point is None else initial_point
        self.kind = match.kind
        self.m_name = model.rvs_to_values[m_rv].name
        self.labels_name = model.rvs_to_values[match.labels].name
        self.z_name = None if match.z_rv is None else model.rvs_to_values[match.z_rv].name
        self.l_max, self.k_max = np.shape(ip[self.m_name])
        n = np.shape(ip[self.labels_name])[0]
        self.surrogate = SurrogateStart(model, match.z, [match.child], (n, self.k_max), alpha,
                                        beta, who, initial_point)
        rvs = [m_rv, match.labels] + ([match.z_rv] if match.z_rv is not None else [])
        self.given = initial_value_given(model, rvs, initial_point)
        # A starts at the surrogate's features when it is one free untransformed K_max x D
        # variable whose start the user did not give
        a = match.a_rv
        self.a_name = None
        if (a is not None and model.rvs_to_transforms.get(a) is None
                and np.shape(ip[model.rvs_to_values[a].name]) == (self.k_max,
                                                                   self.surrogate.d)
                and not initial_value_given(model, [a], initial_point)):
            self.a_name = model.rvs_to_values[a].name

    def draw(self, rng, point):
        """The :class:`ChainedDraw` of one chain, with the chain's own generator ``rng``;
        every value has the dtype of ``point``'s."""
        sd = self.surrogate.draw(rng, point)
        Z = np.asarray(sd.z, dtype=np.int8)
        if self.kind == "dp_ibp":
            labels, M = categories_of_rows(Z, self.l_max)
        else:
            labels, M = owners_of_features(Z, self.l_max)
        values = dict(sd.offsets)
        values[self.m_name] = M
        values[self.labels_name] = labels
        if self.z_name is not None:
            # the noisy-or's Z is 0 wherever C M is: a row moved to a kept pattern keeps
            # only the features of both
            values[self.z_name] = Z & (labels.astype(np.int64) @ M > 0).astype(np.int8)
        values = {k: np.asarray(v).astype(np.asarray(point[k]).dtype) for k, v in values.items()}
        return ChainedDraw(values, sd.features)
