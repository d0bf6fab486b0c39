"""What a worker runs on its shard of rows: numba kernels only (no PyTensor, so nothing is
compiled per worker but the numba functions, which load from the on-disk cache).

A shard is a block of consecutive rows ``X_p`` (``N_p x D``) and its part ``Z_p`` of the binary
matrix.  Its statistics ``G_p = Z_pᵀ Z_p``, ``RX_p = Z_pᵀ X_p`` and counts ``m_p`` are indexed
by feature *slot* (``K_max x K_max``, ``K_max x D``, ``K_max``), so the global ones are their
sums (Doshi-Velez 2009, §5.1, eq. 5.1: the linear-Gaussian likelihood's sufficient statistics
add over processors).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from pymc_ibp import kernels

__all__ = ["ExactProposal", "ShardReport", "ShardResult", "Stats", "add_stats", "exact_iteration",
           "apply_changes", "exact_propose", "exact_reverse", "global_log_joint",
           "proposal_summary", "shard_report",
           "shard_stats", "shard_sweeps", "state_bytes", "stats_delta", "stats_of", "take_rows",
           "tree_sum", "z_changes"]


class ShardResult(NamedTuple):
    """A shard's state after its inner sweeps: its ``Z_p`` and slot-indexed statistics, and
    what the sweeps did (summed over them)."""

    Z: np.ndarray
    G: np.ndarray
    RX: np.ndarray
    m: np.ndarray
    flips: int
    births: int
    deaths: int
    kmax_hit: int
    seconds: float = 0.0
    worker_rss: int = 0
    births_denied: float = 0.0


class Stats(NamedTuple):
    """Slot-indexed statistics ``(G, RX, m)``: a shard's, a sum over shards, or a change."""

    G: np.ndarray
    RX: np.ndarray
    m: np.ndarray


class ShardReport(NamedTuple):
    """What the driver gathers from a shard after its sweeps (one small message, never the
    whole ``Z_p``): the entries of ``Z_p`` that changed (flat indices into ``Z_p``, so the
    driver's copy of ``Z`` is patched in ``O(changes)``), what the sweeps did, their time on
    the worker, the bytes of the shard's state (``X_p``, ``Z_p`` and its statistics), the
    worker process's resident memory, and the shard's statistics when the driver sums them
    (``None`` when they are summed on a tree)."""

    changes: np.ndarray
    flips: int
    births: int
    deaths: int
    kmax_hit: int
    seconds: float
    state_bytes: int
    worker_rss: int
    stats: Stats | None = None
    births_denied: float = 0.0


def _z_of(source):
    """The ``Z_p`` of a shard state: an array, a :class:`ShardResult` or an accepted
    :class:`ExactProposal`."""
    if isinstance(source, ExactProposal):
        source = source.result
    return np.asarray(source.Z if isinstance(source, ShardResult) else source, dtype=np.int8)


def _result_of(X, source) -> ShardResult:
    """The :class:`ShardResult` of a shard state (computed from ``Z_p`` if it is an array)."""
    if isinstance(source, ExactProposal):
        return source.result
    return source if isinstance(source, ShardResult) else shard_stats(X, _z_of(source))


def shard_stats(X, Z) -> ShardResult:
    """The slot-indexed statistics of a shard (no sweep)."""
    Z = np.ascontiguousarray(Z, dtype=np.int8)
    slots = np.arange(Z.shape[1])
    G, RX = kernels.suff_stats(Z, X, slots)
    return ShardResult(Z, G, RX, Z.sum(axis=0).astype(np.int64), 0, 0, 0, 0)


