r"""Maximisation–expectation IBP (MEIBP) for non-negative linear-Gaussian models, and BP-means++.

Model (Reed & Ghahramani 2013; Reed 2013, §4.1): ``Z ~ pmi.IBP(alpha)`` (``beta = 1``),
``A ~ HalfNormal(σa)`` (a Gaussian truncated to ``A ≥ 0``), ``X ~ Normal(Z @ A, σx)``.  The
MEIBP keeps a point estimate of ``Z`` and a distribution over ``A``,
``q(Z, A) = δ(Z - Z*) Π_kd TN_{≥0}(a_kd; μ̃_kd, σ̃²_kd)``, and raises the evidence lower bound
(Reed 2013, eq. 4.5–4.19, App. A.3.1, with its ``-log K_+!`` and ``1/(2σx²)`` typos corrected)

.. math::
    \mathcal L = -\frac{1}{2σ_x^2}\sum_n \mathbb E\|x_n - z_n A\|^2 - \frac{ND}{2}\log 2πσ_x^2
    - \log K_+! - αH_N + \sum_{k≤K_+}\Big[\log\frac{(N-m_k)!(m_k-1)!}{N!} + η_k\Big],
    \qquad η_k = \log α + \sum_d \big(\mathbb E_q\log p(a_{kd}) + H[q(a_{kd})]\big),

alternating exact coordinate updates: each row ``z_n`` maximises the submodular per-row
objective (:mod:`pymc_ibp.inference.submodular`; kept only if it is at least as good as the
current row, so the bound never decreases), and after each changed row every ``q(a_k·)`` is
updated in turn (Reed 2013, eq. 4.13–4.15):
``μ̃_kd = ρ_k Σ_n z_nk (x_nd - Σ_{k'≠k} z_nk' E a_k'd)``, ``σ̃²_kd = ρ_k σx²``,
``ρ_k = (m_k + σx²/σa²)^{-1}`` (an unused feature has ``q = p``).  The hyperparameters are
fixed at the model's initial point.

BP-means++ (Broderick, Kulis & Jordan 2013; seeding of Reed 2013, Alg. 5) minimises
``‖X - Z A‖²_F + λ² K_+`` by greedy entries of ``Z``, least-squares ``A``, and features
removed, replaced or added from the residuals (:func:`bp_means`); it is the baseline of
Reed's comparisons.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
import pymc as pm
from pytensor.graph.traversal import ancestors

from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp.distributions.ibp_math import ibp_mass, log_beta_term
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.inference.submodular import MAXIMISERS, maximise_row, row_value
from pymc_ibp.matching.linear_gaussian import find_linear_gaussian, matched_models
from pymc_ibp.matching.priors import IBPPrior, match_prior

__all__ = ["BPMeansResult", "MEIBPResult", "bp_means", "fit_bp_means", "fit_meibp", "tn_moments"]

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@numba.njit(cache=True)
def erfcx(x):
    """The scaled complementary error function ``exp(x²) erfc(x)``, finite for every ``x`` up to
    ``x ≈ -26`` (beyond which it overflows): direct for ``x < 25``, the asymptotic series
    (relative error below 1e-16) above."""
    if x < 25.0:
        return math.exp(x * x) * math.erfc(x)
    y = 1.0 / (x * x)
    return (1.0 - 0.5 * y * (1.0 - 1.5 * y * (1.0 - 2.5 * y * (1.0 - 3.5 * y)))) / (
        x * math.sqrt(math.pi))


@numba.njit(cache=True)
def tn_moments(mu, sigma):
    """``(E a, E a², H)`` of ``N(μ, σ²)`` truncated to ``a ≥ 0`` (Reed 2013, eq. 4.16–4.17; the
    entropy with the sign of its last term corrected), stable in both tails:
    ``℘ = -μ/(σ√2)``, ``λ = √(2/π) / erfcx(℘)``, ``E a = μ + σλ``, ``E a² = μ² + σ² + σμλ``,
    ``H = ½ log(πeσ²/2) + log erfc(℘) - (μ/σ) λ / 2`` (``log erfc(℘) = log erfcx(℘) - ℘²``
    for ``℘ ≥ 0``, where ``erfc`` underflows)."""
    p = -mu / (sigma * _SQRT2)
    ex = erfcx(p)
    lam = _SQRT_2_OVER_PI / ex
    ea = mu + sigma * lam
    ea2 = mu * mu + sigma * sigma + sigma * mu * lam
    log_erfc = math.log(math.erfc(p)) if p < 0.0 else math.log(ex) - p * p
    h = 0.5 * math.log(math.pi * math.e * sigma * sigma / 2.0) + log_erfc \
        - 0.5 * (mu / sigma) * lam
    return max(ea, 0.0), max(ea2, 0.0), h


@numba.njit(cache=True)
def _update_qa(G, RX, m, Ea, Ea2, Ha, mu_t, sd_t, sx2, sa2):
    """Sequential exact update of ``q(a_k·)`` for every feature slot ``k`` (module
    docstring), from ``G = ZᵀZ`` and ``RX = ZᵀX``."""
    K, D = Ea.shape
    for k in range(K):
        rho = 1.0 / (m[k] + sx2 / sa2)
        sd = math.sqrt(rho * sx2)
        for d in range(D):
            s = RX[k, d]
            for j in range(K):
                if j != k:
                    s -= G[k, j] * Ea[j, d]
            mu = rho * s if m[k] > 0 else 0.0
            mu_t[k, d] = mu
            sd_t[k, d] = sd
            Ea[k, d], Ea2[k, d], Ha[k, d] = tn_moments(mu, sd)


@numba.njit(cache=True)
def _eta(Ea2, Ha, sa2, log_alpha):
    """``η_k = log α + Σ_d (E log p(a_kd) + H[q(a_kd)])`` with ``p`` the half-normal prior."""
    K, D = Ea2.shape
    out = np.empty(K)
    c = -0.5 * math.log(math.pi * sa2 / 2.0)
    for k in range(K):
        v = log_alpha
        for d in range(D):
            v += c - Ea2[k, d] / (2.0 * sa2) + Ha[k, d]
        out[k] = v
    return out


@numba.njit(cache=True)
def meibp_elbo(G, RX, m, trXX, Ea, Ea2, Ha, n, sx2, sa2, alpha):
    """The MEIBP's evidence lower bound (module docstring) from ``ZᵀZ``, ``ZᵀX``, ``m``."""
    K, D = Ea.shape
    quad = 0.0  # Σ_n E‖x_n - z_n A‖² = tr XᵀX - 2 Σ RX·Ea + Σ G_kj Ea_k·Ea_j + Σ m_k (Ea2 - Ea²)
    lin = 0.0
    for k in range(K):
        if m[k] == 0:
            continue
        for d in range(D):
            lin += RX[k, d] * Ea[k, d]
            quad += m[k] * (Ea2[k, d] - Ea[k, d] * Ea[k, d])
        for j in range(K):
            if m[j] > 0:
                for d in range(D):
                    quad += G[k, j] * Ea[k, d] * Ea[j, d]
    sq = trXX - 2.0 * lin + quad
    eta = _eta(Ea2, Ha, sa2, math.log(alpha))
    kplus = 0
    prior = 0.0
    for k in range(K):
        if m[k] > 0:
            kplus += 1
            prior += log_beta_term(m[k], n, 1.0) + eta[k]
    return (-sq / (2.0 * sx2) - 0.5 * n * D * math.log(2.0 * math.pi * sx2)
            - math.lgamma(kplus + 1.0) - ibp_mass(alpha, 1.0, n) + prior)


