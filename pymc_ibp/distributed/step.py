"""The data-parallel accelerated Gibbs sampler on Dask (Doshi-Velez 2009, ch. 5), synchronous
mode.

The rows are split into ``P`` shards of consecutive rows, each held by one Dask worker for the
whole run: its ``X_p`` is scattered once, and its ``Z_p`` stays on the worker between
iterations (the next sweep takes the previous one's result future, which Dask resolves where it
lives).  One PyMC iteration (one draw) is one outer iteration:

1. the driver holds the global statistics ``G = Σ_p G_p``, ``RX = Σ_p RX_p`` and counts
   ``m = Σ_p m_p`` (slot-indexed; they add over shards, Doshi-Velez 2009, eq. 5.1);
2. every shard receives the statistics of the *other* shards (``G - G_p``, ``RX - RX_p``; the
   information-form message of eq. 5.2) and the global counts, and runs ``inner_sweeps``
   accelerated sweeps over its rows (:func:`pymc_ibp.step_methods.kernels.shard_sweep`) with
   the rest held fixed;
3. only the shard holding the *feature token* may create features (births); the token moves
   round-robin, one shard per outer iteration, so features created in the same iteration never
   collide in a slot and a slot means the same feature on every shard (Doshi-Velez 2009, §5.1:
   aligning features created independently "leads to disastrous results").  A feature whose
   global count reaches 0 frees its slot on every shard at once (its statistics are zero
   everywhere);
4. the driver sums the returned statistics exactly, assembles ``Z`` for the trace, draws ``A``
   from the global posterior, and the other steps (``alpha``, the scales) run as in a serial
   run.

Each shard's sweep is an exact Gibbs scan of its rows given the others; running the shards at
the same time on stale statistics of each other is the approximation of the synchronous mode
(exact with ``P = 1``).  ``mode="exact"`` adds the exact parallel Metropolis–Hastings
correction of eqs. 5.3–5.4 (:func:`pymc_ibp.distributed.exact_iteration`), which makes the
chain exact for any ``P``.
"""

from __future__ import annotations

import os
import weakref

import numpy as np
from pymc.step_methods.compound import Competence

from pymc_ibp.distributed.shards import exact_iteration, shard_stats, shard_sweeps
from pymc_ibp.exceptions import ModelPatternError, ShardFailure
from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs

__all__ = ["DataParallelGibbs"]


