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

from pymc_ibp._numba_utils import bernoulli_logodds, categorical_logp, partial_shuffle

LOG2PI = math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------------------------
# linear algebra and statistics
# ---------------------------------------------------------------------------------------------
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
def active_slots(m):
    """``(act, k)``: the slots with ``m > 0`` in ``act[:k]`` (capacity ``len(m)``)."""
    act = np.empty(m.shape[0], dtype=np.int64)
    k = 0
    for c in range(m.shape[0]):
        if m[c] > 0:
            act[k] = c
            k += 1
    return act, k


@numba.njit(cache=True)
def _sweep_state(Z, X, m):
    """Capacity-sized sweep state: active slots, ``G = ZᵀZ``, ``RX = ZᵀX`` (compact order)
    and room for the posterior ``(Σ, μ)``."""
    k_max = Z.shape[1]
    d = X.shape[1]
    act, k = active_slots(m)
    G = np.zeros((k_max, k_max))
    RX = np.zeros((k_max, d))
    G0, RX0 = suff_stats(Z, X, act[:k])
    G[:k, :k] = G0
    RX[:k] = RX0
    return act, k, G, RX, np.zeros((k_max, k_max)), np.zeros((k_max, d))


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


@numba.njit(cache=True)
def _append_empty(k, act, slot, Sig, mu, G, RX, sa2):
    """Append ``slot`` as compact index ``k`` with no data: prior posterior ``N(0, σa²)``."""
    act[k] = slot
    for b in range(k + 1):
        Sig[k, b] = 0.0
        Sig[b, k] = 0.0
        G[k, b] = 0.0
        G[b, k] = 0.0
    Sig[k, k] = sa2
    for t in range(mu.shape[1]):
        mu[k, t] = 0.0
        RX[k, t] = 0.0
    return k + 1


@numba.njit(cache=True)
def _random_free_slots(rng, act, k, k_max, count, free):
    """Put ``count`` uniformly random distinct slots not in ``act[:k]`` into ``free[:count]``."""
    used = np.zeros(k_max, dtype=np.bool_)
    for b in range(k):
        used[act[b]] = True
    nf = 0
    for c in range(k_max):
        if not used[c]:
            free[nf] = c
            nf += 1
    partial_shuffle(rng, free[:nf], count)


@numba.njit(cache=True)
def _stats_with_row(G, RX, z, x, k, sign):
    """Add (``sign=+1``) or remove (``-1``) one row's terms of ``G = ZᵀZ`` and ``RX = ZᵀX``."""
    for a in range(k):
        if z[a] != 0.0:
            for t in range(x.shape[0]):
                RX[a, t] += sign * x[t]
            for b in range(k):
                if z[b] != 0.0:
                    G[a, b] += sign


# ---------------------------------------------------------------------------------------------
# per-row kernels of the accelerated sampler (reusable for any per-entry prior)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _sig_z(Sig, z, k, v):
    """``v = Σ z`` (first ``k`` entries) and return ``zᵀ Σ z``."""
    q = 0.0
    for a in range(k):
        s = 0.0
        for b in range(k):
            if z[b] != 0.0:
                s += Sig[a, b]
        v[a] = s
        q += z[a] * s
    return q


@numba.njit(cache=True)
def _residual(x, z, mu, k, r):
    """``r = x - z μ`` and return ``‖r‖²``."""
    rr = 0.0
    for t in range(x.shape[0]):
        s = x[t]
        for a in range(k):
            if z[a] != 0.0:
                s -= mu[a, t]
        r[t] = s
        rr += s * s
    return rr