def shard_sweeps(X, source, m_global, G_global, RX_global, noise, alpha, beta, n_total, sweeps,
                 seed, births):
    """``sweeps`` accelerated sweeps of the shard's rows (:func:`kernels.shard_sweep`) given the
    rest of the data, which stays fixed meanwhile.  The shard forms the message of eq. 5.2
    itself: the other rows' statistics are the global ``G_global, RX_global`` (the sum over
    shards the driver broadcasts) minus the shard's own, and their counts ``m_global`` minus
    its own.  Only the token holder (``births``) creates features.  ``source`` is the shard's
    previous :class:`ShardResult` (or its ``Z_p``)."""
    t0 = time.perf_counter()
    own = _result_of(X, source)
    G_ext = np.asarray(G_global) - own.G
    RX_ext = np.asarray(RX_global) - own.RX
    Z = _z_of(source).copy()
    rng = np.random.default_rng(seed)
    m = np.asarray(m_global, dtype=np.int64).copy()
    refresh = kernels.refresh_interval(X.shape[0])
    flips = born = died = hit = 0
    denied = 0.0
    for _ in range(int(sweeps)):
        s = kernels.shard_sweep(rng, Z, X, m, noise, kernels.SweepPrior.counts(alpha, beta),
                                refresh, kernels.OtherRows(G_ext, RX_ext, int(n_total)), births)
        flips += s.flips
        born += s.births
        died += s.deaths
        hit = max(hit, s.kmax_hit)
        denied += s.births_denied
    out = shard_stats(X, Z)
    return out._replace(flips=flips, births=born, deaths=died, kmax_hit=hit, births_denied=denied,
                        seconds=time.perf_counter() - t0, worker_rss=_rss())


def _rss():
    import psutil  # a dependency of distributed

    return int(psutil.Process().memory_info().rss)


def stats_of(result) -> Stats:
    """The statistics of a :class:`ShardResult` (or an accepted :class:`ExactProposal`)."""
    if isinstance(result, ExactProposal):
        result = result.result
    return Stats(result.G, result.RX, result.m)


def stats_delta(new, old) -> Stats:
    """``stats(new) - stats(old)``: what a shard's sweeps changed in the global sums."""
    a, b = stats_of(new), stats_of(old)
    return Stats(a.G - b.G, a.RX - b.RX, a.m - b.m)


def add_stats(*parts) -> Stats:
    """The sum of :class:`Stats` (a node of :func:`tree_sum`)."""
    return Stats(sum(p.G for p in parts), sum(p.RX for p in parts), sum(p.m for p in parts))


def tree_sum(submit, items, fanin=2):
    """Sum :class:`Stats` held by the workers along a tree of depth ``ceil(log_fanin P)``.

    ``submit(add_stats, *group)`` runs one node (a Dask task next to its inputs) and returns
    its handle; ``items`` are the leaves' handles (e.g. futures of :func:`stats_of`).  Every
    level halves the number of partial sums, so the driver receives one message of size
    ``O(K² + KD)`` instead of ``P`` (the message passing on a tree of Doshi-Velez 2009, §5.1).
    Returns the root's handle.
    """
    level = list(items)
    if not level:
        raise ValueError("tree_sum needs at least one item.")
    while len(level) > 1:
        level = [submit(add_stats, *level[i:i + fanin]) if len(level[i:i + fanin]) > 1
                 else level[i] for i in range(0, len(level), fanin)]
    return level[0]


def take_rows(X, rows):
    """Rows of a shard's ``X_p`` (local indices): what the driver's start search fetches."""
    return np.ascontiguousarray(X[np.asarray(rows, dtype=np.int64)])


def state_bytes(result, x_bytes) -> int:
    """Bytes of a shard's state: its ``X_p`` (``x_bytes``), ``Z_p`` and statistics."""
    return int(x_bytes + result.Z.nbytes + result.G.nbytes + result.RX.nbytes + result.m.nbytes)


def z_changes(new, old):
    """Flat indices of the entries of ``Z_p`` that differ between two shard states."""
    return np.flatnonzero(_z_of(new) != _z_of(old)).astype(np.int64)


def apply_changes(Z, start, changes):
    """Patch the rows of ``Z`` from ``start`` on with a shard's :func:`z_changes` (in place)."""
    rows, cols = np.divmod(np.asarray(changes, dtype=np.int64), Z.shape[1])
    Z[start + rows, cols] ^= 1


def shard_report(result, X, previous, with_stats=False) -> ShardReport:
    """The :class:`ShardReport` of a shard's latest :class:`ShardResult` against its
    ``previous`` state (runs on its worker)."""
    return ShardReport(z_changes(result, previous), result.flips, result.births, result.deaths,
                       result.kmax_hit, result.seconds, state_bytes(result, X.nbytes),
                       result.worker_rss, stats_of(result) if with_stats else None,
                       result.births_denied)


