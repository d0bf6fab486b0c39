"""Numba kernels of the linear-Gaussian IBP samplers (spec §3.1, §4.3, §4.4).

Conventions: ``Z`` is the ``N x K_max`` int64 matrix of the model (all slots), ``act`` lists the
active slots in a compact order, and the per-feature arrays (``G = ZᵀZ``, ``RX = ZᵀX``, the
posterior ``Sig``/``mu``) are indexed in that compact order.  Sufficient statistics ``G`` and
``RX`` are sums over rows, so they add across data shards (spec §4.9).

Every random number is drawn from the numpy ``Generator`` passed in (the step's ``self.rng``).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy.linalg import cho_solve, solve_triangular

LOG2PI = math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def bernoulli_logodds(rng, logodds):
    """Draw ``1`` with probability ``sigmoid(logodds)``, stable for large |logodds|."""
    u = rng.random()
    if logodds >= 0:
        return 1 if u * (1.0 + math.exp(-logodds)) < 1.0 else 0
    e = math.exp(logodds)
    return 1 if u * (1.0 + e) < e else 0


@numba.njit(cache=True)
def categorical_logp(rng, logp, n):
    """Draw an index in ``0..n-1`` with probabilities ``∝ exp(logp[:n])``."""
    mx = -np.inf
    for i in range(n):
        if logp[i] > mx:
            mx = logp[i]
    tot = 0.0
    for i in range(n):
        tot += math.exp(logp[i] - mx)
    u = rng.random() * tot
    acc = 0.0
    for i in range(n):
        acc += math.exp(logp[i] - mx)
        if u < acc:
            return i
    return n - 1


@numba.njit(cache=True)
def chol_inverse(P):
    """``(P^{-1}, log|P|)`` of a symmetric positive-definite matrix by Cholesky."""
    k = P.shape[0]
    if k == 0:
        return np.zeros((0, 0)), 0.0
    L = np.linalg.cholesky(P)
    logdet = 0.0
    for i in range(k):
        logdet += 2.0 * math.log(L[i, i])
    Linv = np.zeros((k, k))
    for i in range(k):  # forward substitution for L^{-1}
        Linv[i, i] = 1.0 / L[i, i]
        for j in range(i):
            s = 0.0
            for t in range(j, i):
                s += L[i, t] * Linv[t, j]
            Linv[i, j] = -s / L[i, i]
    S = Linv.T @ Linv
    return 0.5 * (S + S.T), logdet


@numba.njit(cache=True)
def suff_stats(Z, X, act):
    """``G = Z_actᵀ Z_act`` and ``RX = Z_actᵀ X`` (the shard-summable statistics)."""
    n, d = X.shape
    k = act.shape[0]
    G = np.zeros((k, k))
    RX = np.zeros((k, d))
    for i in range(n):
        for a in range(k):
            if Z[i, act[a]] != 0:
                for t in range(d):
                    RX[a, t] += X[i, t]
                for b in range(k):
                    if Z[i, act[b]] != 0:
                        G[a, b] += 1.0
    return G, RX


@numba.njit(cache=True)
def posterior_from_stats(G, RX, sx2, sa2):
    """Feature posterior (spec §3.1): ``P = G/σx² + I/σa²``, ``Σ = P⁻¹``, ``μ = Σ RX/σx²``."""
    k = G.shape[0]
    P = G / sx2
    for i in range(k):
        P[i, i] += 1.0 / sa2
    Sig, logdetP = chol_inverse(P)
    mu = (Sig @ RX) / sx2
    return Sig, mu, logdetP


@numba.njit(cache=True)
def collapsed_loglik(G, RX, trXX, n, d, sx2, sa2):
    """``log p(X | Z)`` with ``A`` integrated out (spec §3.1 with E14 and E35).

    ``-ND/2 log 2π - (N-K)D log σx - KD log σa - D/2 log|ZᵀZ + σx²/σa² I|
    - (‖X‖² - tr(RXᵀ M RX)) / (2σx²)``, ``M = (ZᵀZ + σx²/σa² I)⁻¹``, costing ``O(K³ + K²D)``.
    """
    k = G.shape[0]
    ratio = sx2 / sa2
    lp = -0.5 * n * d * LOG2PI - 0.5 * (n - k) * d * math.log(sx2) - 0.5 * k * d * math.log(sa2)
    if k == 0:
        return lp - 0.5 * trXX / sx2
    Mi = G.copy()
    for i in range(k):
        Mi[i, i] += ratio
    M, logdet = chol_inverse(Mi)
    quad = 0.0
    MR = M @ RX
    for a in range(k):
        for t in range(d):
            quad += RX[a, t] * MR[a, t]
    return lp - 0.5 * d * logdet - 0.5 * (trXX - quad) / sx2


@numba.njit(cache=True)
def ibp_log_prior_compact(m_act, n, k_max, alpha, beta, log_norm):
    """``log P(Z)`` of :class:`pymc_ibp.IBP` from the active column sums (spec §2.2)."""
    kp = 0
    lp = 0.0
    for c in m_act:
        if c > 0:
            kp += 1
            lp += math.lgamma(c) + math.lgamma(n - c + beta) - math.lgamma(n + beta)
    mass = 0.0
    for i in range(n):
        mass += beta / (beta + i)
    lp += kp * math.log(alpha * beta) - alpha * mass
    lp += math.lgamma(k_max - kp + 1.0) - math.lgamma(k_max + 1.0) - log_norm
    return lp


# ---------------------------------------------------------------------------------------------
# compact active-set bookkeeping
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _swap_remove(idx, k, act, Sig, mu, G, RX):
    """Remove compact index ``idx`` (of ``k`` active) by swapping in the last one."""
    last = k - 1
    if idx != last:
        act[idx] = act[last]
        for j in range(k):
            Sig[idx, j] = Sig[last, j]
            G[idx, j] = G[last, j]
        for j in range(k):
            Sig[j, idx] = Sig[j, last]
            G[j, idx] = G[j, last]
        Sig[idx, idx] = Sig[last, last]
        G[idx, idx] = G[last, last]
        for t in range(mu.shape[1]):
            mu[idx, t] = mu[last, t]
            RX[idx, t] = RX[last, t]
    return k - 1


# ---------------------------------------------------------------------------------------------
# the accelerated collapsed Gibbs sweep (W = 1)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def accelerated_sweep(rng, Z, X, m, sx2, sa2, alpha, beta, refresh, greedy):
    """One sweep of the accelerated collapsed Gibbs sampler (spec §4.4, errata E1–E5).

    Maintains the full-data feature posterior ``(Σ, μ)`` and updates it by rank-one
    Sherman–Morrison down/up-dates as each row is removed and re-added, so each element costs
    ``O(K + D)`` and a sweep ``O(N(K² + KD))``.  ``Σ, μ`` are recomputed from the exact
    statistics ``G = ZᵀZ`` and ``RX = ZᵀX`` every ``refresh`` rows (drift control).

    Per row ``n`` (visited in random order):

    1. remove row ``n``: ``Σ₋ = Σ + v vᵀ/(σx² - zᵀv)``, ``μ₋ = μ - v (x - zμ)ᵀ/(σx² - zᵀv)``,
       ``v = Σz`` (the corrected E1 form);
    2. Gibbs each ``z_nk`` with ``m₋ₙₖ > 0`` from
       ``log m/(N-1-m+β) + log N(x; zμ₋, (zΣ₋zᵀ+σx²) I)`` ratios, row-``n`` singletons kept
       in the likelihood (they contribute ``σa²`` to the predictive variance);
    3. block-Gibbs row ``n``'s singleton set: ``j ~ Poisson(j; αβ/(N-1+β)) ·
       N(x; zμ₋, (s² + jσa²) I)``, ``j = 0..(free slots)`` (exact for the truncated prior of
       :class:`pymc_ibp.IBP`), placed in uniformly random empty slots;
    4. re-add row ``n``.

    ``m`` (column sums, length K_max) is updated in place, as is ``Z``.
    Returns ``(flips, births, deaths, kmax_hit)``.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    # active set, statistics, posterior
    act = np.empty(k_max, dtype=np.int64)
    k = 0
    for c in range(k_max):
        if m[c] > 0:
            act[k] = c
            k += 1
    G0, RX0 = suff_stats(Z, X, act[:k])
    G = np.zeros((k_max, k_max))
    RX = np.zeros((k_max, d))
    Sig = np.zeros((k_max, k_max))
    mu = np.zeros((k_max, d))
    G[:k, :k] = G0
    RX[:k] = RX0
    S0, mu0, _ = posterior_from_stats(G0, RX0, sx2, sa2)
    Sig[:k, :k] = S0
    mu[:k] = mu0

    log_lam = math.log(alpha * beta / (n - 1.0 + beta))
    flips = 0
    births = 0
    deaths = 0
    kmax_hit = 0
    z = np.zeros(k_max)
    v = np.zeros(k_max)
    r = np.zeros(d)
    e = np.zeros(d)
    order = np.arange(k_max)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)

    for it in range(n):
        i = rows[it]
        if refresh > 0 and it > 0 and it % refresh == 0 and k > 0:
            S1, mu1, _ = posterior_from_stats(G[:k, :k].copy(), RX[:k].copy(), sx2, sa2)
            Sig[:k, :k] = S1
            mu[:k] = mu1
        x = X[i]
        # ---- 1. remove row i -------------------------------------------------------------
        for a in range(k):
            z[a] = 1.0 if Z[i, act[a]] != 0 else 0.0
        q = 0.0
        for a in range(k):
            s = 0.0
            for b in range(k):
                if z[b] != 0.0:
                    s += Sig[a, b]
            v[a] = s
            q += z[a] * s
        c = sx2 - q
        for t in range(d):
            s = x[t]
            for a in range(k):
                if z[a] != 0.0:
                    s -= mu[a, t]
            e[t] = s
        for a in range(k):
            va = v[a] / c
            for b in range(k):
                Sig[a, b] += va * v[b]
            for t in range(d):
                mu[a, t] -= va * e[t]
        for a in range(k):
            if z[a] != 0.0:
                m[act[a]] -= 1
                for t in range(d):
                    RX[a, t] -= x[t]
                for b in range(k):
                    if z[b] != 0.0:
                        G[a, b] -= 1.0
        # singletons of row i: exact prior posterior (no data left on them)
        for a in range(k):
            if z[a] != 0.0 and m[act[a]] == 0:
                for b in range(k):
                    Sig[a, b] = 0.0
                    Sig[b, a] = 0.0
                Sig[a, a] = sa2
                for t in range(d):
                    mu[a, t] = 0.0
        # ---- 2. predictive of row i and element-wise Gibbs ----------------------------------
        s2 = sx2
        for a in range(k):
            s = 0.0
            for b in range(k):
                if z[b] != 0.0:
                    s += Sig[a, b]
            v[a] = s  # u = Σ₋ z
            s2 += z[a] * s
        rr = 0.0
        for t in range(d):
            s = x[t]
            for a in range(k):
                if z[a] != 0.0:
                    s -= mu[a, t]
            r[t] = s
            rr += s * s
        for a in range(k):
            order[a] = a
        for a in range(k - 1, 0, -1):  # random visiting order
            j = int(rng.random() * (a + 1))
            if j > a:
                j = a
            order[a], order[j] = order[j], order[a]
        for oi in range(k):
            a = order[oi]
            ma = m[act[a]]
            if ma == 0:
                continue  # singleton: handled by the birth step
            delta = 1.0 - 2.0 * z[a]
            s2n = s2 + 2.0 * delta * v[a] + Sig[a, a]
            rmu = 0.0
            mm = 0.0
            for t in range(d):
                rmu += r[t] * mu[a, t]
                mm += mu[a, t] * mu[a, t]
            rrn = rr - 2.0 * delta * rmu + mm
            ll_cur = -0.5 * d * math.log(s2) - 0.5 * rr / s2
            ll_new = -0.5 * d * math.log(s2n) - 0.5 * rrn / s2n
            if z[a] != 0.0:
                ll1, ll0 = ll_cur, ll_new
            else:
                ll1, ll0 = ll_new, ll_cur
            lo = math.log(ma) - math.log(n - 1.0 - ma + beta) + ll1 - ll0
            if greedy:
                newz = 1 if lo > 0 else 0
            else:
                newz = bernoulli_logodds(rng, lo)
            if newz != int(z[a]):
                flips += 1
                for t in range(d):
                    r[t] -= delta * mu[a, t]
                rr = rrn
                s2 = s2n
                for b in range(k):
                    v[b] += delta * Sig[b, a]
                z[a] = float(newz)
                Z[i, act[a]] = newz
        # ---- 3. singletons of row i: drop, then block-Gibbs the new count ------------------
        a = 0
        while a < k:
            if z[a] != 0.0 and m[act[a]] == 0:
                s2 -= sa2
                Z[i, act[a]] = 0
                deaths += 1
                z[a] = z[k - 1]
                k = _swap_remove(a, k, act, Sig, mu, G, RX)
            else:
                a += 1
        navail = k_max - k
        for j in range(navail + 1):
            sj = s2 + j * sa2
            logpj[j] = j * log_lam - math.lgamma(j + 1.0) - 0.5 * d * math.log(sj) - 0.5 * rr / sj
        if greedy:
            jnew = 0
            for j in range(navail + 1):
                if logpj[j] > logpj[jnew]:
                    jnew = j
        else:
            jnew = categorical_logp(rng, logpj, navail + 1)
        if jnew > 0:
            nf = 0
            for cc in range(k_max):
                if m[cc] == 0 and Z[i, cc] == 0:
                    is_act = False
                    for b in range(k):
                        if act[b] == cc:
                            is_act = True
                            break
                    if not is_act:
                        free[nf] = cc
                        nf += 1
            for j in range(jnew):  # uniform random distinct free slots
                t = j + int(rng.random() * (nf - j))
                if t >= nf:
                    t = nf - 1
                free[j], free[t] = free[t], free[j]
                slot = free[j]
                act[k] = slot
                for b in range(k + 1):
                    Sig[k, b] = 0.0
                    Sig[b, k] = 0.0
                    G[k, b] = 0.0
                    G[b, k] = 0.0
                Sig[k, k] = sa2
                for tt in range(d):
                    mu[k, tt] = 0.0
                    RX[k, tt] = 0.0
                z[k] = 1.0
                Z[i, slot] = 1
                k += 1
            births += jnew
        if k == k_max:
            kmax_hit = 1
        # ---- 4. re-add row i ---------------------------------------------------------------
        q = 0.0
        for a in range(k):
            s = 0.0
            for b in range(k):
                if z[b] != 0.0:
                    s += Sig[a, b]
            v[a] = s
            q += z[a] * s
        c = sx2 + q
        for t in range(d):
            s = x[t]
            for a in range(k):
                if z[a] != 0.0:
                    s -= mu[a, t]
            e[t] = s
        for a in range(k):
            va = v[a] / c
            for b in range(k):
                Sig[a, b] -= va * v[b]
            for t in range(d):
                mu[a, t] += va * e[t]
        for a in range(k):
            if z[a] != 0.0:
                m[act[a]] += 1
                for t in range(d):
                    RX[a, t] += x[t]
                for b in range(k):
                    if z[b] != 0.0:
                        G[a, b] += 1.0
    return flips, births, deaths, kmax_hit


