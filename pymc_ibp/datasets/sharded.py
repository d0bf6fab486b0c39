"""Row-sharded data that stays where it is: ``.npy`` files, a Dask array or arrays in memory.

A :class:`ShardedData` describes an ``N x D`` data matrix as ``P`` blocks of consecutive rows
(shards) without loading them: the files' headers give the shapes, a Dask array its chunks.
Used as the observed data of a model (``observed=data.tensor()``), it lets
:class:`pymc_ibp.DataParallelGibbs` load every shard on the Dask worker that sweeps it, so
that the driver never holds ``X`` (docs page *Data-parallel sampling*).
"""

from __future__ import annotations

import itertools
import os
import warnings
from typing import NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import generate_fallback_impl, numba_funcify

from pymc_ibp.exceptions import DataError, ModelPatternError

__all__ = ["ShardSummary", "ShardedData", "ShardedDataNotGathered", "load_shard",
           "rows_by_shard", "sharded_data_of"]

_IDS = itertools.count()


class ShardedDataNotGathered(TypeError):
    """The full data of a :class:`ShardedData` was asked for on the driver, which the data
    does not allow (``allow_gather=False``).  A ``TypeError``, so that PyMC leaves the
    ``observed_data`` group out of its result (with a warning) instead of assembling ``X``."""


class ShardSummary(NamedTuple):
    """Column sums and sums of squares over all rows (``N``, ``Σ_n x_nd``, ``Σ_n x_nd²``)."""

    n: int
    colsum: np.ndarray
    colsq: np.ndarray

    @classmethod
    def total(cls, parts):
        """The summary of the union of the shards summarised by ``parts``."""
        return cls(sum(s.n for s in parts), sum(s.colsum for s in parts),
                   sum(s.colsq for s in parts))

    @property
    def spread(self):
        """Root mean square of the column-centred data (the scales' data-driven start)."""
        var = (self.colsq - self.colsum**2 / self.n) / self.n
        return float(np.sqrt(max(float(np.mean(var)), 0.0)))


def load_shard(source, rows, d, where):
    """Load one shard (runs on the worker that keeps it): a float64 C-contiguous
    ``rows x d`` array; a wrong shape, NaN or inf is a :class:`DataError` naming ``where``."""
    kind, obj = source
    if kind == "npy":
        x = np.load(obj, mmap_mode=None, allow_pickle=False)
    elif kind == "dask":
        x = obj.compute(scheduler="sync")
    else:
        x = obj
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.shape != (rows, d):
        raise DataError(f"{where} has shape {x.shape}; expected ({rows}, {d}).")
    bad = ~np.isfinite(x)
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise DataError(
            f"{where} contains {'inf' if np.isinf(x[r, c]) else 'NaN'} at (row {r} of the "
            f"shard, column {c}) ({int(bad.sum())} non-finite entries). Sharded data must be "
            "complete: remove or fill missing values, or fit with pmi.AcceleratedGibbs, which "
            "integrates NaN entries out.")
    return x


def summarise_shard(x):
    """``(rows, column sums, column sums of squares)`` of one loaded shard."""
    return ShardSummary(int(x.shape[0]), x.sum(axis=0), np.einsum("nd,nd->d", x, x))


def _npy_header(path):
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if major == 1
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(f)
    return shape, dtype