@numba.njit(cache=True)
def _row_weights(x, m_rest, Ea, Ea2, eta, n, sx2):
    """Linear weights ``ω`` and the "new feature" flags of one row (Reed 2013, eq. 4.20)."""
    K, D = Ea.shape
    omega = np.empty(K)
    new = np.zeros(K, dtype=np.int64)
    for k in range(K):
        v = 0.0
        for d in range(D):
            v += Ea[k, d] * x[d] + 0.5 * (Ea[k, d] * Ea[k, d] - Ea2[k, d])
        v /= sx2
        mk = m_rest[k]
        if mk == 0:
            new[k] = 1
            v += log_beta_term(1, n, 1.0) + eta[k]
        else:
            v += log_beta_term(mk + 1, n, 1.0) - log_beta_term(mk, n, 1.0)
        omega[k] = v
    return omega, new


@numba.njit(cache=True)
def meibp_sweep(rng, Z, X, G, RX, m, Ea, Ea2, Ha, mu_t, sd_t, sx2, sa2, alpha, kind):
    """One MEIBP iteration: every row in random order maximises its objective with maximiser
    ``kind``; a changed row updates ``ZᵀZ``, ``ZᵀX``, ``m`` and then every ``q(a_k·)``.
    Returns ``(rows changed, objective queries)``."""
    N, K = Z.shape
    D = X.shape[1]
    changed = 0
    queries = 0
    log_alpha = math.log(alpha)
    order = rng.permutation(N)
    Q = Ea @ Ea.T / sx2  # recomputed only when q(A) changes
    eta = _eta(Ea2, Ha, sa2, log_alpha)
    for i in order:
        z_old = Z[i].copy()
        m_rest = m - z_old
        k_rest = 0
        for k in range(K):
            if m_rest[k] > 0:
                k_rest += 1
        omega, new = _row_weights(X[i], m_rest, Ea, Ea2, eta, N, sx2)
        z_new, q = maximise_row(rng, omega, Q, new, k_rest, kind)
        queries += q
        zo = z_old.astype(np.int8)
        if row_value(z_new, omega, Q, new, k_rest) <= row_value(zo, omega, Q, new, k_rest):
            continue
        changed += 1
        for k in range(K):
            dz = z_new[k] - z_old[k]
            if dz != 0:
                m[k] += dz
                for d in range(D):
                    RX[k, d] += dz * X[i, d]
        for a in range(K):
            for b in range(K):
                G[a, b] += z_new[a] * z_new[b] - z_old[a] * z_old[b]
        for k in range(K):
            Z[i, k] = z_new[k]
        _update_qa(G, RX, m, Ea, Ea2, Ha, mu_t, sd_t, sx2, sa2)
        Q = Ea @ Ea.T / sx2
        eta = _eta(Ea2, Ha, sa2, log_alpha)
    return changed, queries