@numba.njit(cache=True)
def accelerated_state_after_rows(Z, X, rows, sx2, sa2):
    """Testing hook: ``(Σ, μ)`` maintained by rank-one down/up-dates of ``rows`` (in order).

    Each listed row is removed and re-added with unchanged ``z``; the result must equal the
    from-scratch posterior (drift test, spec §4.4 "Numerical stability").
    """
    n, d = X.shape
    k = Z.shape[1]
    act = np.arange(k)
    G, RX = suff_stats(Z, X, act)
    Sig, mu, _ = posterior_from_stats(G, RX, sx2, sa2)
    v = np.zeros(k)
    e = np.zeros(d)
    for it in range(rows.shape[0]):
        i = rows[it]
        x = X[i]
        for sign in (-1.0, 1.0):
            q = 0.0
            for a in range(k):
                s = 0.0
                for b in range(k):
                    if Z[i, b] != 0:
                        s += Sig[a, b]
                v[a] = s
                if Z[i, a] != 0:
                    q += s
            c = sx2 + sign * q
            for t in range(d):
                s = x[t]
                for a in range(k):
                    if Z[i, a] != 0:
                        s -= mu[a, t]
                e[t] = s
            for a in range(k):
                va = v[a] / c
                for b in range(k):
                    Sig[a, b] -= sign * va * v[b]
                for t in range(d):
                    mu[a, t] += sign * va * e[t]
    return Sig, mu


