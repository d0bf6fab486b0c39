"""Distributed execution: the data-parallel IBP sampler on Dask (``pip install
pymc_ibp[distributed]``).  It only orchestrates the numba kernels of
:mod:`pymc_ibp.step_methods.kernels`; see :class:`DataParallelGibbs`."""

from pymc_ibp.distributed.shards import ShardResult, shard_stats, shard_sweeps
from pymc_ibp.distributed.step import DataParallelGibbs
from pymc_ibp.exceptions import ShardFailure

__all__ = ["DataParallelGibbs", "ShardFailure", "ShardResult", "shard_stats", "shard_sweeps"]