@numba.njit(cache=True)
def row_update(Sig, mu, z, x, k, sx2, sign, v, e):
    """Add (``sign=+1``) or remove (``sign=-1``) observation row ``(z, x)`` from the feature
    posterior ``(Σ, μ)`` by a rank-one Sherman–Morrison update (spec §4.4, corrected E1–E3):

    remove: ``Σ₋ = Σ + v vᵀ/(σx² - zᵀv)``, ``μ₋ = μ - v (x - zμ)ᵀ/(σx² - zᵀv)``;
    add:    ``Σ = Σ₋ - v vᵀ/(σx² + zᵀv)``, ``μ = μ₋ + v (x - zμ₋)ᵀ/(σx² + zᵀv)``; ``v = Σz``.
    """
    q = _sig_z(Sig, z, k, v)
    c = sx2 + sign * q
    _residual(x, z, mu, k, e)
    for a in range(k):
        va = v[a] / c
        for b in range(k):
            Sig[a, b] -= sign * va * v[b]
        for t in range(mu.shape[1]):
            mu[a, t] += sign * va * e[t]


@numba.njit(cache=True)
def gibbs_row_entries(rng, z, k, prior_lo, skip, x, Sig, mu, sx2, r, v, order, greedy):
    """Gibbs-sample ``z[a]`` for ``a < k`` with ``skip[a] == False`` (random order), given the
    posterior ``(Σ, μ)`` of the *other* rows (spec §4.4, [000 eq 4.2] with W = 1):

    ``log P(z_a=1)/P(z_a=0) = prior_lo[a] + log N(x; z¹μ, s²₁ I) - log N(x; z⁰μ, s²₀ I)``,
    ``s² = zΣzᵀ + σx²``.  ``prior_lo`` carries each entry's own prior log-odds (the IBP's
    ``log m/(N-1-m+β)`` here; a per-entry probability for a dependent IBP).  Each test costs
    ``O(D)`` and each flip ``O(K + D)``.  On return ``r = x - zμ``, ``v = Σz``; returns
    ``(‖r‖², s², flips)``.
    """
    d = x.shape[0]
    s2 = sx2 + _sig_z(Sig, z, k, v)
    rr = _residual(x, z, mu, k, r)
    for a in range(k):
        order[a] = a
    partial_shuffle(rng, order[:k], k)
    flips = 0
    for oi in range(k):
        a = order[oi]
        if skip[a]:
            continue
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
        lo = prior_lo[a] + (ll_cur - ll_new if z[a] != 0.0 else ll_new - ll_cur)
        newz = (1 if lo > 0 else 0) if greedy else bernoulli_logodds(rng, lo)
        if newz != int(z[a]):
            flips += 1
            for t in range(d):
                r[t] -= delta * mu[a, t]
            rr = rrn
            s2 = s2n
            for b in range(k):
                v[b] += delta * Sig[b, a]
            z[a] = float(newz)
    return rr, s2, flips


@numba.njit(cache=True)
def birth_count(rng, navail, log_lam, s2, rr, d, sa2, logpj, greedy):
    """Draw the number ``j`` of row-``n`` singleton features (spec §4.3 eq 3.7 with E5):
    ``p(j) ∝ Poisson(j; λ) N(x; zμ, (s² + jσa²) I)`` over ``j = 0..navail``."""
    for j in range(navail + 1):
        sj = s2 + j * sa2
        logpj[j] = j * log_lam - math.lgamma(j + 1.0) - 0.5 * d * math.log(sj) - 0.5 * rr / sj
    if greedy:
        best = 0
        for j in range(navail + 1):
            if logpj[j] > logpj[best]:
                best = j
        return best
    return categorical_logp(rng, logpj, navail + 1)