# ---------------------------------------------------------------------------------------------
# the classic collapsed Gibbs sweep (reference sampler, spec §4.3)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _stats_with_row(G, RX, zrow, x, k, sign):
    for a in range(k):
        if zrow[a] != 0.0:
            for t in range(x.shape[0]):
                RX[a, t] += sign * x[t]
            for b in range(k):
                if zrow[b] != 0.0:
                    G[a, b] += sign


@numba.njit(cache=True)
def collapsed_sweep(rng, Z, X, m, sx2, sa2, alpha, beta, trXX):
    """One sweep of the collapsed Gibbs sampler (spec §4.3, errata E4, E5, E35).

    Each ``z_nk`` (``m₋ₙₖ > 0``) is drawn from ``m/(N-1-m+β) · p(X | Z)`` evaluated in full by
    :func:`collapsed_loglik` (``O(K³ + K²D)`` each, from cached ``ZᵀZ``, ``ZᵀX``); row ``n``'s
    singleton set is then block-Gibbs sampled over ``j = 0..(free slots)`` new features with
    ``Poisson(j; αβ/(N-1+β)) p(X | Z⁽ʲ⁾)``.  The reference for the accelerated sampler.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    act = np.empty(k_max, dtype=np.int64)
    k = 0
    for c in range(k_max):
        if m[c] > 0:
            act[k] = c
            k += 1
    G = np.zeros((k_max, k_max))
    RX = np.zeros((k_max, d))
    G0, RX0 = suff_stats(Z, X, act[:k])
    G[:k, :k] = G0
    RX[:k] = RX0
    log_lam = math.log(alpha * beta / (n - 1.0 + beta))
    flips = births = deaths = kmax_hit = 0
    z = np.zeros(k_max)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)
    for it in range(n):
        i = rows[it]
        x = X[i]
        for a in range(k):
            z[a] = 1.0 if Z[i, act[a]] != 0 else 0.0
        for a in range(k):
            if z[a] != 0.0:
                m[act[a]] -= 1
        perm = rng.permutation(k)
        for oi in range(k):
            a = perm[oi]
            ma = m[act[a]]
            if ma == 0:
                continue
            ll = np.zeros(2)
            old = z[a]
            for val in range(2):
                _stats_with_row(G, RX, z[:k], x, k, -1.0)
                z[a] = float(val)
                _stats_with_row(G, RX, z[:k], x, k, 1.0)
                ll[val] = collapsed_loglik(G[:k, :k], RX[:k], trXX, n, d, sx2, sa2)
                _stats_with_row(G, RX, z[:k], x, k, -1.0)
                z[a] = old
                _stats_with_row(G, RX, z[:k], x, k, 1.0)
            lo = math.log(ma) - math.log(n - 1.0 - ma + beta) + ll[1] - ll[0]
            newz = bernoulli_logodds(rng, lo)
            if newz != int(old):
                flips += 1
                _stats_with_row(G, RX, z[:k], x, k, -1.0)
                z[a] = float(newz)
                _stats_with_row(G, RX, z[:k], x, k, 1.0)
                Z[i, act[a]] = newz
        # singletons: remove from Z and from the stats
        a = 0
        while a < k:
            if z[a] != 0.0 and m[act[a]] == 0:
                _stats_with_row(G, RX, z[:k], x, k, -1.0)
                Z[i, act[a]] = 0
                z[a] = 0.0
                _stats_with_row(G, RX, z[:k], x, k, 1.0)
                deaths += 1
                Sig_dummy = np.zeros((k_max, k_max))
                mu_dummy = np.zeros((k_max, d))
                z[a] = z[k - 1]
                k = _swap_remove(a, k, act, Sig_dummy, mu_dummy, G, RX)
            else:
                a += 1
        navail = k_max - k
        for j in range(navail + 1):
            kj = k + j
            Gj = np.zeros((kj, kj))
            RXj = np.zeros((kj, d))
            Gj[:k, :k] = G[:k, :k]
            RXj[:k] = RX[:k]
            for b in range(k, kj):
                for t in range(d):
                    RXj[b, t] = x[t]
                for b2 in range(k, kj):
                    Gj[b, b2] = 1.0
                for a2 in range(k):
                    if z[a2] != 0.0:
                        Gj[a2, b] = 1.0
                        Gj[b, a2] = 1.0
            logpj[j] = (j * log_lam - math.lgamma(j + 1.0)
                        + collapsed_loglik(Gj, RXj, trXX, n, d, sx2, sa2))
        jnew = categorical_logp(rng, logpj, navail + 1)
        if jnew > 0:
            _stats_with_row(G, RX, z[:k], x, k, -1.0)
            nf = 0
            for cc in range(k_max):
                is_act = False
                for b in range(k):
                    if act[b] == cc:
                        is_act = True
                        break
                if not is_act:
                    free[nf] = cc
                    nf += 1
            for j in range(jnew):
                t = j + int(rng.random() * (nf - j))
                if t >= nf:
                    t = nf - 1
                free[j], free[t] = free[t], free[j]
                act[k] = free[j]
                for b in range(k + 1):
                    G[k, b] = 0.0
                    G[b, k] = 0.0
                for tt in range(d):
                    RX[k, tt] = 0.0
                z[k] = 1.0
                Z[i, free[j]] = 1
                k += 1
            births += jnew
            _stats_with_row(G, RX, z[:k], x, k, 1.0)
        if k == k_max:
            kmax_hit = 1
        for a in range(k):
            if z[a] != 0.0:
                m[act[a]] += 1
    return flips, births, deaths, kmax_hit


# ---------------------------------------------------------------------------------------------
# draws given Z
# ---------------------------------------------------------------------------------------------
def draw_features(rng, Z, X, sx2, sa2):
    """``A | Z, X`` (spec §3.1/§4.1): active rows from ``N(μ, Σ)`` column-wise via one Cholesky
    of ``P = ZᵀZ/σx² + I/σa²``; empty slots from the prior ``N(0, σa²)``."""
    k_max = Z.shape[1]
    d = X.shape[1]
    A = rng.normal(0.0, math.sqrt(sa2), size=(k_max, d))
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    if act.size:
        Za = Z[:, act].astype(np.float64)
        P = Za.T @ Za / sx2 + np.eye(act.size) / sa2
        L = np.linalg.cholesky(P)
        h = Za.T @ X / sx2
        mu = cho_solve((L, True), h)
        eps = rng.standard_normal(size=(act.size, d))
        A[act] = mu + solve_triangular(L.T, eps, lower=False)
    return A