class MEIBPResult(NamedTuple):
    """Result of :func:`fit_meibp`."""

    Z: np.ndarray  #: the point estimate of ``Z`` (``N x K_max``, int8)
    A: np.ndarray  #: ``E_q[A]`` (``K_max x D``, non-negative)
    mu: np.ndarray  #: pre-truncation means ``μ̃`` of ``q(A)``
    sigma: np.ndarray  #: pre-truncation scales ``σ̃`` of ``q(A)``
    objective: np.ndarray  #: the evidence lower bound after each iteration
    queries: np.ndarray  #: objective evaluations of the row maximisers per iteration
    converged: bool
    z_name: str
    a_name: str
    sigma_x: float  #: the noise scale used at the end (the model's, or learned)
    sigma_a: float  #: the feature scale used at the end
    alpha: float

    def initvals(self):
        """Initial values for ``pm.sample(initvals=...)``: ``Z`` and ``E_q[A]``."""
        return {self.z_name: self.Z.astype(np.int8), self.a_name: self.A.copy()}


def _match_nonnegative(model, z, what):
    zs = [rv for rv in model.free_RVs if (z is None or rv.name == z)
          and match_prior(model, rv) is not None]
    if len(zs) != 1:
        raise ModelPatternError(
            f"{what} needs exactly one pmi.IBP matrix" + (f" named {z!r}" if z else "; pass "
                                                         "z='name'") + f"; found {len(zs)}.")
    spec = find_linear_gaussian(model, zs[0], nonnegative=True)
    if not isinstance(spec.prior, IBPPrior):
        raise ModelPatternError(f"{what} needs a pmi.IBP prior on {zs[0].name!r}.")
    if len(spec.blocks) != 1 or spec.missing_mask is not None or spec.blocks[0].offset is not None:
        raise ModelPatternError(
            f"{what} handles one observed matrix X ~ Normal(Z @ A, sigma_x) with "
            "A ~ HalfNormal(sigma_a), no offset and no missing entries.")
    return spec


