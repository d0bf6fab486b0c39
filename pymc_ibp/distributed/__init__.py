"""Distributed execution: the data-parallel IBP sampler on Dask (``pip install
pymc_ibp[distributed]``).  It only orchestrates the numba kernels of
:mod:`pymc_ibp.kernels`; see :class:`DataParallelGibbs`."""

from pymc.step_methods import STEP_METHODS

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

# competent (IDEAL) only for models whose observed data is a pmi.ShardedData, which no other
# step can sample: pm.sample() then assigns it by itself
if DataParallelGibbs not in STEP_METHODS:
    STEP_METHODS.insert(0, DataParallelGibbs)

__all__ = ["DataParallelGibbs", "ShardFailure", "ShardRecoveryWarning", "ShardReport",
           "ShardResult", "Stats", "exact_iteration", "shard_report", "shard_stats",
           "shard_sweeps", "tree_sum"]