class ShardedData:
    """An ``N x D`` data matrix held as ``P`` shards of consecutive rows, never assembled on
    the driver unless asked (``allow_gather=True``).

    Build it with :meth:`from_npy` (one ``.npy`` file per shard, read by the workers),
    :meth:`from_dask` (a Dask array, one shard per row chunk, computed on the workers) or
    :meth:`from_arrays`; use :meth:`tensor` as the ``observed`` data of the likelihood::

        data = pmi.ShardedData.from_npy(sorted(glob.glob("frames/*.npy")))
        with pm.Model() as model:
            ...
            pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.tensor())
            idata = pm.sample(cores=1)   # Z and A: pmi.DataParallelGibbs, one shard per file

    Parameters
    ----------
    sources : list
        One ``(kind, object)`` per shard: ``("npy", path)``, ``("dask", delayed)`` or
        ``("array", ndarray)``.
    rows : sequence of int
        Rows of each shard.
    d : int
        Columns.
    allow_gather : bool
        Whether the driver may assemble the full matrix when PyMC asks for it (the
        ``observed_data`` group, ``pm.compute_log_likelihood``, a NUTS step whose logp
        involves ``X``).  Default ``False``: such a request raises
        :class:`ShardedDataNotGathered` (and PyMC leaves the ``observed_data`` group out of
        ``pm.sample``'s result with a warning).
    names : list of str, optional
        How the shards are named in errors (default: the file paths, or ``"chunk p"``).
    """

    def __init__(self, sources, rows, d, *, allow_gather=False, names=None):
        rows = [int(r) for r in rows]
        if not sources or len(sources) != len(rows):
            raise ValueError("ShardedData needs one row count per shard (and at least one).")
        if any(r < 1 for r in rows) or int(d) < 1:
            raise DataError(f"ShardedData: every shard needs rows and columns; got rows {rows}, "
                            f"{d} columns.")
        self.sources = list(sources)
        self.rows = rows
        self.d = int(d)
        self.allow_gather = bool(allow_gather)
        self.names = list(names) if names is not None else [f"chunk {p}" for p in range(
            len(rows))]
        self.bounds = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self._summary = None
        self._tensor = None
        self._key = f"sharded-{os.getpid()}-{next(_IDS)}"

    # --- constructors ---------------------------------------------------------------------
    @classmethod
    def from_npy(cls, paths, *, allow_gather=False):
        """One shard per ``.npy`` file (rows in file order); only the headers are read here.
        The files must be readable at the same paths by the workers."""
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise ValueError("from_npy needs at least one file.")
        rows, d = [], None
        for path in paths:
            try:
                shape, dtype = _npy_header(path)
            except (OSError, ValueError) as err:
                raise DataError(f"ShardedData: cannot read the .npy header of {path!r}: "
                                f"{err}") from err
            if len(shape) != 2 or not np.issubdtype(dtype, np.number):
                raise DataError(f"ShardedData: {path!r} holds a {dtype} array of shape {shape}; "
                                "each shard must be a 2-D numeric array (rows x columns).")
            if d is not None and shape[1] != d:
                raise DataError(f"ShardedData: {path!r} has {shape[1]} columns, the first "
                                f"file {d}.")
            d = shape[1]
            rows.append(shape[0])
        return cls([("npy", p) for p in paths], rows, d, allow_gather=allow_gather, names=paths)

    @classmethod
    def from_dask(cls, array, *, n_shards=None, allow_gather=False):
        """One shard per row chunk of a 2-D Dask array (``n_shards``: re-chunk the rows into
        that many equal blocks first); the columns are made one chunk."""
        import dask.array as da

        if not isinstance(array, da.Array) or array.ndim != 2:
            raise DataError("from_dask needs a 2-D dask.array.Array.")
        if any(np.isnan(c) for c in array.chunks[0]):
            raise DataError("from_dask needs known chunk sizes (call array.compute_chunk_sizes()).")
        if n_shards is not None:
            n = array.shape[0]
            if not 1 <= int(n_shards) <= n:
                raise ValueError(f"n_shards must be between 1 and {n}; got {n_shards!r}.")
            b = np.linspace(0, n, int(n_shards) + 1).astype(int)
            array = array.rechunk((tuple(np.diff(b)), -1))
        else:
            array = array.rechunk({1: -1})
        blocks = array.to_delayed()[:, 0]
        return cls([("dask", blk) for blk in blocks], array.chunks[0], array.shape[1],
                   allow_gather=allow_gather)

    @classmethod
    def from_arrays(cls, arrays, *, allow_gather=True):
        """One shard per array in memory (tests and small data; the driver holds them)."""
        arrays = [np.asarray(a) for a in arrays]
        if not arrays or any(a.ndim != 2 for a in arrays) or len({a.shape[1] for a in arrays}) > 1:
            raise DataError("from_arrays needs 2-D arrays with the same number of columns.")
        return cls([("array", a) for a in arrays], [a.shape[0] for a in arrays],
                   arrays[0].shape[1], allow_gather=allow_gather)

    # --- description ----------------------------------------------------------------------
    @property
    def shape(self):
        return int(self.bounds[-1]), self.d

    @property
    def n_shards(self):
        return len(self.rows)

    def describe(self, p):
        """``"shard p (rows a-b, name)"`` for error messages."""
        return (f"shard {p} (rows {self.bounds[p]}-{self.bounds[p + 1] - 1}, "
                f"{self.names[p]})")

    def __repr__(self):
        n, d = self.shape
        return f"ShardedData({n} x {d} in {self.n_shards} shards)"

    # --- reading --------------------------------------------------------------------------
    def source(self, p):
        """What a worker needs to load shard ``p``: ``(source, rows, d, name)`` for
        :func:`load_shard`."""
        return self.sources[p], self.rows[p], self.d, self.describe(p)

    def load(self, p):
        """Shard ``p`` loaded here (validated)."""
        return load_shard(*self.source(p))

    def summary(self):
        """:class:`ShardSummary` of the whole matrix, computed once shard by shard (on the
        active Dask client if there is one, otherwise here, one shard in memory at a time)."""
        if self._summary is None:
            client = _active_client()
            if client is not None:
                futs = [client.submit(_summarise_source, *self.source(p), pure=False)
                        for p in range(self.n_shards)]
                parts = client.gather(futs)
            else:
                parts = [summarise_shard(self.load(p)) for p in range(self.n_shards)]
            self._summary = ShardSummary.total(parts)
        return self._summary

    def set_summary(self, summary):
        """Record the summary computed elsewhere (e.g. by the shards' workers)."""
        self._summary = ShardSummary(*summary)

    # --- the sampler's statistics, for the other steps of the same sampler ----------------
    def publish(self, Z, stats):
        """Record the slot-indexed statistics ``stats = (G, RX, m)`` of the data at ``Z``
        (:class:`pymc_ibp.DataParallelGibbs` after each update of ``Z``), so that the scale
        step can form ``‖X - ZA‖²`` without the data."""
        self._published = (Z, stats)

    def statistics_at(self, Z):
        """``(G, RX)`` (slot-indexed) of the data at ``Z``: zeros when ``Z`` has no feature in
        use, the published ones when they are of this ``Z``; ``None`` before anything was
        published.  A published ``Z`` other than this one is a :class:`ModelPatternError`."""
        Z = np.asarray(Z)
        k = Z.shape[1]
        if not Z.any():
            return np.zeros((k, k)), np.zeros((k, self.d))
        published = getattr(self, "_published", None)
        if published is None:
            return None
        Zp, (G, RX, _) = published
        if Zp.shape != Z.shape or not np.array_equal(Zp, Z):
            raise ModelPatternError(
                f"The statistics of the sharded data {self!r} are not those of the current Z: "
                "Z must be updated by pmi.DataParallelGibbs only, which publishes them.")
        return G, RX

    def gather(self):
        """The full ``N x D`` matrix, assembled here (whatever ``allow_gather`` says)."""
        return np.concatenate([self.load(p) for p in range(self.n_shards)], axis=0)

    def take(self, rows):
        """The given rows (sorted global indices), loading only the shards that hold them."""
        out = np.empty((len(rows), self.d))
        for p, sel, local in rows_by_shard(self.bounds, rows):
            out[sel] = self.load(p)[local]
        return out

    # --- the model side -------------------------------------------------------------------
    def tensor(self):
        """The symbolic ``N x D`` float64 matrix to pass as ``observed=``: evaluating it
        assembles the data on the driver (only with ``allow_gather=True``); the plugin's
        samplers never evaluate it."""
        if self._tensor is None:
            self._tensor = ShardedDataOp(self)()
        return self._tensor

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_tensor"] = None
        state.pop("_published", None)
        return state