def _hyper_values(model, spec):
    b = spec.blocks[0]
    if b.sigma_x.ndim or b.sigma_a.ndim:
        raise ModelPatternError("fit_meibp needs scalar sigma_x and sigma_a.")
    sx, sa, alpha, beta = spec.hyper_values(model)
    if not np.isclose(beta, 1.0):
        raise ModelPatternError(f"fit_meibp needs the one-parameter IBP (beta = 1); got {beta}.")
    return float(sx[0]) ** 2, float(sa[0]) ** 2, alpha


@interrupt_safe
def fit_meibp(model=None, *, z=None, maximiser="ls", max_iters=200, tol=1e-4, start=None,
              restarts=3, learn_hyper=False, hyper_prior=(1.0, 1.0), random_seed=None):
    """Fit the MEIBP (module docstring) to a non-negative linear-Gaussian IBP model.

    Parameters
    ----------
    model : pm.Model, optional
        ``Z ~ pmi.IBP(alpha)``, ``A ~ pm.HalfNormal(sigma_a)`` (``K_max x D``),
        ``X ~ pm.Normal(Z @ A, sigma_x)`` observed; ``alpha``, ``sigma_x``, ``sigma_a`` are
        taken at the model's initial point.
    z : str, optional
        Name of the IBP variable when the model has several.
    maximiser : {"ls", "lg", "lg-ord", "lg-sto"}
        The per-row maximiser (:mod:`pymc_ibp.inference.submodular`; default local search).
    max_iters, tol : int, float
        Stop after ``max_iters`` iterations, or when no row changes, or when the bound changes
        by less than ``tol · |bound|`` over 5 iterations (Reed 2013, §4.9).
    start : ndarray, optional
        Starting ``Z`` (one run); default Bernoulli(1/3) entries (Reed 2013, §4.9.3).
    restarts : int
        Independent random starts (default 3); the run with the highest final bound is kept.
    learn_hyper : bool
        After each iteration, replace ``σx²``, ``σa²`` and ``α`` by their variational
        estimates under Gamma(``hyper_prior``) priors on the precisions and on ``α`` (Reed
        2013, App. A.3.2): ``1/σ² = ã/b̃`` with ``ã_X = a + ND/2``,
        ``b̃_X = b + ½ Σ E‖x_n - z_n A‖²``, ``ã_A = a + K_+D/2``, ``b̃_A = b + ½ Σ_{active}
        E a²``, and ``α = (a + K_+)/(b + H_N)``.  The bound is then no longer monotone.
    hyper_prior : (float, float), default (1.0, 1.0)
        The Gamma ``(a, b)`` (shape, rate) of ``learn_hyper``.
    random_seed : int or Generator, optional
        Seeds the random starts, the row order of each sweep and the randomised maximisers.
    """
    model = pm.modelcontext(model)
    if maximiser not in MAXIMISERS:
        raise ValueError(f"maximiser must be one of {MAXIMISERS}; got {maximiser!r}.")
    spec = _match_nonnegative(model, z, "fit_meibp")
    sx2, sa2, alpha = _hyper_values(model, spec)
    X = np.ascontiguousarray(spec.X, dtype=float)
    n, d = X.shape
    k_max = spec.k_max
    rng = np.random.default_rng(random_seed)
    starts = [None] * max(1, int(restarts)) if start is None else [start]
    best = None
    for st in starts:
        Z = ((rng.random((n, k_max)) < 1.0 / 3.0) if st is None else np.asarray(st)).astype(
            np.int8)
        if Z.shape != (n, k_max):
            raise ValueError(f"start must have shape {(n, k_max)}; got {Z.shape}.")
        run = _meibp_run(rng, Z, X, sx2, sa2, alpha, MAXIMISERS.index(maximiser), max_iters,
                         tol, learn_hyper, hyper_prior)
        if best is None or run[5][-1] > best[5][-1]:
            best = run
    Z, Ea, mu_t, sd_t, hyper, objective, queries, converged = best
    return MEIBPResult(Z=Z.astype(np.int8), A=Ea, mu=mu_t, sigma=sd_t,
                       objective=np.asarray(objective), queries=np.asarray(queries),
                       converged=converged, z_name=model.rvs_to_values[spec.z_rv].name,
                       a_name=spec.blocks[0].a_rv.name, sigma_x=math.sqrt(hyper[0]),
                       sigma_a=math.sqrt(hyper[1]), alpha=hyper[2])