# ---------------------------------------------------------------------------------------------
# the accelerated collapsed Gibbs sweep (W = 1)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def accelerated_sweep(rng, Z, X, m, sx2, sa2, alpha, beta, refresh, greedy):
    """One sweep of the accelerated collapsed Gibbs sampler (spec §4.4, errata E1–E5).

    Maintains the full-data feature posterior ``(Σ, μ)`` and updates it by rank-one
    Sherman–Morrison down/up-dates (:func:`row_update`) as each row is removed and re-added,
    so each element costs ``O(K + D)`` and a sweep ``O(N(K² + KD))``.  ``Σ, μ`` are
    recomputed from the exact statistics ``G = ZᵀZ`` and ``RX = ZᵀX`` every ``refresh`` rows
    (drift control).

    Per row ``n`` (visited in random order):

    1. remove row ``n`` from ``(Σ, μ)``, ``G``, ``RX`` and ``m``;
    2. Gibbs each ``z_nk`` with ``m₋ₙₖ > 0`` (:func:`gibbs_row_entries`, prior log-odds
       ``log m/(N-1-m+β)``), row-``n`` singletons kept in the likelihood (their posterior is
       the prior, so they add ``σa²`` to the predictive variance and nothing to the mean);
    3. block-Gibbs row ``n``'s singleton set: drop it, then draw ``j`` (:func:`birth_count`,
       ``λ = αβ/(N-1+β)``, ``j`` up to the free slots — exact for the truncated prior of
       :class:`pymc_ibp.IBP`) and place the ``j`` features in uniformly random empty slots;
    4. re-add row ``n``.

    ``m`` (column sums, length K_max) is updated in place, as is ``Z``.
    Returns ``(flips, births, deaths, kmax_hit)``.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    act, k, G, RX, Sig, mu = _sweep_state(Z, X, m)

    log_lam = math.log(alpha * beta / (n - 1.0 + beta))
    flips = births = deaths = kmax_hit = 0
    z = np.zeros(k_max)
    v = np.zeros(k_max)
    r = np.zeros(d)
    e = np.zeros(d)
    prior_lo = np.zeros(k_max)
    skip = np.zeros(k_max, dtype=np.bool_)
    order = np.arange(k_max)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)

    for it in range(n):
        i = rows[it]
        if k > 0 and (it == 0 or (refresh > 0 and it % refresh == 0)):
            S1, mu1, _ = posterior_from_stats(G[:k, :k].copy(), RX[:k].copy(), sx2, sa2)
            Sig[:k, :k] = S1
            mu[:k] = mu1
        x = X[i]
        # ---- 1. remove row i ---------------------------------------------------------------
        for a in range(k):
            z[a] = 1.0 if Z[i, act[a]] != 0 else 0.0
        row_update(Sig, mu, z, x, k, sx2, -1.0, v, e)
        _stats_with_row(G, RX, z, x, k, -1.0)
        for a in range(k):
            if z[a] != 0.0:
                m[act[a]] -= 1
        for a in range(k):
            ma = m[act[a]]
            skip[a] = ma == 0
            if ma == 0 and z[a] != 0.0:  # singleton of row i: exactly the prior posterior
                for b in range(k):
                    Sig[a, b] = 0.0
                    Sig[b, a] = 0.0
                Sig[a, a] = sa2
                for t in range(d):
                    mu[a, t] = 0.0
            else:
                prior_lo[a] = math.log(ma) - math.log(n - 1.0 - ma + beta)
        # ---- 2. element-wise Gibbs of the shared features ----------------------------------
        rr, s2, nfl = gibbs_row_entries(rng, z, k, prior_lo, skip, x, Sig, mu, sx2, r, v,
                                        order, greedy)
        flips += nfl
        # ---- 3. singletons of row i: drop, then block-Gibbs the new count ------------------
        a = 0
        while a < k:
            if z[a] != 0.0 and m[act[a]] == 0:
                s2 -= sa2
                deaths += 1
                z[a] = z[k - 1]
                k = _swap_remove(a, k, act, Sig, mu, G, RX)
            else:
                a += 1
        jnew = birth_count(rng, k_max - k, log_lam, s2, rr, d, sa2, logpj, greedy)
        if jnew > 0:
            _random_free_slots(rng, act, k, k_max, jnew, free)
            for j in range(jnew):
                z[k] = 1.0
                k = _append_empty(k, act, free[j], Sig, mu, G, RX, sa2)
            births += jnew
        if k == k_max:
            kmax_hit = 1
        # ---- 4. re-add row i ---------------------------------------------------------------
        for c in range(k_max):
            Z[i, c] = 0
        for a in range(k):
            if z[a] != 0.0:
                Z[i, act[a]] = 1
                m[act[a]] += 1
        row_update(Sig, mu, z, x, k, sx2, 1.0, v, e)
        _stats_with_row(G, RX, z, x, k, 1.0)
    return flips, births, deaths, kmax_hit


@numba.njit(cache=True)
def accelerated_state_after_rows(Z, X, rows, sx2, sa2):
    """Testing hook: ``(Σ, μ)`` maintained by :func:`row_update` while each of ``rows`` is
    removed and re-added (``z`` unchanged), with no refresh.  Must equal the from-scratch
    posterior (drift test, spec §4.4 "Numerical stability")."""
    k = Z.shape[1]
    d = X.shape[1]
    G, RX = suff_stats(Z, X, np.arange(k))
    Sig, mu, _ = posterior_from_stats(G, RX, sx2, sa2)
    v = np.zeros(k)
    e = np.zeros(d)
    z = np.zeros(k)
    for it in range(rows.shape[0]):
        i = rows[it]
        for a in range(k):
            z[a] = float(Z[i, a])
        row_update(Sig, mu, z, X[i], k, sx2, -1.0, v, e)
        row_update(Sig, mu, z, X[i], k, sx2, 1.0, v, e)
    return Sig, mu


# ---------------------------------------------------------------------------------------------
# the windowed variant (W > 1, spec §4.4 "Window W > 1")
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _window_loglik(C, E, d):
    """Matrix-normal ``log N(X_W; Z_W μ₋W, C_W ⊗ I_D)`` up to ``-WD/2 log 2π`` ([000 eq 4.2]):
    ``-D/2 log|C| - tr(Eᵀ C⁻¹ E)/2`` by one W×W Cholesky."""
    L = np.linalg.cholesky(C)
    logdet = 0.0
    for i in range(L.shape[0]):
        logdet += 2.0 * math.log(L[i, i])
    Y = _forward_sub(L, E)
    return -0.5 * d * logdet - 0.5 * np.sum(Y * Y)


@numba.njit(cache=True)
def _window_moments(Zw, Sig, mu, Xw, k, sx2):
    """``C_W = Z_W Σ Z_Wᵀ + σx² I`` and ``E = X_W - Z_W μ`` over the first ``k`` features."""
    w = Zw.shape[0]
    Zk = np.ascontiguousarray(Zw[:, :k])
    C = Zk @ np.ascontiguousarray(Sig[:k, :k]) @ np.ascontiguousarray(Zk.T)
    for i in range(w):
        C[i, i] += sx2
    E = Xw - Zk @ np.ascontiguousarray(mu[:k])
    return C, E


@numba.njit(cache=True)
def accelerated_sweep_window(rng, Z, X, m, sx2, sa2, alpha, beta, refresh, window):
    """Accelerated sweep removing ``W = window`` rows at a time (spec §4.4, [000 §4.2]).

    The posterior ``(Σ₋W, μ₋W)`` of all rows outside the window is obtained by ``W`` rank-one
    downdates; each ``z_nk`` of the window is then drawn from the prior odds times the
    matrix-normal likelihood of the whole window, ``N(X_W; Z_W μ₋W, C_W ⊗ I)`` with
    ``C_W = Z_W Σ₋W Z_Wᵀ + σx² I`` (cost ``O(W³ + W²D + WK)`` per entry), births of row ``n``
    use ``C_W + jσa² e_n e_nᵀ``, and the window is re-added by ``W`` rank-one updates.  The
    conditionals are exactly those of :func:`accelerated_sweep` (the window only changes the
    arithmetic); ``W = 1`` is the cheapest, ``W > 1`` refactorises less often per row.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    act, k, G, RX, Sig, mu = _sweep_state(Z, X, m)
    log_lam = math.log(alpha * beta / (n - 1.0 + beta))
    flips = births = deaths = kmax_hit = 0
    v = np.zeros(k_max)
    e = np.zeros(d)
    z = np.zeros(k_max)
    order = np.arange(k_max)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)
    done = 0
    for start in range(0, n, window):
        stop = min(start + window, n)
        w = stop - start
        wrows = rows[start:stop]
        if k > 0 and (start == 0 or (refresh > 0 and done >= refresh)):
            done = 0
            S1, mu1, _ = posterior_from_stats(G[:k, :k].copy(), RX[:k].copy(), sx2, sa2)
            Sig[:k, :k] = S1
            mu[:k] = mu1
        done += w
        # ---- remove the window ---------------------------------------------------------
        Zw = np.zeros((w, k_max))
        Xw = np.empty((w, d))
        for r in range(w):
            i = wrows[r]
            Xw[r] = X[i]
            for a in range(k):
                Zw[r, a] = 1.0 if Z[i, act[a]] != 0 else 0.0
            row_update(Sig, mu, Zw[r], X[i], k, sx2, -1.0, v, e)
            _stats_with_row(G, RX, Zw[r], X[i], k, -1.0)
        for a in range(k):  # columns owned only inside the window: exactly the prior
            if G[a, a] == 0.0:
                for b in range(k):
                    Sig[a, b] = 0.0
                    Sig[b, a] = 0.0
                Sig[a, a] = sa2
                for t in range(d):
                    mu[a, t] = 0.0
        # ---- Gibbs the window's rows ---------------------------------------------------
        for r in range(w):
            for a in range(k):
                order[a] = a
            partial_shuffle(rng, order[:k], k)
            C, E = _window_moments(Zw, Sig, mu, Xw, k, sx2)
            ll_cur = _window_loglik(C, E, d)
            for oi in range(k):
                a = order[oi]
                mk = m[act[a]] - int(Zw[r, a])  # owners other than this row
                if mk == 0:
                    continue
                Zw[r, a] = 1.0 - Zw[r, a]
                C2, E2 = _window_moments(Zw, Sig, mu, Xw, k, sx2)
                ll_new = _window_loglik(C2, E2, d)
                lo = math.log(mk) - math.log(n - 1.0 - mk + beta)
                lo += ll_new - ll_cur if Zw[r, a] != 0.0 else ll_cur - ll_new
                now = int(Zw[r, a])
                keep = bernoulli_logodds(rng, lo)
                if keep == now:
                    flips += 1
                    ll_cur = ll_new
                    m[act[a]] += 1 if now == 1 else -1
                else:
                    Zw[r, a] = 1.0 - Zw[r, a]
            # singletons of this row (no other owner anywhere): drop, then draw the count
            a = 0
            while a < k:
                if Zw[r, a] != 0.0 and m[act[a]] == 1:
                    m[act[a]] = 0
                    deaths += 1
                    last = k - 1
                    for rr in range(w):
                        Zw[rr, a] = Zw[rr, last]
                        Zw[rr, last] = 0.0
                    k = _swap_remove(a, k, act, Sig, mu, G, RX)
                else:
                    a += 1
            C, E = _window_moments(Zw, Sig, mu, Xw, k, sx2)
            navail = k_max - k
            for j in range(navail + 1):
                Cj = C.copy()
                Cj[r, r] += j * sa2
                logpj[j] = j * log_lam - math.lgamma(j + 1.0) + _window_loglik(Cj, E, d)
            jnew = categorical_logp(rng, logpj, navail + 1)
            if jnew > 0:
                _random_free_slots(rng, act, k, k_max, jnew, free)
                for j in range(jnew):
                    for rr in range(w):
                        Zw[rr, k] = 0.0
                    Zw[r, k] = 1.0
                    m[free[j]] = 1
                    k = _append_empty(k, act, free[j], Sig, mu, G, RX, sa2)
                births += jnew
            if k == k_max:
                kmax_hit = 1
        # ---- write back and re-add the window ------------------------------------------
        for r in range(w):
            i = wrows[r]
            for c in range(k_max):
                Z[i, c] = 0
            for a in range(k):
                if Zw[r, a] != 0.0:
                    Z[i, act[a]] = 1
            for a in range(k):
                z[a] = Zw[r, a]
            row_update(Sig, mu, z, X[i], k, sx2, 1.0, v, e)
            _stats_with_row(G, RX, z, X[i], k, 1.0)
    return flips, births, deaths, kmax_hit


