"""The merge / unmerge move between two overlapping features and their merged triple, with
their parameters: a part of :class:`pymc_ibp.step_methods.feature_moves.FeatureParameterMoves`
(``IBPGibbs(feature_triples=...)``; the collapsed form is
:func:`pymc_ibp.kernels.pair_triple_moves`).

Two features that co-occur in most rows are often found as their union plus two correction
features on the rows owning one alone: ``Z @ A`` is the same, but no single-entry update,
split / merge or fold leaves that state.  The move maps one form to the other with the
parameters, a reversible jump with unit Jacobian (Green 1995).

References
----------
P. J. Green (1995). Reversible jump Markov chain Monte Carlo computation and Bayesian model
determination. *Biometrika* 82(4), 711-732.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_ibp import kernels
from pymc_ibp._numba_utils import ordered_pair as _ordered_pair
from pymc_ibp._numba_utils import ordered_triple as _ordered_triple

__all__ = ["PairTripleMove"]


class PairTripleMove:
    """The merge / unmerge move between two overlapping features and their merged triple, with
    their parameters, of the :class:`FeatureParameterMoves` ``features`` (whose Laplace
    approximations and target it uses); :meth:`propose` states it."""

    def __init__(self, features):
        self.f = features

    def propose(self, rng, Z, trial, alpha, beta):
        r"""One merge or unmerge proposal between a pair of overlapping features and the
        *merged triple* that fits the same, with their parameters; returns ``(accepted, Z)``
        (on acceptance ``trial[A]`` holds the new parameters, a new array).

        Two features ``p, q`` that co-occur in most rows are often found as ``F = p ∨ q``
        (parameters ``A_p + A_q``) with two corrections ``u = p ∧ ¬q`` (``-A_q``) and
        ``v = q ∧ ¬p`` (``-A_p``) on the rows owning one alone (the collapsed form:
        :func:`pymc_ibp.kernels.pair_triple_moves`).  *Merge* (probability ½): an ordered
        pair ``(s_1, s_2)`` of active columns (among ``K_+ (K_+ - 1)``) and an empty slot
        ``s_3`` (among ``E``); unless ``p = z_{s_1}`` and ``q = z_{s_2}`` overlap and each
        has rows without the other, a null move; else ``z_{s_1} = p ∨ q``,
        ``z_{s_2} = p ∧ ¬q``, ``z_{s_3} = q ∧ ¬p``, ``A_F \sim q_F`` (the Laplace
        approximation of a feature owned by the rows of ``p ∧ q``, given the other
        features), ``A_u = A_p - A_F``, ``A_v = A_q - A_F`` (the old ``A_{s_3}`` dropped).
        *Unmerge* (the reverse): an ordered triple of active columns (among
        ``K_+ (K_+ - 1) (K_+ - 2)``); unless ``u, v`` are disjoint, inside ``F`` and leave
        rows of ``F``, a null move; else ``A_p = A_F + A_u``, ``A_q = A_F + A_v`` and
        ``A_{s_3} \sim q_0``.  The map ``(A_p, A_q, A_F) \to (A_F, A_u, A_v)`` has unit
        Jacobian, so a merge is accepted with

        .. math:: \min\Big\{1, \frac{P(Z')\,p(X\mid Z', A')\,p(A_F)\,p(A_u)\,p(A_v)}
            {P(Z)\,p(X\mid Z, A)\,p(A_p)\,p(A_q)\,p(A_{s_3})}\,
            \frac{E\,q_0(A_{s_3})}{(K_+ + 1)\,q_F(A_F)}\Big\}

        (``K_+``, ``E`` before it), an unmerge with the reciprocal (Green 1995).
        """
        try:
            return self._propose(rng, Z, trial, alpha, beta)
        except FloatingPointError:
            return 0, Z

    def _propose(self, rng, Z, trial, alpha, beta):
        k_max = Z.shape[1]
        m = Z.sum(axis=0)
        act = np.flatnonzero(m > 0)
        kp = act.size
        a_cur = np.array(trial[self.f.a_name], dtype=float)
        if rng.random() < 0.5:  # ---- unmerge: triple -> pair
            if kp < 3:
                return 0, Z
            s1, s2, s3 = (int(act[i]) for i in _ordered_triple.py_func(rng, kp))
            if not kernels.is_merged_triple(Z, s1, s2, s3, 0.0):
                return 0, Z
            pair = Z.copy()
            kernels.unmerge_columns(Z, pair, s1, s2, s3)
            a_p, a_q = a_cur[s1] + a_cur[s2], a_cur[s1] + a_cur[s3]
            q0 = self.f.prior_laplace(trial, pair, s3)
            a_e = q0[0] + rng.standard_normal(q0[0].shape) / np.sqrt(q0[1])
            log_r = self._merge_log_ratio(trial, pair, Z, (s1, s2, s3), (a_p, a_q, a_e),
                                          (a_cur[s1], a_cur[s2], a_cur[s3]), q0,
                                          self._both_laplace(trial, pair, s1, s2, s3), kp - 1,
                                          alpha, beta)
            if self.f.accepts(rng, -log_r, pair, trial, {s1: a_p, s2: a_q, s3: a_e}):
                return 1, pair
            return 0, Z
        if kp < 2 or kp == k_max:  # ---- merge: pair -> triple
            return 0, Z
        i, j = _ordered_pair.py_func(rng, kp)
        s1, s2 = int(act[i]), int(act[j])
        empty = np.flatnonzero(m == 0)
        s3 = int(empty[int(rng.random() * empty.size)])
        if not all(kernels.pair_overlap(Z, s1, s2)):
            return 0, Z
        triple = Z.copy()
        kernels.merge_columns(Z, triple, s1, s2, s3)
        q_f = self._both_laplace(trial, Z, s1, s2, s3)
        a_f = q_f[0] + rng.standard_normal(q_f[0].shape) / np.sqrt(q_f[1])
        a_p, a_q = a_cur[s1], a_cur[s2]
        log_r = self._merge_log_ratio(trial, Z, triple, (s1, s2, s3), (a_p, a_q, a_cur[s3]),
                                      (a_f, a_p - a_f, a_q - a_f),
                                      self.f.prior_laplace(trial, Z, s3), q_f, kp, alpha, beta)
        if self.f.accepts(rng, log_r, triple, trial, {s1: a_f, s2: a_p - a_f, s3: a_q - a_f}):
            return 1, triple
        return 0, Z

    def _both_laplace(self, trial, pair, s1, s2, s3):
        """``q_F``: the Laplace approximation of the parameters of a feature owned by the rows
        of both columns ``s1`` and ``s2`` of ``pair``, given the other features (columns
        ``s2``, ``s3`` emptied, their rows of ``A`` and ``A_{s1}`` at 0).  It depends only on
        what a merge or unmerge of ``s1, s2`` leaves unchanged."""
        both = pair.copy()
        both[:, s1] = (pair[:, s1] != 0) & (pair[:, s2] != 0)
        both[:, s2] = 0
        both[:, s3] = 0
        zero = np.zeros_like(np.asarray(trial[self.f.a_name], dtype=float)[s1])
        return self.f.laplace(self.f.with_rows(trial, {s1: zero, s2: zero, s3: zero}), both, s1)

    def _merge_log_ratio(self, trial, pair, triple, slots, a_pair, a_triple, q0, q_f, kp,
                         alpha, beta):
        """Log acceptance ratio of the merge ``(pair, a_pair) -> (triple, a_triple)`` into the
        empty slot ``slots[2]`` (``kp`` active columns before it; ``q0`` the prior's Laplace
        approximation of that slot's row, ``q_f`` :meth:`_both_laplace`)."""
        return (self.f.joint_log_ratio(trial, pair, dict(zip(slots, a_pair, strict=True)),
                                       triple, dict(zip(slots, a_triple, strict=True)), alpha,
                                      beta)
                + math.log(pair.shape[1] - kp) - math.log(kp + 1)
                + self.f.log_q(a_pair[2], *q0) - self.f.log_q(a_triple[0], *q_f))