def _meibp_run(rng, Z, X, sx2, sa2, alpha, kind, max_iters, tol, learn_hyper, hyper_prior):
    """One MEIBP run from ``Z`` (updated in place)."""
    n, d = X.shape
    k_max = Z.shape[1]
    Zf = Z.astype(float)
    G, RX, m = Zf.T @ Zf, Zf.T @ X, Z.sum(axis=0).astype(np.int64)
    Ea, Ea2, Ha = np.zeros((k_max, d)), np.zeros((k_max, d)), np.zeros((k_max, d))
    mu_t, sd_t = np.zeros((k_max, d)), np.zeros((k_max, d))
    for _ in range(3):  # a few sweeps of the sequential update from E a = 0
        _update_qa(G, RX, m, Ea, Ea2, Ha, mu_t, sd_t, sx2, sa2)
    trXX = float((X * X).sum())
    objective, queries, converged = [], [], False
    for _ in range(int(max_iters)):
        changed, q = meibp_sweep(rng, Z, X, G, RX, m, Ea, Ea2, Ha, mu_t, sd_t, sx2, sa2, alpha,
                                 kind)
        if learn_hyper:
            sx2, sa2, alpha = _vb_hyper(G, RX, m, trXX, Ea, Ea2, n, d, hyper_prior)
            _update_qa(G, RX, m, Ea, Ea2, Ha, mu_t, sd_t, sx2, sa2)
        objective.append(meibp_elbo(G, RX, m, trXX, Ea, Ea2, Ha, n, sx2, sa2, alpha))
        queries.append(q)
        if changed == 0 or (len(objective) > 5 and abs(objective[-1] - objective[-6])
                            < tol * abs(objective[-1])):
            converged = True
            break
    return Z, Ea.copy(), mu_t, sd_t, (sx2, sa2, alpha), objective, queries, converged


def _vb_hyper(G, RX, m, trXX, Ea, Ea2, n, d, prior):
    """Variational estimates of ``σx²``, ``σa²``, ``α`` (``fit_meibp(learn_hyper=True)``)."""
    a0, b0 = prior
    act = m > 0
    kplus = int(act.sum())
    # Σ_n E‖x_n - z_n A‖² from the statistics (as in meibp_elbo)
    sq = (trXX - 2.0 * float((RX[act] * Ea[act]).sum())
          + float(np.einsum("kj,kd,jd->", G[np.ix_(act, act)], Ea[act], Ea[act]))
          + float((m[act][:, None] * (Ea2[act] - Ea[act] ** 2)).sum()))
    sx2 = (b0 + 0.5 * sq) / (a0 + 0.5 * n * d)
    sa2 = (b0 + 0.5 * float(Ea2[act].sum())) / (a0 + 0.5 * kplus * d)
    alpha = (a0 + kplus) / (b0 + ibp_mass(1.0, 1.0, n))
    return sx2, sa2, alpha


# ---------------------------------------------------------------------------------------------
# BP-means++ (Broderick, Kulis & Jordan 2013; Reed 2013, §4.8, Alg. 5)
# ---------------------------------------------------------------------------------------------
class BPMeansResult(NamedTuple):
    """Result of :func:`fit_bp_means`."""

    Z: np.ndarray  #: ``N x K_max`` int8
    A: np.ndarray  #: least-squares features (``K_max x D``; unused slots 0)
    objective: np.ndarray  #: ``‖X - Z A‖² + λ² K_+`` after each iteration
    converged: bool
    z_name: str = "Z"
    a_name: str = "A"

    def initvals(self):
        """Initial values for ``pm.sample(initvals=...)``: ``Z`` and the least-squares ``A``
        (clipped at 0 when the model's ``A`` is half-normal)."""
        return {self.z_name: self.Z.astype(np.int8), self.a_name: self.A.copy()}


def _bp_objective(X, Z, A, lam2):
    R = X - Z @ A
    return float((R * R).sum() + lam2 * (Z.sum(axis=0) > 0).sum())


def _lstsq_features(X, Z):
    A = np.zeros((Z.shape[1], X.shape[1]))
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    if act.size:
        A[act] = np.linalg.lstsq(Z[:, act].astype(float), X, rcond=None)[0]
    return A


