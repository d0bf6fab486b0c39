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

import numpy as np
import pymc as pm
from pymc.step_methods.compound import Competence
from pymc.step_methods.state import dataclass_state

from pymc_ibp import kernels
from pymc_ibp.datasets.sharded import sharded_data_of
from pymc_ibp.distributed.cluster import ShardCluster
from pymc_ibp.distributed.modes import (
    ShardData,
    async_iteration,
    exact_mode_iteration,
    sync_iteration,
)
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.step_methods.linear_gaussian import (
    AcceleratedGibbs,
    LinearGaussianIBPState,
    spec_of,
)
from pymc_ibp.step_methods.potentials import refuses_potentials

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


@refuses_potentials
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
        data = self.spec.sharded
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
        if not self.update_z or not self.mode.counts:
            raise ModelPatternError(
                "DataParallelGibbs samples a pmi.IBP matrix Z (with its A): pass [Z].")
        if self.window != 1:
            raise ModelPatternError("DataParallelGibbs runs window=1 sweeps only.")
        if self.update.mask is not None or self.update.has_offset:
            raise ModelPatternError(
                "DataParallelGibbs needs complete data (no NaN entries) and X ~ Normal(Z @ A, "
                "sigma_x) without an offset: the shards hold fixed data. Use "
                "pmi.AcceleratedGibbs for this model.")
        self.inner_sweeps = int(inner_sweeps)
        if self.inner_sweeps < 1:
            raise ValueError(f"inner_sweeps must be >= 1; got {inner_sweeps!r}.")
        if mode not in ("sync", "async", "exact"):
            raise ValueError(f"mode must be 'sync', 'async' or 'exact'; got {mode!r}.")
        self.parallel_mode = mode
        self.refresh_every = int(refresh_every)
        if self.refresh_every < 1:
            raise ValueError("max_recoveries must be >= 0, refresh_every and tree_reduce_min "
                             ">= 1.")
        self.exact_rows = int(exact_rows)
        self.exact_flip = float(exact_flip)
        if self.exact_rows < 1 or not 0.0 < self.exact_flip < 0.5:
            raise ValueError("exact_rows must be >= 1 and 0 < exact_flip < 0.5.")
        #: the shards on the Dask cluster (:class:`~pymc_ibp.distributed.cluster.ShardCluster`)
        self.cluster = ShardCluster(client, n_shards, timeout, on_worker_loss, max_recoveries,
                                    tree_reduce_min)
        # the update reads the data and their statistics through the shards
        self.update.data = ShardData(self.cluster, self.spec,
                                     None if data is not None else self.update.data, self)
        self._diag_chains = []
        self._diag = []
        self._new_chain()

    def _new_chain(self):
        #: per shard, what the last outer iteration did, and which shard held the token
        self.last_iteration = None
        self.exact_accepted = 0
        self.token = 0  # async: the shard holding the feature token

    @property
    def since_refresh(self):
        """Asynchronous mode: outer iterations since the statistics were re-summed exactly."""
        return self.cluster.since_refresh

    @since_refresh.setter
    def since_refresh(self, value):
        self.cluster.since_refresh = int(value)

    @property
    def n_shards(self):
        return self.cluster.n_shards

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.cluster.cancel_inflight()
        self.cluster.drop()
        self._new_chain()
        if self._diag:
            self._diag_chains.append(self._diag)
        self._diag = []

    def close(self):
        """Close the ``LocalCluster`` the step started (not a client the user passed)."""
        self.cluster.close()
        self._new_chain()

    # --- the outer iteration --------------------------------------------------------------
    def _sweep(self, rng, Z, X, m, noise):
        cluster = self.cluster
        ibp = (self.mode.alpha, self.mode.beta)
        it = self.update.sweeps

        def iteration():
            cluster.hold(Z, X, self.spec.sharded)
            P = len(cluster.shards)
            if self.parallel_mode == "exact":
                token = it % P
                flips, accepted, rows = exact_mode_iteration(
                    cluster, rng, Z, noise, ibp, self.n, self.update.data.trXX(X, noise),
                    self.inner_sweeps, self.exact_rows, token, self.exact_flip)
                self.exact_accepted = int(accepted)
                self.last_iteration = {"token": token, "accepted": accepted, "rows": rows}
                return kernels.SweepStats(flips, 0, 0, int(np.all(cluster.total.m > 0)), np.nan)
            if self.parallel_mode == "async":
                token = self.token
                reports, shards, self.token = async_iteration(
                    cluster, rng, Z, noise, ibp, self.n, self.inner_sweeps, token,
                    self.refresh_every)
                self.last_iteration = {"token": token, "reported": shards}
            else:
                token = it % P
                reports = sync_iteration(cluster, rng, Z, noise, ibp, self.n,
                                         self.inner_sweeps, token)
                shards = range(P)
                self.last_iteration = {"token": token}
            self.last_iteration.update(births=[r.births for r in reports],
                                       deaths=[r.deaths for r in reports],
                                       flips=[r.flips for r in reports])
            self._record(reports, shards, token)
            return kernels.SweepStats(
                sum(r.flips for r in reports), sum(r.births for r in reports),
                sum(r.deaths for r in reports), max(r.kmax_hit for r in reports),
                sum(r.births_denied for r in reports))

        out = cluster.run(iteration, rng, it)
        m[:] = cluster.total.m
        cluster.z_last = Z.copy()
        return out

    # --- diagnostics ----------------------------------------------------------------------
    def _record(self, reports, shards, token):
        P = len(self.cluster.shards)
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
        if self.cluster.shards is not None and len(self.cluster.shards) == P:
            coords["row_start"] = ("shard", np.array([a for a, _, _, _ in self.cluster.shards]))
            coords["row_stop"] = ("shard", np.array([b for _, b, _, _ in self.cluster.shards]))
        ds = xr.Dataset(data, coords=coords,
                        attrs={"mode": self.parallel_mode, "inner_sweeps": self.inner_sweeps})
        return xr.DataTree(ds)

    def _extra_stats(self):
        if self.parallel_mode == "async":
            token = self.last_iteration["token"] if self.last_iteration else 0
        else:
            shards = self.cluster.shards
            token = int((self.update.sweeps - 1) % len(shards)) if shards else 0
        return {"ibp_shard_token": int(token), "ibp_exact_accepted": int(self.exact_accepted)}

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
        spec = spec_of(var)
        if spec is None or spec.sharded is None:
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
