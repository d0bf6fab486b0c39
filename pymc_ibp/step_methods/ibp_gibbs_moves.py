"""Split–merge and dissolve / compose Metropolis–Hastings moves on a binary matrix ``Z`` under
the IBP prior, scored with the model's own row likelihood (a
:class:`~pymc_ibp.matching.rows.RowLikelihood`): the moves :class:`pymc_ibp.IBPGibbs` makes
after each sweep, and the pieces its feature moves share (:meth:`RowMoves.split_option_ll`,
:meth:`RowMoves.log_prior`).

References: E. Meeds, Z. Ghahramani, R. Neal and S. Roweis (2007), Modeling dyadic data with
binary latent factors, *NIPS 19*; S. Jain and R. M. Neal (2004), A split-merge Markov chain
Monte Carlo procedure for the Dirichlet process mixture model, *JCGS* 13(1), 158–182.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_ibp.distributions.ibp_math import ibp_log_pmf, log_beta_term
from pymc_ibp.step_methods.feature_moves import ordered_pair

__all__ = ["RowMoves"]


class RowMoves:
    """The row-likelihood moves of a binary matrix ``Z`` (value ``z_name``) with ``k_max``
    slots: ``rows`` its :class:`~pymc_ibp.matching.rows.RowLikelihood`.  Every move takes the
    chain's generator ``rng``.  ``potentials``: the model's potentials on what the moves
    change (a :class:`~pymc_ibp.step_methods.potentials.PotentialTerms`, whose ratio joins
    every acceptance test: :meth:`accepts`), or ``None``."""

    def __init__(self, rows, z_name, k_max, potentials=None):
        self.rows, self.z_name, self.k_max = rows, z_name, k_max
        self.potentials = potentials

    def accepts(self, rng, log_r, Z, trial):
        """The Metropolis--Hastings test of a move to ``Z`` (the other values in ``trial``)
        whose log ratio without the model's potentials is ``log_r``; with potentials, their
        ratio joins it."""
        if self.potentials is None:
            return math.log(rng.random()) < log_r
        return self.potentials.accepts(rng, log_r, {**trial, self.z_name: Z})

    def split_merge_move(self, rng, Z, trial, alpha, beta, cur=None):
        r"""One split–merge Metropolis–Hastings proposal on ``Z`` given every other variable
        (Meeds et al. 2007; Jain & Neal 2004), with the model's own row likelihood.

        *Split* (probability ½): an active column ``c`` and an empty slot ``t``, each uniform;
        every owner ``r`` of ``c`` independently takes option ``c`` only, ``t`` only or both with
        probability :math:`p_r(o) \propto p(x_r \mid z_r^{(o)}, \cdot)` (the row likelihoods
        of the three options, two compiled evaluations since the likelihood factorises over
        rows; slot ``t`` brings the current value of its own parameters).  An allocation that
        leaves a column empty is a null move.  *Merge* (probability ½): an ordered pair of
        distinct active columns (keep, remove) becomes their union in ``keep``; its reverse
        split is scored at the merged state (three evaluations).  With the truncated IBP pmf,
        the empty-slot choice cancels the slot factor and a split ``Z → Z'`` is accepted with

        .. math:: \min\Big\{1, \frac{p(X\mid Z')}{p(X\mid Z)}\,
            \frac{\alpha\beta\,B(m_1, N-m_1+\beta)\,B(m_2, N-m_2+\beta)}
            {B(m, N-m+\beta)\,(K_+ + 1)\,\prod_r p_r(o_r)}\Big\}

        (``K_+`` counted before the split), a merge with the reciprocal.  It is a Metropolis
        move on ``p(Z | everything else)``, so it leaves the joint posterior invariant.
        ``cur``: the rows' log-likelihoods at ``Z`` when known (one evaluation fewer).
        Returns ``(accepted, Z)``.
        """
        n, k_max = Z.shape
        m = Z.sum(axis=0)
        act = np.flatnonzero(m > 0)
        kp = act.size
        log_ab = math.log(alpha * beta)
        if rng.random() < 0.5:  # ---- split
            if kp == 0 or kp == k_max:
                return 0, Z
            c = act[int(rng.random() * kp)]
            empty = np.flatnonzero(m == 0)
            t = empty[int(rng.random() * empty.size)]
            own = Z[:, c] == 1
            ll = self.split_option_ll(trial, Z, c, t, own, cur)
            logp = ll - np.logaddexp.reduce(ll, axis=0)
            u = rng.random(n)
            cum = np.cumsum(np.exp(logp), axis=0)
            opt = np.minimum((u[None, :] > cum).sum(axis=0), 2)
            m1 = int(np.sum(own & (opt != 1)))
            m2 = int(np.sum(own & (opt != 0)))
            if m1 == 0 or m2 == 0:
                return 0, Z
            rows = np.flatnonzero(own)
            d_ll = float(np.sum(ll[opt[rows], rows] - ll[0, rows]))
            log_q = float(np.sum(logp[opt[rows], rows]))
            log_r = (d_ll + log_ab + log_beta_term(m1, n, beta) + log_beta_term(m2, n, beta)
                     - log_beta_term(int(m[c]), n, beta) - math.log(kp + 1.0) - log_q)
            split = Z.copy()
            split[rows, c] = (opt[rows] != 1).astype(Z.dtype)
            split[rows, t] = (opt[rows] != 0).astype(Z.dtype)
            if self.accepts(rng, log_r, split, trial):
                return 1, split
            return 0, Z
        if kp < 2:  # ---- merge
            return 0, Z
        i1, i2 = ordered_pair(rng, kp)
        keep, rem = act[i1], act[i2]
        merged = Z.copy()
        merged[:, keep] = Z[:, keep] | Z[:, rem]
        merged[:, rem] = 0
        own = merged[:, keep] == 1
        ll = self.split_option_ll(trial, merged, keep, rem, own)
        logp = ll - np.logaddexp.reduce(ll, axis=0)
        rows = np.flatnonzero(own)
        opt = np.where(Z[rows, rem] == 0, 0, np.where(Z[rows, keep] == 0, 1, 2))
        cur_ll = (self.rows.at(trial, Z) if cur is None else cur)[rows]
        d_ll = float(np.sum(cur_ll - ll[0, rows]))  # split state minus merged state
        log_q = float(np.sum(logp[opt, rows]))
        log_r = (d_ll + log_ab + log_beta_term(int(m[keep]), n, beta)
                 + log_beta_term(int(m[rem]), n, beta) - log_beta_term(rows.size, n, beta)
                 - math.log(kp) - log_q)
        if self.accepts(rng, -log_r, merged, trial):
            return 1, merged
        return 0, Z

    def combination_move(self, rng, Z, trial, alpha, beta, cur=None):
        r"""One *dissolve / compose* Metropolis–Hastings proposal on ``Z`` given every other
        variable, with the model's own row likelihood.

        A feature that stands for a combination of two others (a motif ``A_k ≈ A_i + A_j``, or
        a merged pair of features) cannot be replaced by the pair by single-entry updates or by
        split–merge moves, which would have to pass through worse states.

        *Dissolve* (probability ½): an active column ``k`` and an unordered pair ``{i, j}`` of
        other active columns, uniformly; every owner of ``k`` drops ``k`` and takes both ``i``
        and ``j``.  *Compose* (probability ½, the reverse): an empty slot ``t`` and a pair
        ``{i, j}`` of active columns, uniformly; every row owning both ``i`` and ``j``
        independently keeps its row (option 0) or takes ``t`` with ``{i, j}`` turned into
        ``{}``, ``{i}``, ``{j}`` or ``{i, j}`` (options 1–4), with probability
        :math:`p_r(o) \propto p(x_r\mid z_r^{(o)},\cdot)` (slot ``t`` brings the current value
        of its parameters); an allocation giving ``t`` no row, or leaving ``i`` or ``j``
        without rows, is a null move.  A dissolve
        ``Z → Z'`` is accepted with

        .. math:: \min\Big\{1, \frac{p(X\mid Z')\,P(Z')}{p(X\mid Z)\,P(Z)}\,
            \frac{K_+ \binom{K_+-1}{2}}{(K_{max}-K_+ + 1)\binom{K_+-1}{2}}
            \prod_r p_r(o_r)\Big\}

        (``P`` the truncated IBP pmf, ``K_+`` counted before the dissolve, the product over
        the rows owning both ``i`` and ``j`` after it, scored at ``Z'``), a compose with the
        reciprocal.  ``cur``: the rows' log-likelihoods at ``Z`` when known (one evaluation
        fewer).  Returns ``(accepted, Z)``.
        """
        n, k_max = Z.shape
        m = Z.sum(axis=0).astype(np.int64)
        act = np.flatnonzero(m > 0)
        kp = act.size
        if rng.random() < 0.5:  # ---- dissolve
            if kp < 3:
                return 0, Z
            k = act[int(rng.random() * kp)]
            rest = act[act != k]
            a, b = rng.choice(rest.size, size=2, replace=False)
            i, j = rest[a], rest[b]
            own = Z[:, k] == 1
            new = Z.copy()
            new[own, k] = 0
            new[own, i] = 1
            new[own, j] = 1
            log_q_rev, d_ll = self.compose_scores(trial, Z, new, k, i, j, cur)
            log_r = (d_ll + self.log_prior(new, alpha, beta) - self.log_prior(Z, alpha, beta)
                     + math.log(kp) - math.log(k_max - kp + 1) + log_q_rev)
            if self.accepts(rng, log_r, new, trial):
                return 1, new
            return 0, Z
        if kp < 2 or kp == k_max:  # ---- compose
            return 0, Z
        empty = np.flatnonzero(m == 0)
        t = empty[int(rng.random() * empty.size)]
        a, b = rng.choice(kp, size=2, replace=False)
        i, j = act[a], act[b]
        both = (Z[:, i] == 1) & (Z[:, j] == 1)
        if not both.any():
            return 0, Z
        ll = self.compose_option_ll(trial, Z, t, i, j, both, cur)
        logp = ll - np.logaddexp.reduce(ll, axis=0)
        rows = np.flatnonzero(both)
        cum = np.cumsum(np.exp(logp[:, rows]), axis=0)
        opt = np.minimum((rng.random(rows.size)[None, :] > cum).sum(axis=0), 4)
        if not np.any(opt > 0):
            return 0, Z
        new = Z.copy()
        on = rows[opt > 0]
        new[on, t] = 1
        new[on, i] = np.isin(opt[opt > 0], (2, 4)).astype(Z.dtype)
        new[on, j] = np.isin(opt[opt > 0], (3, 4)).astype(Z.dtype)
        if not (new[:, i].any() and new[:, j].any()):
            return 0, Z  # a pair member left empty: no dissolve leads back (null move)
        log_q = float(np.sum(logp[opt, rows]))
        d_ll = float(np.sum(ll[opt, rows] - ll[0, rows]))
        log_r = (d_ll + self.log_prior(new, alpha, beta) - self.log_prior(Z, alpha, beta)
                 - math.log(kp + 1) + math.log(k_max - kp) - log_q)
        if self.accepts(rng, log_r, new, trial):
            return 1, new
        return 0, Z

    def log_prior(self, Z, alpha, beta):
        return ibp_log_pmf(Z.sum(axis=0).astype(np.int64), Z.shape[0], Z.shape[1], alpha, beta)

    def compose_option_ll(self, trial, Z, t, i, j, both, cur=None):
        """Row log-likelihoods (5 x N) of the rows ``both`` (owning ``i`` and ``j``; slot ``t``
        empty) under the compose options 0 (unchanged), 1 (``t``), 2 (``t, i``),
        3 (``t, j``), 4 (``t, i, j``); ``cur``, if given, the rows' values at ``Z``."""
        ll = np.empty((5, Z.shape[0]))
        ll[0] = self.rows.at(trial, Z) if cur is None else cur
        for o, (zi, zj) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1)), start=1):
            Zo = Z.copy()
            Zo[both, t] = 1
            Zo[both, i] = zi
            Zo[both, j] = zj
            ll[o] = self.rows.at(trial, Zo)
        return ll

    def compose_scores(self, trial, Z, new, k, i, j, cur=None):
        """For a dissolve ``Z → new`` of column ``k`` into ``{i, j}``: the log-probability of
        its reverse compose allocation (scored at ``new``, slot ``k`` empty) and the change of
        the log-likelihood; ``cur``, if given, the rows' log-likelihoods at ``Z``."""
        both = (new[:, i] == 1) & (new[:, j] == 1)
        ll = self.compose_option_ll(trial, new, k, i, j, both)
        logp = ll - np.logaddexp.reduce(ll, axis=0)
        rows = np.flatnonzero(both)
        was_k = Z[rows, k] == 1
        opt = np.where(~was_k, 0, 1 + Z[rows, i] + 2 * Z[rows, j])
        # options: 1 = {t}, 2 = {t, i}, 3 = {t, j}, 4 = {t, i, j}
        log_q = float(np.sum(logp[opt, rows]))
        own = Z[:, k] == 1
        cur = self.rows.at(trial, Z) if cur is None else cur
        d_ll = float(np.sum(ll[0, own])) - float(np.sum(cur[own]))
        return log_q, d_ll

    def split_option_ll(self, trial, Z, c, t, own, cur=None):
        """Row log-likelihoods (3 x N) of the owners ``own`` of column ``c`` (slot ``t``
        empty) taking option 0 = ``c`` only (``Z`` itself), 1 = ``t`` only, 2 = both;
        ``cur``, if given, the rows' values at ``Z``."""
        ll = np.empty((3, Z.shape[0]))
        ll[0] = self.rows.at(trial, Z) if cur is None else cur
        Zo = Z.copy()
        Zo[own, t] = 1
        ll[2] = self.rows.at(trial, Zo)
        Zo[own, c] = 0
        ll[1] = self.rows.at(trial, Zo)
        return ll