# ---------------------------------------------------------------------------------------------
# the classic collapsed Gibbs sweep (reference sampler, spec §4.3)
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _loglik_with_new(G, RX, k, z, x, j, trXX, n, d, sx2, sa2):
    """``log p(X | Z)`` after appending ``j`` new columns that are 1 in row ``x``'s row only
    (``G``, ``RX`` already include that row with pattern ``z``)."""
    kj = k + j
    Gj = np.zeros((kj, kj))
    RXj = np.zeros((kj, d))
    Gj[:k, :k] = G[:k, :k]
    RXj[:k] = RX[:k]
    for b in range(k, kj):
        RXj[b] = x
        for b2 in range(k, kj):
            Gj[b, b2] = 1.0
        for a in range(k):
            if z[a] != 0.0:
                Gj[a, b] = 1.0
                Gj[b, a] = 1.0
    return collapsed_loglik(Gj, RXj, trXX, n, d, sx2, sa2)


@numba.njit(cache=True)
def collapsed_sweep(rng, Z, X, m, sx2, sa2, alpha, beta, trXX):
    """One sweep of the collapsed Gibbs sampler (spec §4.3, errata E4, E5, E35).

    Each ``z_nk`` (``m₋ₙₖ > 0``) is drawn from ``m/(N-1-m+β) · p(X | Z)`` with ``p(X | Z)``
    evaluated in full by :func:`collapsed_loglik` (``O(K³ + K²D)`` each, from cached ``ZᵀZ``,
    ``ZᵀX``); row ``n``'s singleton set is then block-Gibbs sampled over ``j = 0..(free
    slots)`` new features with ``Poisson(j; αβ/(N-1+β)) p(X | Z⁽ʲ⁾)``.  It shares no
    likelihood code with :func:`accelerated_sweep`, which makes it the reference.
    """
    n, d = X.shape
    k_max = Z.shape[1]
    # no posterior is kept here; no_sig / no_mu only satisfy the shared slot helpers
    act, k, G, RX, no_sig, no_mu = _sweep_state(Z, X, m)
    log_lam = math.log(alpha * beta / (n - 1.0 + beta))
    flips = births = deaths = kmax_hit = 0
    z = np.zeros(k_max)
    ll = np.zeros(2)
    logpj = np.zeros(k_max + 1)
    free = np.empty(k_max, dtype=np.int64)
    rows = rng.permutation(n)
    for it in range(n):
        i = rows[it]
        x = X[i]
        for a in range(k):
            z[a] = 1.0 if Z[i, act[a]] != 0 else 0.0
            if z[a] != 0.0:
                m[act[a]] -= 1
        perm = rng.permutation(k)
        for oi in range(k):
            a = perm[oi]
            ma = m[act[a]]
            if ma == 0:
                continue
            old = z[a]
            for val in range(2):
                _stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = float(val)
                _stats_with_row(G, RX, z, x, k, 1.0)
                ll[val] = collapsed_loglik(G[:k, :k], RX[:k], trXX, n, d, sx2, sa2)
                _stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = old
                _stats_with_row(G, RX, z, x, k, 1.0)
            lo = math.log(ma) - math.log(n - 1.0 - ma + beta) + ll[1] - ll[0]
            newz = bernoulli_logodds(rng, lo)
            if newz != int(old):
                flips += 1
                _stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = float(newz)
                _stats_with_row(G, RX, z, x, k, 1.0)
        # singletons: remove from the stats and the active set
        a = 0
        while a < k:
            if z[a] != 0.0 and m[act[a]] == 0:
                _stats_with_row(G, RX, z, x, k, -1.0)
                z[a] = 0.0
                _stats_with_row(G, RX, z, x, k, 1.0)
                deaths += 1
                z[a] = z[k - 1]
                k = _swap_remove(a, k, act, no_sig, no_mu, G, RX)
            else:
                a += 1
        navail = k_max - k
        for j in range(navail + 1):
            logpj[j] = (j * log_lam - math.lgamma(j + 1.0)
                        + _loglik_with_new(G, RX, k, z, x, j, trXX, n, d, sx2, sa2))
        jnew = categorical_logp(rng, logpj, navail + 1)
        if jnew > 0:
            _stats_with_row(G, RX, z, x, k, -1.0)
            _random_free_slots(rng, act, k, k_max, jnew, free)
            for j in range(jnew):
                z[k] = 1.0
                k = _append_empty(k, act, free[j], no_sig, no_mu, G, RX, sa2)
            births += jnew
            _stats_with_row(G, RX, z, x, k, 1.0)
        if k == k_max:
            kmax_hit = 1
        for c in range(k_max):
            Z[i, c] = 0
        for a in range(k):
            if z[a] != 0.0:
                Z[i, act[a]] = 1
                m[act[a]] += 1
    return flips, births, deaths, kmax_hit