def rows_by_shard(bounds, rows):
    """``(shard, selection, local indices)`` for each shard holding some of ``rows`` (global
    indices), shards of consecutive rows starting at ``bounds[p]``."""
    rows = np.asarray(rows, dtype=np.int64)
    shard = np.searchsorted(bounds, rows, side="right") - 1
    return [(int(p), shard == p, rows[shard == p] - bounds[p]) for p in np.unique(shard)]


def _summarise_source(source, rows, d, where):
    return summarise_shard(load_shard(source, rows, d, where))


def _active_client():
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - the distributed extra is not installed
        return None
    try:
        return default_client()
    except ValueError:
        return None


class ShardedDataOp(Op):
    """The observed data of a model as a :class:`ShardedData`: a graph input-free node whose
    value is the assembled matrix (evaluated only when ``allow_gather=True``)."""

    __props__ = ("key",)

    def __init__(self, data):
        self.data = data
        self.key = data._key

    def make_node(self):
        return Apply(self, [], [pt.tensor(dtype="float64", shape=self.data.shape)])

    def do_constant_folding(self, fgraph, node):
        # never evaluated while a graph is compiled: the matrix is gathered (or refused, with
        # ShardedDataNotGathered) only when a compiled function runs, not once per rewrite
        # pass, where PyTensor would log each refusal as a rewrite failure
        return False

    def perform(self, node, inputs, outputs):
        data = self.data
        if not data.allow_gather:
            n, d = data.shape
            raise ShardedDataNotGathered(
                f"The observed data is a {data!r} that stays on its shards "
                f"(allow_gather=False), but something asked for the whole matrix on the driver "
                f"(the model's logp with X: PyMC's observed_data group, "
                f"pm.compute_log_likelihood, or a step other than pmi.DataParallelGibbs and "
                f"the plugin's hyperparameter steps). Build it with allow_gather=True to "
                f"assemble it here ({n * d * 8 / 1e9:.2f} GB).")
        outputs[0][0] = data.gather()


@numba_funcify.register(ShardedDataOp)
def _numba_sharded_data(op, node, storage_map=None, **kwargs):
    # the data are read in Python (files, Dask): object mode is the design, not a fallback
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Numba will use object mode", UserWarning)
        return generate_fallback_impl(op, node, storage_map, **kwargs)


def sharded_data_of(var):
    """The :class:`ShardedData` behind an observed value variable, or ``None``."""
    owner = getattr(var, "owner", None)
    if owner is not None and isinstance(owner.op, ShardedDataOp):
        return owner.op.data
    return None
