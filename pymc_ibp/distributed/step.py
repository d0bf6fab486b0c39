"""The data-parallel accelerated Gibbs sampler on Dask (Doshi-Velez 2009, ch. 5): synchronous,
asynchronous and exact modes.

The rows are split into ``P`` shards of consecutive rows, each held by one Dask worker for the
whole run: its ``X_p`` is scattered once, and its ``Z_p`` stays on the worker between
iterations (the next sweep takes the previous one's result future, which Dask resolves where it
lives).  One PyMC iteration (one draw) is one outer iteration:

1. the driver holds the global statistics ``G = Σ_p G_p``, ``RX = Σ_p RX_p`` and counts
   ``m = Σ_p m_p`` (slot-indexed; they add over shards, Doshi-Velez 2009, eq. 5.1);
2. every shard receives the global statistics and counts, forms the statistics of the *other*
   shards itself (``G - G_p``, ``RX - RX_p``; the information-form message of eq. 5.2), and
   runs ``inner_sweeps`` accelerated sweeps over its rows
   (:func:`pymc_ibp.kernels.shard_sweep`) with the rest held fixed;
3. only the shard holding the *feature token* may create features (births); the token moves
   round-robin, one shard per outer iteration, so features created in the same iteration never
   collide in a slot and a slot means the same feature on every shard (Doshi-Velez 2009, §5.1:
   aligning features created independently "leads to disastrous results").  A feature whose
   global count reaches 0 frees its slot on every shard at once (its statistics are zero
   everywhere);
4. the new statistics are summed exactly (with ``tree_reduce_min`` or more shards on the
   workers along a tree, :func:`pymc_ibp.distributed.tree_sum`, so one message of size
   ``O(K² + KD)`` reaches the driver; with fewer, by the driver), the driver assembles ``Z``
   for the trace, draws ``A`` from the global posterior, and the other steps (``alpha``, the
   scales) run as in a serial run.

Each shard's sweep is an exact Gibbs scan of its rows given the others; running the shards at
the same time on stale statistics of each other is the approximation of the synchronous mode
(exact with ``P = 1``).  ``mode="async"`` lets each shard start its next sweeps as soon as
its last ones are folded in, from the latest global state, without waiting for the others
(the thesis's asynchronous mode).  ``mode="exact"`` adds the exact parallel Metropolis–Hastings
correction of eqs. 5.3–5.4 (:func:`pymc_ibp.distributed.exact_iteration`), which makes the
chain exact for any ``P``.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from typing import NamedTuple

import numpy as np
import pymc as pm
from pymc.step_methods.compound import Competence
from pymc.step_methods.state import dataclass_state

from pymc_ibp.datasets.sharded import (
    ShardSummary,
    load_shard,
    rows_by_shard,
    sharded_data_of,
    summarise_shard,
)
from pymc_ibp.distributed.shards import (
    Stats,
    add_stats,
    apply_changes,
    exact_iteration,
    exact_propose,
    proposal_summary,
    shard_report,
    shard_stats,
    shard_sweeps,
    stats_delta,
    stats_of,
    take_rows,
    tree_sum,
)
from pymc_ibp.exceptions import ModelPatternError, ShardFailure, ShardRecoveryWarning
from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs, LinearGaussianIBPState

__all__ = ["DataParallelGibbs"]


@dataclass_state
class DataParallelGibbsState(LinearGaussianIBPState):
    """The accelerated step's state plus the outer iterations' own: the shard holding the
    feature token (asynchronous mode), the outer iterations since the statistics were last
    recomputed from the shards, and the exact mode's accepted proposals of the last
    iteration."""

    token: int
    since_refresh: int
    exact_accepted: int


class DataParallelGibbs(AcceleratedGibbs):
    r"""Data-parallel accelerated Gibbs sampler for the linear-Gaussian IBP on a Dask cluster
    (Doshi-Velez 2009, ch. 5).

    The rows are split into ``P`` shards, each held by one worker for the whole run.  The
    statistics add over shards (Doshi-Velez 2009, eq. 5.1),

    .. math:: Z^\top Z = \sum_p Z_p^\top Z_p, \qquad Z^\top X = \sum_p Z_p^\top X_p,

    so in each iteration every shard forms the other shards' part from the global sums
    (eq. 5.2) and runs accelerated sweeps of its rows given it; only the shard holding a
    round-robin *feature token* creates features.  The driver sums the new statistics exactly
    and draws ``A``; the other variables keep their usual steps.  Shards that sweep at the same
    time see each other's statistics from the start of the iteration, an approximation for
    ``P > 1`` that ``mode="exact"`` corrects by Metropolis–Hastings (eqs. 5.3–5.4).

    Use it when a linear-Gaussian model has too many rows for one process, or its data live
    next to the workers (a :class:`~pymc_ibp.datasets.ShardedData`, to which ``pm.sample``
    assigns it): ``pm.sample(step=[pmi.DataParallelGibbs([Z], n_shards=4)], cores=1)``.

    Parameters
    ----------
    vars : list
        ``Z`` (``A`` is added) of a model with the pattern of :class:`~pymc_ibp.AcceleratedGibbs`,
        with complete data and no offset.
    client : distributed.Client, optional
        The cluster (default: a ``LocalCluster`` of process workers, started at the first
        sweep); see the docs page *Data-parallel sampling on Dask*.
    n_shards : int, optional
        ``P`` (default: the number of workers; with sharded data, its files or chunks); see
        the docs page *Data-parallel sampling on Dask*.
    inner_sweeps : int
        Sweeps of its rows each shard runs per iteration (default 5); see the docs page.
    timeout : float
        Seconds to wait for one iteration's shards (default 600); see the docs page.
    mode : {"sync", "async", "exact"}
        ``"sync"`` (default) and ``"async"``, approximations for ``P > 1``, or ``"exact"``; see
        the docs page *Data-parallel sampling on Dask* and :mod:`pymc_ibp.distributed`.
    exact_rows : int
        Rows per shard that one exact-mode iteration may change (default 5); see the docs page.
    exact_flip : float
        Probability that the exact mode's proposal flips an entry (default 0.01); see
        :func:`pymc_ibp.distributed.exact_iteration`.
    on_worker_loss : {"resume", "raise"}
        On a lost worker, resume the iteration from the driver's state (default) or raise
        :class:`~pymc_ibp.ShardFailure`; see the docs page.
    max_recoveries : int
        Recoveries allowed within one iteration (default 3); see the docs page.
    refresh_every : int
        Asynchronous mode: iterations between exact re-sums of the statistics (default 50);
        see the docs page.
    tree_reduce_min : int
        Shards from which the sums run on the workers along a tree (default 8); see
        :func:`~pymc_ibp.distributed.tree_sum`.
    **kwargs
        As for :class:`~pymc_ibp.AcceleratedGibbs`; ``split_merge``, ``birth_death`` and
        ``pair_swaps`` default to 0 here.

    References
    ----------
    F. Doshi-Velez (2009). *The Indian buffet process: scalable inference and extensions*. MSc
    thesis, University of Cambridge.
    """

    name = "data_parallel_gibbs"
    _state_class = DataParallelGibbsState
    supports_sharded = True
    stats_dtypes_shapes = {
        **AcceleratedGibbs.stats_dtypes_shapes,
        "ibp_shard_token": (np.int64, []),
        "ibp_exact_accepted": (np.int64, []),
    }

    def __init__(self, vars=None, *, client=None, n_shards=None, inner_sweeps=5, timeout=600.0,
                 mode="sync", exact_rows=5, exact_flip=0.01, on_worker_loss="resume",
                 max_recoveries=3, refresh_every=50, tree_reduce_min=8, **kwargs):
        kwargs.setdefault("split_merge", 0)
        kwargs.setdefault("birth_death", 0)
        kwargs.setdefault("pair_swaps", 0)
        super().__init__(vars, **kwargs)
        data = self._sharded
        if data is not None:
            if n_shards is not None and int(n_shards) != data.n_shards:
                raise ValueError(
                    f"The sharded data come in {data.n_shards} shards (files or row chunks); "
                    f"got n_shards={n_shards!r}. Re-chunk a Dask array with "
                    "pmi.ShardedData.from_dask(array, n_shards=...).")
            n_shards = data.n_shards
            if self.split_merge or self.birth_death or self.pair_swaps or \
                    self.column_split_merge:
                raise ValueError(
                    "With sharded data the driver has no rows to run split-merge, birth/death "
                    "or pair-swap moves on: leave split_merge, birth_death, pair_swaps and "
                    "column_split_merge at 0.")
            self._X = _ShardRows(self)  # what the start search reads: rows fetched by index
        if not self.update_z or not self.mode.counts:
            raise ModelPatternError(
                "DataParallelGibbs samples a pmi.IBP matrix Z (with its A): pass [Z].")
        if self.window != 1:
            raise ModelPatternError("DataParallelGibbs runs window=1 sweeps only.")
        if self._mask is not None or self._offset_fn is not None:
            raise ModelPatternError(
                "DataParallelGibbs needs complete data (no NaN entries) and X ~ Normal(Z @ A, "
                "sigma_x) without an offset: the shards hold fixed data. Use "
                "pmi.AcceleratedGibbs for this model.")
        self.inner_sweeps = int(inner_sweeps)
        if self.inner_sweeps < 1:
            raise ValueError(f"inner_sweeps must be >= 1; got {inner_sweeps!r}.")
        if mode not in ("sync", "async", "exact"):
            raise ValueError(f"mode must be 'sync', 'async' or 'exact'; got {mode!r}.")
        if on_worker_loss not in ("resume", "raise"):
            raise ValueError(f"on_worker_loss must be 'resume' or 'raise'; got {on_worker_loss!r}.")
        self.parallel_mode = mode
        self.on_worker_loss = on_worker_loss
        self.max_recoveries = int(max_recoveries)
        self.refresh_every = int(refresh_every)
        self.tree_reduce_min = int(tree_reduce_min)
        if self.max_recoveries < 0 or self.refresh_every < 1 or self.tree_reduce_min < 1:
            raise ValueError("max_recoveries must be >= 0, refresh_every and tree_reduce_min "
                             ">= 1.")
        self.exact_rows = int(exact_rows)
        self.exact_flip = float(exact_flip)
        if self.exact_rows < 1 or not 0.0 < self.exact_flip < 0.5:
            raise ValueError("exact_rows must be >= 1 and 0 < exact_flip < 0.5.")
        if n_shards is not None and int(n_shards) < 1:
            raise ValueError(f"n_shards must be >= 1; got {n_shards!r}.")
        self._n_shards = None if n_shards is None else int(n_shards)
        self.timeout = float(timeout)
        self._user_client = client
        self._client = self._cluster = None
        self._x = None  # per shard: (rows a, b, worker, future of X_p)
        self._diag_chains = []
        self._diag = []
        self._drop_shards()

    # --- cluster and shards ---------------------------------------------------------------
    def _drop_shards(self):
        #: per shard, what the last outer iteration did, and which shard held the token
        self.last_iteration = None
        self.exact_accepted = 0
        self._results = None  # per shard: future of its latest ShardResult
        self._global = None  # Stats summed over the shards' latest results
        self._z_last = None  # Z as the shards hold it
        self._inflight = {}  # async: shard -> _Flight
        self.token = 0  # async: the shard holding the feature token
        self.since_refresh = 0

    def _reset_chain(self, tune):
        super()._reset_chain(tune)
        if hasattr(self, "_results"):
            self._cancel_inflight()
            self._drop_shards()
            if self._diag:
                self._diag_chains.append(self._diag)
            self._diag = []

    def __getstate__(self):  # a copy of the step (e.g. per chain) gets its own connection
        state = self.__dict__.copy()
        state.update(_client=None, _cluster=None, _x=None, _results=None, _global=None,
                     _z_last=None, _user_client=None, _inflight={})
        return state

    @property
    def n_shards(self):
        return self._n_shards

    def _get_client(self):
        if self._client is None:
            if self._user_client is not None:
                self._client = self._user_client
            else:
                from distributed import Client, LocalCluster

                n = self._n_shards or (os.cpu_count() or 1)
                self._cluster = LocalCluster(n_workers=min(n, os.cpu_count() or 1),
                                             threads_per_worker=1, processes=True,
                                             dashboard_address=":0")
                self._client = Client(self._cluster)
                weakref.finalize(self, _close, self._client, self._cluster)
        return self._client

    def close(self):
        """Close the ``LocalCluster`` the step started (not a client the user passed)."""
        self._cancel_inflight()
        if self._cluster is not None:
            _close(self._client, self._cluster)
        self._client = self._cluster = self._x = None
        self._drop_shards()

    def _cancel_inflight(self):
        flights = getattr(self, "_inflight", None)
        if flights and self._client is not None:
            try:
                self._client.cancel([f for fl in flights.values() for f in fl.futures])
            except Exception:  # noqa: S110 - the cluster may already be gone
                pass
        if flights:
            flights.clear()

    def _ensure_data(self, client, X):
        """Put every shard's rows on its worker: scattered from the driver's ``X``, or with
        sharded data loaded by the worker itself (:func:`~pymc_ibp.datasets.sharded.load_shard`:
        a file, a Dask chunk), whose column sums of squares then come back as the only
        message (``‖X‖²`` per column, for the log joint and the scales)."""
        if self._x is not None:
            return
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ShardFailure("DataParallelGibbs: the Dask cluster has no workers.")
        data = self._sharded
        if data is not None:
            bounds = data.bounds
        else:
            P = self._n_shards or len(workers)
            if P > self.n:
                raise ValueError(f"n_shards = {P} exceeds the number of rows ({self.n}).")
            bounds = np.linspace(0, self.n, P + 1).astype(int)
        P = len(bounds) - 1
        self._n_shards = P
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
                raise _ShardsLost(f"DataParallelGibbs: sending the rows {a}-{b - 1} of shard "
                                  f"{p} to worker {w} failed: {err!r}.") from err
            x.append((a, b, w, fut))
        self._x = x
        if data is not None and self._colsq is None:
            parts = self._gather(client, [self._submit(client, p, summarise_shard, xf)
                                          for p, (_, _, _, xf) in enumerate(x)],
                                 "loading their data")
            summary = ShardSummary.total(parts)
            data.set_summary(summary)
            self._colsq = np.asarray(summary.colsq, dtype=np.float64)

    def _take(self, rows):
        """Rows of the sharded data (sorted global indices), each shard sending its own."""
        def fetch(client):
            self._ensure_data(client, None)
            groups = rows_by_shard(self._sharded.bounds, rows)
            futs = [self._submit(client, p, take_rows, self._x[p][3], local)
                    for p, _, local in groups]
            parts = self._gather(client, futs, "sending rows for the start search",
                                 [p for p, _, _ in groups])
            out = np.empty((len(rows), self.d))
            for (_, sel, _), part in zip(groups, parts, strict=True):
                out[sel] = part
            return out

        return self._run(fetch)

    def _trXX(self, X, noise):
        if self._sharded is not None and self._colsq is None:
            self._run(lambda client: self._ensure_data(client, None))
        return super()._trXX(X, noise)

    def _assign_rows(self, rng, Z, X, noise, ibp):
        """With sharded data the rows outside the start's subset are on the workers: each
        shard sweeps its rows once, without births, given the start's features (the global
        statistics of ``Z`` before the sweep, as in one synchronous outer iteration), at the
        start's noise; ``Z`` in place."""
        if self._sharded is None:
            super()._assign_rows(rng, Z, X, noise, ibp)
            return

        def assign(client):
            self._hold(client, Z, X)
            self._sync_sweeps(client, Z, noise, ibp, 1, -1,
                              "assigning their rows to the start's features")
            self._z_last = Z.copy()

        self._run(assign)

    def _gather(self, client, futures, what, shards=None):
        """The shards' results, or an error naming the shards that failed (never a hang:
        ``timeout`` seconds at most).  ``shards[i]`` is the shard of ``futures[i]`` (default:
        ``i``).  Futures cancelled because their worker died raise :class:`_ShardsLost`, which
        the step recovers from (``on_worker_loss="resume"``)."""
        from distributed import wait

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
                    raise ShardFailure(self._describe(late, f"did not finish {what} within "
                                                            f"{self.timeout:g} s")) from err
                # a shard's state is pinned to its worker: loaded (not scattered) data would
                # wait for a worker that has left, so a departure is a loss at once
                gone = self._orphaned(client)
                if gone:
                    raise _ShardsLost(self._describe(gone, f"lost their worker during "
                                                           f"{what}")) from err
            except Exception:  # noqa: S110 - e.g. futures cancelled when a worker died
                break
        bad = [i for i, f in enumerate(futures) if f.status != "finished"]
        if bad:
            f = futures[bad[0]]
            names = [shards[i] for i in bad]
            if all(futures[i].status == "cancelled" for i in bad):
                raise _ShardsLost(self._describe(names, f"lost their data or state with their "
                                                        f"worker during {what}"))
            if f.status == "error":
                why = f"raised {f.exception()!r}"
            else:
                why = f"ended with status {f.status!r}"
            raise ShardFailure(self._describe(names, f"failed {what}: {why}; the run stops "
                                                     "here (restart it from the last draw)"))
        try:
            return client.gather(futures)
        except Exception as err:  # a worker lost between wait and gather: name its shards
            lost = ([shards[i] for i, f in enumerate(futures) if f.status != "finished"]
                    or self._orphaned(client) or shards)
            raise _ShardsLost(self._describe(sorted(set(lost)), f"lost their worker while "
                                                                f"{what} were gathered "
                                                                f"({err!r})")) from err

    def _orphaned(self, client):
        """The shards whose worker is no longer in the cluster."""
        try:
            alive = set(client.scheduler_info()["workers"])
        except Exception:  # noqa: BLE001 - the scheduler itself is unreachable: wait on
            return []
        return [p for p, (_, _, w, _) in enumerate(self._x or []) if w not in alive]

    def _describe(self, shards, what):
        parts = [f"shard {p} (rows {self._x[p][0]}-{self._x[p][1] - 1}, worker "
                 f"{self._x[p][2]})" for p in shards]
        return f"DataParallelGibbs: {', '.join(parts)} {what}."

    def _submit(self, client, p, fn, *args):
        return client.submit(fn, *args, workers=[self._x[p][2]], pure=False)

    def _tree_root(self, client, results):
        """A future of the global statistics of the shards' ``results`` (futures), summed on
        the workers along a tree (:func:`tree_sum`), so one message reaches the driver."""
        leaves = [self._submit(client, p, stats_of, r) for p, r in enumerate(results)]

        def node(fn, *parts):
            return client.submit(fn, *parts, pure=False)

        return tree_sum(node, leaves)

    def _tree_total(self, client, results):
        [total] = self._gather(client, [self._tree_root(client, results)],
                               "summing their statistics")
        return Stats(*total)

    def _send_z(self, client, Z):
        """(Re)start the shards from the driver's ``Z`` (chain start, a multi-start segment, a
        driver-side move, a recovery)."""
        self._cancel_inflight()
        futs = [self._submit(client, p, shard_stats, xf, Z[a:b])
                for p, (a, b, _, xf) in enumerate(self._x)]
        self._gather(client, futs, "computing their statistics")
        self._results = futs
        self._global = self._tree_total(client, futs)
        self.since_refresh = 0
        self._z_last = Z.copy()

    def _recover(self, client, err):
        """A worker was lost: warn, wait for a worker, and drop the shards so that the
        iteration is repeated from the driver's last global state (its ``X`` and ``Z``)."""
        warnings.warn(f"{err} Re-sending the shards from the driver's last global state and "
                      f"repeating iteration {self.sweeps} with the same seeds.",
                      ShardRecoveryWarning, stacklevel=4)
        self._cancel_inflight()
        self._x = None
        token = self.token
        self._drop_shards()
        self.token = token
        try:
            client.wait_for_workers(1, timeout=self.timeout)
        except Exception as exc:
            raise ShardFailure(f"DataParallelGibbs: no Dask worker came back within "
                               f"{self.timeout:g} s after {err}") from exc

    # --- the outer iteration --------------------------------------------------------------
    def _run(self, fn):
        """``fn(client)``, repeated from the driver's last global state (with the same seeds)
        when shards lose their worker (``on_worker_loss="resume"``)."""
        client = self._get_client()
        rng_state = self.rng.bit_generator.state
        for attempt in range(self.max_recoveries + 1):
            try:
                return fn(client)
            except _ShardsLost as err:
                if self.on_worker_loss == "raise" or attempt == self.max_recoveries:
                    raise ShardFailure(f"{err} The run stops here (restart it from the last "
                                       "draw).") from err
                self.rng.bit_generator.state = rng_state  # the same seeds again
                self._recover(client, err)

    def _hold(self, client, Z, X):
        """The shards' data on their workers and their ``Z_p`` equal to the driver's ``Z``."""
        self._ensure_data(client, X)
        if self._z_last is None or not np.array_equal(Z, self._z_last):
            self._send_z(client, Z)

    def _sweep(self, Z, X, m, noise):
        def iteration(client):
            self._hold(client, Z, X)
            if self.parallel_mode == "exact":
                return self._exact(client, Z, X, noise)
            if self.parallel_mode == "async":
                return self._async(client, Z, noise)
            return self._sync(client, Z, noise)

        out = self._run(iteration)
        m[:] = self._global.m
        self._z_last = Z.copy()
        return out

    def _sync(self, client, Z, noise):
        """One synchronous outer iteration: every shard sweeps given the others' statistics
        from the start of the iteration; the new global statistics are summed on a tree."""
        P = len(self._x)
        token = self.sweeps % P
        reports = self._sync_sweeps(client, Z, noise, (self.mode.alpha, self.mode.beta),
                                    self.inner_sweeps, token, "their sweeps")
        self.last_iteration = {"token": token, "births": [r.births for r in reports],
                               "deaths": [r.deaths for r in reports],
                               "flips": [r.flips for r in reports]}
        self._record(reports, range(P), token)
        return (sum(r.flips for r in reports), sum(r.births for r in reports),
                sum(r.deaths for r in reports), max(r.kmax_hit for r in reports))

    def _sync_sweeps(self, client, Z, noise, ibp, sweeps, token, what):
        """``sweeps`` sweeps of every shard's rows given the others' statistics from the
        start (:func:`~pymc_ibp.distributed.shards.shard_sweeps`, prior ``ibp = (α, β)``), only
        shard ``token`` creating features (none for ``token = -1``); their changes applied to
        ``Z`` (in place) and the new global statistics kept.  Returns the shards' reports."""
        P = len(self._x)
        seeds = self.rng.integers(0, 2**63 - 1, size=P)
        G, RX, m_glob = self._global
        futs = [self._submit(client, p, shard_sweeps, xf, self._results[p], m_glob, G, RX,
                             noise, ibp[0], ibp[1], self.n, sweeps, int(seeds[p]),
                             p == token)
                for p, (_, _, _, xf) in enumerate(self._x)]
        # each shard reports the entries of its Z_p that changed (never the whole Z_p) and, with
        # few shards, its statistics, which the driver sums; with many they are summed on a tree
        tree = P >= self.tree_reduce_min
        root = self._tree_root(client, futs) if tree else None
        reports = self._gather(client, [self._submit(client, p, shard_report, f, xf,
                                                     self._results[p], not tree)
                                        for p, (f, (_, _, _, xf)) in
                                        enumerate(zip(futs, self._x, strict=True))], what)
        if tree:
            [total] = self._gather(client, [root], "summing their statistics")
            total = Stats(*total)
        else:
            total = add_stats(*[r.stats for r in reports])
        for (a, _, _, _), r in zip(self._x, reports, strict=True):
            apply_changes(Z, a, r.changes)
        self._results = futs
        self._global = total
        return reports

    def _launch(self, client, p, noise, seed):
        """Start shard ``p``'s sweeps (asynchronous mode) from the latest global statistics.

        The token holder may create features only if no slot is a *zombie*: free in the
        global counts but in use in the view of a shard still running, which could still put
        rows in it (a birth there would merge two different features in one slot)."""
        G, RX, m_glob = self._global
        free = m_glob == 0
        zombies = any(np.any(free & fl.view) for fl in self._inflight.values())
        births = p == self.token and not zombies
        _, _, _, xf = self._x[p]
        fut = self._submit(client, p, shard_sweeps, xf, self._results[p], m_glob, G, RX, noise,
                           self.mode.alpha, self.mode.beta, self.n, self.inner_sweeps, int(seed),
                           births)
        delta = self._submit(client, p, stats_delta, fut, self._results[p])
        report = self._submit(client, p, shard_report, fut, xf, self._results[p])
        self._inflight[p] = _Flight(fut, delta, report, m_glob > 0, births)

    def _async(self, client, Z, noise):
        """One asynchronous outer iteration: idle shards start from the latest global state,
        the driver waits for at least one running shard, and folds the changes of every shard
        that has finished into the global statistics (Doshi-Velez 2009, §5.1, asynchronous
        mode); the others keep running."""
        from distributed import wait

        P = len(self._x)
        seeds = self.rng.integers(0, 2**63 - 1, size=P)
        for p in range(P):
            if p not in self._inflight:
                self._launch(client, p, noise, seeds[p])
        running = sorted(self._inflight)
        futs = [self._inflight[p].result for p in running]
        try:
            wait(futs, timeout=self.timeout, return_when="FIRST_COMPLETED")
        except TimeoutError as err:
            raise ShardFailure(self._describe(running, f"did not finish their sweeps within "
                                                       f"{self.timeout:g} s")) from err
        except Exception:  # noqa: S110 - a cancelled future: named by _gather below
            pass
        done = [p for p in running if self._inflight[p].result.done()]
        flights = [self._inflight[p] for p in done]
        reports = self._gather(client, [fl.report for fl in flights], "their sweeps", done)
        deltas = self._gather(client, [fl.delta for fl in flights], "their statistics", done)
        G, RX, m_glob = self._global
        token = self.token
        for p, fl, r, d in zip(done, flights, reports, deltas, strict=True):
            apply_changes(Z, self._x[p][0], r.changes)
            G, RX, m_glob = G + d.G, RX + d.RX, m_glob + d.m
            self._results[p] = fl.result
            del self._inflight[p]
            if p == self.token and fl.births:
                self.token = (p + 1) % P
        self._global = Stats(G, RX, m_glob)
        self.since_refresh += 1
        if self.since_refresh >= self.refresh_every:  # the float sums of RX, recomputed
            self._global = self._tree_total(client, self._results)
            self.since_refresh = 0
        self.last_iteration = {"token": token, "reported": done,
                               "births": [r.births for r in reports],
                               "deaths": [r.deaths for r in reports],
                               "flips": [r.flips for r in reports]}
        self._record(reports, done, token)
        return (sum(r.flips for r in reports), sum(r.births for r in reports),
                sum(r.deaths for r in reports), max(r.kmax_hit for r in reports))

    def _exact(self, client, Z, X, noise):
        """One iteration of the exact mode (:func:`pymc_ibp.distributed.exact_iteration`)."""
        P = len(self._x)
        token = self.sweeps % P

        changes = []

        def run(fn, args_list):
            futs = [self._submit(client, p, fn, *args) for p, args in enumerate(args_list)]
            what = fn.__name__.replace("_", " ")
            if fn is not exact_propose:
                return futs, self._gather(client, futs, what)
            # the proposals stay on the workers: the driver gathers their statistics, rows,
            # log Q and the entries of Z_p they change, never Z_p itself
            summaries = self._gather(client, [
                self._submit(client, p, proposal_summary, f, args_list[p][1])
                for p, f in enumerate(futs)], what)
            changes.extend(c for _, c in summaries)
            return futs, [prop for prop, _ in summaries]

        xs = [xf for _, _, _, xf in self._x]
        accepted, sources, stats, _, fwd = exact_iteration(
            run, xs, self._results, [self._global], self.rng, noise, self.mode.alpha,
            self.mode.beta, self.n, self._trXX(X, noise), self.inner_sweeps, self.exact_rows,
            token, self.exact_flip)
        flips = 0
        if accepted:
            for (a, _, _, _), c in zip(self._x, changes, strict=True):
                flips += int(c.size)
                apply_changes(Z, a, c)
        self._results = sources
        self._global = add_stats(*[Stats(*s) for s in stats])
        self.exact_accepted = int(accepted)
        self.last_iteration = {"token": token, "accepted": accepted,
                               "rows": [f.rows for f in fwd]}
        return flips, 0, 0, int(np.all(self._global.m > 0))

    # --- diagnostics ----------------------------------------------------------------------
    def _record(self, reports, shards, token):
        P = len(self._x)
        row = {k: np.full(P, -1, dtype=np.int64) for k in
               ("flips", "births", "deaths", "state_bytes", "worker_rss")}
        row["seconds"] = np.full(P, np.nan)
        row["reported"] = np.zeros(P, dtype=bool)
        for p, r in zip(shards, reports, strict=True):
            for k in ("flips", "births", "deaths", "state_bytes", "worker_rss"):
                row[k][p] = getattr(r, k)
            row["seconds"][p] = r.seconds
            row["reported"][p] = True
        row["token"] = np.arange(P) == token
        self._diag.append(row)

    def shard_diagnostics(self):
        """The run's per-shard diagnostics as an :class:`xarray.DataTree` node, to add to the
        result of ``pm.sample`` as an extra group::

            idata["shard_diagnostics"] = step.shard_diagnostics()

        Variables over ``(chain, iteration, shard)`` (tuning iterations included; ``-1`` /
        NaN where a shard did not report in that iteration, as in the asynchronous mode):
        ``flips``, ``births``, ``deaths`` (what its sweeps did), ``seconds`` (their time on
        the worker), ``state_bytes`` (``X_p``, ``Z_p`` and its statistics: the memory a
        shard holds, bounded by ``N_p (D·8 + K_max) + 8 K_max (K_max + D + 1)``),
        ``worker_rss`` (the resident memory of its worker process, bytes), ``reported`` and
        ``token`` (the shard held the feature token); coordinates ``row_start`` and
        ``row_stop`` of each shard.  The exact mode records nothing here (its stats are
        ``ibp_exact_accepted``).
        """
        import xarray as xr

        chains = [c for c in (*self._diag_chains, self._diag) if c]
        if not chains:
            raise ValueError("shard_diagnostics: the step has not run an iteration yet.")
        P = max(len(c[0]["flips"]) for c in chains)
        n_it = max(len(c) for c in chains)
        data = {}
        for k in ("flips", "births", "deaths", "state_bytes", "worker_rss", "seconds",
                  "reported", "token"):
            fill = np.nan if k == "seconds" else (False if k in ("reported", "token") else -1)
            first = chains[0][0][k]
            arr = np.full((len(chains), n_it, P), fill, dtype=first.dtype)
            for c, rows in enumerate(chains):
                for i, row in enumerate(rows):
                    arr[c, i, :row[k].size] = row[k]
            data[k] = (("chain", "iteration", "shard"), arr)
        coords = {"chain": np.arange(len(chains)), "iteration": np.arange(n_it),
                  "shard": np.arange(P)}
        if self._x is not None and len(self._x) == P:
            coords["row_start"] = ("shard", np.array([a for a, _, _, _ in self._x]))
            coords["row_stop"] = ("shard", np.array([b for _, b, _, _ in self._x]))
        ds = xr.Dataset(data, coords=coords,
                        attrs={"mode": self.parallel_mode, "inner_sweeps": self.inner_sweeps})
        return xr.DataTree(ds)

    def _extra_stats(self):
        if self.parallel_mode == "async":
            token = self.last_iteration["token"] if self.last_iteration else 0
        else:
            token = int((self.sweeps - 1) % len(self._x)) if self._x else 0
        return {"ibp_shard_token": int(token), "ibp_exact_accepted": int(self.exact_accepted)}

    def _feature_stats(self, Z, X, act):
        """The aggregated statistics of the shards when ``Z`` is what they hold (no pass over
        the data at the driver).  With sharded data a ``Z`` the shards do not hold (the start
        search's) is sent to them first, and the statistics are published for the scale
        step (:meth:`pymc_ibp.datasets.ShardedData.publish`)."""
        stale = self._global is None or not np.array_equal(Z, self._z_last)
        if stale and self._sharded is None:
            return super()._feature_stats(Z, X, act)
        if stale:
            self._run(lambda client: self._hold(client, Z, X))
        G, RX, _ = self._global
        if self._sharded is not None:
            self._sharded.publish(self._z_last, self._global)
        return np.ascontiguousarray(G[np.ix_(act, act)]), np.ascontiguousarray(RX[act])

    @staticmethod
    def competence(var, has_grad):
        # assigned automatically only to models whose observed data is a pmi.ShardedData (no
        # other step can sample them); otherwise chosen by the user (step=...).  The cheap
        # test first: matching the model costs a compiled initial point
        try:
            model = pm.modelcontext(None)
        except TypeError:
            return Competence.INCOMPATIBLE
        if not any(sharded_data_of(model.rvs_to_values.get(rv)) is not None
                   for rv in model.observed_RVs):
            return Competence.INCOMPATIBLE
        spec = AcceleratedGibbs._spec_of(var)
        if spec is None or spec.sharded is None:
            return Competence.INCOMPATIBLE
        return Competence.IDEAL


class _ShardRows:
    """The sharded data as the start search sees it: ``shape`` and rows by index, fetched from
    the shards' workers (:meth:`DataParallelGibbs._take`)."""

    def __init__(self, step):
        self._step = step

    @property
    def shape(self):
        return self._step.n, self._step.d

    def __getitem__(self, rows):
        return self._step._take(rows)


class _ShardsLost(ShardFailure):
    """Shards lost their worker (their futures were cancelled): recoverable by re-sending."""


class _Flight(NamedTuple):
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


def _close(client, cluster):
    try:
        client.close()
    finally:
        if cluster is not None:
            cluster.close()