# ---------------------------------------------------------------------------------------------
# draws given Z
# ---------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _forward_sub(L, B):
    """Solve ``L Y = B`` for lower-triangular ``L`` (columns of ``B`` at once)."""
    k = L.shape[0]
    Y = B.copy()
    for i in range(k):
        for j in range(i):
            Y[i] -= L[i, j] * Y[j]
        Y[i] /= L[i, i]
    return Y


@numba.njit(cache=True)
def _backward_sub_t(L, B):
    """Solve ``Lᵀ Y = B`` for lower-triangular ``L``."""
    k = L.shape[0]
    Y = B.copy()
    for i in range(k - 1, -1, -1):
        for j in range(i + 1, k):
            Y[i] -= L[j, i] * Y[j]
        Y[i] /= L[i, i]
    return Y


@numba.njit(cache=True)
def draw_active_features(rng, G, RX, sx2, sa2):
    """``A_act ~ N(μ, Σ)`` column-wise (spec §3.1, §4.1): one Cholesky ``P = L Lᵀ`` of
    ``P = G/σx² + I/σa²``; ``μ = L⁻ᵀ L⁻¹ RX/σx²``, ``A = μ + L⁻ᵀ ε``."""
    k, d = RX.shape
    P = G / sx2
    for i in range(k):
        P[i, i] += 1.0 / sa2
    L = np.linalg.cholesky(P)
    eps = np.empty((k, d))
    for i in range(k):
        for t in range(d):
            eps[i, t] = rng.standard_normal()
    return _backward_sub_t(L, _forward_sub(L, RX / sx2) + eps)


def draw_features(rng, Z, X, sx2, sa2):
    """``A | Z, X`` for all ``K_max`` slots: active rows from :func:`draw_active_features`,
    empty slots from the prior ``N(0, σa²)``."""
    k_max = Z.shape[1]
    A = rng.normal(0.0, math.sqrt(sa2), size=(k_max, X.shape[1]))
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    if act.size:
        G, RX = suff_stats(Z, X, act)
        A[act] = draw_active_features(rng, G, RX, sx2, sa2)
    return A
