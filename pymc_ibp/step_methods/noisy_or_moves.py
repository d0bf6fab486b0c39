"""The joint moves of a binary matrix ``Z`` with a Bernoulli child matrix ``Y`` whose
probabilities it sets: for the noisy-or IBP-IBP (``Z`` the categories ``C``,
``Y ~ Bernoulli(1 - q^(C M))`` the features), the block flips and targeted turn-on / turn-off
moves of Doshi-Velez (2009, §7.2.3) that single-site Gibbs lacks, made by
:class:`pymc_ibp.IBPGibbs` after each sweep.

F. Doshi-Velez (2009). *The Indian buffet process: scalable inference and extensions*. MSc
thesis, University of Cambridge.
"""

from __future__ import annotations

import math

import numpy as np
from pytensor.tensor.random.basic import BernoulliRV

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.ibp_math import ibp_entry_logodds, log_birth_rate
from pymc_ibp.exceptions import ModelPatternError

__all__ = ["ChildBlockMoves"]


def _redraw_log_q(redrawn, Y, p):
    """Per row, the log-probability of the entries ``redrawn`` of ``Y`` under
    ``Bernoulli(p)`` (the proposal density of the block moves' redrawn children)."""
    with np.errstate(divide="ignore"):
        return np.where(redrawn, np.where(Y == 1, np.log(p), np.log1p(-p)), 0.0).sum(1)