def _bp_assign(X, Z, A):
    """Each entry of ``Z`` set to its better value, a column at a time for all rows, until no
    entry changes (flipping ``z_nk`` changes ``‖r_n‖²`` by ``‖a_k‖² - 2 s r_n·a_k``)."""
    R = X - Z @ A
    in_use = np.abs(A).sum(axis=1) > 0
    used = np.flatnonzero(in_use)
    Z[:, ~in_use] = 0
    for _ in range(20):
        changed = False
        for k in used:
            s = 1.0 - 2.0 * Z[:, k]  # +1 adds feature k to the row, -1 removes it
            flip = 2.0 * s * (R @ A[k]) > A[k] @ A[k]
            if flip.any():
                Z[flip, k] ^= 1
                R[flip] -= s[flip, None] * A[k]
                changed = True
        if not changed:
            break
    return Z


def _bp_refit(X, Z, A):
    Z = _bp_assign(X, Z, A)
    return Z, _lstsq_features(X, Z)


def _bp_candidate(R, rng, tries=3):
    """A new feature from the residuals: seeded at a row drawn with probability proportional
    to its squared residual (BP-means++), then alternately owned by the rows it lowers and set
    to their mean residual.  The best of ``tries`` by the fit it gains, or ``None``."""
    e = (R * R).sum(axis=1)
    best, best_gain = None, 0.0
    if not e.sum() > 0:
        return None
    for _ in range(tries):
        a = R[rng.choice(len(R), p=e / e.sum())].copy()
        owners = None
        for _ in range(20):
            new = 2.0 * (R @ a) > a @ a
            if not new.any() or (owners is not None and np.array_equal(owners, new)):
                break
            owners, a = new, R[new].mean(axis=0)
        if owners is not None and owners.sum() * (a @ a) > best_gain:
            best, best_gain = (owners, a), owners.sum() * (a @ a)
    return best


def _bp_with(X, Z, A, k, cand):
    Z, A = Z.copy(), A.copy()
    Z[:, k], A[k] = 0, 0.0
    if cand is not None:
        Z[cand[0], k], A[k] = 1, cand[1]
    return _bp_refit(X, Z, A)


def _bp_run(X, k_max, lam2, rng, max_iters):
    n, d = X.shape
    Z, A = np.zeros((n, k_max), dtype=np.int8), np.zeros((k_max, d))
    objective, converged = [_bp_objective(X, Z, A, lam2)], False
    for _ in range(int(max_iters)):
        Z, A = _bp_refit(X, Z, A)
        cur = _bp_objective(X, Z, A, lam2)
        # each feature in use is removed, or replaced by a new one from the residuals without
        # it, when that lowers the objective; then a new feature is added where it pays its λ²
        for k in np.flatnonzero(Z.sum(axis=0) > 0):
            Z0, A0 = _bp_with(X, Z, A, k, None)
            for Z1, A1 in ((Z0, A0), _bp_with(X, Z0, A0, k, _bp_candidate(X - Z0 @ A0, rng))):
                o = _bp_objective(X, Z1, A1, lam2)
                if o < cur - 1e-12 * abs(cur):
                    Z, A, cur = Z1, A1, o
        free = np.flatnonzero(Z.sum(axis=0) == 0)
        if free.size:
            Z1, A1 = _bp_with(X, Z, A, free[0], _bp_candidate(X - Z @ A, rng))
            if _bp_objective(X, Z1, A1, lam2) < cur:
                Z, A = Z1, A1
        objective.append(_bp_objective(X, Z, A, lam2))
        if objective[-2] - objective[-1] <= 1e-10 * abs(objective[-1]):
            converged = True
            break
    return Z, A, objective, converged


