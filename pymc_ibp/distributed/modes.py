"""The outer iterations of the data-parallel sampler (Doshi-Velez 2009, ch. 5) on a
:class:`~pymc_ibp.distributed.cluster.ShardCluster`: synchronous (:func:`sync_iteration`),
asynchronous (:func:`async_iteration`) and exact (:func:`exact_mode_iteration`), and
:class:`ShardData`, the data as the linear-Gaussian update reads them when they live on the
shards."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_ibp.distributed.shards import (
    Stats,
    add_stats,
    apply_changes,
    exact_iteration,
    exact_propose,
    proposal_summary,
    shard_report,
    shard_sweeps,
    stats_delta,
)
from pymc_ibp.exceptions import ShardFailure

__all__ = ["Flight", "ShardData", "async_iteration", "exact_mode_iteration", "sync_iteration",
           "sync_sweeps"]


class Flight(NamedTuple):
    """A shard's sweeps running in the asynchronous mode: the futures of its result and of its
    statistics' change, the slots in use in the global counts it started from, and whether it
    may create features."""

    result: object
    delta: object
    report: object
    view: np.ndarray
    births: bool

    @property
    def futures(self):
        return (self.result, self.delta, self.report)


def sync_sweeps(cluster, rng, Z, noise, ibp, n, sweeps, token, what):
    """``sweeps`` sweeps of every shard's rows given the others' statistics from the start
    (:func:`~pymc_ibp.distributed.shards.shard_sweeps`, prior ``ibp = (α, β)``, ``n`` rows in
    all), only shard ``token`` creating features (none for ``token = -1``); their changes
    applied to ``Z`` (in place) and the new global statistics kept.  Returns the shards'
    reports."""
    shards = cluster.shards
    P = len(shards)
    seeds = rng.integers(0, 2**63 - 1, size=P)
    G, RX, m_glob = cluster.total
    futs = [cluster.submit(p, shard_sweeps, xf, cluster.results[p], m_glob, G, RX, noise,
                           ibp[0], ibp[1], n, sweeps, int(seeds[p]), p == token)
            for p, (_, _, _, xf) in enumerate(shards)]
    # each shard reports the entries of its Z_p that changed (never the whole Z_p) and, with
    # few shards, its statistics, which the driver sums; with many they are summed on a tree
    tree = P >= cluster.tree_reduce_min
    root = cluster.tree_root(futs) if tree else None
    reports = cluster.gather([cluster.submit(p, shard_report, f, xf, cluster.results[p], not tree)
                              for p, (f, (_, _, _, xf)) in
                              enumerate(zip(futs, shards, strict=True))], what)
    if tree:
        [total] = cluster.gather([root], "summing their statistics")
        total = Stats(*total)
    else:
        total = add_stats(*[r.stats for r in reports])
    for (a, _, _, _), r in zip(shards, reports, strict=True):
        apply_changes(Z, a, r.changes)
    cluster.results = futs
    cluster.total = total
    return reports


def sync_iteration(cluster, rng, Z, noise, ibp, n, inner_sweeps, token):
    """One synchronous outer iteration: every shard sweeps ``inner_sweeps`` times given the
    others' statistics from the start of the iteration, shard ``token`` creating features;
    the new global statistics are summed (on a tree with many shards).  Returns the reports."""
    return sync_sweeps(cluster, rng, Z, noise, ibp, n, inner_sweeps, token, "their sweeps")


def _launch(cluster, p, noise, ibp, n, inner_sweeps, seed, token):
    """Start shard ``p``'s sweeps (asynchronous mode) from the latest global statistics.

    The token holder may create features only if no slot is a *zombie*: free in the global
    counts but in use in the view of a shard still running, which could still put rows in it
    (a birth there would merge two different features in one slot)."""
    G, RX, m_glob = cluster.total
    free = m_glob == 0
    zombies = any(np.any(free & fl.view) for fl in cluster.inflight.values())
    births = p == token and not zombies
    _, _, _, xf = cluster.shards[p]
    fut = cluster.submit(p, shard_sweeps, xf, cluster.results[p], m_glob, G, RX, noise,
                         ibp[0], ibp[1], n, inner_sweeps, int(seed), births)
    delta = cluster.submit(p, stats_delta, fut, cluster.results[p])
    report = cluster.submit(p, shard_report, fut, xf, cluster.results[p])
    cluster.inflight[p] = Flight(fut, delta, report, m_glob > 0, births)


def async_iteration(cluster, rng, Z, noise, ibp, n, inner_sweeps, token, refresh_every):
    """One asynchronous outer iteration: idle shards start from the latest global state, the
    driver waits for at least one running shard, and folds the changes of every shard that
    has finished into the global statistics (Doshi-Velez 2009, §5.1, asynchronous mode); the
    others keep running.  The statistics are re-summed exactly every ``refresh_every``
    iterations.  Returns ``(reports, shards that reported, the token's next holder)``."""
    from distributed import wait

    P = len(cluster.shards)
    seeds = rng.integers(0, 2**63 - 1, size=P)
    for p in range(P):
        if p not in cluster.inflight:
            _launch(cluster, p, noise, ibp, n, inner_sweeps, seeds[p], token)
    running = sorted(cluster.inflight)
    futs = [cluster.inflight[p].result for p in running]
    try:
        wait(futs, timeout=cluster.timeout, return_when="FIRST_COMPLETED")
    except TimeoutError as err:
        raise ShardFailure(cluster.describe(running, f"did not finish their sweeps within "
                                                     f"{cluster.timeout:g} s")) from err
    except Exception:  # noqa: S110 - a cancelled future: named by gather below
        pass
    done = [p for p in running if cluster.inflight[p].result.done()]
    flights = [cluster.inflight[p] for p in done]
    reports = cluster.gather([fl.report for fl in flights], "their sweeps", done)
    deltas = cluster.gather([fl.delta for fl in flights], "their statistics", done)
    G, RX, m_glob = cluster.total
    nxt = token
    for p, fl, r, d in zip(done, flights, reports, deltas, strict=True):
        apply_changes(Z, cluster.shards[p][0], r.changes)
        G, RX, m_glob = G + d.G, RX + d.RX, m_glob + d.m
        cluster.results[p] = fl.result
        del cluster.inflight[p]
        if p == nxt and fl.births:
            nxt = (p + 1) % P
    cluster.total = Stats(G, RX, m_glob)
    cluster.since_refresh += 1
    if cluster.since_refresh >= refresh_every:  # the float sums of RX, recomputed
        cluster.total = cluster.tree_total(cluster.results)
        cluster.since_refresh = 0
    return reports, done, nxt


def exact_mode_iteration(cluster, rng, Z, noise, ibp, n, trXX, inner_sweeps, exact_rows, token,
                         exact_flip):
    """One iteration of the exact mode (:func:`pymc_ibp.distributed.exact_iteration`):
    ``(flips, accepted, the proposal's rows per shard)``; ``Z`` changed in place if accepted."""
    changes = []

    def run(fn, args_list):
        futs = [cluster.submit(p, fn, *args) for p, args in enumerate(args_list)]
        what = fn.__name__.replace("_", " ")
        if fn is not exact_propose:
            return futs, cluster.gather(futs, what)
        # the proposals stay on the workers: the driver gathers their statistics, rows,
        # log Q and the entries of Z_p they change, never Z_p itself
        summaries = cluster.gather([
            cluster.submit(p, proposal_summary, f, args_list[p][1])
            for p, f in enumerate(futs)], what)
        changes.extend(c for _, c in summaries)
        return futs, [prop for prop, _ in summaries]

    xs = [xf for _, _, _, xf in cluster.shards]
    accepted, sources, stats, _, fwd = exact_iteration(
        run, xs, cluster.results, [cluster.total], rng, noise, ibp[0], ibp[1], n, trXX,
        inner_sweeps, exact_rows, token, exact_flip)
    flips = 0
    if accepted:
        for (a, _, _, _), c in zip(cluster.shards, changes, strict=True):
            flips += int(c.size)
            apply_changes(Z, a, c)
    cluster.results = sources
    cluster.total = add_stats(*[Stats(*s) for s in stats])
    return flips, bool(accepted), [f.rows for f in fwd]


class ShardData:
    """The data of a linear-Gaussian model whose rows the shards hold, as
    :class:`~pymc_ibp.step_methods.linear_gaussian_update.LinearGaussianUpdate` reads them
    (the interface of :class:`~pymc_ibp.step_methods.linear_gaussian_update.LocalData`):
    ``X`` (the driver's array, or with sharded data rows fetched from the shards by index),
    ``‖X_b‖²`` per block, the statistics of the features from the shards' sums and the
    assignment of the rows outside a start search's subset on the workers.  ``local``: the
    driver's :class:`LocalData` (``None`` for sharded data); ``owner``: the step (its ``rng``
    and iteration count, for :meth:`ShardCluster.run`)."""

    def __init__(self, cluster, spec, local, owner):
        self.cluster, self.sharded, self.local, self.owner = cluster, spec.sharded, local, owner
        self.n, self.d = spec.shape
        self.X = local.X if local is not None else _ShardRows(self)

    def run(self, fn):
        """``fn()`` on the cluster, recovered from a lost worker (:meth:`ShardCluster.run`)."""
        owner = self.owner
        return self.cluster.run(fn, owner.rng, owner.update.sweeps)

    def load(self):
        """The rows on their shards (sharded data: loaded by the workers, the column sums of
        squares sent back)."""
        self.cluster.ensure_data(None if self.local is None else self.local.X, self.n,
                                 self.sharded)

    def trXX(self, X, noise):
        if self.local is not None:
            return self.local.trXX(X, noise)
        if self.cluster.summary is None:
            self.run(self.load)
        colsq = np.asarray(self.cluster.summary.colsq, dtype=np.float64)
        return np.add.reduceat(colsq, noise.cols[:-1])

    def feature_stats(self, Z, X, act):
        """The aggregated statistics of the shards when ``Z`` is what they hold (no pass over
        the data at the driver).  With sharded data a ``Z`` the shards do not hold (the start
        search's) is sent to them first, and the statistics are published for the scale step
        (:meth:`pymc_ibp.datasets.ShardedData.publish`)."""
        cluster = self.cluster
        stale = cluster.total is None or not np.array_equal(Z, cluster.z_last)
        if stale and self.sharded is None:
            return self.local.feature_stats(Z, X, act)
        if stale:
            self.run(lambda: cluster.hold(Z, X, self.sharded))
        G, RX, _ = cluster.total
        if self.sharded is not None:
            self.sharded.publish(cluster.z_last, cluster.total)
        return np.ascontiguousarray(G[np.ix_(act, act)]), np.ascontiguousarray(RX[act])

    def assign_rows(self, search, rng, Z, X, noise, ibp):
        """With sharded data the rows outside the start's subset are on the workers: each
        shard sweeps its rows once, without births, given the start's features (the global
        statistics of ``Z`` before the sweep, as in one synchronous outer iteration), at the
        start's noise; ``Z`` in place."""
        if self.sharded is None:
            search.assign_local(rng, Z, X, noise, ibp)
            return
        cluster = self.cluster

        def assign():
            cluster.hold(Z, X, self.sharded)
            sync_sweeps(cluster, rng, Z, noise, ibp, self.n, 1, -1,
                        "assigning their rows to the start's features")
            cluster.z_last = Z.copy()

        self.run(assign)


class _ShardRows:
    """The sharded data as the start search sees it: ``shape`` and rows by index, fetched from
    the shards' workers (:meth:`ShardCluster.take`)."""

    def __init__(self, data):
        self._data = data

    @property
    def shape(self):
        return self._data.n, self._data.d

    def __getitem__(self, rows):
        data = self._data
        return data.run(lambda: data.cluster.take(rows, data.sharded, data.d))