class ChildBlockMoves:
    """The block and turn-on / turn-off moves of ``Z`` (value ``z_name``) with its Bernoulli
    child matrix ``Y`` (value ``y_name``, probabilities ``p_fn(point)``), scored with the row
    likelihood ``rows`` (a :class:`~pymc_ibp.matching.rows.RowLikelihood`, whose terms include
    ``Y``'s own).  Build with :meth:`find`; every move takes the chain's generator ``rng``."""

    def __init__(self, rows, z_name, y_name, p_fn):
        self.rows, self.z_name, self.y_name, self.p_fn = rows, z_name, y_name, p_fn

    @classmethod
    def find(cls, model, rows, ip, compile_kwargs, required):
        """The moves when exactly one child of ``Z`` is a free
        ``N x K`` Bernoulli matrix ``Y`` (e.g. the noisy-or features of
        :func:`pymc_ibp.noisy_or_ibp_ibp`, ``Y ~ Bernoulli(1 - q^(C M))`` with ``Z = C``);
        else ``None`` (or raise when ``required``).  ``Y``'s own likelihood is among the
        descendants of ``Z`` whose row log-likelihood ``rows`` already sums."""
        free = set(model.free_RVs)
        cands = [c for c in rows.children if c in free and isinstance(c.owner.op, BernoulliRV)
                 and c.ndim == 2 and ip[model.rvs_to_values[c].name].shape[0] == rows.n]
        if len(cands) != 1:
            if required:
                raise ModelPatternError(
                    f"IBPGibbs(block_moves=True): exactly one variable that depends on "
                    f"{rows.name!r} must be a free N x K pm.Bernoulli matrix (found "
                    f"{[c.name for c in cands]}).")
            return None
        p = model.replace_rvs_by_values([cands[0].owner.inputs[-1]])
        p_fn = compile_point_fn(model, p[0], compile_kwargs=compile_kwargs)
        return cls(rows, rows.name, model.rvs_to_values[cands[0]].name, p_fn)

    def block_move(self, rng, Z, trial, alpha, beta, k):
        r"""Flip ``z_nk`` jointly with the entries of the child matrix ``Y`` whose probability
        it changes (Doshi-Velez 2009, §7.2.3: a category and its children in the noisy-or
        IBP-IBP), one Metropolis–Hastings decision per row, for every row of column ``k``.

        Proposal for row ``n``: ``z'_nk = 1 - z_nk``; the entries ``y_nj`` with
        ``p'_nj ≠ p_nj`` redrawn from ``Bernoulli(p'_nj)``.  Acceptance
        ``min(1, P(z'_nk | Z_{-nk}) p(·| Z', Y') q(Y | Z) / (P(z_nk | Z_{-nk}) p(·| Z, Y)
        q(Y' | Z')))``, with ``p(·|…)`` the row likelihood of everything that depends on
        ``Z`` (``Y``'s logp and its children's), ``q`` the proposal of the redrawn entries
        and the IBP prior odds from the running column counts.  Single-site Gibbs cannot
        switch a category on where it is the only parent of a feature the data need, nor off
        where it is the only parent of an active one; this move can.  Returns the number of
        accepted rows; ``Z`` and ``trial[Y]`` are updated in place."""
        y_name, p_fn = self.y_name, self.p_fn
        n = Z.shape[0]
        Y = np.array(trial[y_name], copy=True)
        trial[self.z_name] = Z
        trial[y_name] = Y
        p0 = np.asarray(p_fn(trial), dtype=float)
        ll0 = np.asarray(self.rows(trial), dtype=float)  # all descendants of Z, Y's too
        Z1 = Z.copy()
        Z1[:, k] = 1 - Z1[:, k]
        t1 = {**trial, self.z_name: Z1}
        p1 = np.asarray(p_fn(t1), dtype=float)
        changed = p1 != p0
        Y1 = Y.copy()
        Y1[changed] = (rng.random(int(changed.sum())) < p1[changed]).astype(Y.dtype)
        t1[y_name] = Y1
        ll1 = np.asarray(self.rows(t1), dtype=float)
        with np.errstate(invalid="ignore"):
            d = (ll1 - _redraw_log_q(changed, Y1, p1)) - (ll0 - _redraw_log_q(changed, Y, p0))
        return self._accept_row_flips(rng, Z, Y, Y1, np.arange(n), np.full(n, k), d, alpha, beta)

    def _accept_row_flips(self, rng, Z, Y, Y1, rows, cols, d, alpha, beta):
        """Metropolis–Hastings decisions, in turn, on flipping ``Z[r, c]`` for ``(r, c)`` in
        ``zip(rows, cols)`` (with row ``r`` of the child matrix ``Y`` becoming ``Y1``'s): log
        ratio ``d[r]`` (``d`` one entry per row of ``Z``; NaN: impossible either way) plus the
        IBP prior odds of the flip from the running column counts.  ``Z`` and ``Y`` are
        updated in place; returns the number accepted."""
        n = Z.shape[0]
        d = np.where(np.isnan(d), -np.inf, d)
        m = Z.sum(axis=0).astype(np.int64)
        n_active = int((m > 0).sum())
        log_lam = log_birth_rate(alpha, beta, n)
        u = np.log(rng.random(len(rows)))
        accepted = 0
        for i, k, ui in zip(rows, cols, u, strict=True):
            old = int(Z[i, k])
            mk = int(m[k]) - old
            others = n_active - (1 if m[k] > 0 else 0)
            lo = float(ibp_entry_logodds(mk, others, n, Z.shape[1], log_lam, beta))
            if ui < (lo if old == 0 else -lo) + d[i]:
                Z[i, k] = 1 - old
                Y[i] = Y1[i]
                m[k] = mk + 1 - old
                n_active = others + (1 if m[k] > 0 else 0)
                accepted += 1
        return accepted

    def _parent_links(self, trial, Z, p):
        """``links[l, n, j]``: whether toggling ``z_nl`` changes the probability ``p_nj`` of
        the child matrix (``p`` its value at ``Z``), one evaluation per column of ``Z``."""
        p_fn = self.p_fn
        links = np.empty((Z.shape[1],) + p.shape, dtype=bool)
        for col in range(Z.shape[1]):
            Zt = Z.copy()
            Zt[:, col] = 1 - Zt[:, col]
            links[col] = np.asarray(p_fn({**trial, self.z_name: Zt}), dtype=float) != p
        return links

    def turn_on_move(self, rng, Z, trial, alpha, beta):
        r"""The targeted joint moves of Doshi-Velez (2009, §7.2.3) for the noisy-or IBP-IBP:
        one Metropolis–Hastings proposal per row, ``Z`` the categories ``C`` and ``Y`` the
        features (``Y ~ Bernoulli(1 - q^(C M))``).

        *Turn on* (probability ½): an entry ``k`` of ``y_n`` that is 0 and has a parent
        category ``l`` that row ``n`` lacks (toggling ``c_nl`` changes ``p_nk``), uniformly
        among such entries, and such an ``l`` uniformly among its absent parents; then
        ``c_nl = 1``, ``y_nk = 1``, and the other entries of ``y_n`` whose probability
        changes redrawn from ``Bernoulli(p'_nj)``.  *Turn off* (probability ½), the reverse:
        an entry ``k`` that is 1, one of its present parents ``l``; ``c_nl = 0``,
        ``y_nk = 0``, the other changed entries redrawn.  With :math:`E_n` the entries the
        move could pick and :math:`P_{nk}` the parents it could pick, the forward proposal
        has probability :math:`\frac12 |E_n|^{-1}|P_{nk}|^{-1}\prod_j q(y'_{nj})` and the
        reverse one is scored at the proposed state, so a turn-on is accepted with

        .. math:: \min\Big\{1, \frac{P(c_{nl}=1\mid C_{-nl})\, p(y'_n, x_n\mid c'_n, \cdot)}
            {P(c_{nl}=0\mid C_{-nl})\, p(y_n, x_n\mid c_n, \cdot)}\,
            \frac{\prod_{j\ne k} q(y_{nj})\;|E_n|\,|P_{nk}|}
            {\prod_{j\ne k} q(y'_{nj})\;|E'_n|\,|P'_{nk}|}\Big\}

        (``p(y_n, x_n | …)`` the row likelihood of everything that depends on ``Z``: the
        noisy-or prior of ``y_n`` and the data; the IBP prior odds from the running column
        counts), a turn-off with the reciprocal form.  Where single-site Gibbs would need the
        feature and its parent on at once, this proposes exactly that.  Returns the number of
        accepted rows; ``Z`` and ``trial[Y]`` are updated in place."""
        y_name, p_fn = self.y_name, self.p_fn
        n, n_cols = Z.shape
        Y = np.array(trial[y_name], copy=True)
        trial[self.z_name] = Z
        trial[y_name] = Y
        p0 = np.asarray(p_fn(trial), dtype=float)
        links0 = self._parent_links(trial, Z, p0)
        on = rng.random(n) < 0.5
        pick = np.full(n, -1)  # the entry k of y_n
        par = np.full(n, -1)  # the parent l
        log_fwd = np.zeros(n)
        for i in range(n):
            has = Z[i][:, None] == (0 if on[i] else 1)
            parents = links0[:, i, :] & has  # L x K
            cand = np.flatnonzero((Y[i] == (0 if on[i] else 1)) & parents.any(axis=0))
            if cand.size == 0:
                continue
            k = cand[int(rng.random() * cand.size)]
            ls = np.flatnonzero(parents[:, k])
            pick[i], par[i] = k, ls[int(rng.random() * ls.size)]
            log_fwd[i] = -math.log(cand.size) - math.log(ls.size)
        rows = np.flatnonzero(pick >= 0)
        if rows.size == 0:
            return 0
        Z1 = Z.copy()
        Z1[rows, par[rows]] = 1 - Z1[rows, par[rows]]
        t1 = {**trial, self.z_name: Z1}
        p1 = np.asarray(p_fn(t1), dtype=float)
        forced = np.zeros(Y.shape, dtype=bool)
        forced[rows, pick[rows]] = True
        redraw = (p1 != p0) & ~forced
        Y1 = Y.copy()
        Y1[redraw] = (rng.random(int(redraw.sum())) < p1[redraw]).astype(Y.dtype)
        Y1[rows, pick[rows]] = on[rows].astype(Y.dtype)
        t1[y_name] = Y1
        ll0 = np.asarray(self.rows(trial), dtype=float)
        ll1 = np.asarray(self.rows(t1), dtype=float)
        links1 = self._parent_links(t1, Z1, p1)
        log_rev = np.full(n, -np.inf)
        for i in rows:
            k, ll_ = pick[i], par[i]
            back = not on[i]  # the reverse move's direction
            parents = links1[:, i, :] & (Z1[i][:, None] == (0 if back else 1))
            cand = (Y1[i] == (0 if back else 1)) & parents.any(axis=0)
            if cand[k] and parents[ll_, k]:
                log_rev[i] = -math.log(cand.sum()) - math.log(parents[:, k].sum())
        with np.errstate(invalid="ignore"):
            d = ((ll1 - _redraw_log_q(redraw, Y1, p1) + log_rev)
                 - (ll0 - _redraw_log_q(redraw, Y, p0) + log_fwd))
        return self._accept_row_flips(rng, Z, Y, Y1, rows, par[rows], d, alpha, beta)