# ---------------------------------------------------------------------------------------------
# the exact parallel Metropolis–Hastings correction (Doshi-Velez 2009, §5.2, eqs. 5.3–5.4)
# ---------------------------------------------------------------------------------------------
class ExactProposal(NamedTuple):
    """A shard's half of a proposal: its proposed state, the rows it may change and
    ``log Q(Z'_p | f_r(Z)_p)`` over those rows."""

    result: ShardResult
    rows: np.ndarray
    log_q: float


def _rows_to_change(seed_r, n_p, n_change):
    return np.sort(np.random.default_rng([seed_r, 0]).choice(n_p, size=min(n_change, n_p),
                                                             replace=False))


def _f_r(X, Z, rows, m_global, G_global, RX_global, noise, alpha, beta, n_total, sweeps, seed_r,
         births):
    """``f_r``: ``sweeps`` Gibbs sweeps of ``rows`` given every other row (of every shard),
    a deterministic function of the global state for the shared seed ``r``."""
    Xs = np.ascontiguousarray(X[rows])
    Zs = np.array(Z[rows], dtype=np.int8, copy=True)
    own = shard_stats(Xs, Zs)
    rng = np.random.default_rng([seed_r, 1])
    m = np.asarray(m_global, dtype=np.int64).copy()
    for _ in range(int(sweeps)):
        kernels.shard_sweep(rng, Zs, Xs, m, noise, kernels.SweepPrior.counts(alpha, beta), 5,
                            kernels.OtherRows(G_global - own.G, RX_global - own.RX,
                                              int(n_total)), births)
    return Zs


def _log_q(new, hat, eps, slots):
    """``log Q(new | hat)``: in the noised ``slots`` each entry keeps ``hat``'s value with
    probability ``1 - eps``; elsewhere ``new`` must equal ``hat`` (else ``-inf``)."""
    if np.any(new[:, ~slots] != hat[:, ~slots]):
        return -np.inf
    a, b = new[:, slots], hat[:, slots]
    same = int(np.sum(a == b))
    return same * float(np.log1p(-eps)) + (a.size - same) * float(np.log(eps))


def exact_propose(X, source, m_global, G_global, RX_global, noise, alpha, beta, n_total, sweeps,
                  seed_r, seed_noise, births, n_change, eps):
    """Forward half on one shard: ``Ẑ = f_r(Z)`` on ``n_change`` rows chosen by ``r``, then
    ``Z'`` by noising ``Ẑ`` there: each entry of a feature in use (global count > 0 in ``Z``)
    flipped with probability ``eps``, the other slots kept (the reverse move noises the
    features in use in ``Z'``; a reverse that would need a kept entry to change has
    probability 0 and is rejected)."""
    Z = _z_of(source)
    rows = _rows_to_change(seed_r, Z.shape[0], n_change)
    hat = _f_r(X, Z, rows, m_global, G_global, RX_global, noise, alpha, beta, n_total, sweeps,
               seed_r, births)
    slots = np.asarray(m_global) > 0  # the features in use (the thesis's k <= K)
    flip = (np.random.default_rng(seed_noise).random(hat.shape) < eps) & slots
    new = np.where(flip, 1 - hat, hat).astype(np.int8)
    Zp = Z.copy()
    Zp[rows] = new
    return ExactProposal(shard_stats(X, Zp), rows, _log_q(new, hat, eps, slots))


def proposal_summary(proposal, source):
    """What the driver gathers of a shard's :class:`ExactProposal` (runs on its worker): the
    proposal without ``Z'_p`` (its statistics, rows and ``log Q``) and the entries of ``Z_p``
    it changes (:func:`z_changes`)."""
    return (proposal._replace(result=proposal.result._replace(Z=None)),
            z_changes(proposal, source))