class DataParallelGibbs(AcceleratedGibbs):
    r"""Data-parallel accelerated Gibbs sampler for the linear-Gaussian IBP on a Dask cluster
    (Doshi-Velez 2009, ch. 5, synchronous mode; module docstring).

    Select it with one line; the other variables get their usual steps::

        with model:
            idata = pm.sample(step=[pmi.DataParallelGibbs([Z], n_shards=4)], cores=1)

    Parameters
    ----------
    vars : list
        The ``pmi.IBP`` variable ``Z`` (``A`` is added automatically), in a model with the
        pattern of :class:`~pymc_ibp.AcceleratedGibbs`: complete data (no NaN), no offset.
    client : distributed.Client, optional
        The cluster to run on.  Default: a ``LocalCluster`` of ``min(n_shards, CPUs)`` process
        workers with one thread each, started at the first sweep and closed with the step.
    n_shards : int, optional
        ``P``, the number of row shards (default: the number of workers).  Shard ``p`` lives on
        worker ``p mod W``.
    inner_sweeps : int
        Sweeps of its rows each shard runs per outer iteration (default 5; the thesis used
        5–20).
    timeout : float
        Seconds to wait for the shards of one outer iteration before failing (default 600).
    mode : {"sync", "exact"}
        ``"sync"`` (default): every shard sweeps all its rows given the others' statistics from
        the start of the iteration (an approximation for ``P > 1``).  ``"exact"``: the exact
        parallel Metropolis–Hastings correction (Doshi-Velez 2009, eqs. 5.3–5.4;
        :func:`pymc_ibp.distributed.exact_iteration`): ``inner_sweeps`` Gibbs sweeps of
        ``exact_rows`` rows per shard chosen by a shared seed, a noisy proposal, and one global
        accept/reject, so the chain targets the exact posterior for any ``P``.
    exact_rows : int
        Rows per shard that one exact-mode iteration may change (default 5; the thesis used 1,
        5 or 10 to keep the acceptance rate up).
    exact_flip : float
        Probability that the exact mode's proposal flips an entry of ``f_r(Z)`` (default
        0.01).
    **kwargs
        As for :class:`~pymc_ibp.AcceleratedGibbs`.  ``split_merge``, ``birth_death`` and
        ``pair_swaps`` default to 0 here: those moves run on the driver over all rows (the
        shards' ``Z`` is then re-sent).

    Notes
    -----
    Besides the ``ibp_`` stats of :class:`~pymc_ibp.AcceleratedGibbs` it records
    ``ibp_shard_token`` (the shard that held the feature token) and ``ibp_exact_accepted``
    (1 when the exact mode's proposal was accepted; always 0 in the synchronous mode).
    A chain is reproducible for a seed given ``P`` (each shard's sweeps use a seed drawn from
    the step's generator).  A failed or lost worker raises an error naming the shard and its
    rows.  Use ``cores=1`` in ``pm.sample``: the parallelism is across shards, not chains.
    """

    name = "data_parallel_gibbs"
    stats_dtypes_shapes = {
        **AcceleratedGibbs.stats_dtypes_shapes,
        "ibp_shard_token": (np.int64, []),
        "ibp_exact_accepted": (np.int64, []),
    }

    def __init__(self, vars=None, *, client=None, n_shards=None, inner_sweeps=5, timeout=600.0,
                 mode="sync", exact_rows=5, exact_flip=0.01, **kwargs):
        kwargs.setdefault("split_merge", 0)
        kwargs.setdefault("birth_death", 0)
        kwargs.setdefault("pair_swaps", 0)
        super().__init__(vars, **kwargs)
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
        if mode not in ("sync", "exact"):
            raise ValueError(f"mode must be 'sync' or 'exact'; got {mode!r}.")
        self.parallel_mode = mode
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
        self._drop_shards()

    # --- cluster and shards ---------------------------------------------------------------
    def _drop_shards(self):
        #: per shard, what the last outer iteration did, and which shard held the token
        self.last_iteration = None
        self._accepted = 0
        self._results = None  # futures of the shards' ShardResult
        self._stats = None  # per shard: (G_p, RX_p, m_p) at the driver
        self._z_last = None  # Z as the shards hold it

    def _reset_chain(self, tune):
        super()._reset_chain(tune)
        if hasattr(self, "_results"):
            self._drop_shards()

    def __getstate__(self):  # a copy of the step (e.g. per chain) gets its own connection
        state = self.__dict__.copy()
        state.update(_client=None, _cluster=None, _x=None, _results=None, _stats=None,
                     _z_last=None, _user_client=None)
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
                                             dashboard_address=None)
                self._client = Client(self._cluster)
                weakref.finalize(self, _close, self._client, self._cluster)
        return self._client

    def close(self):
        """Close the ``LocalCluster`` the step started (not a client the user passed)."""
        if self._cluster is not None:
            _close(self._client, self._cluster)
        self._client = self._cluster = self._x = None
        self._drop_shards()

    def _ensure_data(self, client, X):
        if self._x is not None:
            return
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ShardFailure("DataParallelGibbs: the Dask cluster has no workers.")
        P = self._n_shards or len(workers)
        if P > self.n:
            raise ValueError(f"n_shards = {P} exceeds the number of rows ({self.n}).")
        self._n_shards = P
        bounds = np.linspace(0, self.n, P + 1).astype(int)
        self._x = []
        for p in range(P):
            a, b, w = int(bounds[p]), int(bounds[p + 1]), workers[p % len(workers)]
            fut = client.scatter(np.ascontiguousarray(X[a:b]), workers=[w], hash=False)
            self._x.append((a, b, w, fut))

    def _gather(self, client, futures, what):
        """The shards' results, or an error naming the shards that failed (never a hang:
        ``timeout`` seconds at most)."""
        from distributed import wait

        try:
            wait(futures, timeout=self.timeout)
        except TimeoutError as err:
            late = [p for p, f in enumerate(futures) if not f.done()]
            raise ShardFailure(self._describe(late, f"did not finish {what} within "
                                                    f"{self.timeout:g} s")) from err
        except Exception:  # e.g. futures cancelled when a worker died: named below
            pass
        bad = [p for p, f in enumerate(futures) if f.status != "finished"]
        if bad:
            f = futures[bad[0]]
            if f.status == "error":
                why = f"raised {f.exception()!r}"
            elif f.status == "cancelled":
                why = "lost their data or state with their worker"
            else:
                why = f"ended with status {f.status!r}"
            raise ShardFailure(self._describe(bad, f"failed {what}: {why}; the run stops "
                                                   "here (restart it from the last draw)"))
        try:
            return client.gather(futures)
        except Exception as err:  # a worker lost between wait and gather
            raise ShardFailure(f"DataParallelGibbs: gathering {what} failed: {err!r}") from err

    def _describe(self, shards, what):
        parts = [f"shard {p} (rows {self._x[p][0]}-{self._x[p][1] - 1}, worker "
                 f"{self._x[p][2]})" for p in shards]
        return f"DataParallelGibbs: {', '.join(parts)} {what}."

    def _send_z(self, client, Z):
        """(Re)start the shards from the driver's ``Z`` (chain start, a multi-start segment, a
        driver-side move)."""
        futs = [client.submit(shard_stats, xf, Z[a:b], workers=[w], pure=False)
                for a, b, w, xf in self._x]
        res = self._gather(client, futs, "computing their statistics")
        self._results = futs
        self._stats = [(r.G, r.RX, r.m) for r in res]
        self._z_last = Z.copy()

    # --- the outer iteration --------------------------------------------------------------
    def _sweep(self, Z, X, m, noise):
        client = self._get_client()
        self._ensure_data(client, X)
        if self._z_last is None or not np.array_equal(Z, self._z_last):
            self._send_z(client, Z)
        P = len(self._x)
        token = self.sweeps % P
        if self.parallel_mode == "exact":
            return self._exact(client, Z, X, m, noise, token)
        G = sum(s[0] for s in self._stats)
        RX = sum(s[1] for s in self._stats)
        m_glob = sum(s[2] for s in self._stats)
        seeds = self.rng.integers(0, 2**63 - 1, size=P)
        alpha, beta = self.mode.alpha, self.mode.beta
        futs = [client.submit(shard_sweeps, xf, self._results[p], m_glob, G - self._stats[p][0],
                              RX - self._stats[p][1], noise, alpha, beta, self.n,
                              self.inner_sweeps, int(seeds[p]), p == token, workers=[w],
                              pure=False)
                for p, (_, _, w, xf) in enumerate(self._x)]
        res = self._gather(client, futs, "their sweeps")
        for (a, b, _, _), r in zip(self._x, res, strict=True):
            Z[a:b] = r.Z
        self._results = futs
        self._stats = [(r.G, r.RX, r.m) for r in res]
        self._z_last = Z.copy()
        self.last_iteration = {"token": token, "births": [r.births for r in res],
                               "deaths": [r.deaths for r in res],
                               "flips": [r.flips for r in res]}
        m[:] = sum(r.m for r in res)
        return (sum(r.flips for r in res), sum(r.births for r in res),
                sum(r.deaths for r in res), max(r.kmax_hit for r in res))

    def _exact(self, client, Z, X, m, noise, token):
        """One iteration of the exact mode (:func:`pymc_ibp.distributed.exact_iteration`)."""

        def run(fn, args_list):
            futs = [client.submit(fn, *args, workers=[self._x[p][2]], pure=False)
                    for p, args in enumerate(args_list)]
            return futs, self._gather(client, futs, fn.__name__.replace("_", " "))

        xs = [xf for _, _, _, xf in self._x]
        accepted, sources, stats, _, fwd = exact_iteration(
            run, xs, self._results, self._stats, self.rng, noise, self.mode.alpha,
            self.mode.beta, self.n, self._trXX(X, noise), self.inner_sweeps, self.exact_rows,
            token, self.exact_flip)
        flips = 0
        if accepted:
            for (a, b, _, _), f in zip(self._x, fwd, strict=True):
                flips += int(np.sum(Z[a:b] != f.result.Z))
                Z[a:b] = f.result.Z
        self._results, self._stats = sources, stats
        self._z_last = Z.copy()
        self._accepted = int(accepted)
        self.last_iteration = {"token": token, "accepted": accepted,
                               "rows": [f.rows for f in fwd]}
        m[:] = sum(s[2] for s in stats)
        return flips, 0, 0, int(np.all(m > 0))

    def _extra_stats(self):
        return {"ibp_shard_token": int((self.sweeps - 1) % len(self._x)) if self._x else 0,
                "ibp_exact_accepted": int(self._accepted)}

    def _feature_stats(self, Z, X, act):
        """The aggregated statistics of the shards when ``Z`` is what they hold (no pass over
        the data at the driver)."""
        if self._stats is None or not np.array_equal(Z, self._z_last):
            return super()._feature_stats(Z, X, act)
        G = sum(s[0] for s in self._stats)
        RX = sum(s[1] for s in self._stats)
        return np.ascontiguousarray(G[np.ix_(act, act)]), np.ascontiguousarray(RX[act])

    @staticmethod
    def competence(var, has_grad):
        return Competence.INCOMPATIBLE  # chosen by the user (step=...), never automatically


def _close(client, cluster):
    try:
        client.close()
    finally:
        if cluster is not None:
            cluster.close()