def fit_bp_means(model=None, *, lam2=None, z=None, n_init=4, max_iters=100, random_seed=None):
    """BP-means (Broderick, Kulis & Jordan 2013) with BP-means++ seeding (Reed 2013, Alg. 5)
    on the data of a linear-Gaussian IBP model (``A`` normal or half-normal, one observed
    matrix, no missing entries): minimise ``‖X - Z A‖²_F + λ² K_+`` with ``K_+ ≤ K_max``, by
    the moves of :func:`bp_means`.  Returns a :class:`BPMeansResult` whose ``initvals()`` can
    start ``pm.sample``.

    A feature fitted to noise alone lowers ``‖X - Z A‖²`` by about ``(N/π + D) σx²`` (more
    once the search picks its best direction); a real feature used by ``n_k`` rows lowers it
    by about ``n_k ‖a_k‖²``.  ``λ²`` must lie between the two: the default ``(N + D) σx²``
    does when ``n_k ‖a_k‖²`` of the weakest feature to find is several times larger (see
    docs/meibp.md for the measured range on the block images).

    Parameters
    ----------
    model : pm.Model, optional
        The model (default: the one in context), as for :func:`fit_meibp` or with
        ``A ~ pm.Normal(0, sigma_a)``.
    lam2 : float, optional
        The penalty ``λ²`` per feature in use.  Default ``(N + D) σx²``, which needs a fixed
        scalar ``sigma_x`` in the model; with a free one, pass ``lam2``.
    z : str, optional
        Name of the IBP variable when the model has several.
    n_init : int, default 4
        Independent runs; the one with the lowest objective is returned.
    max_iters : int, default 100
        Iteration limit per run (it stops earlier once converged).
    random_seed : int or Generator, optional
        Seeds the new features' rows.
    """
    model = pm.modelcontext(model)
    try:
        spec = _match_nonnegative(model, z, "fit_bp_means")
        nonneg = True
    except ModelPatternError:
        zs = [s_ for s_ in matched_models(model) if z is None or s_.z_rv.name == z]
        if len(zs) != 1 or len(zs[0].blocks) != 1 or zs[0].missing_mask is not None:
            raise ModelPatternError(
                "fit_bp_means needs one pmi.IBP matrix Z and one observed X ~ Normal(Z @ A, "
                "sigma_x) with A ~ Normal(0, sigma_a) or HalfNormal(sigma_a), without missing "
                "entries.") from None
        spec, nonneg = zs[0], False
    if lam2 is None:
        lam2 = _default_lam2(model, spec)
    res = bp_means(spec.X, spec.k_max, lam2, n_init=n_init, max_iters=max_iters,
                   random_seed=random_seed)
    A = np.maximum(res.A, 0.0) if nonneg else res.A
    return res._replace(A=A, z_name=model.rvs_to_values[spec.z_rv].name,
                        a_name=spec.blocks[0].a_rv.name)


def _default_lam2(model, spec):
    sx = spec.blocks[0].sigma_x
    free = set(model.free_RVs)
    sigma_x = spec.hyper_values(model)[0]
    if any(v in free for v in ancestors([sx])) or np.unique(sigma_x).size != 1:
        raise ModelPatternError(
            "fit_bp_means sets lam2 = (N + D) sigma_x^2 only for a fixed scalar sigma_x; this "
            "model's sigma_x is free or per column: pass lam2= with your estimate of the noise "
            "scale (see docs/meibp.md).")
    n, d = spec.X.shape
    return float((n + d) * np.ravel(sigma_x)[0] ** 2)


def bp_means(X, k_max, lam2, *, n_init=4, max_iters=100, random_seed=None):
    """Array-level BP-means of :func:`fit_bp_means`: minimise ``‖X - Z A‖²_F + λ² K_+``.

    From no features, each iteration sets every entry of ``Z`` to its better value and ``A``
    by least squares; then removes each feature in use, or replaces it by a new feature fitted
    to the residuals without it, when that lowers the objective; then adds a new feature
    (seeded at a row drawn in proportion to its squared residual, as in BP-means++, and
    fitted to the rows it helps) when it pays its ``λ²``.  The objective never increases; the
    best of ``n_init`` runs is returned.
    """
    X = np.asarray(X, dtype=float)
    if not (np.isfinite(lam2) and lam2 >= 0):
        raise ValueError(f"lam2 must be a finite number >= 0; got {lam2!r}.")
    rng = np.random.default_rng(random_seed)
    runs = [_bp_run(X, int(k_max), float(lam2), rng, max_iters) for _ in range(max(1, n_init))]
    Z, A, objective, converged = min(runs, key=lambda r: r[2][-1])
    return BPMeansResult(Z=Z, A=A, objective=np.asarray(objective), converged=converged)
