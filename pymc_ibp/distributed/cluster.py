"""The shards of a data-parallel run on a Dask cluster: the connection, where every shard's rows
and state live, sending and gathering with deadlines, sums on a tree of workers, and recovery
from a lost worker (:class:`ShardCluster`)."""

from __future__ import annotations

import logging
import os
import time
import warnings
import weakref

import numpy as np

from pymc_ibp.datasets.sharded import ShardSummary, load_shard, rows_by_shard, summarise_shard
from pymc_ibp.distributed.shards import Stats, shard_stats, stats_of, take_rows, tree_sum
from pymc_ibp.exceptions import ShardFailure, ShardRecoveryWarning

__all__ = ["ShardCluster", "ShardsLost"]


class ShardsLost(ShardFailure):
    """Shards lost their worker (their futures were cancelled): recoverable by re-sending."""


class ShardCluster:
    """The cluster side of :class:`~pymc_ibp.DataParallelGibbs`: ``client`` (default: a
    ``LocalCluster`` of process workers, started at first use), ``n_shards`` (default: the
    workers), ``timeout`` (seconds per gather), ``on_worker_loss`` and ``max_recoveries`` (see
    :meth:`run`), ``tree_reduce_min`` (shards from which the sums run on a tree of workers).

    Per shard it holds ``shards[p] = (first row, end row, worker, future of X_p)``, the
    future of its latest result (``results``); ``total`` the statistics summed over them,
    ``z_last`` the ``Z`` they hold, ``inflight`` the asynchronous mode's running sweeps and
    ``since_refresh`` the iterations since ``total`` was last re-summed exactly."""

    def __init__(self, client=None, n_shards=None, timeout=600.0, on_worker_loss="resume",
                 max_recoveries=3, tree_reduce_min=8):
        if on_worker_loss not in ("resume", "raise"):
            raise ValueError(f"on_worker_loss must be 'resume' or 'raise'; got {on_worker_loss!r}.")
        self.on_worker_loss = on_worker_loss
        self.max_recoveries = int(max_recoveries)
        self.tree_reduce_min = int(tree_reduce_min)
        if self.max_recoveries < 0 or self.tree_reduce_min < 1:
            raise ValueError("max_recoveries must be >= 0, refresh_every and tree_reduce_min "
                             ">= 1.")
        if n_shards is not None and int(n_shards) < 1:
            raise ValueError(f"n_shards must be >= 1; got {n_shards!r}.")
        self.n_shards = None if n_shards is None else int(n_shards)
        self.timeout = float(timeout)
        self._user_client = client
        self._client = self._local = None
        self.shards = None
        #: the sharded data's ShardSummary, once their workers have loaded them
        self.summary = None
        self.drop()

    def drop(self):
        """Forget the shards' state (not their data): the next iteration re-sends ``Z``."""
        self.results = None  # per shard: future of its latest ShardResult
        self.total = None  # Stats summed over the shards' latest results
        self.z_last = None  # Z as the shards hold it
        self.inflight = {}  # async: shard -> Flight
        self.since_refresh = 0

    def __getstate__(self):  # a copy (e.g. per chain) gets its own connection
        state = self.__dict__.copy()
        state.update(_client=None, _local=None, shards=None, results=None, total=None,
                     z_last=None, _user_client=None, inflight={})
        return state

    def client(self):
        """The Dask client (the user's, or a ``LocalCluster``'s started now)."""
        if self._client is None:
            if self._user_client is not None:
                self._client = self._user_client
            else:
                from distributed import Client, LocalCluster

                n = self.n_shards or (os.cpu_count() or 1)
                # Dask's own log lines stay quiet (at shutdown it reports the shards' data it
                # drops as lost); a lost worker is reported by ShardRecoveryWarning or
                # ShardFailure
                self._local = LocalCluster(n_workers=min(n, os.cpu_count() or 1),
                                           threads_per_worker=1, processes=True,
                                           dashboard_address=":0",
                                           silence_logs=logging.CRITICAL)
                self._client = Client(self._local)
                weakref.finalize(self, _close, self._client, self._local)
        return self._client

    def close(self):
        """Close the ``LocalCluster`` started here (not a client the user passed)."""
        self.cancel_inflight()
        if self._local is not None:
            _close(self._client, self._local)
        self._client = self._local = self.shards = None
        self.drop()

    def cancel_inflight(self):
        """Cancel the asynchronous mode's running sweeps."""
        flights = self.inflight
        if flights and self._client is not None:
            try:
                self._client.cancel([f for fl in flights.values() for f in fl.futures])
            except Exception:  # noqa: S110 - the cluster may already be gone
                pass
        flights.clear()

    def ensure_data(self, X, n, data=None):
        """Put every shard's rows on its worker: scattered from the driver's ``X`` (``n``
        rows), or with sharded ``data`` loaded by the worker itself
        (:func:`~pymc_ibp.datasets.sharded.load_shard`: a file, a Dask chunk), whose column
        sums of squares then come back as the only message (:attr:`summary`, also given to
        ``data.set_summary``)."""
        if self.shards is not None:
            return
        client = self.client()
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ShardFailure("DataParallelGibbs: the Dask cluster has no workers.")
        if data is not None:
            bounds = data.bounds
        else:
            P = self.n_shards or len(workers)
            if P > n:
                raise ValueError(f"n_shards = {P} exceeds the number of rows ({n}).")
            bounds = np.linspace(0, n, P + 1).astype(int)
        P = len(bounds) - 1
        self.n_shards = P
        x = []
        for p in range(P):
            a, b, w = int(bounds[p]), int(bounds[p + 1]), workers[p % len(workers)]
            if data is not None:  # the worker reads its shard; Dask can recompute it
                fut = client.submit(load_shard, *data.source(p), workers=[w], pure=False)
                x.append((a, b, w, fut))
                continue
            try:
                fut = client.scatter(np.ascontiguousarray(X[a:b]), workers=[w], hash=False,
                                     timeout=self.timeout)
            except Exception as err:  # the worker went away while the data was sent
                raise ShardsLost(f"DataParallelGibbs: sending the rows {a}-{b - 1} of shard "
                                 f"{p} to worker {w} failed: {err!r}.") from err
            x.append((a, b, w, fut))
        self.shards = x
        if data is not None and self.summary is None:
            parts = self.gather([self.submit(p, summarise_shard, xf)
                                 for p, (_, _, _, xf) in enumerate(x)], "loading their data")
            self.summary = ShardSummary.total(parts)
            data.set_summary(self.summary)

    def take(self, rows, data, d):
        """Rows ``rows`` (sorted global indices) of the sharded ``data`` (``d`` columns), each
        shard sending its own."""
        self.ensure_data(None, data.shape[0], data)
        groups = rows_by_shard(data.bounds, rows)
        futs = [self.submit(p, take_rows, self.shards[p][3], local) for p, _, local in groups]
        parts = self.gather(futs, "sending rows for the start search", [p for p, _, _ in groups])
        out = np.empty((len(rows), d))
        for (_, sel, _), part in zip(groups, parts, strict=True):
            out[sel] = part
        return out

    def gather(self, futures, what, shards=None):
        """The shards' results, or an error naming the shards that failed (never a hang:
        ``timeout`` seconds at most).  ``shards[i]`` is the shard of ``futures[i]`` (default:
        ``i``).  Futures cancelled because their worker died raise :class:`ShardsLost`, which
        :meth:`run` recovers from (``on_worker_loss="resume"``)."""
        from distributed import wait

        client = self.client()
        shards = list(range(len(futures))) if shards is None else list(shards)
        deadline = time.monotonic() + self.timeout
        while True:  # in slices of a second, watching for shards whose worker has gone
            left = deadline - time.monotonic()
            try:
                wait(futures, timeout=max(min(1.0, left), 0.01))
                break
            except TimeoutError as err:
                if left <= 1.0:
                    late = [shards[i] for i, f in enumerate(futures) if not f.done()]
                    raise ShardFailure(self.describe(late, f"did not finish {what} within "
                                                           f"{self.timeout:g} s")) from err
                # a shard's state is pinned to its worker: loaded (not scattered) data would
                # wait for a worker that has left, so a departure is a loss at once
                gone = self.orphaned()
                if gone:
                    raise ShardsLost(self.describe(gone, f"lost their worker during "
                                                         f"{what}")) from err
            except Exception:  # noqa: S110 - e.g. futures cancelled when a worker died
                break
        bad = [i for i, f in enumerate(futures) if f.status != "finished"]
        if bad:
            f = futures[bad[0]]
            names = [shards[i] for i in bad]
            if all(futures[i].status == "cancelled" for i in bad):
                raise ShardsLost(self.describe(names, f"lost their data or state with their "
                                                      f"worker during {what}"))
            if f.status == "error":
                why = f"raised {f.exception()!r}"
            else:
                why = f"ended with status {f.status!r}"
            raise ShardFailure(self.describe(names, f"failed {what}: {why}; the run stops "
                                                    "here (restart it from the last draw)"))
        try:
            return client.gather(futures)
        except Exception as err:  # a worker lost between wait and gather: name its shards
            lost = ([shards[i] for i, f in enumerate(futures) if f.status != "finished"]
                    or self.orphaned() or shards)
            raise ShardsLost(self.describe(sorted(set(lost)), f"lost their worker while "
                                                              f"{what} were gathered "
                                                              f"({err!r})")) from err

    def orphaned(self):
        """The shards whose worker is no longer in the cluster."""
        try:
            alive = set(self.client().scheduler_info()["workers"])
        except Exception:  # noqa: BLE001 - the scheduler itself is unreachable: wait on
            return []
        return [p for p, (_, _, w, _) in enumerate(self.shards or []) if w not in alive]

    def describe(self, shards, what):
        """A message naming ``shards`` (rows and worker) and ``what`` they did."""
        parts = [f"shard {p} (rows {self.shards[p][0]}-{self.shards[p][1] - 1}, worker "
                 f"{self.shards[p][2]})" for p in shards]
        return f"DataParallelGibbs: {', '.join(parts)} {what}."

    def submit(self, p, fn, *args):
        """``fn(*args)`` on shard ``p``'s worker (a future)."""
        return self.client().submit(fn, *args, workers=[self.shards[p][2]], pure=False)

    def tree_root(self, results):
        """A future of the global statistics of the shards' ``results`` (futures), summed on
        the workers along a tree (:func:`~pymc_ibp.distributed.tree_sum`), so one message
        reaches the driver."""
        client = self.client()
        leaves = [self.submit(p, stats_of, r) for p, r in enumerate(results)]

        def node(fn, *parts):
            return client.submit(fn, *parts, pure=False)

        return tree_sum(node, leaves)

    def tree_total(self, results):
        """The global statistics of the shards' ``results`` (gathered :meth:`tree_root`)."""
        [total] = self.gather([self.tree_root(results)], "summing their statistics")
        return Stats(*total)

    def send_z(self, Z):
        """(Re)start the shards from the driver's ``Z`` (chain start, a multi-start segment, a
        driver-side move, a recovery)."""
        self.cancel_inflight()
        futs = [self.submit(p, shard_stats, xf, Z[a:b])
                for p, (a, b, _, xf) in enumerate(self.shards)]
        self.gather(futs, "computing their statistics")
        self.results = futs
        self.total = self.tree_total(futs)
        self.since_refresh = 0
        self.z_last = Z.copy()

    def hold(self, Z, X, data=None):
        """The shards' data on their workers (:meth:`ensure_data`) and their ``Z_p`` equal to
        the driver's ``Z``."""
        self.ensure_data(X, Z.shape[0], data)
        if self.z_last is None or not np.array_equal(Z, self.z_last):
            self.send_z(Z)

    def run(self, fn, rng, iteration):
        """``fn()``, repeated from the driver's last global state with the same draws of
        ``rng`` when shards lose their worker (``on_worker_loss="resume"``, at most
        ``max_recoveries`` times; ``iteration`` is named in the warning)."""
        rng_state = rng.bit_generator.state
        for attempt in range(self.max_recoveries + 1):
            try:
                return fn()
            except ShardsLost as err:
                if self.on_worker_loss == "raise" or attempt == self.max_recoveries:
                    raise ShardFailure(f"{err} The run stops here (restart it from the last "
                                       "draw).") from err
                rng.bit_generator.state = rng_state  # the same seeds again
                self._recover(err, iteration)

    def _recover(self, err, iteration):
        """A worker was lost: warn, wait for a worker, and drop the shards so that the
        iteration is repeated from the driver's last global state (its ``X`` and ``Z``)."""
        warnings.warn(f"{err} Re-sending the shards from the driver's last global state and "
                      f"repeating iteration {iteration} with the same seeds.",
                      ShardRecoveryWarning, stacklevel=5)
        self.cancel_inflight()
        self.shards = None
        self.drop()
        try:
            self.client().wait_for_workers(1, timeout=self.timeout)
        except Exception as exc:
            raise ShardFailure(f"DataParallelGibbs: no Dask worker came back within "
                               f"{self.timeout:g} s after {err}") from exc


def _close(client, cluster):
    """Close the client and the ``LocalCluster`` started for it.  Also run as a finalizer at
    garbage collection, where Dask's close may leave its coroutines un-awaited (one run in
    five of ``pm.compute_log_likelihood`` after sharded sampling printed three
    ``RuntimeWarning: coroutine ... was never awaited``): not the user's to act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        try:
            client.close()
        finally:
            if cluster is not None:
                cluster.close()
