"""The fold / unfold move of a duplicated feature with its parameters: a part of
:class:`pymc_ibp.step_methods.feature_moves.FeatureParameterMoves` (the fold moves of
:class:`pymc_ibp.IBPGibbs`).

Under a location ``Z @ A`` two columns with the same owners are one feature with its
parameters shared out, ``A_c + A_t``; the split–merge move never merges them (its anchors need
a row owning each alone).  The move folds such a pair into one column, and unfolds a column
into two, a reversible jump with unit Jacobian (Green 1995).

References
----------
P. J. Green (1995). Reversible jump Markov chain Monte Carlo computation and Bayesian model
determination. *Biometrika* 82(4), 711-732.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_ibp._numba_utils import ordered_pair as _ordered_pair

__all__ = ["FoldMove"]


class FoldMove:
    """The fold / unfold move of a duplicated feature with its parameters, of the
    :class:`FeatureParameterMoves` ``features`` (whose Laplace approximations and target it
    uses); :meth:`propose` states it."""

    def __init__(self, features):
        self.f = features

    def propose(self, rng, Z, trial, alpha, beta, seen=None):
        r"""One fold or unfold proposal of a feature with its parameters; returns
        ``(accepted, Z)`` (on acceptance ``trial[A]`` holds the new parameters, a new array).
        ``seen``: the rows the likelihood sees at ``trial``
        (:meth:`pymc_ibp.matching.rows.RowLikelihood.rows_seen`; ``None``: every row).

        The split–merge of
        :meth:`~pymc_ibp.step_methods.feature_moves.FeatureParameterMoves.split_merge` never merges
        two columns with the same owners (its anchors need a row owning each alone), yet under a
        location ``Z @ A`` such a pair is one feature with its parameters shared out, ``A_c + A_t``.
        "The same owners" counts only the rows the likelihood sees: with ``Z = M[c]`` (the DP-IBP)
        the rows of ``M`` of categories without observations are free, drawn from their prior, and
        would almost never agree.  *Fold* (probability ½): an ordered pair ``(c, t)`` of active
        columns (among ``K_+ (K_+ - 1)``); unless they have the same owners among the seen rows, a
        null move; else ``t`` is emptied (every row), ``A_c' = A_c + A_t`` and ``A_t' \sim q_0``
        (the Laplace approximation of the prior).  *Unfold* (the reverse): an active column ``c``
        (among ``K_+``) and an empty slot ``t`` (among ``E``); ``t`` takes ``c``'s owners among the
        seen rows and each of the ``U`` unseen rows with probability ½ (a null move if ``t`` stays
        empty), ``A_t' = u`` and ``A_c' = A_c - u`` with ``u \sim \mathcal N(A_c / 2, 1 / (2
        p_0))``, the conditional of one of two draws of ``q_0`` (precision ``p_0``) given their sum.
        The map ``(A_c, A_t, u) \to (A_c - u, u, A_t)`` has unit Jacobian, so an unfold is accepted
        with

        .. math:: \min\Big\{1, \frac{P(Z')\,p(X\mid Z', A')\,p(A_c')\,p(A_t')}
            {P(Z)\,p(X\mid Z, A)\,p(A_c)\,p(A_t)}\,
            \frac{E\,2^U\,q_0(A_t)}{(K_+ + 1)\,q_u(u)}\Big\}

        (``K_+``, ``E`` before it; ``P`` the prior of ``Z`` over every row), a fold with the
        reciprocal (Green 1995).
        """
        try:
            return self._propose(rng, Z, trial, alpha, beta, seen)
        except FloatingPointError:
            return 0, Z

    def _propose(self, rng, Z, trial, alpha, beta, seen):
        k_max = Z.shape[1]
        m = Z.sum(axis=0).astype(np.int64)
        act = np.flatnonzero(m > 0)
        kp = act.size
        a_cur = np.array(trial[self.f.a_name], dtype=float)
        unseen = (np.zeros(0, dtype=np.int64) if seen is None
                  else np.setdiff1d(np.arange(Z.shape[0]), seen))
        seen = slice(None) if seen is None else seen
        log_unseen = unseen.size * math.log(2.0)  # -log q of t's entries on the unseen rows
        if rng.random() < 0.5:  # ---- unfold
            if kp == 0 or kp == k_max:
                return 0, Z
            c, t = self.f.column_and_slot(rng, m, act)
            mean0, prec0 = self.f.prior_laplace(trial, Z, t)
            u = a_cur[c] / 2.0 + rng.standard_normal(a_cur[c].shape) / np.sqrt(2.0 * prec0)
            split = Z.copy()
            split[seen, t] = Z[seen, c]
            if unseen.size:
                split[unseen, t] = rng.random(unseen.size) < 0.5
            if not split[:, t].any():
                return 0, Z  # no fold leads here
            log_r = self._unfold_log_ratio(trial, Z, split, c, t, (a_cur[c], a_cur[t]),
                                           (a_cur[c] - u, u), (mean0, prec0), kp, alpha, beta)
            if self.f.accepts(rng, log_r + log_unseen, split, trial, {c: a_cur[c] - u, t: u}):
                return 1, split
            return 0, Z
        if kp < 2:  # ---- fold
            return 0, Z
        i, j = _ordered_pair.py_func(rng, kp)
        c, t = int(act[i]), int(act[j])
        if not np.array_equal(Z[seen, c], Z[seen, t]):
            return 0, Z
        merged = Z.copy()
        merged[:, t] = 0
        mean0, prec0 = self.f.prior_laplace(trial, merged, t)
        new_t = mean0 + rng.standard_normal(mean0.shape) / np.sqrt(prec0)
        total = a_cur[c] + a_cur[t]
        log_r = self._unfold_log_ratio(trial, merged, Z, c, t, (total, new_t),
                                       (a_cur[c], a_cur[t]), (mean0, prec0), kp - 1, alpha,
                                       beta)
        if self.f.accepts(rng, -(log_r + log_unseen), merged, trial, {c: total, t: new_t}):
            return 1, merged
        return 0, Z

    def _unfold_log_ratio(self, trial, merged, split, c, t, a_merged, a_split, q0, kp, alpha,
                          beta):
        """Log acceptance ratio of the unfold ``(merged, A_c, A_t = a_merged) -> (split,
        a_split)`` of column ``c`` into ``c`` and the empty slot ``t`` (``kp`` active columns
        before it; ``q0`` the prior's Laplace approximation of a row)."""
        k_max = merged.shape[1]
        mean0, prec0 = q0
        u = a_split[1]
        return (self.f.target_log_ratio(trial, merged, split, c, t, a_merged, a_split,
                                        alpha, beta)
                + math.log(k_max - kp) - math.log(kp + 1)
                + self.f.log_q(a_merged[1], mean0, prec0)
                - self.f.log_q(u, a_merged[0] / 2.0, 2.0 * prec0))
