"""Distributed execution: the data-parallel IBP sampler on Dask (``pip install
pymc_ibp[distributed]``).  It only orchestrates the numba kernels of
:mod:`pymc_ibp.step_methods.kernels`; see :class:`DataParallelGibbs`."""

from pymc_ibp.distributed.shards import (
    ShardReport,
    ShardResult,
    Stats,
    exact_iteration,
    shard_report,
    shard_stats,
    shard_sweeps,
    tree_sum,
)
from pymc_ibp.distributed.step import DataParallelGibbs
from pymc_ibp.exceptions import ShardFailure, ShardRecoveryWarning

__all__ = ["DataParallelGibbs", "ShardFailure", "ShardRecoveryWarning", "ShardReport",
           "ShardResult", "Stats", "exact_iteration", "shard_report", "shard_stats",
           "shard_sweeps", "tree_sum"]