def exact_reverse(X, source, proposal, m_new, G_new, RX_new, noise, alpha, beta, n_total, sweeps,
                  seed_r, births, eps):
    """Reverse half on one shard: ``log Q(Z_p | f_r(Z')_p)`` over the same rows."""
    Z = _z_of(source)
    hat = _f_r(X, proposal.result.Z, proposal.rows, m_new, G_new, RX_new, noise, alpha, beta,
               n_total, sweeps, seed_r, births)
    return _log_q(Z[proposal.rows], hat, eps, np.asarray(m_new) > 0)


def global_log_joint(G, RX, m, trXX, n_total, noise, alpha, beta):
    """``log p(X | Z) + log P(Z)`` from the summed slot-indexed statistics (A integrated out;
    the truncated IBP pmf of :class:`pymc_ibp.IBP`)."""
    act = np.flatnonzero(m > 0)
    return kernels.collapsed_log_joint(np.ascontiguousarray(G[np.ix_(act, act)]),
                                       np.ascontiguousarray(RX[act]), m[act].astype(np.int64),
                                       trXX, int(n_total), noise, float(alpha), float(beta),
                                       m.shape[0])[0]


def exact_iteration(run, xs, sources, stats, rng, noise, alpha, beta, n_total, trXX, sweeps,
                    n_change, token, eps=0.01):
    """One outer iteration of the exact mode (Doshi-Velez 2009, eqs. 5.3–5.4).

    A seed ``r`` is drawn and shared: every shard computes ``Ẑ_p = f_r(Z)_p`` (Gibbs sweeps of
    ``n_change`` of its rows chosen by ``r``, given the rest of the global state) and proposes
    ``Z'_p`` by flipping each entry of those rows in a feature in use with probability ``eps``
    (:func:`exact_propose`); the root sums the
    proposal's statistics, every shard computes ``f_r(Z')_p`` with the same ``r``, and the
    global ``Z'`` is accepted with probability

    .. math:: \\min\\Big(1, \\frac{p(X\\mid Z')P(Z')\\,Q(Z\\mid f_r(Z'))}
              {p(X\\mid Z)P(Z)\\,Q(Z'\\mid f_r(Z))}\\Big).

    ``r`` is an auxiliary variable drawn independently of the state and reused by the reverse
    move, so the chain is exact for any ``f_r``, however stale the shards' views inside it.

    ``run(fn, args_list)`` maps ``fn`` over the shards and returns ``(handles, values)`` (a
    local list comprehension, or Dask futures pinned to the shards' workers); ``xs`` and
    ``sources`` are the shards' data and current states (arrays, results or futures);
    ``stats`` the current ``(G_p, RX_p, m_p)``.  Returns ``(accepted, sources, stats,
    log_ratio, proposals)`` for the next iteration.
    """
    G = sum(s[0] for s in stats)
    RX = sum(s[1] for s in stats)
    m = sum(s[2] for s in stats)
    P = len(xs)
    seed_r = int(rng.integers(0, 2**63 - 1))
    seeds = rng.integers(0, 2**63 - 1, size=P)
    fwd_h, fwd = run(exact_propose, [
        (xs[p], sources[p], m, G, RX, noise, alpha, beta, n_total, sweeps, seed_r,
         int(seeds[p]), p == token, n_change, eps) for p in range(P)])
    new_stats = [(f.result.G, f.result.RX, f.result.m) for f in fwd]
    G2 = sum(s[0] for s in new_stats)
    RX2 = sum(s[1] for s in new_stats)
    m2 = sum(s[2] for s in new_stats)
    _, rev = run(exact_reverse, [
        (xs[p], sources[p], fwd_h[p], m2, G2, RX2, noise, alpha, beta, n_total, sweeps, seed_r,
         p == token, eps) for p in range(P)])
    log_ratio = (global_log_joint(G2, RX2, m2, trXX, n_total, noise, alpha, beta)
                 - global_log_joint(G, RX, m, trXX, n_total, noise, alpha, beta)
                 + sum(rev) - sum(f.log_q for f in fwd))
    accepted = bool(np.log(rng.random()) < log_ratio)
    if accepted:
        return True, [h for h in fwd_h], new_stats, log_ratio, fwd
    return False, sources, stats, log_ratio, fwd
